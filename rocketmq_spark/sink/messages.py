"""Rows to messages: the values of an Arrow batch's columns, checked, and each message's property
string as RocketMQ's Java producer would send it to the broker it goes to.

A row's own errors (no body, no topic, a reserved property name, a delivery time on a 4.9
broker) cannot be known before the task sees the row; they fail the task naming the row's
topic. User properties that RocketMQ itself puts on stored messages, which the source reports,
are dropped, so rows read by the source can be written back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import pyarrow as pa

from rocketmq_spark.config.cluster import with_namespace
from rocketmq_spark.records.outgoing import (
    PROPERTY_DELAY,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_WAIT,
    WAIT_FOR_STORE,
    encode_properties,
    message_properties,
    plain_properties,
    properties_bytes,
)
from rocketmq_spark.records.properties import PROPERTY_INSTANCE_ID
from rocketmq_spark.remoting.errors import RocketMQError
from rocketmq_spark.sink import columns as col

# Names a broker or RocketMQ's clients put on stored messages (delivery, retry, timer, transaction
# and trace bookkeeping): the source reports them in ``properties``, and a row written back drops
# them (tags and keys have columns of their own).
DROPPED_PROPERTIES = frozenset(
    {
        "TAGS", "KEYS", "UNIQ_KEY", "WAIT", "MIN_OFFSET", "MAX_OFFSET", "CLUSTER", "MSG_REGION", "TRACE_ON",
        "REAL_TOPIC", "REAL_QID", "RETRY_TOPIC", "DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS",
        "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL", "INSTANCE_ID", "__CRC32#", "__BORNHOST", "BORN_TIMESTAMP", "RECONSUME_TIME",
        "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "ORIGIN_MESSAGE_ID", "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID", "TRAN_MSG", "PGROUP", "TRAN_PREPARED_QUEUE_OFFSET",
    }
)  # fmt: skip
# The rest of ``MessageConst``'s system names (what ``Message.putUserProperty`` refuses) on the
# 4.9 line, and the ones 5.x adds: a row that sets one of them is an error naming it.
RESERVED_PROPERTIES_4X = frozenset(
    {
        "BUYER_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL",
        "ARRIVE_TIME", "PUSH_REPLY_TIME", "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET",
    }
)  # fmt: skip
RESERVED_PROPERTIES_5X = RESERVED_PROPERTIES_4X | {
    "DUP_INFO",
    "EXTEND_UNIQ_INFO",
    "1ST_POP_TIME",
    "POP_CK",
    "POP_CK_OFFSET",
}
# An Arrow timestamp in milliseconds: times this, then floor-divided by that.
_TO_MS = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}


class RowError(RocketMQError, ValueError):
    """A row cannot be sent; the message names its topic and what to change."""


class Row(NamedTuple):
    """One row's values, by the sink's column names; ``topic`` with the namespace prefix. A tuple:
    a task makes one per row, and a tuple is the cheapest object to make."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | None = None
    properties: Sequence[tuple[str, str]] | None = None
    sharding_key: str | None = None
    broker_name: str | None = None
    queue_id: int | None = None
    deliver_ms: int | None = None
    delay_level: int | None = None

    @property
    def single(self) -> bool:
        """Whether it must be sent alone: delayed and timer messages are never batched."""
        return self.deliver_ms is not None or self.delay_level is not None

    @property
    def pinned(self) -> bool:
        """Whether its queue is fixed (ordered or explicit): retried there, never elsewhere."""
        return self.sharding_key is not None or self.broker_name is not None


def _column(batch: pa.RecordBatch, name: str | None) -> list[object] | None:
    if name is None:
        return None
    array = batch.column(batch.schema.get_field_index(name))
    if name.lower() == col.BODY.lower() and pa.types.is_string(array.type):
        array = array.cast(pa.binary())  # UTF-8 bytes, without a Python string per row
    elif name.lower() == col.BODY.lower() and pa.types.is_large_string(array.type):
        array = array.cast(pa.large_binary())
    elif pa.types.is_timestamp(array.type):
        times, per = _TO_MS[array.type.unit]
        return [None if v is None else v * times // per for v in array.cast(pa.int64()).to_pylist()]
    values: list[object] = array.to_pylist()
    return values


def rows_of(batch: pa.RecordBatch, names: Mapping[str, str], topic: str | None, namespace: str | None) -> list[Row]:
    """The rows of an Arrow batch whose columns are ``names`` (sink column -> the batch's name);
    ``topic`` (the option) overrides the topic column. Raises RowError for a row without a topic
    or a body, or with both a delay level and a delivery time."""
    lookup = {field.lower(): field for field in batch.schema.names}
    values = {column: _column(batch, lookup.get(given.lower())) for column, given in names.items()}
    return rows_from_columns(values, batch.num_rows, topic, namespace)


def rows_from_columns(
    values: Mapping[str, Sequence[object] | None], count: int, topic: str | None, namespace: str | None
) -> list[Row]:
    """The rows of ``count`` values per sink column (bodies as bytes, delivery times in epoch
    ms, properties as (name, value) pairs), checked as ``rows_of`` says."""

    def of(column: str) -> Sequence[object]:
        found = values.get(column)
        return found if found is not None else [None] * count

    rows = []
    fields = (col.TAGS, col.KEYS, col.PROPERTIES, col.SHARDING_KEY, col.BROKER_NAME, col.QUEUE_ID)
    timing = zip(of(col.DELIVER_TIME), of(col.DELAY_LEVEL))
    for row_topic, body, rest, (deliver, delay) in zip(of(col.TOPIC), of(col.BODY), zip(*map(of, fields)), timing):
        name = topic if topic is not None else checked_topic(row_topic, namespace)
        tags, keys, properties, sharding_key, broker_name, queue_id = rest
        if (broker_name is None) != (queue_id is None):
            raise RowError(
                f"a row of topic {name} sets only one of brokerName ({broker_name}) and queueId ({queue_id}). "
                "Set both for an explicit queue, or neither"
            )
        rows.append(
            Row(
                name,
                _body(body, name),
                tags,
                keys,
                properties,
                sharding_key,
                broker_name,
                queue_id,
                deliver,  # type: ignore[arg-type]
                _delay(delay, deliver, name),
            )
        )
    return rows


def checked_topic(value: object, namespace: str | None) -> str:
    """A row's topic column value with the namespace, or RowError when it is null or blank."""
    if not isinstance(value, str) or not value.strip():
        raise RowError("a row has no topic: its topic column is null or empty. Fill it, or set the topic option")
    return with_namespace(value.strip(), namespace)


def _body(value: object, topic: str) -> bytes:
    if not isinstance(value, bytes) or not value:
        kind = "a null" if value is None else "an empty"
        raise RowError(f"a row of topic {topic} has {kind} body. RocketMQ stores no message without a body")
    return value


def _delay(level: object, deliver: object, topic: str) -> int | None:
    if level is None:
        return None
    if deliver is not None:
        raise RowError(f"a row of topic {topic} sets both delayLevel and deliverTime. Keep one of them")
    if not isinstance(level, int) or level < 1:
        raise RowError(f"a row of topic {topic} has delayLevel {level}. Give a level from 1 (the broker's levels)")
    return level


def user_properties(row: Row, five_x: bool) -> dict[str, str]:
    """The row's properties to send: those RocketMQ puts on stored messages dropped; a name it
    reserves otherwise (on the broker's line) is a RowError naming it."""
    reserved = RESERVED_PROPERTIES_5X if five_x else RESERVED_PROPERTIES_4X
    kept: dict[str, str] = {}
    for name, value in row.properties or ():
        if name in DROPPED_PROPERTIES or not name or not value:
            continue
        if name in reserved:
            raise RowError(
                f"a row of topic {row.topic} sets property {name}, a name RocketMQ reserves. "
                "Rename it, or drop it from the properties column"
            )
        kept[name] = value
    return kept


def encoded_properties(row: Row, unique_id: str, *, five_x: bool, namespace: str | None) -> bytes:
    """The property string of the row's message, as sent to a broker of the given line."""
    if not row.properties and row.delay_level is None and row.deliver_ms is None and not namespace:
        try:
            return properties_bytes(plain_properties(row.tags, row.keys, unique_id))
        except ValueError as err:
            raise RowError(f"a row of topic {row.topic}: {err}. Send shorter tags or keys") from err
    extra: dict[str, str] = {}
    if namespace:
        extra[PROPERTY_INSTANCE_ID] = namespace
    if row.delay_level is not None:
        extra[PROPERTY_DELAY] = str(row.delay_level)
    if row.deliver_ms is not None:
        if not five_x:
            raise RowError(
                f"a row of topic {row.topic} sets deliverTime, but its broker runs RocketMQ 4.9, which has no "
                "timer messages. Use delayLevel, or a 5.x broker"
            )
        extra[PROPERTY_TIMER_DELIVER_MS] = str(row.deliver_ms)
    properties = message_properties(
        tags=row.tags, keys=row.keys, unique_id=unique_id, user=user_properties(row, five_x), extra=extra
    )
    try:
        return properties_bytes(encode_properties(properties))
    except ValueError as err:
        raise RowError(f"a row of topic {row.topic}: {err}. Send fewer or shorter properties") from err


def batch_properties(namespace: str | None) -> str:
    """A batch send's own properties: ``WAIT`` (and the namespace), without a unique id of the
    batch. Brokers append these to every message of the batch, and a consumer that keeps the last
    ``UNIQ_KEY`` of a message (RocketMQ's Java one) would otherwise report the batch's id as each
    message's ``msgId`` where the source reports the message's own."""
    properties = {PROPERTY_WAIT: WAIT_FOR_STORE}
    if namespace:
        properties[PROPERTY_INSTANCE_ID] = namespace
    return encode_properties(properties)
