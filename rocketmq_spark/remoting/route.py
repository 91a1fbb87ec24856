"""Topic routes from the name server: which brokers serve a topic, with how many queues. No I/O.

Name servers older than 4.9.4, or asked without ``acceptStandardJsonOnly``, write ``brokerAddrs``
(a ``HashMap<Long, String>``) with bare numeric keys, ``{0:"127.0.0.1:10911"}``, which is not
JSON. ``parse_route`` quotes such keys before parsing, but only outside string literals, so a
broker address or name containing ``,1:`` is never rewritten.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.errors import ProtocolError

MASTER_BROKER_ID = 0

# A bare integer map key: after "{" or ",", optional blanks, digits, optional blanks, ":".
_BARE_INT_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")
# A JSON string literal, escapes included.
_STRING_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


@dataclass(frozen=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int

    @property
    def readable(self) -> bool:
        return bool(self.perm & codes.PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & codes.PERM_WRITE)


@dataclass(frozen=True)
class BrokerData:
    broker_name: str
    addresses: dict[int, str]

    @property
    def master_address(self) -> str | None:
        return self.addresses.get(MASTER_BROKER_ID)


@dataclass(frozen=True)
class TopicRoute:
    topic: str
    queue_datas: tuple[QueueData, ...]
    brokers: dict[str, BrokerData]
    # ``brokerName:queueCount;...`` of a topic created as ordered (``orderTopicConf``), else None.
    order_topic_conf: str | None = None

    def readable_queues(self) -> list[MessageQueue]:
        """Every queue a consumer can read, in a stable order."""
        queues = [
            MessageQueue(self.topic, qd.broker_name, queue_id)
            for qd in self.queue_datas
            if qd.readable
            for queue_id in range(qd.read_queue_nums)
        ]
        return sorted(queues)

    def master_address(self, broker_name: str) -> str | None:
        broker = self.brokers.get(broker_name)
        return broker.master_address if broker else None

    def publish_queues(self) -> list[MessageQueue]:
        """The queues a producer sends to, in the order the Java client lists them
        (``topicRouteData2TopicPublishInfo``): those of ``orderTopicConf`` when it is set, else
        the write queues of each writable broker name that lists a master, by name and queue id."""
        if self.order_topic_conf:
            return [
                MessageQueue(self.topic, name, queue_id)
                for name, count in _order_entries(self.order_topic_conf)
                for queue_id in range(count)
            ]
        return [
            MessageQueue(self.topic, qd.broker_name, queue_id)
            for qd in sorted(self.queue_datas, key=lambda q: q.broker_name)
            if qd.writable and self.master_address(qd.broker_name) is not None
            for queue_id in range(qd.write_queue_nums)
        ]


ORDER_CONF_SEPARATOR = ";"
ORDER_CONF_COUNT_SEPARATOR = ":"


def _order_entries(conf: str) -> list[tuple[str, int]]:
    """``brokerA:4;brokerB:4`` as (broker name, queue count) pairs, in their order."""
    entries = []
    for entry in conf.split(ORDER_CONF_SEPARATOR):
        name, _, count = entry.strip().rpartition(ORDER_CONF_COUNT_SEPARATOR)
        if not name or not count.strip().isdigit():
            raise ProtocolError(f"orderTopicConf entry {entry!r} is not brokerName:queueCount")
        entries.append((name, int(count)))
    return entries


def quote_bare_int_keys(text: str) -> str:
    """Quote numeric map keys outside string literals so the text becomes valid JSON."""
    out: list[str] = []
    position = 0
    for literal in _STRING_LITERAL.finditer(text):
        out.append(_BARE_INT_KEY.sub(r'\1"\2"\3', text[position : literal.start()]))
        out.append(literal.group())
        position = literal.end()
    out.append(_BARE_INT_KEY.sub(r'\1"\2"\3', text[position:]))
    return "".join(out)


def _load(body: bytes) -> dict[str, Any]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ProtocolError(f"topic route body is not UTF-8: {err}") from err
    for candidate in (text, quote_bare_int_keys(text)):
        try:
            data = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            return data
    raise ProtocolError(f"topic route body is not a JSON object: {text[:200]!r}")


def parse_live_brokers(body: bytes) -> frozenset[str]:
    """Names of the brokers a name server's ClusterInfo lists with a master address."""
    data = _load(body)
    table = data.get("brokerAddrTable")
    if not isinstance(table, dict):
        raise ProtocolError("cluster info has no brokerAddrTable object")
    return frozenset(
        name
        for name, broker in table.items()
        if isinstance(broker, dict) and str(MASTER_BROKER_ID) in map(str, broker.get("brokerAddrs") or {})
    )


def parse_route(topic: str, body: bytes) -> TopicRoute:
    """TopicRouteData JSON into a TopicRoute."""
    data = _load(body)
    try:
        queue_datas = tuple(
            QueueData(
                broker_name=str(q["brokerName"]),
                read_queue_nums=int(q["readQueueNums"]),
                write_queue_nums=int(q["writeQueueNums"]),
                perm=int(q["perm"]),
            )
            for q in data.get("queueDatas") or []
        )
        brokers = {
            str(b["brokerName"]): BrokerData(
                broker_name=str(b["brokerName"]),
                addresses={int(k): str(v) for k, v in (b.get("brokerAddrs") or {}).items()},
            )
            for b in data.get("brokerDatas") or []
        }
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ProtocolError(f"topic route for {topic} is missing or mistypes a field: {err!r}") from err
    order = data.get("orderTopicConf")
    return TopicRoute(
        topic=topic, queue_datas=queue_datas, brokers=brokers, order_topic_conf=str(order) if order else None
    )
