"""The CH-benCHmark catalog: the twelve relations go-tpc v1.0.12 creates in PostgreSQL, placed
over three sources.

CH-benCHmark (Cole et al., DBTest 2011) runs TPC-H-like analytical queries over TPC-C's nine
relations, with TPC-H's supplier, nation and region beside them. The relations, their columns
(in the order of the CREATE TABLE statements) and their primary keys are those of go-tpc's
PostgreSQL DDL: `go-tpc tpcc prepare --driver postgres` creates warehouse, district, customer,
history, new_order, orders, order_line, stock and item; `go-tpc ch prepare` creates nation,
region and supplier. tests/test_ch_views.py holds this catalog against the schema the two
commands create.

Column types: fedlab has five (fedmodel.catalog.TYPES); each PostgreSQL type of that DDL maps
to one, and a source reads the column as the cast `READ_AS` gives its fedlab type:

    PostgreSQL                     fedlab    read as
    INT, BIGINT                    BIGINT    col::bigint
    DECIMAL(p, s)                  DOUBLE    col::float8   (the nearest double: 5755.94 stays 5755.94)
    CHAR(n), VARCHAR(n)            VARCHAR   col::text     (a CHAR's trailing blanks dropped, as
                                                           PostgreSQL ignores them when comparing)
    TIMESTAMP                      VARCHAR   col::text     (its ISO text, '2026-12-07 23:50:01.123456',
                                                           under DateStyle ISO)

A timestamp's ISO text orders as the timestamp does, since PostgreSQL writes the fraction without
trailing zeros (and none at all on a whole second), so a view's comparison with a literal written
the same way (`ol_delivery_d > '2007-01-02 00:00:00'`) selects the same rows as in PostgreSQL; a
literal with trailing zeros (go-tpc writes '... 00:00:00.000000') still selects them under `>`
and `<=`, and differs under `>=`, `<` and `=` at that very instant only (docs/ch-benchmark.md).

Two columns are not go-tpc's: CH-benCHmark joins a stock row to its supplier and a customer to
its nation through expressions (`mod(s_w_id * s_i_id, 10000) = s_suppkey`,
`ascii(substr(c_state, 1, 1)) - 65 = s_nationkey`), and fedlab relates two relations by equalities
of columns only. The prepare (loadgen.ch.go_tpc) adds each expression of `JOIN_COLUMNS` as a
column at the end of its table, kept by a BEFORE INSERT OR UPDATE trigger (go-tpc names its
columns in every INSERT, so it writes on unchanged): stock.s_su_suppkey and customer.c_nationkey.
The queries that join through them (Q5) then join by columns. A trigger, not a generated column:
PostgreSQL 15's logical decoding leaves generated columns out of the WAL stream (the trigger is
the applications' schema, the same under every capture and without one).

Placement: TPC-C's nine relations at the source `tpcc`, since go-tpc's transactions write all of
them in one database, and a transaction of a source commits at that source alone; supplier at
`suppliers`; nation and region at `geography`. The queries that join order lines with suppliers
and nations then join across sources, as the TPC-H federation's do (loadgen/tpch.py), which is
what the maintenance algorithms are for. go-tpc's foreign keys (`tpcc prepare --use-fk`, TPC-C
1.3's) hold between relations of `tpcc` and are referential-integrity constraints there, as is
TPC-H's nation -> region at `geography`; supplier -> nation spans two sources, which cannot
enforce it (fedmodel.catalog). history has no primary key in go-tpc's DDL: it is keyed by all of
its columns, the catalog's rule for a relation without one.
"""

from __future__ import annotations

from fedlab.fedmodel.catalog import Catalog, ReferentialIntegrity, Relation

# The PostgreSQL types of go-tpc's DDL (information_schema.columns.data_type) -> fedlab's.
PG_TYPES = {"integer": "BIGINT", "bigint": "BIGINT", "numeric": "DOUBLE", "character": "VARCHAR",
            "character varying": "VARCHAR", "timestamp without time zone": "VARCHAR"}
# How a source reads a column of each fedlab type from PostgreSQL (see the module's docstring).
READ_AS = {"BIGINT": "bigint", "DOUBLE": "float8", "VARCHAR": "text"}

PLACEMENT: dict[str, tuple[str, ...]] = {
    "tpcc": ("warehouse", "district", "customer", "history", "new_order", "orders", "order_line", "stock", "item"),
    "suppliers": ("supplier",),
    "geography": ("nation", "region"),
}


def _columns(spec: str) -> tuple[tuple[str, str], ...]:
    """'a BIGINT, b VARCHAR' -> (('a', 'BIGINT'), ('b', 'VARCHAR'))."""
    return tuple(tuple(column.split()) for column in spec.split(","))


_STOCK_DISTRICTS = ", ".join(f"s_dist_{d:02d} VARCHAR" for d in range(1, 11))

# name -> (columns with their fedlab types, in go-tpc's DDL order; primary key, in its order)
SCHEMA: dict[str, tuple[tuple[tuple[str, str], ...], tuple[str, ...]]] = {
    "warehouse": (_columns("w_id BIGINT, w_name VARCHAR, w_street_1 VARCHAR, w_street_2 VARCHAR, w_city VARCHAR, "
                           "w_state VARCHAR, w_zip VARCHAR, w_tax DOUBLE, w_ytd DOUBLE"),
                  ("w_id",)),
    "district": (_columns("d_id BIGINT, d_w_id BIGINT, d_name VARCHAR, d_street_1 VARCHAR, d_street_2 VARCHAR, "
                          "d_city VARCHAR, d_state VARCHAR, d_zip VARCHAR, d_tax DOUBLE, d_ytd DOUBLE, "
                          "d_next_o_id BIGINT"),
                 ("d_w_id", "d_id")),
    "customer": (_columns("c_id BIGINT, c_d_id BIGINT, c_w_id BIGINT, c_first VARCHAR, c_middle VARCHAR, "
                          "c_last VARCHAR, c_street_1 VARCHAR, c_street_2 VARCHAR, c_city VARCHAR, c_state VARCHAR, "
                          "c_zip VARCHAR, c_phone VARCHAR, c_since VARCHAR, c_credit VARCHAR, c_credit_lim DOUBLE, "
                          "c_discount DOUBLE, c_balance DOUBLE, c_ytd_payment DOUBLE, c_payment_cnt BIGINT, "
                          "c_delivery_cnt BIGINT, c_data VARCHAR, c_nationkey BIGINT"),
                 ("c_w_id", "c_d_id", "c_id")),
    "history": (_columns("h_c_id BIGINT, h_c_d_id BIGINT, h_c_w_id BIGINT, h_d_id BIGINT, h_w_id BIGINT, "
                         "h_date VARCHAR, h_amount DOUBLE, h_data VARCHAR"),
                ()),   # no primary key: keyed by all its columns
    "new_order": (_columns("no_o_id BIGINT, no_d_id BIGINT, no_w_id BIGINT"),
                  ("no_w_id", "no_d_id", "no_o_id")),
    "orders": (_columns("o_id BIGINT, o_d_id BIGINT, o_w_id BIGINT, o_c_id BIGINT, o_entry_d VARCHAR, "
                        "o_carrier_id BIGINT, o_ol_cnt BIGINT, o_all_local BIGINT"),
               ("o_w_id", "o_d_id", "o_id")),
    "order_line": (_columns("ol_o_id BIGINT, ol_d_id BIGINT, ol_w_id BIGINT, ol_number BIGINT, ol_i_id BIGINT, "
                            "ol_supply_w_id BIGINT, ol_delivery_d VARCHAR, ol_quantity BIGINT, ol_amount DOUBLE, "
                            "ol_dist_info VARCHAR"),
                   ("ol_w_id", "ol_d_id", "ol_o_id", "ol_number")),
    "stock": (_columns(f"s_i_id BIGINT, s_w_id BIGINT, s_quantity BIGINT, {_STOCK_DISTRICTS}, s_ytd BIGINT, "
                       "s_order_cnt BIGINT, s_remote_cnt BIGINT, s_data VARCHAR, s_su_suppkey BIGINT"),
              ("s_w_id", "s_i_id")),
    "item": (_columns("i_id BIGINT, i_im_id BIGINT, i_name VARCHAR, i_price DOUBLE, i_data VARCHAR"),
             ("i_id",)),
    "supplier": (_columns("s_suppkey BIGINT, s_name VARCHAR, s_address VARCHAR, s_nationkey BIGINT, "
                          "s_phone VARCHAR, s_acctbal DOUBLE, s_comment VARCHAR"),
                 ("s_suppkey",)),
    "nation": (_columns("n_nationkey BIGINT, n_name VARCHAR, n_regionkey BIGINT, n_comment VARCHAR"),
               ("n_nationkey",)),
    "region": (_columns("r_regionkey BIGINT, r_name VARCHAR, r_comment VARCHAR"),
               ("r_regionkey",)),
}

TABLES = tuple(SCHEMA)

# The columns fedlab adds to go-tpc's tables: (table, column, the expression CH-benCHmark joins by).
JOIN_COLUMNS = (("stock", "s_su_suppkey", "mod(s_w_id * s_i_id, 10000)"),
             ("customer", "c_nationkey", "ascii(substr(c_state, 1, 1)) - 65"))


def _fk(child: str, columns: str, parent: str, parent_columns: str) -> ReferentialIntegrity:
    return ReferentialIntegrity(child, tuple(columns.split()), parent, tuple(parent_columns.split()))


# go-tpc's foreign keys (`tpcc prepare --use-fk`), then TPC-H's nation -> region (specification 1.4.2).
FOREIGN_KEYS: tuple[ReferentialIntegrity, ...] = (
    _fk("district", "d_w_id", "warehouse", "w_id"),
    _fk("customer", "c_w_id c_d_id", "district", "d_w_id d_id"),
    _fk("history", "h_c_w_id h_c_d_id h_c_id", "customer", "c_w_id c_d_id c_id"),
    _fk("history", "h_w_id h_d_id", "district", "d_w_id d_id"),
    _fk("new_order", "no_w_id no_d_id no_o_id", "orders", "o_w_id o_d_id o_id"),
    _fk("orders", "o_w_id o_d_id o_c_id", "customer", "c_w_id c_d_id c_id"),
    _fk("order_line", "ol_w_id ol_d_id ol_o_id", "orders", "o_w_id o_d_id o_id"),
    _fk("order_line", "ol_supply_w_id ol_i_id", "stock", "s_w_id s_i_id"),
    _fk("stock", "s_w_id", "warehouse", "w_id"),
    _fk("stock", "s_i_id", "item", "i_id"),
    _fk("nation", "n_regionkey", "region", "r_regionkey"),
)


def ch_catalog() -> Catalog:
    """The CH-benCHmark catalog, each relation at its source of PLACEMENT.

    >>> cat = ch_catalog()
    >>> cat.sources, cat.relation("order_line").key
    (('tpcc', 'suppliers', 'geography'), ('ol_w_id', 'ol_d_id', 'ol_o_id', 'ol_number'))
    >>> cat.relation("history").key == cat.relation("history").columns
    True
    """
    source_of = {name: source for source, names in PLACEMENT.items() for name in names}
    relations = tuple(Relation(name, source_of[name], tuple(c for c, _ in columns), tuple(t for _, t in columns),
                               key or tuple(c for c, _ in columns))
                      for name, (columns, key) in SCHEMA.items())
    return Catalog(relations, (), FOREIGN_KEYS)
