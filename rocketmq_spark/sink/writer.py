"""The writers Spark runs: ``df.write.format("rocketmq").mode("append").save()`` and
``df.writeStream.format("rocketmq")``.

Each task sends its rows and returns only once every one is stored (acknowledged by the broker):
a task that fails, or that Spark runs again, may have sent some of its rows already, so the
delivery is at least once, as Spark's Kafka sink's is. The driver's commit has nothing left to
do; it logs what was written. The writers hold only options and column names, which Spark ships
to the executors; connections are the worker's own (``shared.shared_producer``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.sink.columns import check_columns
from rocketmq_spark.sink.exactly_once import ExactlyOnceBatchWriter, ExactlyOnceStreamWriter
from rocketmq_spark.sink.options import SinkOptions, parse_sink_options
from rocketmq_spark.sink.spark_api import StreamWriterBase
from rocketmq_spark.sink.task import WrittenRows, write_task

log = logging.getLogger(__name__)

SAVE_MODE = "mode"


def checked(raw: Mapping[str, str], schema: StructType, overwrite: bool) -> tuple[SinkOptions, dict[str, str]]:
    """A write's options and the DataFrame's sink columns, checked before any task runs."""
    if overwrite:
        raise ConfigurationError(
            SAVE_MODE,
            "overwrite would replace a topic's messages, which RocketMQ cannot do",
            "Write with mode('append'), which sends every row as a new message",
        )
    options = parse_sink_options(raw)
    return options, check_columns(schema, options.topic).names


def _report(what: str, messages: Sequence[WriterCommitMessage | None]) -> None:
    done = [m for m in messages if isinstance(m, WrittenRows)]
    unflushed = sum(m.unflushed for m in done)
    log.info("%s: %d message(s) stored by %d task(s)", what, sum(m.stored for m in done), len(done))
    if unflushed:
        log.warning("%s: %d message(s) stored but not yet flushed or replicated by their broker", what, unflushed)


class RocketMQBatchWriter(DataSourceArrowWriter):
    """``df.write``: each task sends its partition's rows, taken from Arrow batches."""

    def __init__(self, options: SinkOptions, names: dict[str, str]) -> None:
        self.options = options
        self.names = names

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRows:
        return write_task(self.options, self.names, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _report("write", messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("write aborted: messages its tasks stored stay stored (RocketMQ cannot take them back)")


class RocketMQStreamWriter(StreamWriterBase):
    """``writeStream``: each micro-batch's tasks send their rows (Arrow batches from PySpark 4.1 on,
    rows on 4.0); a micro-batch run again after a failure sends its rows again."""

    def __init__(self, options: SinkOptions, names: dict[str, str]) -> None:
        self.options = options
        self.names = names

    def write(self, iterator: Iterator[Any]) -> WrittenRows:
        return write_task(self.options, self.names, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _report(f"micro-batch {batchId}", messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("micro-batch %d aborted: messages its tasks stored stay stored; Spark sends it again", batchId)


def batch_writer(
    raw: Mapping[str, str], schema: StructType, overwrite: bool
) -> RocketMQBatchWriter | ExactlyOnceBatchWriter:
    options, names = checked(raw, schema, overwrite)
    if options.exactly_once is not None:
        return ExactlyOnceBatchWriter(options, names)
    return RocketMQBatchWriter(options, names)


def stream_writer(
    raw: Mapping[str, str], schema: StructType, overwrite: bool
) -> RocketMQStreamWriter | ExactlyOnceStreamWriter:
    options, names = checked(raw, schema, overwrite)
    if options.exactly_once is not None:
        return ExactlyOnceStreamWriter(options, names)
    return RocketMQStreamWriter(options, names)
