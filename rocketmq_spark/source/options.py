"""Every user option of the ``rocketmq`` source, parsed and checked in one place.

Spark options are case-insensitive strings. ``parse_options`` turns them into a typed, immutable
``SourceOptions`` or raises ``ConfigurationError`` naming the option, the problem and the fix,
before any job runs. Checks that need the broker (an offset for a queue that does not exist) are
made by the readers when they first resolve offsets.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from rocketmq_spark.config.cluster import (
    ACCESS_KEY, DEFAULT_PULL_TIMEOUT_MS, NAME_SERVER, NAMESPACE, PULL_TIMEOUT_MS, RETRY_BUDGET_MS, SECRET_KEY,
    SECURITY_TOKEN, TLS, TLS_TRUST_CERT_PATH, TLS_VERIFY, client_config, name_servers, retry_policy, with_namespace,
    without_namespace,
)
from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.config.values import OptionReader
from rocketmq_spark.model import (  # the parsers are where the subscription words are; used here
    EXPRESSION_SQL92, EXPRESSION_TAG, MS_PER_SECOND, SUBSCRIBE_ALL, ClientConfig, parse_tag_expression,
)
from rocketmq_spark.model import now_ms as wall_clock_ms
from rocketmq_spark.records.compression import DEFAULT_MAX_BODY_BYTES
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.source.offsets import OffsetMap, parse_offset_json
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

ALL_OPTIONS = (
    NAME_SERVER, TOPIC, CONSUMER_GROUP, SUB_EXPRESSION, EXPRESSION_TYPE, CONSUME_FROM_WHERE,
    CONSUME_TIMESTAMP, STARTING_OFFSETS, STARTING_TIMESTAMP, ENDING_OFFSETS, ENDING_TIMESTAMP,
    MAX_MESSAGES_PER_TRIGGER, MIN_MESSAGES_PER_TRIGGER, MAX_TRIGGER_DELAY, MIN_PARTITIONS,
    MAX_MESSAGES_PER_PARTITION, FAIL_ON_DATA_LOSS, FAIL_ON_SHARED_GROUP, COMMIT_OFFSETS, PULL_BATCH_SIZE, MAX_BODY_BYTES,
    PULL_TIMEOUT_MS, RETRY_BUDGET_MS, ACCESS_KEY, SECRET_KEY, SECURITY_TOKEN, TLS, TLS_TRUST_CERT_PATH, TLS_VERIFY,
    NAMESPACE, ON_OFFSET_RESET, FILTER_PUSHDOWN,
)
# Whose options these are, as the error about an unknown one says.
OWNER = "the rocketmq source"
# Options Spark itself may add to a source's map.
SPARK_OWNED = frozenset({"path"})

DEFAULT_PULL_BATCH_SIZE = 32
# What to do about a body that decompresses past maxBodyBytes (the decoders speak of their bound).
MAX_BODY_BYTES_FIX = (f"If producers send bodies this large on purpose, raise the {MAX_BODY_BYTES} option above "
                      "their size; otherwise the message is damaged or hostile: read past its offset")
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


def _consume_timestamp(reader: OptionReader, now_ms: int) -> int:
    value = reader.get(CONSUME_TIMESTAMP)
    if value is None:
        return now_ms - DEFAULT_CONSUME_TIMESTAMP_LOOKBACK_MS
    if value.isdigit() and len(value) == ROCKETMQ_TIMESTAMP_DIGITS:
        try:
            return int(datetime.strptime(value, ROCKETMQ_TIMESTAMP_FORMAT).timestamp() * MS_PER_SECOND)
        except ValueError:
            pass
    elif value.isdigit():
        return int(value)
    raise ConfigurationError(CONSUME_TIMESTAMP, f"'{value}' is not a time",
                             "Use RocketMQ's yyyyMMddHHmmss (driver time zone), e.g. 20240131235959, "
                             "or epoch milliseconds")


def _offsets_json(reader: OptionReader, name: str, namespace: str | None, topics: tuple[str, ...]) -> OffsetMap:
    text = reader.get(name)
    assert text is not None
    try:
        offsets = parse_offset_json(text, namespace=namespace)
    except ValueError as err:
        raise ConfigurationError(
            name, f"malformed offsets ({err})",
            'Use JSON like {"<topic>": {"<brokerName>": {"<queueId>": <offset>}}}',
        ) from err
    stray = sorted({queue.topic for queue in offsets} - set(topics))
    if stray:
        raise ConfigurationError(name, f"names topics the query does not read: {', '.join(stray)}",
                                 f"List only topics from the '{TOPIC}' option")
    return offsets


def parse_options(raw: Mapping[str, str], *, kind: ReadKind, now_ms: int | None = None) -> SourceOptions:
    """Parse and check the options of a stream, a batch read, or a read not yet known (``kind``)."""
    now = wall_clock_ms() if now_ms is None else now_ms
    reader = OptionReader(raw, ALL_OPTIONS, SPARK_OWNED, owner=OWNER)
    servers = name_servers(reader)
    namespace = reader.get(NAMESPACE)
    topic_names = [t.strip() for t in reader.required(
        TOPIC, "Set it to the topic to read, or several separated by commas").split(",") if t.strip()]
    if not topic_names:
        raise ConfigurationError(TOPIC, "names no topic", "Set it to the topic to read, or several separated by commas")
    topics = tuple(dict.fromkeys(with_namespace(t, namespace) for t in topic_names))

    group = reader.get(CONSUMER_GROUP)
    if kind is ReadKind.STREAM and group is None:
        raise ConfigurationError(
            CONSUMER_GROUP, "is required for streams",
            "Set it to the consumer group whose stored offsets the stream starts from and commits to")
    if group is not None:
        group = with_namespace(group, namespace)

    expression_type = reader.choice(EXPRESSION_TYPE, (EXPRESSION_TAG, EXPRESSION_SQL92), EXPRESSION_TAG)
    sub_expression = reader.get(SUB_EXPRESSION) or SUBSCRIBE_ALL
    if expression_type == EXPRESSION_SQL92 and sub_expression == SUBSCRIBE_ALL:
        raise ConfigurationError(SUB_EXPRESSION, "'*' is a tag expression, not SQL92",
                                 "Give a SQL92 selector, e.g. a > 5 AND b = 'x', or use expressionType=TAG")

    consume_from_where = ConsumeFromWhere(reader.choice(
        CONSUME_FROM_WHERE, tuple(c.value for c in ConsumeFromWhere), ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET.value))

    starting_text = reader.get(STARTING_OFFSETS)
    default_mode = StartingMode.GROUP if kind is ReadKind.STREAM else StartingMode.EARLIEST
    starting_offsets: OffsetMap = {}
    if starting_text is None:
        starting_mode = default_mode
    elif starting_text.startswith("{"):
        starting_mode = StartingMode.SPECIFIC
        starting_offsets = _offsets_json(reader, STARTING_OFFSETS, namespace, topics)
    else:
        named = (StartingMode.GROUP, StartingMode.EARLIEST, StartingMode.LATEST)
        starting_mode = StartingMode(reader.choice(
            STARTING_OFFSETS, tuple(m.value for m in named), default_mode.value, also=("JSON offsets",)).lower())
    starting_timestamp = reader.epoch_ms(STARTING_TIMESTAMP)
    if starting_timestamp is not None and starting_mode is StartingMode.SPECIFIC:
        raise ConfigurationError(STARTING_TIMESTAMP, f"cannot be combined with JSON {STARTING_OFFSETS}",
                                 "Give one of the two")

    ending_offsets: OffsetMap | None = None
    ending_timestamp = reader.epoch_ms(ENDING_TIMESTAMP)
    ending_text = reader.get(ENDING_OFFSETS)
    if kind is ReadKind.STREAM:
        for name in (ENDING_OFFSETS, ENDING_TIMESTAMP, FILTER_PUSHDOWN):
            if reader.get(name) is not None:
                raise ConfigurationError(name, "applies to batch reads only",
                                         "Remove it from the stream, or read with spark.read")
    elif ending_text is not None and ending_text.lower() != "latest":
        if not ending_text.startswith("{"):
            raise ConfigurationError(ENDING_OFFSETS, f"unknown value '{ending_text}'",
                                     "Use one of: latest, JSON offsets")
        ending_offsets = _offsets_json(reader, ENDING_OFFSETS, namespace, topics)
    if ending_timestamp is not None and ending_offsets is not None:
        raise ConfigurationError(ENDING_TIMESTAMP, f"cannot be combined with JSON {ENDING_OFFSETS}",
                                 "Give one of the two")

    max_per_trigger = reader.positive_int(MAX_MESSAGES_PER_TRIGGER)
    min_per_trigger = reader.positive_int(MIN_MESSAGES_PER_TRIGGER)
    if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise ConfigurationError(MIN_MESSAGES_PER_TRIGGER, f"{min_per_trigger} exceeds "
                                 f"{MAX_MESSAGES_PER_TRIGGER}={max_per_trigger}", "Make it at most that")

    client = client_config(reader, servers)
    retry = retry_policy(reader)

    return SourceOptions(
        client=client,
        topics=topics,
        consumer_group=group,
        sub_expression=sub_expression,
        expression_type=expression_type,
        consume_from_where=consume_from_where,
        consume_timestamp_ms=_consume_timestamp(reader, now),
        starting_mode=starting_mode,
        starting_offsets=starting_offsets,
        starting_timestamp_ms=starting_timestamp,
        ending_offsets=ending_offsets,
        ending_timestamp_ms=ending_timestamp,
        max_messages_per_trigger=max_per_trigger,
        min_messages_per_trigger=min_per_trigger,
        max_trigger_delay_ms=reader.duration_ms(MAX_TRIGGER_DELAY, DEFAULT_MAX_TRIGGER_DELAY_MS),
        min_partitions=reader.positive_int(MIN_PARTITIONS),
        max_messages_per_partition=reader.positive_int(MAX_MESSAGES_PER_PARTITION),
        fail_on_data_loss=reader.boolean(FAIL_ON_DATA_LOSS, True),
        commit_offsets=reader.boolean(COMMIT_OFFSETS, True),
        fail_on_shared_group=reader.boolean(FAIL_ON_SHARED_GROUP, False),
        pull_batch_size=reader.positive_int(PULL_BATCH_SIZE, DEFAULT_PULL_BATCH_SIZE) or DEFAULT_PULL_BATCH_SIZE,
        max_body_bytes=reader.positive_int(MAX_BODY_BYTES, DEFAULT_MAX_BODY_BYTES) or DEFAULT_MAX_BODY_BYTES,
        namespace=namespace,
        on_offset_reset=OnOffsetReset(reader.choice(ON_OFFSET_RESET, tuple(m.value for m in OnOffsetReset),
                                                    OnOffsetReset.FOLLOW.value)),
        retry=retry,
        start_retry=retry.within(client.request_timeout),
        filter_pushdown=reader.boolean(FILTER_PUSHDOWN, False),
    )
