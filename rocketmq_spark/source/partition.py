"""What one Spark task reads, planned on the driver: picklable ranges with all a pull needs. No I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from rocketmq_spark.config.cluster import without_namespace
from rocketmq_spark.model import EXPRESSION_TAG, ClientConfig, MessageQueue
from rocketmq_spark.records.compression import DEFAULT_MAX_BODY_BYTES
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.source.option_model import SourceOptions
from rocketmq_spark.source.planning import QueueRange, plan
from rocketmq_spark.source.schema import COLUMNS


@dataclass(frozen=True)
class ReadRange:
    """Offsets ``[start, end)`` of one queue. Its broker is named, not addressed: the task pulls
    from whichever replica serves the broker name when it runs (``remoting.replicas``), so a batch
    Spark runs again after a failover reads the same offsets from the new master or a slave."""

    queue: MessageQueue
    start: int
    end: int
    # The store time of the newest message its broker name showed when the batch was planned
    # (``offsets.STAMPS_KEY``): the range's messages were stored by then, and a message stored
    # later is not the one planned at its offset (a new master's own: ``rows.BatchBuilder``).
    stored_by_ms: int | None = None


@dataclass(frozen=True)
class TaskOptions:
    """What every task of a read needs of the query's options: taken from ``SourceOptions`` once
    on the driver (``of``), and shipped as one value with each partition."""

    client: ClientConfig
    group: str
    sub_expression: str
    expression_type: str
    tag_filter: frozenset[str] | None
    pull_batch_size: int
    fail_on_data_loss: bool
    retry: Retry
    namespace: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    columns: tuple[str, ...] = COLUMNS

    @classmethod
    def of(cls, options: SourceOptions) -> TaskOptions:
        return cls(
            client=options.client,
            group=options.pull_group,
            sub_expression=options.sub_expression,
            expression_type=options.expression_type,
            tag_filter=options.tag_filter,
            pull_batch_size=options.pull_batch_size,
            fail_on_data_loss=options.fail_on_data_loss,
            retry=options.retry,
            namespace=options.namespace,
            max_body_bytes=options.max_body_bytes,
            columns=options.columns,
        )

    @property
    def reads_every_message(self) -> bool:
        """No filter: every offset of a range holds a message this read returns."""
        return self.expression_type == EXPRESSION_TAG and self.tag_filter is None

    def display_topic(self, topic: str) -> str:
        """The topic as the user named it, without the namespace."""
        return without_namespace(topic, self.namespace)


@dataclass(frozen=True)
class RocketMQPartition(InputPartition):
    """One Spark partition: one or more queue ranges, each read in offset order, and the options
    every task of the read shares."""

    ranges: tuple[ReadRange, ...]
    task: TaskOptions


def make_partitions(
    options: SourceOptions, groups: list[list[QueueRange]], stamps: Mapping[str, int] | None = None
) -> list[RocketMQPartition]:
    """A partition per group of planned ranges; ``stamps``: the batch's store times per broker name."""
    task = TaskOptions.of(options)
    known = stamps or {}
    return [
        RocketMQPartition(
            tuple(ReadRange(r.queue, r.start, r.end, known.get(r.queue.broker_name)) for r in group), task
        )
        for group in groups
    ]


def plan_partitions(
    options: SourceOptions,
    start: Mapping[MessageQueue, int],
    end: Mapping[MessageQueue, int],
    stamps: Mapping[str, int] | None = None,
) -> list[RocketMQPartition]:
    """The partitions of a batch reading ``[start, end)``, split and packed as the options ask."""
    groups = plan(
        start, end, min_partitions=options.min_partitions, max_per_partition=options.max_messages_per_partition
    )
    return make_partitions(options, groups, stamps)
