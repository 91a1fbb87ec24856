"""The batch reader (``spark.read``): one job over fixed offset ranges. It never commits offsets."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from rocketmq_spark.errors import ConfigurationError
from rocketmq_spark.offset_reader import OffsetReader
from rocketmq_spark.offsets import OffsetMap
from rocketmq_spark.options import ENDING_OFFSETS, SourceOptions
from rocketmq_spark.partition_reader import RocketMQPartition, make_partitions, read_partition
from rocketmq_spark.planning import on_data_loss, plan_ranges, reconcile, split_ranges
from rocketmq_spark.route import MessageQueue


class RocketMQBatchReader(DataSourceReader):
    """Reads ``[start, end)`` of every queue, with starts and ends from the options."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        reader = OffsetReader(self.options)
        try:
            addresses = reader.queues()
            queues = sorted(addresses)
            earliest = reader.min_offsets(queues)
            latest = reader.max_offsets(queues)
            start, losses = reconcile(reader.starting_offsets(queues), earliest, latest)
            on_data_loss(losses, self.options.fail_on_data_loss)
            end = self._ending_offsets(reader, queues, latest)
            ranges = split_ranges(plan_ranges(start, end), min_partitions=self.options.min_partitions,
                                  max_per_partition=self.options.max_messages_per_partition)
            return make_partitions(self.options, ranges, addresses)
        finally:
            reader.close()

    def _ending_offsets(self, reader: OffsetReader, queues: list[MessageQueue], latest: OffsetMap) -> OffsetMap:
        opts = self.options
        if opts.ending_timestamp_ms is not None:
            return reader.offsets_for_time(queues, opts.ending_timestamp_ms)
        if opts.ending_offsets is None:
            return latest
        missing = sorted(set(opts.ending_offsets) - set(queues))
        if missing:
            raise ConfigurationError(ENDING_OFFSETS, f"names queues that do not exist: {', '.join(map(str, missing))}",
                                     f"Use queues of the route: {', '.join(map(str, queues))}")
        return {q: opts.ending_offsets.get(q, latest[q]) for q in queues}

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RocketMQPartition)
        return read_partition(partition)
