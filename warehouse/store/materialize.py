"""Initial materialization and full recomputation of the view as one Spark job: of the rows the
algorithms maintain, whose SQL fedmodel.terms_sql writes (an outer-join view's terms, padded).

Nothing here is durable: the result goes to `DeltaViewStore.initialize` (first materialization)
or back to the maintenance core (resynchronisation), which decides what to commit.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import sqlglot

from fedlab.fedmodel.predicates import null_divisors
from fedlab.warehouse.store.sparktypes import create_df, from_spark, quote

Snapshot = tuple[Sequence[str], Sequence[str], Sequence[Sequence]]  # (columns, types, rows)


def materialize(spark, view_sql: str, snapshots: Mapping[str, Snapshot]) -> dict[tuple, int]:
    """Evaluates `view_sql` over the snapshot rows; returns {view row: multiplicity}.

    Each snapshot becomes a temporary view named after its relation, in a child session
    (`spark.newSession()`: same SparkContext, own temp views and SQL conf), so relation names never
    clash with anyone else's temp views. The view SQL is rewritten to Spark's dialect by sqlglot,
    then grouped by all its output columns with COUNT(*) as the multiplicity.
    """
    session = spark.newSession()
    for relation, (columns, types, rows) in snapshots.items():
        create_df(session, columns, types, rows).createOrReplaceTempView(relation)
    query = session.sql(_spark_sql(view_sql))
    columns = query.columns
    counted = query.groupBy(*[quote(c) for c in columns]).count()
    return {tuple(from_spark(v) for v in row[:-1]): int(row[-1]) for row in counted.collect()}


def _spark_sql(view_sql: str) -> str:
    """The view in Spark's dialect, division by zero NULL as everywhere in the maintenance path."""
    try:
        return null_divisors(sqlglot.parse_one(view_sql)).sql(dialect="spark")
    except sqlglot.errors.SqlglotError:
        return view_sql  # let Spark report what is wrong with it
