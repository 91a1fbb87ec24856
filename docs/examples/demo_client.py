"""Just enough of a RocketMQ client for the demo: create a topic, send messages, read offsets.

The Spark source only reads, so the demo needs something to write the orders it streams. This
speaks RocketMQ's remoting protocol (TCP frames with a JSON header) with the standard library
alone, so the demo runs wherever the package is installed, with nothing else to set up: no Java
client, no RocketMQ distribution. It sends one message per request and is meant for a few
thousand messages on a test cluster, not as a producer for real use.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Request and response codes (RocketMQ's RequestCode and ResponseCode).
SEND_MESSAGE = 10
QUERY_CONSUMER_OFFSET = 14
UPDATE_AND_CREATE_TOPIC = 17
GET_MAX_OFFSET = 30
GET_BROKER_CLUSTER_INFO = 106
SUCCESS = 0
QUERY_NOT_FOUND = 22

PROTOCOL_VERSION = 401
MASTER_ID = "0"
READ_WRITE_PERM = 6
DEFAULT_TOPIC = "TBW102"
TIMEOUT_S = 10.0
FRAME_LENGTH = struct.Struct(">i")
# Message properties travel as name\x01value\x02 pairs.
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
# The name server writes integer map keys bare ({0:"host:port"}), which JSON does not allow.
BARE_INT_KEY = re.compile(r"([{,])(-?\d+):")


class DemoClientError(RuntimeError):
    """A server refused a request."""


@dataclass(frozen=True)
class Queue:
    """One queue of the topic: the broker that holds it, its address and its id."""

    broker: str
    address: str
    queue_id: int


class Connection:
    """One TCP connection; requests go one at a time, each waiting for its answer."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self.opaque = 0

    def request(self, code: int, fields: Mapping[str, object], body: bytes = b"") -> tuple[dict[str, Any], bytes]:
        """Send a request; the response header and body, or DemoClientError for a failure code."""
        self.opaque += 1
        header = json.dumps(
            {
                "code": code,
                "language": "PYTHON",
                "version": PROTOCOL_VERSION,
                "opaque": self.opaque,
                "flag": 0,
                "extFields": {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in fields.items()},
                "serializeTypeCurrentRPC": "JSON",
            }
        ).encode()
        payload = FRAME_LENGTH.pack(len(header)) + header + body
        self.sock.sendall(FRAME_LENGTH.pack(len(payload)) + payload)
        frame = self._read(FRAME_LENGTH.unpack(self._read(FRAME_LENGTH.size))[0])
        header_length = FRAME_LENGTH.unpack(frame[:4])[0] & 0xFFFFFF  # the top byte is the format
        answer: dict[str, Any] = json.loads(frame[4 : 4 + header_length])
        if answer["code"] not in (SUCCESS, QUERY_NOT_FOUND):
            raise DemoClientError(f"request {code} refused ({answer['code']}): {answer.get('remark')}")
        return answer, frame[4 + header_length :]

    def _read(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise DemoClientError("the server closed the connection")
            data += chunk
        return bytes(data)

    def close(self) -> None:
        self.sock.close()


class DemoClient:
    """The name server's brokers, and one connection to each broker's master."""

    def __init__(self, name_server: str) -> None:
        # The first name server of a namesrvAddr list is enough here.
        lookup = Connection(name_server.split(";")[0])
        try:
            _, body = lookup.request(GET_BROKER_CLUSTER_INFO, {})
        finally:
            lookup.close()
        table = json.loads(BARE_INT_KEY.sub(r'\1"\2":', body.decode()))["brokerAddrTable"]
        self.masters = {
            name: data["brokerAddrs"][MASTER_ID]
            for name, data in sorted(table.items())
            if MASTER_ID in data["brokerAddrs"]
        }
        if not self.masters:
            raise DemoClientError(f"the name server {name_server} knows no broker")
        self.connections = {address: Connection(address) for address in self.masters.values()}

    def create_topic(self, topic: str, queues_per_broker: int) -> list[Queue]:
        """The topic on every broker, as ``mqadmin updateTopic -c`` creates it; its queues."""
        for name, address in self.masters.items():
            self.connections[address].request(
                UPDATE_AND_CREATE_TOPIC,
                {
                    "topic": topic,
                    "defaultTopic": DEFAULT_TOPIC,
                    "readQueueNums": queues_per_broker,
                    "writeQueueNums": queues_per_broker,
                    "perm": READ_WRITE_PERM,
                    "topicFilterType": "SINGLE_TAG",
                    "topicSysFlag": 0,
                    "order": False,
                    "bname": name,
                },
            )
        return [Queue(name, address, q) for name, address in self.masters.items() for q in range(queues_per_broker)]

    def send(
        self, queue: Queue, topic: str, body: bytes, tags: str, keys: str, properties: Mapping[str, str] | None = None
    ) -> None:
        """One message into one queue, stored before this returns."""
        props = {"TAGS": tags, "KEYS": keys, "WAIT": "true", **(properties or {})}
        encoded = "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items())
        self.connections[queue.address].request(
            SEND_MESSAGE,
            {
                "producerGroup": "rocketmq-spark-demo",
                "topic": topic,
                "defaultTopic": DEFAULT_TOPIC,
                "defaultTopicQueueNums": 4,
                "queueId": queue.queue_id,
                "sysFlag": 0,
                "bornTimestamp": int(time.time() * 1000),
                "flag": 0,
                "properties": encoded,
                "reconsumeTimes": 0,
                "unitMode": False,
                "batch": False,
            },
            body,
        )

    def offsets(self, queues: Sequence[Queue], topic: str, group: str) -> Iterator[tuple[Queue, int | None, int]]:
        """Per queue: the group's stored offset (None: none stored) and the queue's max offset."""
        for queue in queues:
            connection = self.connections[queue.address]
            stored, _ = connection.request(
                QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": queue.queue_id}
            )
            high, _ = connection.request(GET_MAX_OFFSET, {"topic": topic, "queueId": queue.queue_id})
            fields = stored.get("extFields") or {}
            committed = int(fields["offset"]) if stored["code"] == SUCCESS and "offset" in fields else None
            yield queue, committed, int(high["extFields"]["offset"])

    def close(self) -> None:
        for connection in self.connections.values():
            connection.close()
