"""One writing task: every row of its partition sent (Arrow batches, or Spark rows on a PySpark
4.0 stream), each row alone as a half message when the write is exactly once.

What it returns travels to the driver's commit: how many rows were stored and, for exactly once,
where the halves lie (``halves.SentHalves``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from rocketmq_spark.sink.halves import HalfLog, SentHalves
from rocketmq_spark.sink.messages import rows_from_columns, rows_of
from rocketmq_spark.sink.options import SinkOptions, sink_retry
from rocketmq_spark.sink.producer import TaskProducer
from rocketmq_spark.sink.shared import shared_producer
from rocketmq_spark.sink.spark_api import spark_rows_to_columns
from rocketmq_spark.sink.vectorized import columns_batch, send_arrow_batch, slices, vectorized


@dataclass
class WrittenRows(WriterCommitMessage):
    """What one task stored: its rows, and how many of them the broker stored without flushing or
    replicating them yet (accepted with a warning)."""

    stored: int
    unflushed: int
    halves: SentHalves | None = None  # exactly once: the halves the driver commits


def write_task(
    options: SinkOptions, names: Mapping[str, str], iterator: Iterator[Any], halves: HalfLog | None = None
) -> WrittenRows:
    """Send every row of a task (Arrow batches, or Spark rows on a PySpark 4.0 stream); with
    ``halves``, each row as a half message, which the driver's commit makes visible."""
    producer = shared_producer(options.client, options.producer_group)
    task = TaskProducer(options, producer, sink_retry(options), halves=halves)
    first = next(iterator, None)
    if first is None:
        return WrittenRows(0, 0)
    whole = halves is None and vectorized(options, names)  # halves go alone, row by row
    if isinstance(first, pa.RecordBatch):
        for batch in _chain(first, iterator):
            for part in slices(batch) if whole else (batch,):
                if whole and send_arrow_batch(task, part, names, options):
                    continue
                for row in rows_of(part, names, options.topic, options.namespace):
                    task.add(row)
    else:
        for values, count in spark_rows_to_columns(_chain(first, iterator), names):
            batch = columns_batch(values) if whole else None
            if batch is not None and send_arrow_batch(task, batch, {c: c for c in values}, options):
                continue
            for row in rows_from_columns(values, count, options.topic, options.namespace):
                task.add(row)
    task.close()
    return WrittenRows(task.stored, task.unflushed, None if halves is None else halves.sent.compact())


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest
