"""Catalog types <-> Spark and Arrow: schemas, and rows in and out of Spark.

Rows in the federation carry DATE values as ISO strings (see fedmodel.codec); Spark gets
`datetime.date` and hands them back as ISO strings, so a row read from Delta equals the row the
maintenance core holds. DOUBLE columns accept ints. Data goes to Spark as Arrow tables with an
explicit schema (no pandas, no Python workers).
"""

from __future__ import annotations

import datetime
from typing import Iterable, Sequence

import pyarrow as pa
from pyspark.sql.types import BooleanType, DataType, DateType, DoubleType, LongType, StringType, StructField, StructType

from fedlab.fedmodel.codec import rows_to_arrow

SPARK_TYPES: dict[str, DataType] = {
    "BIGINT": LongType(), "DOUBLE": DoubleType(), "VARCHAR": StringType(),
    "DATE": DateType(), "BOOLEAN": BooleanType(),
}


def validate_types(types: Sequence[str]) -> list[str]:
    """Upper-cased catalog type names; raises ValueError on anything else."""
    out = [str(t).upper() for t in types]
    bad = [t for t in out if t not in SPARK_TYPES]
    if bad:
        raise ValueError(f"unsupported column type(s) {bad}; use one of {', '.join(SPARK_TYPES)}")
    return out


def spark_schema(columns: Sequence[str], types: Sequence[str]) -> StructType:
    return StructType([StructField(c, SPARK_TYPES[t], True) for c, t in zip(columns, validate_types(types))])


def to_arrow(columns: Sequence[str], types: Sequence[str], rows: Iterable[Sequence]) -> pa.Table:
    """Rows (tuples in column order) as an Arrow table of the catalog types (fedmodel.codec);
    ValueError naming the column a value does not fit."""
    return rows_to_arrow(columns, validate_types(types), list(rows))


def create_df(spark, columns: Sequence[str], types: Sequence[str], rows: Iterable[Sequence]):
    """A Spark DataFrame of `rows` with the explicit schema of `columns`/`types`."""
    return spark.createDataFrame(to_arrow(columns, types, rows), schema=spark_schema(columns, types))


def from_spark(value):
    """A value collected from Spark, as the federation's rows carry it (DATE -> ISO string)."""
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    return value


def quote(name: str) -> str:
    """A Spark SQL identifier, back-quoted."""
    return "`" + name.replace("`", "``") + "`"
