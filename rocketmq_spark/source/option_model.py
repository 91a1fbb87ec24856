"""The source's options as names and values: every option name, the defaults, and the typed,
immutable ``SourceOptions`` that ``options.parse_options`` fills (and the tasks receive)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rocketmq_spark.config.cluster import CLUSTER_OPTIONS, DEFAULT_PULL_TIMEOUT_MS, RETRY_BUDGET_MS, without_namespace
from rocketmq_spark.model import EXPRESSION_TAG, MS_PER_SECOND, ClientConfig, parse_tag_expression
from rocketmq_spark.records.compression import DEFAULT_MAX_BODY_BYTES
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.source.offsets import OffsetMap
from rocketmq_spark.source.schema import COLUMNS

# Option names exactly as documented; matching is case-insensitive. Those shared with writing
# (nameServer, the credentials, TLS, pullTimeoutMs, namespace, retryBudgetMs) are config.cluster's.
TOPIC = "topic"
CONSUMER_GROUP = "consumerGroup"
SUB_EXPRESSION = "subExpression"
EXPRESSION_TYPE = "expressionType"
CONSUME_FROM_WHERE = "consumeFromWhere"
CONSUME_TIMESTAMP = "consumeTimestamp"
STARTING_OFFSETS = "startingOffsets"
STARTING_TIMESTAMP = "startingTimestamp"
ENDING_OFFSETS = "endingOffsets"
ENDING_TIMESTAMP = "endingTimestamp"
MAX_MESSAGES_PER_TRIGGER = "maxMessagesPerTrigger"
MIN_MESSAGES_PER_TRIGGER = "minMessagesPerTrigger"
MAX_TRIGGER_DELAY = "maxTriggerDelay"
MIN_PARTITIONS = "minPartitions"
MAX_MESSAGES_PER_PARTITION = "maxMessagesPerPartition"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
FAIL_ON_SHARED_GROUP = "failOnSharedGroup"
COMMIT_OFFSETS = "commitOffsets"
PULL_BATCH_SIZE = "pullBatchSize"
MAX_BODY_BYTES = "maxBodyBytes"
ON_OFFSET_RESET = "onOffsetReset"
FILTER_PUSHDOWN = "filterPushdown"

# Every option the source takes: those shared with writing (``config.cluster``), the retry budget
# of a running query, then the source's own.
ALL_OPTIONS = (
    *CLUSTER_OPTIONS,
    RETRY_BUDGET_MS,
    TOPIC,
    CONSUMER_GROUP,
    SUB_EXPRESSION,
    EXPRESSION_TYPE,
    CONSUME_FROM_WHERE,
    CONSUME_TIMESTAMP,
    STARTING_OFFSETS,
    STARTING_TIMESTAMP,
    ENDING_OFFSETS,
    ENDING_TIMESTAMP,
    MAX_MESSAGES_PER_TRIGGER,
    MIN_MESSAGES_PER_TRIGGER,
    MAX_TRIGGER_DELAY,
    MIN_PARTITIONS,
    MAX_MESSAGES_PER_PARTITION,
    FAIL_ON_DATA_LOSS,
    FAIL_ON_SHARED_GROUP,
    COMMIT_OFFSETS,
    PULL_BATCH_SIZE,
    MAX_BODY_BYTES,
    ON_OFFSET_RESET,
    FILTER_PUSHDOWN,
)
# Whose options these are, as the error about an unknown one says.
OWNER = "the rocketmq source"
# Options Spark itself may add to a source's map.
SPARK_OWNED = frozenset({"path"})

DEFAULT_PULL_BATCH_SIZE = 32
# What to do about a body that decompresses past maxBodyBytes (the decoders speak of their bound).
MAX_BODY_BYTES_FIX = (
    f"If producers send bodies this large on purpose, raise the {MAX_BODY_BYTES} option above "
    "their size; otherwise the message is damaged or hostile: read past its offset"
)
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
DEFAULT_CONSUME_TIMESTAMP_LOOKBACK_MS = 30 * 60 * 1000
# RocketMQ's consumeTimestamp format (UtilAll.YYYYMMDDHHMMSS), read in the driver's time zone.
ROCKETMQ_TIMESTAMP_FORMAT = "%Y%m%d%H%M%S"
ROCKETMQ_TIMESTAMP_DIGITS = 14

# What a batch read without ``consumerGroup`` pulls as: a group every broker (4.9, 5.x) creates at
# start, mqadmin's own, so none is created (autoCreateSubscriptionGroup=false is fine) and, as
# pulls never commit, nothing is stored. Never namespaced: it is the broker's own name.
BATCH_READ_GROUP = "TOOLS_CONSUMER"


class ConsumeFromWhere(enum.Enum):
    """Where a queue starts when the group has no stored offset on it (RocketMQ's names)."""

    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class OnOffsetReset(enum.Enum):
    """What a running stream does when an operator resets its group's offsets (docs/offsets.md)."""

    FOLLOW = "follow"
    IGNORE = "ignore"
    FAIL = "fail"


class ReadKind(enum.Enum):
    """What the options are parsed for. Spark's ``load()`` has them checked before it says whether
    a stream or a batch read follows (UNDECIDED): every rule is checked then but those of streams
    (a group is required, ending options are refused), as for a batch read."""

    STREAM = "stream"
    BATCH = "batch"
    UNDECIDED = "undecided"


class StartingMode(enum.Enum):
    GROUP = "group"
    EARLIEST = "earliest"
    LATEST = "latest"
    SPECIFIC = "json"


@dataclass(frozen=True)
class SourceOptions:
    """The parsed options; topics and group carry the namespace prefix when one is set."""

    client: ClientConfig
    topics: tuple[str, ...]
    consumer_group: str | None
    sub_expression: str
    expression_type: str
    consume_from_where: ConsumeFromWhere
    consume_timestamp_ms: int
    starting_mode: StartingMode
    starting_offsets: OffsetMap
    starting_timestamp_ms: int | None
    ending_offsets: OffsetMap | None  # None = latest as of planning
    ending_timestamp_ms: int | None
    max_messages_per_trigger: int | None
    min_messages_per_trigger: int | None
    max_trigger_delay_ms: int
    min_partitions: int | None
    max_messages_per_partition: int | None
    fail_on_data_loss: bool
    commit_offsets: bool
    fail_on_shared_group: bool
    pull_batch_size: int
    namespace: str | None
    on_offset_reset: OnOffsetReset = OnOffsetReset.FOLLOW
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # How long the driver and the tasks of a running query retry what a retry can fix (a broker
    # restarting), and how long a query's start does: one request timeout, as a failure there
    # almost always means a wrong address or an unreachable network.
    retry: Retry = Retry()
    start_retry: Retry = Retry().within(DEFAULT_PULL_TIMEOUT_MS / MS_PER_SECOND)
    # The columns rows carry, in order: all of them unless the user gave a narrower schema
    # (``schema.checked_columns``); not an option string, but it travels to the tasks with them.
    columns: tuple[str, ...] = COLUMNS
    # Batch reads: take the filters Spark 4.1+ pushes (``pushdown.py``); needs Spark's conf too.
    filter_pushdown: bool = False

    @property
    def tag_filter(self) -> frozenset[str] | None:
        """Tags kept after the broker's hash-code filter; None keeps everything."""
        if self.expression_type != EXPRESSION_TAG:
            return None
        return parse_tag_expression(self.sub_expression)

    @property
    def pull_group(self) -> str:
        """The group pulls name: the consumer group, else one every broker has (nothing is stored)."""
        return self.consumer_group or BATCH_READ_GROUP

    def display_topic(self, topic: str) -> str:
        """The topic as the user named it (RocketMQ clients strip the namespace the same way)."""
        return without_namespace(topic, self.namespace)
