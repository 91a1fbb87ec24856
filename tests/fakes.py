"""The fakes several unit test modules share, each held to the real class it stands in for.

For each fake, a ``Protocol`` names what the code under test uses of the real class: the fake
subclasses it (so the type checker compares each of its methods with the protocol's), and a
function below returns the real class as the protocol (so the real class is compared too). A
signature changed on either side then fails the type check instead of leaving the fake behind:

    python -m mypy --ignore-missing-imports --follow-imports=silent tests/fakes.py

(``--follow-imports=silent``: the modules imported are read for their types; their own findings
are not this check's.)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.calls import Call
from rocketmq_spark.remoting.client import DEFAULT_WINDOW, RocketMQClient
from rocketmq_spark.remoting.client_requests import Members
from rocketmq_spark.remoting.codec import RemotingCommand, joined
from rocketmq_spark.remoting.codes import FIRST_5X_VERSION, RequestCode, ResponseCode
from rocketmq_spark.remoting.connection import ServerRequestHandler
from rocketmq_spark.remoting.errors import ConnectionFailedError, RocketMQError
from rocketmq_spark.remoting.membership import NO_CONSUMER_REMARK
from rocketmq_spark.remoting.route import BrokerData, QueueData, TopicRoute
from rocketmq_spark.source.commits import CommitResult
from rocketmq_spark.source.group import Caller
from rocketmq_spark.source.offset_reader import OffsetReader
from rocketmq_spark.source.offsets import OffsetMap
from rocketmq_spark.source.starts import BrokerOffsets
from tests.support import ADDRESS, BROKERS, PERM_READ_WRITE, TOPICS, VERSION_5_3_3

T = TypeVar("T")

MEMBERSHIP_CODES = frozenset(
    {RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP}
)


# ------------------------------------------------------------------------------ the protocols


class GroupClient(Protocol):
    """What the stream reader and its group watch use of the offset reader's ``RocketMQClient``:
    answering what brokers ask a registered member, and sending calls."""

    def serve(self, handler: ServerRequestHandler | None) -> None: ...

    def call_many(
        self, addressed: Sequence[tuple[str, Call[T]]], window: int = DEFAULT_WINDOW
    ) -> list[T | RocketMQError]: ...


class BrokerClient(GroupClient, Protocol):
    """What the offset reader and its commits use of ``RocketMQClient`` besides."""

    def topic_route(self, topic: str) -> TopicRoute: ...

    def live_brokers(self) -> frozenset[str] | None: ...

    def connections_opened(self, address: str) -> int: ...

    def close(self) -> None: ...


class OffsetQuestions(Protocol):
    """What the stream and batch readers (and the start rules they call) ask ``OffsetReader``.
    Flags the readers pass by name are keyword-only here, so that renaming one fails the check."""

    def queues(self, *, missing_ok: bool = False) -> dict[MessageQueue, str]: ...

    def unavailable(self, absent: Iterable[MessageQueue]) -> set[MessageQueue]: ...

    def broker_addresses(self) -> set[str]: ...

    def read_from_slaves(self) -> frozenset[str]: ...

    def min_offsets(self, queues: Iterable[MessageQueue]) -> OffsetMap: ...

    def max_offsets(self, queues: Iterable[MessageQueue], *, hold_unreachable: bool = False) -> OffsetMap: ...

    def offsets_for_time(self, queues: Iterable[MessageQueue], timestamp_ms: int) -> OffsetMap: ...

    def stored_as(self, offsets: Mapping[MessageQueue, int]) -> dict[MessageQueue, int]: ...

    def stored_offsets(self, queues: Iterable[MessageQueue], group: str) -> dict[MessageQueue, int | None]: ...

    def group_offsets(self, queues: Iterable[MessageQueue], group: str) -> dict[MessageQueue, int]: ...

    def commit(self, offsets: Mapping[MessageQueue, int]) -> CommitResult: ...

    def take_new_masters_for_commits(self) -> frozenset[str]: ...

    def take_new_masters_for_data_loss(self) -> frozenset[str]: ...

    def running(self) -> None: ...


class MemberRegistry(Protocol):
    """What the stream reader uses of ``remoting.cluster.Cluster``: where its group membership
    registers to answer brokers' requests."""

    @property
    def members(self) -> Members: ...


class Offsets(OffsetQuestions, Protocol):
    """All the readers use of ``OffsetReader``: its questions and four attributes. The fake
    subclasses only the questions and is held to these attributes below: a property a subclass
    inherits would, at run time, refuse the fake's own attribute of the same name."""

    @property
    def client(self) -> GroupClient: ...

    @property
    def cluster(self) -> MemberRegistry: ...

    @property
    def unreachable(self) -> Mapping[str, float]: ...

    @property
    def last_stored(self) -> Mapping[MessageQueue, tuple[int, int]]: ...


# ---------------------------------------------------------------------------------- the fakes


@dataclass
class Registry:
    """The members part of a cluster view, for a fake offset reader."""

    members: Members = field(default_factory=Members)


class FakeMembers(GroupClient):
    """Brokers as a consumer group's members see them: heartbeats register the client id of their
    body on the broker they reach, UNREGISTER_CLIENT removes it, and GET_CONSUMER_LIST_BY_GROUP
    answers as a broker does (SYSTEM_ERROR for a group without members). One group's members per
    broker address; ``down`` addresses refuse connections."""

    def __init__(self, others: Iterable[str] = (), addresses: Iterable[str] = ()) -> None:
        self.others = set(others)  # members on every broker (push consumers, other queries)
        self.members: dict[str, set[str]] = {a: set() for a in addresses}
        self.sent: list[tuple[str, int]] = []  # (address, request code), in order
        self.heartbeats: list[dict[str, Any]] = []  # bodies, as the broker reads them
        self.down: set[str] = set()
        self.handler: Any = None  # what answers the requests a broker sends the member on its own

    def serve(self, handler: ServerRequestHandler | None) -> None:
        self.handler = handler

    def listed(self, address: str) -> set[str]:
        return self.others | self.members.setdefault(address, set())

    def call_many(
        self, addressed: Sequence[tuple[str, Call[T]]], window: int = DEFAULT_WINDOW
    ) -> list[T | RocketMQError]:
        outcomes: list[T | RocketMQError] = []
        for address, call in addressed:
            self.sent.append((address, call.code))
            if address in self.down:
                outcomes.append(ConnectionFailedError(f"cannot connect to {address}: refused", address))
                continue
            try:
                outcomes.append(call.read(self.answer(address, call), address))
            except RocketMQError as err:
                outcomes.append(err)
        return outcomes

    def answer(self, address: str, call: Call[Any]) -> RemotingCommand:
        if call.code == RequestCode.HEART_BEAT:
            body = json.loads(joined(call.body))
            self.heartbeats.append(body)
            self.members.setdefault(address, set()).add(body["clientID"])
            return RemotingCommand(ResponseCode.SUCCESS)
        if call.code == RequestCode.UNREGISTER_CLIENT:
            self.members.setdefault(address, set()).discard(str(call.fields["clientID"]))
            return RemotingCommand(ResponseCode.SUCCESS)
        if call.code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            ids = sorted(self.listed(address))
            if not ids:
                return RemotingCommand(
                    ResponseCode.SYSTEM_ERROR, remark=f"{NO_CONSUMER_REMARK}, {call.fields['consumerGroup']}"
                )
            return RemotingCommand(ResponseCode.SUCCESS, body=json.dumps({"consumerIdList": ids}).encode())
        raise AssertionError(f"unexpected request {call.code}")


class FakeOffsets(OffsetQuestions):
    """A topic's queues as the brokers would describe them: ``[min, max)`` per queue, the group's
    stored offsets, the store time of each offset, and brokers that are away."""

    def __init__(
        self,
        queues: Mapping[MessageQueue, tuple[int, int]],
        stored: Mapping[MessageQueue, int] | None = None,
        times: Mapping[MessageQueue, list[int]] | None = None,
    ) -> None:
        self.ranges = dict(queues)
        self.stored: dict[MessageQueue, int] = dict(stored or {})
        self.times = dict(times or {})
        self.shifted: dict[MessageQueue, int] = {}  # queues whose index points at messages stored elsewhere
        self.index_checks: list[dict[MessageQueue, int]] = []  # the offsets each index check pulled
        self.away: set[str] = set()  # brokers not registered: out of the routes
        self.frozen: set[str] = set()  # brokers registered that do not answer
        self.slave_read: set[str] = set()  # brokers with no master listed, read from a slave
        self.unreachable: dict[str, float] = {}
        self.commits: list[OffsetMap] = []
        self.reconnects: set[str] = set()  # brokers reached over a new connection, until asked
        self.elections: set[str] = set()  # broker names with a new master, until the data-loss check asks
        self.answers: list[dict[MessageQueue, tuple[int, int]]] = []  # queue ranges the next asks find, in turn
        self.running_calls = 0  # times the reader was told the query runs (long retries from then)
        self.client = FakeMembers()  # the stream's consumer group, on the brokers
        self.cluster = Registry()
        self.client.serve(self.cluster.members)

    def routed(self) -> dict[MessageQueue, tuple[int, int]]:
        return {q: r for q, r in self.ranges.items() if q.broker_name not in self.away}

    def queues(self, missing_ok: bool = False) -> dict[MessageQueue, str]:
        return {q: ADDRESS[q.broker_name] for q in sorted(self.routed())}

    def unavailable(self, absent: Iterable[MessageQueue]) -> set[MessageQueue]:
        return {q for q in absent if q.broker_name in self.away or q.broker_name in self.unreachable}

    def address(self, queue: MessageQueue) -> str:
        return ADDRESS[queue.broker_name]

    def broker_addresses(self) -> set[str]:
        return {ADDRESS[q.broker_name] for q in self.routed()}

    def read_from_slaves(self) -> frozenset[str]:
        return frozenset(self.slave_read)

    def min_offsets(self, queues: Iterable[MessageQueue]) -> OffsetMap:
        return {q: self.routed()[q][0] for q in queues}

    def max_offsets(self, queues: Iterable[MessageQueue], hold_unreachable: bool = False) -> OffsetMap:
        if self.answers:  # a broker whose queues move between two asks
            self.ranges.update(self.answers.pop(0))
        if hold_unreachable:
            self.unreachable = {b: self.unreachable.get(b, 0.0) for b in self.frozen}
        assert hold_unreachable or not self.frozen, "only a running stream holds what does not answer"
        return {q: self.routed()[q][1] for q in queues if q.broker_name not in self.frozen}

    def offsets_for_time(self, queues: Iterable[MessageQueue], timestamp_ms: int) -> OffsetMap:
        """The first offset stored at or after the time, else the max offset."""
        out = {}
        for q in queues:
            low, high = self.routed()[q]
            out[q] = next((o for o in range(low, high) if self.times[q][o] >= timestamp_ms), high)
        return out

    def stored_as(self, offsets: Mapping[MessageQueue, int]) -> dict[MessageQueue, int]:
        """The offset each message was stored as: its index offset, but on queues ``shifted``."""
        self.index_checks.append(dict(offsets))
        return {q: o + self.shifted.get(q, 0) for q, o in offsets.items()}

    def stored_offsets(self, queues: Iterable[MessageQueue], group: str) -> dict[MessageQueue, int | None]:
        return {q: self.stored.get(q) for q in queues}

    def group_offsets(self, queues: Iterable[MessageQueue], group: str) -> dict[MessageQueue, int]:
        return {q: self.stored[q] for q in queues if q in self.stored and q.broker_name not in self.away}

    def commit(self, offsets: Mapping[MessageQueue, int]) -> CommitResult:
        routable = {q: o for q, o in offsets.items() if q.broker_name not in self.away}
        self.stored.update(routable)
        self.commits.append(routable)
        return CommitResult(stored=routable)

    def take_new_masters_for_commits(self) -> frozenset[str]:
        again, self.reconnects = frozenset(self.reconnects), set()
        return again

    def take_new_masters_for_data_loss(self) -> frozenset[str]:
        changed, self.elections = frozenset(self.elections), set()
        return changed

    @property
    def last_stored(self) -> dict[MessageQueue, tuple[int, int]]:
        """Per queue with store times, its max offset and its last message's store time, as topic
        stats give them."""
        return {
            q: (high, self.times[q][high - 1])
            for q, (_, high) in self.routed().items()
            if q in self.times and 0 < high <= len(self.times[q])
        }

    def running(self) -> None:
        self.running_calls += 1


# The requests ACL 2.0 allows only with Get on the topic (5.3.3's @RocketMQAction headers).
NEEDS_GET = frozenset(
    {
        RequestCode.GET_MAX_OFFSET,
        RequestCode.GET_MIN_OFFSET,
        RequestCode.GET_TOPIC_STATS_INFO,
        RequestCode.GET_CONSUME_STATS,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
    }
)


class FakeBrokers(BrokerClient):
    """Brokers holding ``[0, messages)`` on every queue of the topics, counting every request.

    They answer with the bytes a broker sends (topic stats as fastjson, offsets in header fields),
    so the calls' own readers run as they do against a real broker."""

    def __init__(
        self, queues_per_broker: int, *, topic_stats: bool = True, messages: int = 10, version: int = VERSION_5_3_3
    ) -> None:
        self.version = version
        self.queues_per_broker = queues_per_broker
        self.topic_stats = topic_stats
        self.max = {
            MessageQueue(t, f"broker-{b}", q): messages
            for t in TOPICS
            for b in range(BROKERS)
            for q in range(queues_per_broker)
        }
        self.stored: dict[MessageQueue, int] = {}
        self.sent: list[int] = []  # request codes, in order
        self.away: set[str] = set()  # brokers stopped: unregistered, their port closed
        self.deleted: set[str] = set()  # topics whose config the brokers no longer hold
        self.rounds = 0  # call_many calls
        # Brokers that know the group; None = every broker does (offsets of any group are taken).
        self.group_known: set[str] | None = None
        self.members = FakeMembers()  # the stream's consumer group
        self.connections: dict[str, int] = {}  # connections opened per address, as the pool counts them
        # Topics whose Get the user lacks (ACL 2.0): what needs it is refused as 5.3.3 refuses it.
        self.no_get: set[str] = set()

    @staticmethod
    def address(broker: str) -> str:
        return f"127.0.0.{int(broker.rsplit('-', 1)[1]) + 1}:10911"

    def topic_route(self, topic: str) -> TopicRoute:
        self.sent.append(RequestCode.GET_ROUTEINFO_BY_TOPIC)
        names = [f"broker-{b}" for b in range(BROKERS) if f"broker-{b}" not in self.away]
        return TopicRoute(
            topic,
            tuple(QueueData(n, self.queues_per_broker, self.queues_per_broker, PERM_READ_WRITE) for n in names),
            {n: BrokerData(n, {0: self.address(n)}) for n in names},
        )

    def live_brokers(self) -> frozenset[str]:
        self.sent.append(RequestCode.GET_BROKER_CLUSTER_INFO)
        return frozenset(f"broker-{b}" for b in range(BROKERS)) - self.away

    def serve(self, handler: ServerRequestHandler | None) -> None:
        """Requests brokers send the stream's client on their own: none in these tests."""

    def connections_opened(self, address: str) -> int:
        return self.connections.setdefault(address, 1)

    def call_many(
        self, addressed: Sequence[tuple[str, Call[T]]], window: int = DEFAULT_WINDOW
    ) -> list[T | RocketMQError]:
        self.rounds += 1
        # The (broker, topic) offset tables of the group before this round, and the queues each
        # table created in this round holds (see UPDATE_CONSUMER_OFFSET below).
        self.tables = {(q.broker_name, q.topic) for q in self.stored}
        self.created: dict[tuple[str, str], list[MessageQueue]] = {}
        outcomes: list[T | RocketMQError] = []
        for address, call in addressed:
            self.sent.append(call.code)
            if any(self.address(broker) == address for broker in self.away):
                outcomes.append(ConnectionFailedError(f"cannot connect to {address}: refused"))
                continue
            try:
                response = self.members.answer(address, call) if call.code in MEMBERSHIP_CODES else self.answer(call)
                response.version = self.version
                outcomes.append(call.read(response, address))
            except RocketMQError as err:
                outcomes.append(err)
        return outcomes

    def answer(self, call: Call[Any]) -> RemotingCommand:
        fields = call.fields
        code = call.code
        if code in NEEDS_GET and fields.get("topic") in self.no_get:
            denied = f"User:u has no permission to access Topic:{fields['topic']} from 127.0.0.1, no matched policies."
            return RemotingCommand(ResponseCode.NO_PERMISSION, remark=denied)
        if code == RequestCode.GET_ALL_CONSUMER_OFFSET:
            tables: dict[str, list[str]] = {}
            for q, offset in self.stored.items():
                if q.broker_name == fields["bname"]:
                    tables.setdefault(f"{q.topic}@g", []).append(f"{q.queue_id}:{offset}")
            body = ",".join(f'"{name}":{{' + ",".join(entries) + "}" for name, entries in tables.items())
            return RemotingCommand(ResponseCode.SUCCESS, body=('{"offsetTable":{' + body + "}}").encode())
        if code == RequestCode.GET_TOPIC_STATS_INFO:
            if fields["topic"] in self.deleted:
                return RemotingCommand(ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{fields['topic']}] not exist")
            if not self.topic_stats:
                return RemotingCommand(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark="not supported")
            table = ",".join(
                json.dumps({"brokerName": q.broker_name, "queueId": q.queue_id, "topic": q.topic})
                + ":"
                + json.dumps({"lastUpdateTimestamp": 0, "maxOffset": high, "minOffset": 0})
                for q, high in self.max.items()
                if q.topic == fields["topic"] and q.broker_name == fields["bname"]
            )
            return RemotingCommand(ResponseCode.SUCCESS, body=('{"offsetTable":{' + table + "}}").encode())
        if code == RequestCode.GET_CONSUME_STATS:
            if not self.topic_stats:  # a proxy serves neither
                return RemotingCommand(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark="not supported")
            table = ",".join(
                json.dumps({"brokerName": q.broker_name, "queueId": q.queue_id, "topic": q.topic})
                + ":"
                + json.dumps({"brokerOffset": high, "consumerOffset": self.stored.get(q, 0), "lastTimestamp": 0})
                for q, high in self.max.items()
                if q.topic == fields["topic"] and q.broker_name == fields["bname"]
            )
            return RemotingCommand(
                ResponseCode.SUCCESS, body=('{"consumeTps":0.0,"offsetTable":{' + table + "}}").encode()
            )
        queue = MessageQueue(str(fields["topic"]), str(fields["bname"]), int(fields["queueId"]))  # type: ignore[call-overload]
        if code == RequestCode.GET_MAX_OFFSET:
            return RemotingCommand(ResponseCode.SUCCESS, ext_fields={"offset": str(self.max[queue])})
        if code == RequestCode.GET_MIN_OFFSET:
            return RemotingCommand(ResponseCode.SUCCESS, ext_fields={"offset": "0"})
        if code == RequestCode.QUERY_CONSUMER_OFFSET:
            if queue not in self.stored:
                if self.version < FIRST_5X_VERSION:  # 4.9 ignores setZeroIfNotFound
                    return RemotingCommand(ResponseCode.SUCCESS, ext_fields={"offset": "0"})
                return RemotingCommand(ResponseCode.QUERY_NOT_FOUND)
            return RemotingCommand(ResponseCode.SUCCESS, ext_fields={"offset": str(self.stored[queue])})
        if code == RequestCode.PULL_MESSAGE:
            if self.group_known is not None:
                self.group_known.add(queue.broker_name)  # autoCreateSubscriptionGroup
            return RemotingCommand(
                ResponseCode.PULL_NOT_FOUND,
                ext_fields={
                    "nextBeginOffset": str(fields["queueOffset"]),
                    "minOffset": "0",
                    "maxOffset": str(self.max[queue]),
                },
            )
        if code == RequestCode.UPDATE_CONSUMER_OFFSET:
            if self.group_known is not None and queue.broker_name not in self.group_known:
                return RemotingCommand(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, remark="subscription group not exist")
            table_key = (queue.broker_name, queue.topic)
            if table_key not in self.tables:
                # A broker creates the table at the first commit (check, then put): of first
                # commits handled at once, the last table put wins and the others' offsets are lost.
                for lost in self.created.pop(table_key, []):
                    del self.stored[lost]
                self.created[table_key] = [queue]
            self.stored[queue] = int(fields["commitOffset"])  # type: ignore[call-overload]
            return RemotingCommand(ResponseCode.SUCCESS)
        raise AssertionError(f"unexpected request {code}")

    def close(self) -> None:
        pass


# ------------------------------------------------------------- the real classes, checked too


def _real_client(client: RocketMQClient) -> BrokerClient:
    return client


def _real_offsets(reader: OffsetReader) -> Offsets:
    return reader


def _fake_offsets(fake: FakeOffsets) -> Offsets:
    """The attributes, which FakeOffsets does not inherit from the protocol."""
    return fake


def _fake_offsets_for_the_start_rules(fake: FakeOffsets) -> BrokerOffsets:
    """The start rules take the offset reader as a protocol of their own (starts.BrokerOffsets)."""
    return fake


def _fake_members_for_the_group_watch(fake: FakeMembers) -> Caller:
    """The group watch takes its client as a protocol of its own (group.Caller)."""
    return fake
