"""The one row codec: lists of row tuples <-> Arrow IPC stream bytes.

Every `bytes` field of the wire contract that carries rows uses this. Column types come from the
catalog (BIGINT, DOUBLE, VARCHAR, DATE, BOOLEAN); an empty row set still carries its schema.
A garbled or truncated payload raises ModelError, which servers turn into INVALID_ARGUMENT.
"""

from __future__ import annotations

import datetime
from typing import Sequence

import pyarrow as pa

from fedmodel.errors import ModelError

_ARROW = {
    "BIGINT": pa.int64(), "DOUBLE": pa.float64(), "VARCHAR": pa.string(),
    "DATE": pa.date32(), "BOOLEAN": pa.bool_(),
}


def arrow_schema(columns: Sequence[str], types: Sequence[str]) -> pa.Schema:
    return pa.schema([pa.field(c, _ARROW[t]) for c, t in zip(columns, types)])


def encode_rows(columns: Sequence[str], types: Sequence[str], rows: Sequence[Sequence]) -> bytes:
    table = rows_to_arrow(columns, types, rows)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def rows_to_arrow(columns: Sequence[str], types: Sequence[str], rows: Sequence[Sequence]) -> pa.Table:
    """Row tuples as an Arrow table with the catalog's types (what DuckDB reads without copying)."""
    schema = arrow_schema(columns, types)
    arrays = []
    for i, field in enumerate(schema):
        try:
            arrays.append(pa.array([_to_arrow_value(r[i], field.type) for r in rows], type=field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as err:
            raise ModelError(f"column {field.name}: {err}") from None
    return pa.Table.from_arrays(arrays, schema=schema)


def decode_rows(payload: bytes) -> tuple[list[str], list[tuple]]:
    """Returns (column names, rows as tuples of Python values)."""
    if not payload:
        return [], []
    try:
        table = pa.ipc.open_stream(payload).read_all()
        # Buffers are not checked on read: a corrupt offset would crash the process on access.
        table.validate(full=True)
        columns = [_from_arrow_column(table.column(i)) for i in range(table.num_columns)]
    except (pa.ArrowException, OSError, ValueError, OverflowError) as err:
        raise ModelError(f"garbled row payload: {err}") from None
    return list(table.schema.names), list(zip(*columns)) if columns else []


def _to_arrow_value(value, typ):
    if value is not None and typ == pa.date32() and isinstance(value, str):
        return datetime.date.fromisoformat(value)
    return value


def _from_arrow_column(col: pa.ChunkedArray) -> list:
    values = col.to_pylist()
    if pa.types.is_date32(col.type):
        return [v.isoformat() if v is not None else None for v in values]
    return values
