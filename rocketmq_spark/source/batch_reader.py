"""The batch reader (``spark.read``): one job over fixed offset ranges. It never commits offsets.

``PushingBatchReader`` is the same read taking the filters Spark 4.1+ pushes (``pushdown.py``);
the data source uses it only when asked (``spark_api.batch_reader_class`` says why)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.source.offset_reader import OffsetReader
from rocketmq_spark.source.offsets import OffsetMap, stamps_of
from rocketmq_spark.source.option_model import ENDING_OFFSETS, SourceOptions
from rocketmq_spark.source.partition import RocketMQPartition, plan_partitions
from rocketmq_spark.source.partition_reader import read_partition
from rocketmq_spark.source.planning import checked_starts
from rocketmq_spark.source.pushdown import Pushed, push
from rocketmq_spark.source.spark_api import Filter
from rocketmq_spark.source.starts import check_queues_exist, check_within_ends, starting_offsets


class RocketMQBatchReader(DataSourceReader):
    """Reads ``[start, end)`` of every queue, with starts and ends from the options."""

    def __init__(
        self, options: SourceOptions, open_offsets: Callable[[SourceOptions], OffsetReader] = OffsetReader
    ) -> None:
        self.options = options
        self._open_offsets = open_offsets
        self.pushed = Pushed()

    def partitions(self) -> Sequence[InputPartition]:
        reader = self._open_offsets(self.options)
        addresses = reader.queues()
        latest = reader.max_offsets(sorted(addresses))
        queues = sorted(latest)  # without the queues of a broker that left meanwhile
        earliest = reader.min_offsets(queues)
        start = checked_starts(
            starting_offsets(self.options, queues, reader), earliest, latest, self.options.fail_on_data_loss
        )
        end = self._ending_offsets(reader, queues, latest)
        # Cut after the options' own checks, which judge the queues and offsets they name.
        start, end = self.pushed.narrowed(start, end, reader.offsets_for_time)
        # With the brokers' newest store times, a task that meets a new master's own messages
        # inside its range (a failover after planning) ends the range there, as a stream's does.
        stamps = stamps_of(end, reader.last_stored)
        return plan_partitions(self.pushed.subscribed(self.options), start, end, stamps)

    def _ending_offsets(self, reader: OffsetReader, queues: list[MessageQueue], latest: OffsetMap) -> OffsetMap:
        opts = self.options
        if opts.ending_timestamp_ms is not None:
            return reader.offsets_for_time(queues, opts.ending_timestamp_ms)
        if opts.ending_offsets is None:
            return latest
        check_queues_exist(ENDING_OFFSETS, opts.ending_offsets, queues)
        check_within_ends(ENDING_OFFSETS, opts.ending_offsets, latest)
        return {q: opts.ending_offsets.get(q, latest[q]) for q in queues}

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RocketMQPartition):
            # PySpark runs one task of InputPartition(None) when partitions() planned none: an
            # empty topic, or ranges that are all empty. It reads nothing.
            assert partition.value is None, f"not a partition of this source: {partition!r}"
            return iter(())
        return read_partition(partition)


class PushingBatchReader(RocketMQBatchReader):
    """The batch read with Spark 4.1+'s filter pushdown: what it can take narrows the plan."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.pushed, back = push(filters, self.options)
        return back
