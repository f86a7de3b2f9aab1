"""Vinh 2020's experiment at a tiny size (bench.postgres_maintenance): synchronous
maintenance by triggers and asynchronous maintenance by a pass over fedlab's captured changes
both keep the materialized join equal to its recomputation, in every measured setting and over a
mixed history; the figures are there. No timing is asserted.

Every test runs against the server the suite shares (tests/postgres_support.py), each in
databases of its own.
"""

from __future__ import annotations

import pytest
from postgres_support import fresh_database

from fedlab.bench.postgres_maintenance import (
    ACTIONS,
    CASES,
    TABLES,
    MaintainedDatabase,
    MaintenanceMismatch,
    measure,
    report,
)


def test_every_setting_keeps_the_view_equal_to_its_recomputation(postgres_dsn):
    result = measure(lambda mode: fresh_database(postgres_dsn, f"maintenance_{mode}"),
                     customers=60, sales=600, repeat=3)
    checked = {(c["mode"], c["setting"]) for c in result["checks"] if c["mismatched_rows"] == 0 and c["view_rows"] > 0}
    assert checked == ({(mode, f"{table} {action} x{records}") for mode in ("sync", "async") for table in TABLES
                        for action in ACTIONS for records in CASES}
                       | {(mode, f"combined x{records}") for mode in ("sync", "async") for records in CASES})
    figures = [row[name] for row in result["rows"] for name in
               ("sync_ms", "async_ms", "capture_ms_per_statement", "no_trigger_ms_per_statement")]
    figures += [case[name] for case in result["cases"].values() for name in
                ("sync_total_ms", "async_combined_ms", "sync_settings_total_ms", "async_passes_total_ms")]
    assert len(result["rows"]) == len(TABLES) * len(ACTIONS) * len(CASES)
    assert all(isinstance(f, float) and f > 0 for f in figures), figures
    assert "Paper (Table 1" in report(result)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_mixed_history_leaves_the_view_equal_to_its_recomputation(postgres_dsn, mode):
    """Both tables changed in one transaction (docs/paper-notes.md's counterexample to formula 13 among them),
    a join column changed, keys changed several times over one and over several transactions, a
    rollback; the asynchronous pass runs once, after all of it."""
    with MaintainedDatabase(mode, fresh_database(postgres_dsn, f"mixed_{mode}"), 20, 120, 3) as db:
        before = sorted(db.writer.execute("TABLE mv").fetchall())
        (cust, sale), = db.writer.execute("SELECT cust_id, min(sale_id) FROM sales GROUP BY cust_id "
                                          "ORDER BY cust_id LIMIT 1").fetchall()
        db.write([("DELETE FROM customers WHERE cust_id = %s", [cust])])   # its sales stay, joining nothing
        # The customer comes back while one of its sales goes: that pair must never be in the view.
        db.write([("INSERT INTO customers VALUES (%s, 'VN', 'back')", [cust]),
                  ("DELETE FROM sales WHERE sale_id = %s", [sale])])
        db.write([("INSERT INTO sales VALUES (1000, 2, 5, 1.5)", []),
                  ("UPDATE sales SET qty = 6 WHERE sale_id = 1000", []),
                  ("UPDATE sales SET cust_id = 3 WHERE sale_id = 1000", []),          # the join column
                  ("DELETE FROM sales WHERE sale_id = 1000", []),
                  ("INSERT INTO sales VALUES (1000, 4, 5, 2.5)", []),
                  ("UPDATE sales SET cust_id = 5 WHERE cust_id = 6", []),              # several rows at once
                  ("UPDATE customers SET country = 'UA' WHERE cust_id = 7", [])])
        db.write([("UPDATE customers SET country = 'NZ' WHERE cust_id = 7", []),
                  ("DELETE FROM customers WHERE cust_id = 8", []),
                  ("INSERT INTO customers SELECT 8, country, name FROM customers WHERE cust_id = 9", [])])
        with pytest.raises(ZeroDivisionError):
            with db.writer.transaction():
                db.writer.execute("DELETE FROM sales")
                raise ZeroDivisionError   # rolls the transaction back
        if mode == "async":
            db.maintain()
        db.check("the mixed history")
        assert sorted(db.writer.execute("TABLE mv").fetchall()) != before


def test_a_view_that_drifted_from_its_recomputation_is_an_error(postgres_dsn):
    with MaintainedDatabase("sync", fresh_database(postgres_dsn, "drifted"), 20, 120, 1) as db:
        db.check("loading")
        db.writer.execute("UPDATE mv SET cnt = cnt + 1 WHERE (cust_id, country, qty) IN "
                          "(SELECT cust_id, country, qty FROM mv ORDER BY 1, 2, 3 LIMIT 1)")
        with pytest.raises(MaintenanceMismatch, match="after a hand-made error: mv differs from the recomputed "
                                                      "view in 2 rows"):
            db.check("a hand-made error")
