"""Fakes of what the sink sends over: a client whose broker answers sends as scripted, the route
of a topic on two brokers, and the reading of a batch body. Like ``tests/fakes.py``, the fake is
held to the protocol the sink names (``SendingClient``) by the type checker:

    python -m mypy --ignore-missing-imports --follow-imports=silent tests/fake_sends.py
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from rocketmq_spark.remoting.calls import Call
from rocketmq_spark.remoting.codec import RemotingCommand, joined
from rocketmq_spark.remoting.codes import FLAG_RESPONSE, RequestCode, ResponseCode
from rocketmq_spark.remoting.errors import ConnectionFailedError, RocketMQError
from rocketmq_spark.remoting.route import TopicRoute, parse_route
from rocketmq_spark.sink.shared import SendingClient

T = TypeVar("T")
VERSION_5 = 479
VERSION_4 = 407
_INNER_HEAD = 20  # size, magic, CRC, flag, body length
HOST_AND_PORT = "7F00000100002A9F"  # the start of an offset message id: 127.0.0.1:10911
_INT = 4


@dataclass
class Sent:
    address: str
    code: int
    fields: dict[str, object]
    body: bytes

    @property
    def queue(self) -> tuple[str, int]:
        return str(self.fields["n"]), int(self.fields["e"])  # type: ignore[call-overload]


class Answer:
    def __init__(self, client: FakeClient, sent: Sent, outcome: int | RocketMQError) -> None:
        self.client, self.sent, self.outcome = client, sent, outcome

    def result(self) -> RemotingCommand:
        self.client.on_wire[self.sent.queue] -= 1
        if not self.client.on_wire[self.sent.queue]:
            del self.client.on_wire[self.sent.queue]
        if isinstance(self.outcome, RocketMQError):
            raise self.outcome
        # Each send stored at its own offsets: the commit-log offset ends the offset message id.
        index = self.client.sent.index(self.sent)
        fields = {
            "msgId": f"{HOST_AND_PORT}{index:016X}",
            "queueId": str(self.sent.fields["e"]),
            "queueOffset": str(index),
        }
        return RemotingCommand(code=self.outcome, flag=FLAG_RESPONSE, ext_fields=fields, version=VERSION_5)


class FakeClient(SendingClient):
    """Answers heartbeats with a version per address and sends with scripted outcomes per address
    (SUCCESS once the script is used up); checks that a queue never has two sends on the wire.
    A heartbeat to an ``unreachable`` address fails as a broker that cannot be connected to.
    ``many_per_queue``: sends of one queue may travel together (unordered halves do)."""

    def __init__(
        self,
        outcomes: Mapping[str, list[int | RocketMQError]] | None = None,
        version: int = VERSION_5,
        unreachable: frozenset[str] = frozenset(),
        many_per_queue: bool = False,
    ) -> None:
        self.many_per_queue = many_per_queue
        self.most_on_one_queue = 0
        self.outcomes = {a: list(o) for a, o in (outcomes or {}).items()}
        self.version = version
        self.unreachable = unreachable
        self.sent: list[Sent] = []
        self.heartbeats: list[str] = []
        self.on_wire: Counter[tuple[str, int]] = Counter()
        self.most_on_wire = 0

    def call(self, address: str, call: Call[T], timeout: float | None = None) -> T:
        assert call.code == RequestCode.HEART_BEAT
        if address in self.unreachable:
            raise ConnectionFailedError(f"cannot connect to {address}", address)
        self.heartbeats.append(address)
        return call.read(RemotingCommand(code=0, flag=FLAG_RESPONSE, version=self.version), address)

    def submit(self, address: str, call: Call[object], timeout: float | None = None) -> Answer:
        sent = Sent(address, call.code, dict(call.fields), joined(call.body))
        assert self.many_per_queue or sent.queue not in self.on_wire, f"two sends on the wire for {sent.queue}"
        self.on_wire[sent.queue] += 1
        self.most_on_wire = max(self.most_on_wire, sum(self.on_wire.values()))
        self.most_on_one_queue = max(self.most_on_one_queue, self.on_wire[sent.queue])
        self.sent.append(sent)
        script = self.outcomes.get(address) or []
        return Answer(self, sent, script.pop(0) if script else ResponseCode.SUCCESS)


def route() -> TopicRoute:
    """Topic ``t`` on brokers ``a`` and ``b`` (masters at ``a:1`` and ``b:1``), two queues each."""
    datas = [{"brokerName": n, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6} for n in ("a", "b")]
    brokers = [{"brokerName": n, "brokerAddrs": {"0": f"{n}:1"}} for n in ("a", "b")]
    return parse_route("t", json.dumps({"queueDatas": datas, "brokerDatas": brokers}).encode())


def inner_bodies(body: bytes) -> list[bytes]:
    """The bodies of a batch send's messages."""
    found, position = [], 0
    while position < len(body):
        size = int.from_bytes(body[position : position + _INT], "big")
        length = int.from_bytes(body[position + _INNER_HEAD - _INT : position + _INNER_HEAD], "big")
        found.append(body[position + _INNER_HEAD : position + _INNER_HEAD + length])
        position += size
    return found


def _fake_client_is_a_sending_client(fake: FakeClient) -> SendingClient:
    return fake
