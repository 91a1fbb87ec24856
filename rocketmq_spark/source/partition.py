"""What one Spark task reads, planned on the driver: a picklable range with all a pull needs. No I/O."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from rocketmq_spark.model import EXPRESSION_TAG, ClientConfig, MessageQueue
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.source.options import SourceOptions
from rocketmq_spark.source.planning import QueueRange, plan

# The group a batch read without ``consumerGroup`` pulls as (pulls name a group; nothing is stored).
BATCH_READ_GROUP = "rocketmq-spark-reader"


@dataclass(frozen=True)
class RocketMQPartition(InputPartition):
    """One Spark partition: offsets ``[start, end)`` of one queue."""

    queue: MessageQueue
    start: int
    end: int
    address: str
    display_topic: str
    client: ClientConfig
    group: str
    sub_expression: str
    expression_type: str
    tag_filter: frozenset[str] | None
    pull_batch_size: int
    fail_on_data_loss: bool
    retry: Retry

    @property
    def reads_every_message(self) -> bool:
        """No filter: every offset of the range holds a message this read returns."""
        return self.expression_type == EXPRESSION_TAG and self.tag_filter is None


def make_partitions(options: SourceOptions, ranges: list[QueueRange],
                    address_of: Callable[[MessageQueue], str]) -> list[RocketMQPartition]:
    """Partitions for planned ranges, each told the address of its queue's broker."""
    return [
        RocketMQPartition(
            queue=r.queue, start=r.start, end=r.end, address=address_of(r.queue),
            display_topic=options.display_topic(r.queue.topic), client=options.client,
            group=options.consumer_group or BATCH_READ_GROUP, sub_expression=options.sub_expression,
            expression_type=options.expression_type, tag_filter=options.tag_filter,
            pull_batch_size=options.pull_batch_size, fail_on_data_loss=options.fail_on_data_loss,
            retry=options.retry,
        )
        for r in ranges
    ]


def plan_partitions(options: SourceOptions, start: Mapping[MessageQueue, int], end: Mapping[MessageQueue, int],
                    address_of: Callable[[MessageQueue], str]) -> list[RocketMQPartition]:
    """The partitions of a batch reading ``[start, end)``, split as the options ask."""
    ranges = plan(start, end, min_partitions=options.min_partitions,
                  max_per_partition=options.max_messages_per_partition)
    return make_partitions(options, ranges, address_of)
