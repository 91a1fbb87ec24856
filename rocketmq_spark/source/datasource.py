"""The reading side of the ``rocketmq`` data source (``rocketmq_spark.datasource``): the readers
``spark.read/readStream.format("rocketmq")`` get.

When Spark asks what (measured on PySpark 4.0 to 4.3): ``load()`` creates the source and, unless
the user gave a schema, calls ``schema()``; that is the first the source sees of its options, so
it checks them there (``check_read_options``). Whether a stream or a batch read follows is only
known later, when the query starts (``stream_reader``) or the job is planned (``batch_reader``);
the rules of one kind only are checked then.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.source.batch_reader import PushingBatchReader, RocketMQBatchReader
from rocketmq_spark.source.option_model import ReadKind, SourceOptions
from rocketmq_spark.source.options import parse_options
from rocketmq_spark.source.schema import checked_columns
from rocketmq_spark.source.spark_api import ReadLimit, SupportsTriggerAvailableNow, batch_reader_class, for_this_spark
from rocketmq_spark.source.stream_reader import RocketMQStreamReader


def check_read_options(raw: Mapping[str, str]) -> None:
    """``load()``: a bad option of a read of either kind fails here."""
    parse_options(raw, kind=ReadKind.UNDECIDED)


def batch_reader(raw: Mapping[str, str], schema: StructType) -> DataSourceReader:
    """The reader of a batch query over the columns of ``schema``."""
    options = _with_columns(parse_options(raw, kind=ReadKind.BATCH), schema)
    return batch_reader_class(options.filter_pushdown, RocketMQBatchReader, PushingBatchReader)(options)


def stream_reader(raw: Mapping[str, str], schema: StructType) -> DataSourceStreamReader:
    """The reader of a stream over the columns of ``schema``, as this PySpark calls it."""
    try:
        options = _with_columns(parse_options(raw, kind=ReadKind.STREAM), schema)
    except ConfigurationError as err:
        return for_this_spark(RefusedStreamReader(err))
    limited = options.max_messages_per_trigger is not None or options.min_messages_per_trigger is not None
    return for_this_spark(RocketMQStreamReader(options), stores=options.commit_offsets, limited=limited)


def _with_columns(options: SourceOptions, schema: StructType) -> SourceOptions:
    """The options with the columns of the schema Spark reads with (the user's, if given)."""
    return replace(options, columns=checked_columns(schema))


class RefusedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream whose options are wrong: every call raises the error that says so.

    PySpark's stream runner (``pyspark/sql/streaming/python_streaming_source_runner.py``, 4.0 to 4.3)
    calls ``reader.stop()`` in a ``finally`` around ``streamReader()``; when that raises,
    ``reader`` is unbound and an ``UnboundLocalError`` ends the traceback Spark shows, after ours.
    Returning this reader instead lets the first call Spark makes raise our error alone.
    """

    def __init__(self, error: ConfigurationError) -> None:
        self.error = error

    def initialOffset(self) -> dict[str, Any]:
        raise self.error

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        raise self.error

    def getDefaultReadLimit(self) -> ReadLimit:
        raise self.error

    def prepareForTriggerAvailableNow(self) -> None:
        raise self.error

    def reportLatestOffset(self) -> dict[str, Any] | None:
        raise self.error

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise self.error

    def commit(self, end: dict[str, Any]) -> None:
        raise self.error

    def stop(self) -> None:
        """Nothing was opened."""
