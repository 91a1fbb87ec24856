"""Requests a broker sends to a registered member of a consumer group, read and answered. No I/O.

A broker ties a member to the connection its heartbeats come on and sends it requests of its own
there (the Java client's ``ClientRemotingProcessor`` answers them). The ones an operator's tools
cause:

- RESET_CONSUMER_CLIENT_OFFSET (one-way): ``mqadmin resetOffsetByTime`` and
  ``skipAccumulatedMessage`` on a 4.9 broker, which only tells the online members the new offsets
  (a ``ResetOffsetBody``, fastjson with MessageQueue keys) and leaves storing them to them;
- GET_CONSUMER_RUNNING_INFO: ``mqadmin consumerStatus`` and the dashboard's consumer view, relayed
  by the broker; answered with a ``ConsumerRunningInfo`` (see ``running_info_body``);
- GET_CONSUMER_STATUS_FROM_CLIENT: a broker asking each member for its offsets of a topic.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting import fastjson
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.connection import ServerRequestHandler
from rocketmq_spark.remoting.errors import ProtocolError
from rocketmq_spark.remoting.membership import Subscription


@dataclass(frozen=True)
class OffsetReset:
    """A broker's notice that the group's offsets of a topic were reset (to ``offsets``)."""

    group: str
    topic: str
    timestamp_ms: int
    offsets: dict[MessageQueue, int]


def read_offset_reset(request: RemotingCommand) -> OffsetReset:
    """A RESET_CONSUMER_CLIENT_OFFSET request; raises ProtocolError if it is not readable."""
    fields = request.ext_fields
    try:
        table = fastjson.loads(request.body.decode("utf-8")).get("offsetTable") or {}
        pairs = table.items() if isinstance(table, dict) else table
        offsets = {
            MessageQueue(str(key["topic"]), str(key["brokerName"]), int(key["queueId"])): int(value)
            for key, value in pairs
        }
        return OffsetReset(fields["group"], fields["topic"], int(fields.get("timestamp", "-1")), offsets)
    except (AttributeError, KeyError, TypeError, ValueError, UnicodeDecodeError) as err:
        raise ProtocolError(f"unreadable offset reset notice: {err!r}") from err


def response(code: int = ResponseCode.SUCCESS, body: bytes = b"", remark: str | None = None) -> RemotingCommand:
    """A response to a broker's request (the connection sets its opaque and response flag)."""
    return RemotingCommand(code=code, body=body, remark=remark)


@dataclass(frozen=True)
class QueueStanding:
    """Where a member stands on one queue: its stored offset, and the batch it reads now
    (``[reading_from, reading_to)``, empty when it waits)."""

    committed: int
    reading_from: int
    reading_to: int


def _queue_key(queue: MessageQueue) -> str:
    return json.dumps(
        {"brokerName": queue.broker_name, "queueId": queue.queue_id, "topic": queue.topic}, separators=(",", ":")
    )


def _object_keyed(entries: Mapping[MessageQueue, object]) -> str:
    """A Java map keyed by MessageQueue, as fastjson writes and reads it: object keys."""
    return (
        "{"
        + ",".join(f"{_queue_key(q)}:{json.dumps(entries[q], separators=(',', ':'))}" for q in sorted(entries))
        + "}"
    )


def running_info_body(
    properties: Mapping[str, str],
    subscriptions: Sequence[Subscription],
    sub_version: int,
    queues: Mapping[MessageQueue, QueueStanding],
) -> bytes:
    """A ``ConsumerRunningInfo`` of a pulling member, as ``mqadmin consumerStatus`` reads it: the
    properties, the subscription, and per queue a ``ProcessQueueInfo`` whose commit offset is the
    stored one and whose cached span is the batch read now."""
    table = {
        q: {
            "commitOffset": s.committed,
            "cachedMsgMinOffset": s.reading_from,
            "cachedMsgMaxOffset": s.reading_to,
            "cachedMsgCount": max(0, s.reading_to - s.reading_from),
            "cachedMsgSizeInMiB": 0,
            "transactionMsgMinOffset": 0,
            "transactionMsgMaxOffset": 0,
            "transactionMsgCount": 0,
            "locked": False,
            "tryUnlockTimes": 0,
            "lastLockTimestamp": 0,
            "droped": False,
            "lastPullTimestamp": 0,
            "lastConsumeTimestamp": 0,
        }
        for q, s in queues.items()
    }
    subs = json.dumps([s.to_json(sub_version) for s in subscriptions], separators=(",", ":"))
    text = (
        f'{{"properties":{json.dumps(dict(properties), separators=(",", ":"))},"subscriptionSet":{subs},'
        f'"mqTable":{_object_keyed(table)},"statusTable":{{}}}}'
    )
    return text.encode("utf-8")


def consumer_status_body(offsets: Mapping[MessageQueue, int]) -> bytes:
    """A ``GetConsumerStatusBody`` (GET_CONSUMER_STATUS_FROM_CLIENT): the member's offset per queue."""
    return f'{{"messageQueueTable":{_object_keyed(dict(offsets))},"consumerTable":{{}}}}'.encode()


# The fields a broker's request names its addressee by: one client id (running info), or a group
# (the group's resets and status questions, its members' changes), under either spelling.
_CLIENT_ID_FIELD = "clientId"
_GROUP_FIELDS = ("consumerGroup", "group")


class Members:
    """Who answers the requests brokers send on one client's connections, where several members
    (each stream's registration in its consumer group, by client id) share the client.

    A request that names a client id goes to that member alone; one that names only a group goes
    to each member of that group (an operator's reset reaches every stream of it), and the first
    answer is sent back. Safe to change from any thread while the client's reader threads ask.
    """

    def __init__(self) -> None:
        self._members: dict[str, tuple[str, ServerRequestHandler]] = {}
        self._lock = threading.Lock()

    def add(self, client_id: str, group: str, handler: ServerRequestHandler) -> None:
        with self._lock:
            self._members = {**self._members, client_id: (group, handler)}

    def remove(self, client_id: str) -> None:
        with self._lock:
            self._members = {k: v for k, v in self._members.items() if k != client_id}

    def __call__(self, request: RemotingCommand) -> RemotingCommand | None:
        fields = request.ext_fields
        client_id = fields.get(_CLIENT_ID_FIELD)
        group = next((fields[name] for name in _GROUP_FIELDS if name in fields), None)
        answer = None
        for member, (members_group, handler) in self._members.items():  # replaced whole, never changed
            if (client_id is None or member == client_id) and (group is None or members_group == group):
                answer = handler(request) if answer is None else answer
        return answer
