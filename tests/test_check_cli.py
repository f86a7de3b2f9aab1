"""`fedlab check RUN_DIR` on hand-built run directories: one per consistency level, one per kind
of violation (a lost transaction, a doubled one, a wrong state), the totals of the nodes' message
logs, and unreadable histories.

Each run has two sources with real database files, ds1's SQLite and ds2's DuckDB (the checker
opens each with the engine that made it), and a warehouse history written by hand. The
federation: ds1 holds R1(K1, V1), ds2 holds R2(K2, F2); the view joins R2.F2 = R1.K1. Initially R1 = {(1, a)}, R2 = {(10, 1)}, so the view is {(1, a, 10)}. Then:
  t1 at ds1 (DSV 2): insert R1 (2, b)               view unchanged
  t2 at ds2 (DSV 2): insert R2 (20, 2)              + (2, b, 20)
  t3 at ds1 (DSV 3): modify R1 (1, a) -> (1, c)     - (1, a, 10) + (1, c, 10)
"""

from __future__ import annotations

import json

import pytest

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.transactions import Modification, TransactionRequest
from fedlab.cli import main
from fedlab.live.runfile import RunFile, Subscriber
from fedlab.source_node.engines import open_store

CATALOG = Catalog.from_dict({"sources": {
    "ds1": {"R1": {"columns": ["K1", "V1"], "types": ["BIGINT", "VARCHAR"], "key": ["K1"]}},
    "ds2": {"R2": {"columns": ["K2", "F2"], "types": ["BIGINT", "BIGINT"], "key": ["K2"]}}}})
VIEW = "SELECT R1.K1, R1.V1, R2.K2 FROM R1 JOIN R2 ON R2.F2 = R1.K1"
INITIAL_VIEW = [[1, "a", 10, 1]]

COMMIT_TIME = 1000.0   # when t1 and t2 commit; t3 a second later
T1 = ("t1", "ds1", 2, {"ds1": 2, "ds2": 1}, [])
T2 = ("t2", "ds2", 2, {"ds1": 2, "ds2": 2}, [[[2, "b", 20], 1]])
T3 = ("t3", "ds1", 3, {"ds1": 3, "ds2": 2}, [[[1, "a", 10], -1], [[1, "c", 10], 1]])


def make_run(tmp_path, states, initial_view=INITIAL_VIEW, start_versions=None, applied_time=0):
    """A run directory: the sources' files after t1, t2, t3, and the given warehouse history."""
    run = tmp_path / "run"
    history = run / "warehouse" / "history"
    history.mkdir(parents=True)
    ds1 = open_store(CATALOG, "ds1", run / "ds1.sqlite", "sqlite", {"R1": [(1, "a")]})
    ds2 = open_store(CATALOG, "ds2", run / "ds2.duckdb", "duckdb", {"R2": [(10, 1)]})
    ds1.commit(TransactionRequest("t1", inserts={"R1": [(2, "b")]}), COMMIT_TIME)
    ds2.commit(TransactionRequest("t2", inserts={"R2": [(20, 2)]}), COMMIT_TIME)
    ds1.commit(TransactionRequest("t3", modifies={"R1": [Modification((1, "a"), (1, "c"))]}), COMMIT_TIME + 1)
    ds1.close()
    ds2.close()
    write_history(history, states, initial_view, start_versions, applied_time)
    RunFile(CATALOG, VIEW, "sze-ling", {"ds1": run / "ds1.sqlite", "ds2": run / "ds2.duckdb"}, history).write(run)
    return run


def write_history(history, states, initial_view=INITIAL_VIEW, start_versions=None, applied_time=0):
    """A warehouse's history folder, written by hand (fedmodel.change_history's format)."""
    history.mkdir(parents=True, exist_ok=True)
    (history / "initial_view.json").write_text(json.dumps(
        {"columns": ["K1", "V1", "K2"], "versions": start_versions or {"ds1": 1, "ds2": 1}, "rows": initial_view}))
    (history / "changes.jsonl").write_text("".join(
        json.dumps({"seq": i, "source": s, "dsv": d, "txn_id": t, "commit_time": 0, "applied_time": applied_time,
                    "versions": v, "delta": delta}) + "\n"
        for i, (t, s, d, v, delta) in enumerate(states, 1)))


def check(run, *flags, capsys):
    code = main(["check", str(run), *flags])
    out = capsys.readouterr()
    return code, out.out, out.err


def verdict(run, capsys, expect="complete"):
    code, out, _ = check(run, "--json", "--expect", expect, capsys=capsys)
    return code, json.loads(out)


# ---- one run per level ----

def test_complete(tmp_path, capsys):
    run = make_run(tmp_path, [T1, T2, T3])
    code, v = verdict(run, capsys)
    assert (code, v["level"], v["lost"], v["doubled"]) == (0, "complete", [], [])
    assert (v["transactions"], v["states"], v["first_violation"]) == (3, 3, None)
    assert (v["oracle"], v["messages"], v["anomalies"]) == ("duckdb", {}, [])   # no node kept a message log
    code, out, _ = check(run, capsys=capsys)
    assert code == 0 and "level: complete" in out and "lost: none" in out
    assert "messages: no message logs" in out
    assert "clocks: no source's commit stamps show another clock than the warehouse's" in out


def test_staleness_from_each_commit_to_the_state_that_reflects_it(tmp_path, capsys):
    run = make_run(tmp_path, [T1, T2, T3], applied_time=COMMIT_TIME + 4)   # every state applied then
    code, v = verdict(run, capsys)
    applied = v["staleness"]["applied"]
    assert code == 0 and (applied["n"], applied["p50"], applied["max"]) == (3, 4.0, 4.0)   # t3: 3 s
    assert v["staleness"]["durable"]["n"] == 0       # the history has no durable times
    code, out, _ = check(run, capsys=capsys)
    line = next(x for x in out.splitlines() if x.startswith("staleness: "))
    assert line.startswith("staleness: applied p50 ") and line.endswith("durable in the store: none measured")


def test_strong_when_two_transactions_share_a_state(tmp_path, capsys):
    both = ("t2", "ds2", 2, {"ds1": 2, "ds2": 2}, [[[2, "b", 20], 1]])   # t1 and t2 in one state
    run = make_run(tmp_path, [both, T3])
    code, v = verdict(run, capsys)
    assert (code, v["level"], v["first_violation"]) == (1, "strong", None)
    assert [(a["anomaly"], a["state"], a["transactions"]) for a in v["anomalies"]] == [("skipped", 0, ["ds2:2"])]
    assert verdict(run, capsys, expect="strong")[0] == 0


def test_strong_when_a_state_claims_a_source_state_it_does_not_show(tmp_path, capsys):
    # t2's state claims ds2 DSV 2 but still holds the view before t2 (its row arrives with t3's
    # state): the view at ds1 1, ds2 1, so the states map in order. Strong by section 4.2, with the
    # claims reported apart as failed.
    run = make_run(tmp_path, [T1, ("t2", "ds2", 2, {"ds1": 2, "ds2": 2}, []),
                              ("t3", "ds1", 3, {"ds1": 3, "ds2": 2}, [*T3[4], [[2, "b", 20], 1]])])
    code, v = verdict(run, capsys, expect="strong")
    assert (code, v["level"], v["claims_held"], v["claims_ordered"], v["order_violation"]) == (
        0, "strong", False, True, None)
    f = v["first_violation"]
    assert (f["state"], f["transaction"], f["missing"]) == (1, "t2", [[2, "b", 20, 1]])
    assert f["matches"] == {"ds1": 1, "ds2": 1}
    code, out, _ = check(run, capsys=capsys)
    assert code == 1 and ("level: strong (the states' claimed version vectors did not all hold; "
                          "a monotone mapping exists)\n") in out
    assert ("anomaly wrong-state: state 1 (after transaction t2) is not the view at the source state it claims, "
            "ds1 DSV 2, ds2 DSV 2, but at ds1 DSV 1, ds2 DSV 1: 1 rows missing, 0 extra") in out


def test_strong_when_claims_go_backwards_between_states_of_one_view(tmp_path, capsys):
    # The claims go from ds2 DSV 2 back to ds2 DSV 1, but both states hold the initial view.
    run = make_run(tmp_path, [("t2", "ds2", 2, {"ds1": 1, "ds2": 2}, []),
                              ("t1", "ds1", 2, {"ds1": 2, "ds2": 1}, []),
                              ("t3", "ds1", 3, {"ds1": 3, "ds2": 2},
                               [[[1, "a", 10], -1], [[1, "c", 10], 1], [[2, "b", 20], 1]])])
    code, v = verdict(run, capsys, expect="strong")
    assert (code, v["level"], v["first_violation"]) == (0, "strong", None)
    assert (v["claims_held"], v["claims_ordered"]) == (True, False)
    code, out, _ = check(run, capsys=capsys)
    assert "level: strong (the states' claimed version vectors held but are out of order; a monotone mapping exists)" in out


def test_weak_when_a_source_goes_backwards(tmp_path, capsys):
    # ds1 is shown after t3, then before it (with t2), then after it again.
    run = make_run(tmp_path, [("t3", "ds1", 3, {"ds1": 3, "ds2": 1}, [[[1, "a", 10], -1], [[1, "c", 10], 1]]),
                              ("t2", "ds2", 2, {"ds1": 2, "ds2": 2},
                               [[[1, "c", 10], -1], [[1, "a", 10], 1], [[2, "b", 20], 1]]),
                              ("t1", "ds1", 2, {"ds1": 3, "ds2": 2}, [[[1, "a", 10], -1], [[1, "c", 10], 1]])])
    code, v = verdict(run, capsys, expect="strong")
    assert (code, v["level"], v["first_violation"], v["claims_held"], v["claims_ordered"]) == (
        1, "weak", None, True, False)
    o = v["order_violation"]
    assert (o["state"], o["transaction"], o["matches"], o["not_below"]) == (
        1, "t2", [{"ds1": 2, "ds2": 2}], [{"ds1": 3, "ds2": 1}])
    assert [a["anomaly"] for a in v["anomalies"]] == ["backwards", "out-of-order"]
    code, out, _ = check(run, "--expect", "weak", capsys=capsys)
    assert code == 0 and "anomaly out-of-order: state 1 (after transaction t2) is the view only at" in out
    assert "is the view at [ds1 DSV 2, ds2 DSV 2]" in out and "[ds1 DSV 3, ds2 DSV 1]" in out


def test_convergence_accepts_the_charts_spelling(tmp_path, capsys):
    wrong = ("t1", "ds1", 2, {"ds1": 2, "ds2": 1}, [[[9, "x", 9], 1]])
    fixed = ("t2", "ds2", 2, {"ds1": 2, "ds2": 2}, [[[9, "x", 9], -1], [[2, "b", 20], 1]])
    run = make_run(tmp_path, [wrong, fixed, T3])
    assert verdict(run, capsys, expect="convergent") == verdict(run, capsys, expect="convergence")
    code, v = verdict(run, capsys, expect="convergent")
    assert (code, v["level"]) == (0, "convergence")
    assert verdict(run, capsys, expect="weak")[0] == 1


def test_none_when_the_final_view_is_wrong(tmp_path, capsys):
    run = make_run(tmp_path, [T1, T2, ("t3", "ds1", 3, {"ds1": 3, "ds2": 2}, [[[1, "a", 10], -1]])])
    code, v = verdict(run, capsys, expect="none")
    assert (code, v["level"]) == (0, "none")
    assert v["first_violation"]["missing"] == [[1, "c", 10, 1]]


def test_a_view_materialised_after_some_commits_starts_there(tmp_path, capsys):
    # The warehouse materialised at ds1 DSV 2 (t1 is in its first view): t1 has no state of its own.
    run = make_run(tmp_path, [T2, T3], start_versions={"ds1": 2, "ds2": 1})
    code, v = verdict(run, capsys)
    assert (code, v["level"], v["transactions"], v["lost"]) == (0, "complete", 2, [])


def test_a_wrong_initial_view_is_a_violation(tmp_path, capsys):
    run = make_run(tmp_path, [T1, T2, T3], initial_view=[[1, "a", 10, 1], [7, "z", 7, 1]])
    code, v = verdict(run, capsys)
    assert code == 1 and v["first_violation"]["transaction"] == "(initial view)"
    assert v["first_violation"]["extra"] == [[7, "z", 7, 1]]


# ---- one run per kind of violation ----

def test_a_lost_transaction(tmp_path, capsys):
    # t1 never reached the view, yet the warehouse went on to t3 claiming ds1 DSV 3.
    run = make_run(tmp_path, [("t2", "ds2", 2, {"ds1": 1, "ds2": 2}, []),
                              ("t3", "ds1", 3, {"ds1": 3, "ds2": 2}, [[[1, "a", 10], -1], [[1, "c", 10], 1]])])
    code, v = verdict(run, capsys)
    assert (code, v["level"], v["lost"], v["doubled"]) == (1, "none", ["ds1:2"], [])
    f = v["first_violation"]
    assert (f["state"], f["transaction"], f["versions"]) == (1, "t3", {"ds1": 3, "ds2": 2})
    assert (f["missing"], f["extra"]) == ([[2, "b", 20, 1]], [])
    assert [a["anomaly"] for a in v["anomalies"]] == ["wrong-state", "diverged", "lost"]
    code, out, _ = check(run, capsys=capsys)
    assert code == 1 and "lost: [ds1:2]" in out
    assert "anomaly lost: 1 transaction committed and reflected by no state: ds1:2" in out
    assert "state 1 (after transaction t3)" in out and "ds1 DSV 3, ds2 DSV 2" in out and "missing: [[2, 'b', 20, 1]]" in out


def test_a_doubled_transaction(tmp_path, capsys):
    run = make_run(tmp_path, [T1, T2, T2, ("t3", "ds1", 3, {"ds1": 3, "ds2": 2}, T3[4])])
    code, v = verdict(run, capsys)
    assert (code, v["level"], v["doubled"], v["lost"]) == (1, "none", ["ds2:2"], [])
    f = v["first_violation"]
    assert (f["state"], f["transaction"], f["extra"]) == (2, "t2", [[2, "b", 20, 1]])
    assert [a["anomaly"] for a in v["anomalies"]] == ["wrong-state", "diverged", "doubled"]


def test_a_wrong_state(tmp_path, capsys):
    # t2's state holds the row with the wrong multiplicity; t3 repairs it.
    run = make_run(tmp_path, [T1, ("t2", "ds2", 2, {"ds1": 2, "ds2": 2}, [[[2, "b", 20], 2]]),
                              ("t3", "ds1", 3, {"ds1": 3, "ds2": 2}, [*T3[4], [[2, "b", 20], -1]])])
    code, v = verdict(run, capsys)
    assert (code, v["level"], v["lost"], v["doubled"]) == (1, "convergence", [], [])
    f = v["first_violation"]
    assert (f["state"], f["expected"], f["extra"]) == (1, [[1, "a", 10, 1], [2, "b", 20, 1]], [[2, "b", 20, 1]])
    assert [(a["anomaly"], a["transactions"]) for a in v["anomalies"]] == [("mixed-state", ["ds2:2"])]   # no source state has it


# ---- the message-level history ----

def message(node, kind, event, rows=0, size=0, peer="warehouse", **names) -> str:
    return json.dumps({"t": 0.0, "node": node, "kind": kind, "event": event, "peer": peer,
                       "bytes": size, "rows": rows, **names}) + "\n"


# ---- a run of several warehouses, one per subscriber (fedlab bench --same-stream) ----

def two_warehouses(tmp_path):
    """The run with a second warehouse, subscribed as w2, whose history lost t3; the sources' logs
    hold one answer for each warehouse."""
    run = make_run(tmp_path, [T1, T2, T3])
    write_history(run / "w2" / "history", [T1, T2])
    first = RunFile.read(run)
    RunFile(CATALOG, VIEW, "sze-ling", first.sources, first.warehouse_history,
            others={"w2": Subscriber(VIEW, "versioned", run / "w2" / "history")}).write(run)
    (run / "ds1.messages.jsonl").write_text(message("ds1", "answer", "sent", rows=3, size=70, id="q1")
                                            + message("ds1", "answer", "sent", rows=5, size=90, id="q1", peer="w2"))
    return run


def test_each_warehouse_of_a_run_is_judged_on_its_own(tmp_path, capsys):
    run = two_warehouses(tmp_path)
    code, out, _ = check(run, capsys=capsys)
    assert code == 1   # w2 fell short: the run does
    first, second = out.split("== subscriber w2 (versioned)\n")
    assert first.startswith("== subscriber warehouse (sze-ling)\n") and "level: complete" in first
    assert "level: complete" not in second and "lost: [ds1:3]" in second
    code, v = verdict(run, capsys)
    assert code == 1 and v["subscribers"]["warehouse"]["level"] == "complete"
    assert v["subscribers"]["w2"]["lost"] == ["ds1:3"]
    # each one's wire cost is what the sources sent it, not the other
    assert v["subscribers"]["w2"]["messages"]["answer"] == {"sent": 1, "rows": 5, "bytes": 90}
    assert v["subscribers"]["warehouse"]["messages"]["answer"] == {"sent": 1, "rows": 3, "bytes": 70}


def test_one_subscriber_is_judged_when_named(tmp_path, capsys):
    run = two_warehouses(tmp_path)
    code, out, _ = check(run, "--subscriber", "warehouse", "--json", capsys=capsys)
    assert code == 0 and json.loads(out)["level"] == "complete"
    code, out, err = check(run, "--subscriber", "w3", capsys=capsys)
    assert code == 2 and out == ""
    assert err.strip().endswith("no subscriber named 'w3' (the run's: warehouse, w2)") and len(err.splitlines()) == 1


def test_the_nodes_message_logs_are_summed_up(tmp_path, capsys):
    run = make_run(tmp_path, [T1, T2, T3])
    # ds1 sent its two notifications, the fault injector dropped one and duplicated the other;
    # ds2 kept no log; the warehouse received two, asked one sub-query, and its answer came back.
    # The last line of ds1's log was cut off by a crash: it does not count.
    (run / "ds1.messages.jsonl").write_text(
        message("ds1", "notification", "sent", rows=1, size=100, dsv=2)
        + message("ds1", "notification", "dropped", dsv=2)
        + message("ds1", "notification", "sent", rows=2, size=150, dsv=3)
        + message("ds1", "notification", "duplicated", dsv=3)
        + message("ds1", "answer", "sent", rows=3, size=70, id="q1")
        + message("ds1", "notification", "sent", rows=9, size=999)[:40])
    (run / "warehouse" / "history" / "messages.jsonl").write_text(
        message("warehouse", "notification", "received", dsv=2)
        + message("warehouse", "notification", "received", dsv=3)
        + message("warehouse", "subquery", "sent", rows=1, size=40, id="q1")
        + message("warehouse", "answer", "received", id="q1"))
    code, v = verdict(run, capsys)
    assert (code, v["level"]) == (0, "complete")
    assert v["messages"] == {
        "answer": {"sent": 1, "rows": 3, "bytes": 70, "received": 1},
        "notification": {"sent": 2, "rows": 3, "bytes": 250, "dropped": 1, "duplicated": 1, "received": 2},
        "subquery": {"sent": 1, "rows": 1, "bytes": 40}}
    code, out, _ = check(run, capsys=capsys)
    assert ("messages: answer 1 sent (3 rows, 70 bytes), 1 received; "
            "notification 2 sent (3 rows, 250 bytes), 1 dropped, 1 duplicated, 2 received; "
            "subquery 1 sent (1 rows, 40 bytes)\n") in out


def test_a_source_whose_commits_were_stamped_after_the_warehouse_received_them_is_named_as_ahead(tmp_path, capsys):
    run = make_run(tmp_path, [T1, T2, T3])
    (run / "warehouse" / "history" / "messages.jsonl").write_text(   # ds1's clock 1 s ahead, ds2's right
        json.dumps({"t": COMMIT_TIME - 1.0, "node": "warehouse", "kind": "notification", "event": "received",
                    "peer": "ds1", "dsv": 2}) + "\n"
        + json.dumps({"t": COMMIT_TIME, "node": "warehouse", "kind": "notification", "event": "received",
                      "peer": "ds1", "dsv": 3}) + "\n"
        + json.dumps({"t": COMMIT_TIME + 0.01, "node": "warehouse", "kind": "notification", "event": "received",
                      "peer": "ds2", "dsv": 2}) + "\n")
    code, v = verdict(run, capsys)
    assert code == 0 and v["clock_skew"] == {"ds1": {"ahead_s": 1.0, "median_delivery_s": -1.0, "notifications": 2}}
    code, out, _ = check(run, capsys=capsys)
    assert "clocks: ds1 ran at least 1.0 s ahead: staleness from their commits spans two clocks\n" in out


def test_what_happened_to_the_transactions_involved_comes_from_the_message_logs(tmp_path, capsys):
    # t1's notification was dropped at ds1 and never received: the run lost it.
    run = make_run(tmp_path, [("t2", "ds2", 2, {"ds1": 1, "ds2": 2}, []),
                              ("t3", "ds1", 3, {"ds1": 3, "ds2": 2}, [[[1, "a", 10], -1], [[1, "c", 10], 1]])])
    (run / "ds1.messages.jsonl").write_text(message("ds1", "notification", "sent", dsv=2, txn_id="t1")
                                            + message("ds1", "notification", "dropped", dsv=2, txn_id="t1"))
    code, out, _ = check(run, capsys=capsys)
    assert code == 1 and ("what happened to transaction ds1:2:\n  0.000 ds1 sent notification t1 (DSV 2)\n"
                          "  0.000 ds1 dropped notification t1 (DSV 2)\n") in out


def test_a_garbled_message_log_exits_2(tmp_path, capsys):
    run = make_run(tmp_path, [T1, T2, T3])
    (run / "ds2.messages.jsonl").write_text("not json\n")
    code, out, err = check(run, capsys=capsys)
    assert (code, out) == (2, "")
    assert err.startswith("fedlab check: message log: malformed") and len(err.strip().splitlines()) == 1


# ---- unreadable histories: exit 2, one line ----

@pytest.mark.parametrize("damage", ["no run file", "no changes", "partial line", "no source file", "source open"])
def test_an_unreadable_history_exits_2(tmp_path, capsys, damage):
    run = make_run(tmp_path, [T1, T2, T3])
    store = None
    if damage == "no run file":
        (run / "run.json").unlink()
    elif damage == "no changes":
        (run / "warehouse" / "history" / "changes.jsonl").unlink()
    elif damage == "partial line":
        with open(run / "warehouse" / "history" / "changes.jsonl", "a") as out:
            out.write('{"seq": 4, "source": "ds')
    elif damage == "no source file":
        (run / "ds2.duckdb").unlink()
    else:   # a DuckDB source still running holds its file; the checker cannot read it
        import subprocess
        import sys
        store = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                                  "print('open', flush=True); time.sleep(60)", str(run / "ds2.duckdb")],
                                 stdout=subprocess.PIPE, text=True)
        assert store.stdout.readline().strip() == "open"
    try:
        code, out, err = check(run, capsys=capsys)
    finally:
        if store is not None:
            store.kill()
            store.wait()
    assert (code, out) == (2, "")
    assert err.startswith("fedlab check: ") and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("delta", ["warehouse/delta", "s3a://bucket/warehouse/delta", None])
def test_the_run_file_keeps_where_the_delta_tables_are(tmp_path, delta):
    history = tmp_path / "warehouse" / "history"
    given = str(tmp_path / delta) if delta and "://" not in delta else delta
    RunFile(CATALOG, VIEW, "sze-ling", {"ds1": None}, history, given).write(tmp_path)
    stored = json.loads((tmp_path / "run.json").read_text())["warehouse_delta"]
    assert stored == delta   # inside the run directory: relative, so the directory can move
    assert RunFile.read(tmp_path).warehouse_delta == given
