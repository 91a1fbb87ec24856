"""Every user option of the ``rocketmq`` source, parsed and checked in one place.

Spark options are case-insensitive strings. ``parse_options`` turns them into a typed, immutable
``SourceOptions`` or raises ``ConfigurationError`` naming the option, the problem and the fix,
before any job runs. Checks that need the broker (an offset for a queue that does not exist) are
made by the readers when they first resolve offsets.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import NamedTuple

from rocketmq_spark.config.cluster import (
    NAMESPACE,
    client_config,
    name_servers,
    retry_policy,
    with_namespace,
)
from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.config.values import OptionReader
from rocketmq_spark.model import (  # the parsers are where the subscription words are; used here
    EXPRESSION_SQL92,
    EXPRESSION_TAG,
    MS_PER_SECOND,
    SUBSCRIBE_ALL,
    ClientConfig,
)
from rocketmq_spark.model import now_ms as wall_clock_ms
from rocketmq_spark.records.compression import DEFAULT_MAX_BODY_BYTES
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.source.offsets import OffsetMap, parse_offset_json
from rocketmq_spark.source.option_model import (
    ALL_OPTIONS,
    COMMIT_OFFSETS,
    CONSUME_FROM_WHERE,
    CONSUME_TIMESTAMP,
    CONSUMER_GROUP,
    DEFAULT_CONSUME_TIMESTAMP_LOOKBACK_MS,
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    DEFAULT_PULL_BATCH_SIZE,
    ENDING_OFFSETS,
    ENDING_TIMESTAMP,
    EXPRESSION_TYPE,
    FAIL_ON_DATA_LOSS,
    FAIL_ON_SHARED_GROUP,
    FILTER_PUSHDOWN,
    MAX_BODY_BYTES,
    MAX_MESSAGES_PER_PARTITION,
    MAX_MESSAGES_PER_TRIGGER,
    MAX_TRIGGER_DELAY,
    MIN_MESSAGES_PER_TRIGGER,
    MIN_PARTITIONS,
    ON_OFFSET_RESET,
    OWNER,
    PULL_BATCH_SIZE,
    ROCKETMQ_TIMESTAMP_DIGITS,
    ROCKETMQ_TIMESTAMP_FORMAT,
    SPARK_OWNED,
    STARTING_OFFSETS,
    STARTING_TIMESTAMP,
    SUB_EXPRESSION,
    TOPIC,
    ConsumeFromWhere,
    OnOffsetReset,
    ReadKind,
    SourceOptions,
    StartingMode,
)


# The pieces parse_options is made of, one per concern; each holds the SourceOptions fields it names.
class _Names(NamedTuple):
    """What is read, and as which group."""

    topics: tuple[str, ...]
    consumer_group: str | None
    namespace: str | None


class _Subscription(NamedTuple):
    expression_type: str
    sub_expression: str


class _Start(NamedTuple):
    """Where each queue starts: the rule of a new query, and the fallback where nothing is stored."""

    consume_from_where: ConsumeFromWhere
    consume_timestamp_ms: int
    starting_mode: StartingMode
    starting_offsets: OffsetMap
    starting_timestamp_ms: int | None


class _BatchOnly(NamedTuple):
    """What only batch reads take: where each queue ends, and Spark's pushed filters."""

    ending_offsets: OffsetMap | None
    ending_timestamp_ms: int | None
    filter_pushdown: bool


class _TriggerLimits(NamedTuple):
    max_messages_per_trigger: int | None
    min_messages_per_trigger: int | None
    max_trigger_delay_ms: int


class _Cluster(NamedTuple):
    """The client, and its retries while the query runs and at its start (SourceOptions says why)."""

    client: ClientConfig
    retry: Retry
    start_retry: Retry


class _Pulls(NamedTuple):
    """How ranges become Spark partitions, and what one pull asks for and may hold."""

    min_partitions: int | None
    max_messages_per_partition: int | None
    pull_batch_size: int
    max_body_bytes: int


class _Policies(NamedTuple):
    """What a query does about lost data, its commits, a shared group and an operator's reset."""

    fail_on_data_loss: bool
    commit_offsets: bool
    fail_on_shared_group: bool
    on_offset_reset: OnOffsetReset


def parse_options(raw: Mapping[str, str], *, kind: ReadKind, now_ms: int | None = None) -> SourceOptions:
    """Parse and check the options of a stream, a batch read, or a read not yet known (``kind``)."""
    reader = OptionReader(raw, ALL_OPTIONS, SPARK_OWNED, owner=OWNER)
    servers = name_servers(reader)
    names = _names(reader, kind)
    now = wall_clock_ms() if now_ms is None else now_ms
    # The pieces check their options in this order; each field is named, so mypy checks them all.
    subscription = _subscription(reader)
    start = _start(reader, kind, names, now)
    batch = _batch_only(reader, kind, names)
    limits = _trigger_limits(reader)
    cluster = _cluster(reader, servers)
    pulls = _pulls(reader)
    policies = _policies(reader)
    return SourceOptions(
        topics=names.topics,
        consumer_group=names.consumer_group,
        namespace=names.namespace,
        expression_type=subscription.expression_type,
        sub_expression=subscription.sub_expression,
        consume_from_where=start.consume_from_where,
        consume_timestamp_ms=start.consume_timestamp_ms,
        starting_mode=start.starting_mode,
        starting_offsets=start.starting_offsets,
        starting_timestamp_ms=start.starting_timestamp_ms,
        ending_offsets=batch.ending_offsets,
        ending_timestamp_ms=batch.ending_timestamp_ms,
        filter_pushdown=batch.filter_pushdown,
        max_messages_per_trigger=limits.max_messages_per_trigger,
        min_messages_per_trigger=limits.min_messages_per_trigger,
        max_trigger_delay_ms=limits.max_trigger_delay_ms,
        client=cluster.client,
        retry=cluster.retry,
        start_retry=cluster.start_retry,
        min_partitions=pulls.min_partitions,
        max_messages_per_partition=pulls.max_messages_per_partition,
        pull_batch_size=pulls.pull_batch_size,
        max_body_bytes=pulls.max_body_bytes,
        fail_on_data_loss=policies.fail_on_data_loss,
        commit_offsets=policies.commit_offsets,
        fail_on_shared_group=policies.fail_on_shared_group,
        on_offset_reset=policies.on_offset_reset,
    )


def _names(reader: OptionReader, kind: ReadKind) -> _Names:
    """The topics and the group, with the namespace prefix when one is set."""
    namespace = reader.get(NAMESPACE)
    fix = "Set it to the topic to read, or several separated by commas"
    topic_names = [t.strip() for t in reader.required(TOPIC, fix).split(",") if t.strip()]
    if not topic_names:
        raise ConfigurationError(TOPIC, "names no topic", fix)
    topics = tuple(dict.fromkeys(with_namespace(t, namespace) for t in topic_names))
    group = reader.get(CONSUMER_GROUP)
    if group is None and kind is ReadKind.STREAM:
        raise ConfigurationError(
            CONSUMER_GROUP,
            "is required for streams",
            "Set it to the consumer group whose stored offsets the stream starts from and commits to",
        )
    return _Names(topics, None if group is None else with_namespace(group, namespace), namespace)


def _subscription(reader: OptionReader) -> _Subscription:
    """The expression pulls filter by on the broker, and its language."""
    expression_type = reader.choice(EXPRESSION_TYPE, (EXPRESSION_TAG, EXPRESSION_SQL92), EXPRESSION_TAG)
    sub_expression = reader.get(SUB_EXPRESSION) or SUBSCRIBE_ALL
    if expression_type == EXPRESSION_SQL92 and sub_expression == SUBSCRIBE_ALL:
        raise ConfigurationError(
            SUB_EXPRESSION,
            "'*' is a tag expression, not SQL92",
            "Give a SQL92 selector, e.g. a > 5 AND b = 'x', or use expressionType=TAG",
        )
    return _Subscription(expression_type, sub_expression)


def _start(reader: OptionReader, kind: ReadKind, names: _Names, now_ms: int) -> _Start:
    """The start rule: streams start from the group's stored offsets unless told otherwise, batch
    reads from the earliest."""
    consume_from_where = ConsumeFromWhere(
        reader.choice(
            CONSUME_FROM_WHERE,
            tuple(c.value for c in ConsumeFromWhere),
            ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET.value,
        )
    )
    text = reader.get(STARTING_OFFSETS)
    default_mode = StartingMode.GROUP if kind is ReadKind.STREAM else StartingMode.EARLIEST
    offsets: OffsetMap = {}
    if text is None:
        mode = default_mode
    elif text.startswith("{"):
        mode = StartingMode.SPECIFIC
        offsets = _offsets_json(reader, STARTING_OFFSETS, names)
    else:
        named = (StartingMode.GROUP, StartingMode.EARLIEST, StartingMode.LATEST)
        mode = StartingMode(
            reader.choice(
                STARTING_OFFSETS, tuple(m.value for m in named), default_mode.value, also=("JSON offsets",)
            ).lower()
        )
    timestamp = reader.epoch_ms(STARTING_TIMESTAMP)
    if timestamp is not None and mode is StartingMode.SPECIFIC:
        raise ConfigurationError(
            STARTING_TIMESTAMP, f"cannot be combined with JSON {STARTING_OFFSETS}", "Give one of the two"
        )
    return _Start(consume_from_where, _consume_timestamp(reader, now_ms), mode, offsets, timestamp)


def _batch_only(reader: OptionReader, kind: ReadKind, names: _Names) -> _BatchOnly:
    """The ending options and pushdown of a batch read; on a stream, an error if any is given."""
    timestamp = reader.epoch_ms(ENDING_TIMESTAMP)
    text = reader.get(ENDING_OFFSETS)
    offsets: OffsetMap | None = None  # latest as of planning
    if kind is ReadKind.STREAM:
        for name in (ENDING_OFFSETS, ENDING_TIMESTAMP, FILTER_PUSHDOWN):
            if reader.get(name) is not None:
                raise ConfigurationError(
                    name, "applies to batch reads only", "Remove it from the stream, or read with spark.read"
                )
    elif text is not None and text.lower() != "latest":
        if not text.startswith("{"):
            raise ConfigurationError(ENDING_OFFSETS, f"unknown value '{text}'", "Use one of: latest, JSON offsets")
        offsets = _offsets_json(reader, ENDING_OFFSETS, names)
    if timestamp is not None and offsets is not None:
        raise ConfigurationError(
            ENDING_TIMESTAMP, f"cannot be combined with JSON {ENDING_OFFSETS}", "Give one of the two"
        )
    return _BatchOnly(offsets, timestamp, reader.boolean(FILTER_PUSHDOWN, False))


def _trigger_limits(reader: OptionReader) -> _TriggerLimits:
    """How much a micro-batch may take, and how long it waits for enough."""
    most = reader.positive_int(MAX_MESSAGES_PER_TRIGGER)
    least = reader.positive_int(MIN_MESSAGES_PER_TRIGGER)
    if most is not None and least is not None and least > most:
        raise ConfigurationError(
            MIN_MESSAGES_PER_TRIGGER, f"{least} exceeds {MAX_MESSAGES_PER_TRIGGER}={most}", "Make it at most that"
        )
    return _TriggerLimits(most, least, reader.duration_ms(MAX_TRIGGER_DELAY, DEFAULT_MAX_TRIGGER_DELAY_MS))


def _cluster(reader: OptionReader, servers: tuple[str, ...]) -> _Cluster:
    """From the options shared with writing (``config.cluster``)."""
    client, retry = client_config(reader, servers), retry_policy(reader)
    return _Cluster(client, retry, retry.within(client.request_timeout))


def _pulls(reader: OptionReader) -> _Pulls:
    return _Pulls(
        min_partitions=reader.positive_int(MIN_PARTITIONS),
        max_messages_per_partition=reader.positive_int(MAX_MESSAGES_PER_PARTITION),
        pull_batch_size=reader.positive_int(PULL_BATCH_SIZE, DEFAULT_PULL_BATCH_SIZE) or DEFAULT_PULL_BATCH_SIZE,
        max_body_bytes=reader.positive_int(MAX_BODY_BYTES, DEFAULT_MAX_BODY_BYTES) or DEFAULT_MAX_BODY_BYTES,
    )


def _policies(reader: OptionReader) -> _Policies:
    return _Policies(
        fail_on_data_loss=reader.boolean(FAIL_ON_DATA_LOSS, True),
        commit_offsets=reader.boolean(COMMIT_OFFSETS, True),
        fail_on_shared_group=reader.boolean(FAIL_ON_SHARED_GROUP, False),
        on_offset_reset=OnOffsetReset(
            reader.choice(ON_OFFSET_RESET, tuple(m.value for m in OnOffsetReset), OnOffsetReset.FOLLOW.value)
        ),
    )


def _consume_timestamp(reader: OptionReader, now_ms: int) -> int:
    """``consumeTimestamp`` in epoch ms: RocketMQ's yyyyMMddHHmmss (driver time zone) or epoch ms."""
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
    raise ConfigurationError(
        CONSUME_TIMESTAMP,
        f"'{value}' is not a time",
        "Use RocketMQ's yyyyMMddHHmmss (driver time zone), e.g. 20240131235959, or epoch milliseconds",
    )


def _offsets_json(reader: OptionReader, name: str, names: _Names) -> OffsetMap:
    """JSON offsets of the query's topics."""
    text = reader.get(name)
    assert text is not None
    try:
        offsets = parse_offset_json(text, namespace=names.namespace)
    except ValueError as err:
        raise ConfigurationError(
            name,
            f"malformed offsets ({err})",
            'Use JSON like {"<topic>": {"<brokerName>": {"<queueId>": <offset>}}}',
        ) from err
    stray = sorted({queue.topic for queue in offsets} - set(names.topics))
    if stray:
        raise ConfigurationError(
            name,
            f"names topics the query does not read: {', '.join(stray)}",
            f"List only topics from the '{TOPIC}' option",
        )
    return offsets
