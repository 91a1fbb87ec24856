"""Each typed broker call as a value: the request it sends and how its answer is read. No I/O.

A :class:`Call` can be sent alone (``RocketMQClient.call``) or many at once on open connections
(``RocketMQClient.call_many``), so a driver asking about a thousand queues sends its requests back
to back instead of one round trip after another. Every call names its broker in ``bname`` as
well as going to its address: a broker ignores the field, and a 5.x proxy's remoting port needs
it to forward the call.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from rocketmq_spark.model import EXPRESSION_TAG, SUBSCRIBE_ALL, MessageQueue
from rocketmq_spark.remoting import codes, fastjson
from rocketmq_spark.remoting.codec import Body, RemotingCommand
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.errors import ProtocolError, error_for_response

# What a call's answer is read as. Covariant, as a Call only produces it: a Call[PullResult] is
# also a call of any wider answer, which is how mypy reads call_many's calls (answers or errors).
T_co = TypeVar("T_co", covariant=True)

SUCCESS_ONLY = (ResponseCode.SUCCESS,)


@dataclass(frozen=True)
class Call(Generic[T_co]):
    """One request and the reading of its answer (``read(response, address)``), which raises the
    error a refusal stands for; ``body`` for the few requests that carry one (a heartbeat)."""

    code: RequestCode
    fields: Mapping[str, object]
    read: Callable[[RemotingCommand, str], T_co]
    body: Body = b""


def accepted(
    response: RemotingCommand, code: int, address: str, accept: Collection[int] = SUCCESS_ONLY
) -> RemotingCommand:
    """The response, if its code is one the caller handles; else the error it stands for."""
    if response.code not in accept:
        raise error_for_response(response.code, response.remark, request_code=code, address=address)
    return response


def int_field(response: RemotingCommand, name: str) -> int:
    value = response.ext_fields.get(name)
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as err:
        raise ProtocolError(f"response {response.code} lacks a numeric '{name}' field: {response.ext_fields}") from err


def _queue_fields(queue: MessageQueue) -> dict[str, object]:
    return {"topic": queue.topic, "queueId": queue.queue_id, "bname": queue.broker_name}


def _int_call(code: RequestCode, fields: Mapping[str, object], name: str) -> Call[int]:
    return Call(code, fields, lambda response, address: int_field(accepted(response, code, address), name))


def done_call(code: RequestCode, fields: Mapping[str, object], body: bytes = b"") -> Call[None]:
    """A request whose answer says only that it was done (or the error why not)."""

    def read(response: RemotingCommand, address: str) -> None:
        accepted(response, code, address)

    return Call(code, fields, read, body)


def broker_config() -> Call[dict[str, str]]:
    """A broker's settings as it runs (GET_BROKER_CONFIG, what ``mqadmin getBrokerConfig`` shows):
    a ``key=value`` line each."""
    code = RequestCode.GET_BROKER_CONFIG

    def read(response: RemotingCommand, address: str) -> dict[str, str]:
        text = accepted(response, code, address).body.decode("utf-8", errors="replace")
        pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
        return {key.strip(): value.strip() for key, value in pairs}

    return Call(code, {}, read)


# ----------------------------------------------------------------------- offsets


def min_offset(queue: MessageQueue) -> Call[int]:
    """The queue's first offset still stored."""
    return _int_call(RequestCode.GET_MIN_OFFSET, _queue_fields(queue), "offset")


def max_offset(queue: MessageQueue) -> Call[int]:
    """The offset the next message will get (one past the last one consumers can read)."""
    return _int_call(RequestCode.GET_MAX_OFFSET, {**_queue_fields(queue), "committed": True}, "offset")


class Boundary(enum.Enum):
    """Which offset SEARCH_OFFSET_BY_TIMESTAMP returns for a time."""

    LOWER = "lower"  # the first offset stored at or after the time
    UPPER = "upper"  # the last offset stored at or before the time


@dataclass(frozen=True)
class SearchedOffset:
    """A broker's answer to a search by time.

    ``nearest``: a 4.x broker answered, which ignores ``boundaryType`` and gives the entry whose
    store time is nearest the time (the last entry if all are older), on either side of the one
    asked for; ``source.time_search`` turns it into the exact offset.
    """

    offset: int
    nearest: bool = False


def search_offset(queue: MessageQueue, timestamp_ms: int, boundary: Boundary = Boundary.LOWER) -> Call[SearchedOffset]:
    """LOWER: first offset stored at or after the time (max offset if none); UPPER: last at or
    before. Exact on 5.x; on 4.x only near it (see :class:`SearchedOffset`)."""
    code = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
    fields = {**_queue_fields(queue), "timestamp": timestamp_ms, "boundaryType": boundary.value}

    def read(response: RemotingCommand, address: str) -> SearchedOffset:
        offset = int_field(accepted(response, code, address), "offset")
        return SearchedOffset(offset, nearest=response.version < codes.FIRST_5X_VERSION)

    return Call(code, fields, read)


def earliest_store_time(queue: MessageQueue) -> Call[int]:
    return _int_call(RequestCode.GET_EARLIEST_MSG_STORETIME, _queue_fields(queue), "timestamp")


@dataclass(frozen=True)
class StoredOffset:
    """A group's stored offset on a queue (the next to read), None where nothing is stored.

    ``unsure``: a 4.x broker answered 0, which it also answers where nothing is stored (it
    ignores ``setZeroIfNotFound``); :func:`all_consumer_offsets` tells the two apart.
    """

    offset: int | None
    unsure: bool = False


def query_consumer_offset(queue: MessageQueue, group: str) -> Call[StoredOffset]:
    """The group's stored offset on the queue.

    ``setZeroIfNotFound=false`` makes a 5.x broker answer QUERY_NOT_FOUND instead of guessing 0 for
    a queue whose first message is still in memory; a 4.9 broker ignores the field and answers 0.
    """
    code = RequestCode.QUERY_CONSUMER_OFFSET

    def read(response: RemotingCommand, address: str) -> StoredOffset:
        accepted(response, code, address, (ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return StoredOffset(None)
        offset = int_field(response, "offset")
        return StoredOffset(offset, unsure=offset == 0 and response.version < codes.FIRST_5X_VERSION)

    return Call(code, {**_queue_fields(queue), "consumerGroup": group, "setZeroIfNotFound": False}, read)


def all_consumer_offsets(broker_name: str) -> Call[dict[str, dict[int, int]]]:
    """Every offset stored on a broker, by ``topic@group`` and queue id (GET_ALL_CONSUMER_OFFSET):
    the whole table, so asked only to settle what QUERY_CONSUMER_OFFSET leaves unsure."""
    code = RequestCode.GET_ALL_CONSUMER_OFFSET

    def read(response: RemotingCommand, address: str) -> dict[str, dict[int, int]]:
        accepted(response, code, address)
        try:
            table = fastjson.loads(response.body.decode("utf-8")).get("offsetTable") or {}
            return {
                str(name): {int(q): int(o) for q, o in (entries.items() if isinstance(entries, dict) else entries)}
                for name, entries in table.items()
            }
        except (AttributeError, TypeError, ValueError, UnicodeDecodeError) as err:
            raise ProtocolError(f"consumer offsets of {broker_name} are malformed: {err!r}") from err

    return Call(code, {"bname": broker_name}, read)


def group_offsets(topic: str, group: str, broker_name: str) -> Call[dict[MessageQueue, int]]:
    """The group's stored offset of every queue of the topic on one broker, in one answer
    (GET_CONSUME_STATS, what ``mqadmin consumerProgress`` reads); a queue without one reads 0.
    A proxy does not serve it (REQUEST_CODE_NOT_SUPPORTED)."""
    code = RequestCode.GET_CONSUME_STATS

    def read(response: RemotingCommand, address: str) -> dict[MessageQueue, int]:
        accepted(response, code, address)
        try:
            table = fastjson.loads(response.body.decode("utf-8")).get("offsetTable") or {}
            return {
                MessageQueue(str(key["topic"]), str(key["brokerName"]), int(key["queueId"])): int(
                    value["consumerOffset"]
                )
                for key, value in (table.items() if isinstance(table, dict) else table)
            }
        except (AttributeError, KeyError, TypeError, ValueError, UnicodeDecodeError) as err:
            raise ProtocolError(f"consume stats of {group} on {broker_name} are malformed: {err!r}") from err

    return Call(code, {"consumerGroup": group, "topic": topic, "bname": broker_name}, read)


def update_consumer_offset(queue: MessageQueue, group: str, offset: int) -> Call[None]:
    """Store ``offset`` (the next offset to read) for the group on the queue."""
    fields = {**_queue_fields(queue), "consumerGroup": group, "commitOffset": offset}
    return done_call(RequestCode.UPDATE_CONSUMER_OFFSET, fields)


@dataclass(frozen=True)
class QueueOffsets:
    """A queue's first and next offsets, ``[min_offset, max_offset)``, and the store time of its
    last message (``lastUpdateTimestamp``, epoch ms in the broker's clock; 0 if empty or unknown)."""

    min_offset: int
    max_offset: int
    last_stored_ms: int = 0


def topic_stats(topic: str, broker_name: str) -> Call[dict[MessageQueue, QueueOffsets]]:
    """Min and max offsets of every queue of the topic on one broker, in one answer
    (GET_TOPIC_STATS_INFO): the same numbers GET_MIN_OFFSET and GET_MAX_OFFSET give one queue at a
    time. A proxy does not serve it (REQUEST_CODE_NOT_SUPPORTED)."""
    code = RequestCode.GET_TOPIC_STATS_INFO

    def read(response: RemotingCommand, address: str) -> dict[MessageQueue, QueueOffsets]:
        accepted(response, code, address)
        return parse_topic_stats(response.body, broker_name)

    return Call(code, {"topic": topic, "bname": broker_name}, read)


# One entry of a TopicStatsTable's offset table as fastjson writes it (fields in name order): the
# MessageQueue key's broker name, queue id and topic, and the value's fields.
_STATS_ENTRY = re.compile(
    r'\{"brokerName":("(?:[^"\\]|\\.)*"),"queueId":(\d+),"topic":("(?:[^"\\]|\\.)*")\}'
    r":\{([^{}]*)\}"
)
_ENTRY_JOIN = "}:{"


def parse_topic_stats(body: bytes, broker_name: str) -> dict[MessageQueue, QueueOffsets]:
    """A TopicStatsTable body: its offset table is keyed by MessageQueue objects (fastjson).

    Where every entry has fastjson's usual shape, the entries are found with one regular
    expression and their values read by one ``json.loads``; anything else goes through the
    general fastjson reader.
    """
    try:
        text = body.decode("utf-8")
        entries = _STATS_ENTRY.findall(text)
        if len(entries) == text.count(_ENTRY_JOIN):
            rows = json.loads("[" + ",".join(f"[{b},{q},{t},{{{v}}}]" for b, q, t, v in entries) + "]")
            table = [({"brokerName": b, "queueId": q, "topic": t}, v) for b, q, t, v in rows]
        else:
            table = fastjson.loads(text).get("offsetTable") or []
            if isinstance(table, dict):  # an empty table reads as {}
                table = list(table.items())
        stats = {}
        for key, value in table:
            queue = MessageQueue(str(key["topic"]), str(key["brokerName"]), int(key["queueId"]))
            stats[queue] = QueueOffsets(
                max(0, int(value["minOffset"])), int(value["maxOffset"]), int(value.get("lastUpdateTimestamp") or 0)
            )
    except (AttributeError, KeyError, TypeError, ValueError, UnicodeDecodeError) as err:
        raise ProtocolError(f"topic stats of {broker_name} are malformed: {err!r}") from err
    return {queue: offsets for queue, offsets in stats.items() if queue.broker_name == broker_name}


# -------------------------------------------------------------------------- pull


class PullStatus(enum.Enum):
    """What a pull found, named as the Java client names it, and RETRY_IMMEDIATELY, which it lumps
    in with NO_MATCHED_MSG."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"  # caught up (offset == max offset), or the consume queue has no entry there
    NO_MATCHED_MSG = "NO_MATCHED_MSG"  # entries scanned, none matched; go on from next_begin_offset
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"  # offset outside [min, max]; next_begin_offset is the broker's correction
    # The broker could not serve the entries it scanned: their commit log is being deleted
    # (MESSAGE_WAS_REMOVING), or a slave or a static topic's mapping sends the client elsewhere.
    # next_begin_offset is past what was not served, so going on from it would skip that silently.
    RETRY_IMMEDIATELY = "RETRY_IMMEDIATELY"


# Keyed by int: a response carries its code as the number the broker sent.
PULL_STATUS_BY_CODE: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.RETRY_IMMEDIATELY,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}
# A broker's remark on a pull is the store's GetMessageStatus name (PullMessageProcessor). Code 20
# with this one is the ordinary answer of a filter that matched nothing in the entries scanned.
NO_MATCHED_REMARK = "NO_MATCHED_MESSAGE"


@dataclass(frozen=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    body: bytes  # raw message records, decoded by rocketmq_spark.records
    remark: str = ""  # the broker's GetMessageStatus name, what errors quote
    # The replica the broker suggests for the queue's next pull (``suggestWhichBrokerId``): 0, the
    # master, unless slave reads are on and the data has left the master's memory.
    suggested_broker_id: int = 0


@dataclass(frozen=True)
class PullSpec:
    """What every pull of one queue range has in common: all of a pull's header but its offset
    and count. Described once, by whoever reads the range, and passed as it is to the call, the
    client and the template the client renders the request from (keyed by it)."""

    queue: MessageQueue
    group: str
    subscription: str = SUBSCRIBE_ALL
    expression_type: str = EXPRESSION_TAG
    suspend_timeout_ms: int = 0  # > 0: the broker holds the pull that long for new messages


def pull_fields(spec: PullSpec, offset: int, max_messages: int) -> dict[str, Any]:
    """The header of a pull. It carries its subscription (``PULL_FLAG_SUBSCRIPTION``), so no
    heartbeat or prior registration is needed, on a broker or through the proxy."""
    suspend = codes.PULL_FLAG_SUSPEND if spec.suspend_timeout_ms > 0 else 0
    return {
        "consumerGroup": spec.group,
        "topic": spec.queue.topic,
        "queueId": spec.queue.queue_id,
        "queueOffset": offset,
        "maxMsgNums": max_messages,
        "sysFlag": codes.PULL_FLAG_SUBSCRIPTION | suspend,
        "commitOffset": 0,
        "suspendTimeoutMillis": spec.suspend_timeout_ms,
        "subscription": spec.subscription,
        "subVersion": 0,
        "expressionType": spec.expression_type,
        "bname": spec.queue.broker_name,
    }


# The pull answer's header field naming the replica to pull from next.
SUGGESTED_BROKER_FIELD = "suggestWhichBrokerId"


def read_pull(response: RemotingCommand, address: str) -> PullResult:
    """A pull's answer. Code 20 (PULL_RETRY_IMMEDIATELY) is NO_MATCHED_MSG only where the remark
    says the filter matched nothing; any other code 20 is RETRY_IMMEDIATELY, data not served."""
    accepted(response, RequestCode.PULL_MESSAGE, address, PULL_STATUS_BY_CODE)
    status = PULL_STATUS_BY_CODE[response.code]
    if status is PullStatus.RETRY_IMMEDIATELY and response.remark == NO_MATCHED_REMARK:
        status = PullStatus.NO_MATCHED_MSG
    return PullResult(
        status=status,
        next_begin_offset=int_field(response, "nextBeginOffset"),
        min_offset=int_field(response, "minOffset"),
        max_offset=int_field(response, "maxOffset"),
        body=response.body,
        remark=response.remark or "",
        suggested_broker_id=int(response.ext_fields.get(SUGGESTED_BROKER_FIELD) or 0),
    )


def pull(spec: PullSpec, offset: int, max_messages: int) -> Call[PullResult]:
    """A pull as a call that can be sent with others (``RocketMQClient.call_many``)."""
    return Call(RequestCode.PULL_MESSAGE, pull_fields(spec, offset, max_messages), read_pull)
