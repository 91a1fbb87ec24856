"""What differs between the PySpark 4 lines for writing, in one place.

Batch writes take Arrow batches on every line (``DataSourceArrowWriter``, 4.0 and later). Streams
take them from 4.1 on (``DataSourceStreamArrowWriter``); on 4.0 a stream writer gets ``Row``
objects, which ``spark_rows_to_columns`` turns into the columns the sink reads, a chunk at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from itertools import islice
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter

from rocketmq_spark.model import MS_PER_SECOND
from rocketmq_spark.sink import columns as col

try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as StreamWriterBase

    ARROW_STREAM_WRITER = True
except ImportError:  # PySpark 4.0
    StreamWriterBase = DataSourceStreamWriter  # type: ignore[assignment,misc]
    ARROW_STREAM_WRITER = False

# Rows of a 4.0 stream turned into columns at a time: about an Arrow batch's worth.
ROWS_PER_CHUNK = 10_000

__all__ = ["ARROW_STREAM_WRITER", "ROWS_PER_CHUNK", "StreamWriterBase", "spark_rows_to_columns"]


def _value(column: str, value: Any) -> Any:
    """A Row's value as the Arrow path gives it."""
    if value is None:
        return None
    if column == col.BODY:
        return value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if column == col.PROPERTIES:
        return list(value.items())
    if column == col.DELIVER_TIME and isinstance(value, datetime):
        return int(value.timestamp() * MS_PER_SECOND)
    return value


def spark_rows_to_columns(
    rows: Iterable[Any], names: Mapping[str, str]
) -> Iterator[tuple[dict[str, Sequence[object]], int]]:
    """Spark ``Row`` objects as (values per sink column, row count), ``ROWS_PER_CHUNK`` at a time."""
    iterator = iter(rows)
    while chunk := list(islice(iterator, ROWS_PER_CHUNK)):
        fields = chunk[0].__fields__
        lookup = {field.lower(): index for index, field in enumerate(fields)}
        values: dict[str, Sequence[object]] = {}
        for column, given in names.items():
            index = lookup[given.lower()]
            values[column] = [_value(column, row[index]) for row in chunk]
        yield values, len(chunk)
