"""Capture real PULL responses from a running RocketMQ as test fixtures.

The official Java producer (the test tool) sends the messages; this script pulls them back over a
plain socket and saves the exact bytes the broker sent, as hex, next to what the official Java
consumer decoded from the same queue. ``tests/unit/test_captured.py`` then checks the project's
decoder against both without any broker.

    python -m integration.capture_fixtures [--namesrv 127.0.0.1:9876] [--out tests/data]

The cluster must have a broker named broker-a (``python -m integration.cluster start``). Cases:

* ``plain``: a whole response frame (length, JSON header, body) of a pull of plain messages;
* ``zlib``, ``lz4``, ``zstd``: pull bodies of bodies the producer compressed;
* ``long_topic``: a record whose topic is longer than 127 bytes, which the broker stores with the
  V2 magic (two-byte topic length). Only retry topics may be that long (``HookUtils`` refuses
  others), so the message is sent back by a consumer group with a long name and pulled from
  ``%RETRY%<group>``;
* ``unicode``: tags, keys, properties and body outside ASCII;
* ``inner_batch``: a batch send to a ``queue.type=BatchCQ`` topic, stored as one INNER_BATCH record.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from integration.cluster import run_tool
from integration.cluster_config import BROKER_A
from integration.constants import COMPRESSIBLE_BODY_BYTES, CONSUMER_ADDED_PROPERTIES, POLL_S, PULL_BATCH, REPO
from rocketmq_spark.model import ClientConfig, MessageQueue
from rocketmq_spark.remoting import calls, codes
from rocketmq_spark.remoting.client import PullSpec, RocketMQClient
from rocketmq_spark.remoting.codec import RemotingCommand, encode_frame

EXPECTATIONS_FILE = "captured.json"
REQUEST_OPAQUE = 4242
REQUEST_TIMEOUT_S = 10.0
LENGTH_FIELD_BYTES = 4
HEX_BYTES_PER_LINE = 32
# RequestCode.CONSUMER_SEND_MSG_BACK: a consumer hands a message back for redelivery.
CONSUMER_SEND_MSG_BACK = 36
# Delay level 1 (1 s): the broker parks the message in SCHEDULE_TOPIC_XXXX, then writes it to the
# group's retry topic.
SEND_BACK_DELAY_LEVEL = 1
MAX_RECONSUME_TIMES = 16
RETRY_WAIT_S = 60.0
TOPIC_LENGTH_V1_MAX = 127
# offsetMsgId: hex of store IPv4 and port (16 digits), then of the commit-log offset.
OFFSET_MSG_ID_HOST_DIGITS = 16
MAGIC_AT = 4
MAGICS = {codes.MESSAGE_MAGIC_V1: "V1", codes.MESSAGE_MAGIC_V2: "V2"}


class Capture:
    """One cluster, one run: unique names, the tool, raw pulls."""

    def __init__(self, namesrv: str) -> None:
        self.namesrv = namesrv
        self.run = uuid.uuid4().hex[:8]
        self.client = RocketMQClient(ClientConfig((namesrv,)))

    def name(self, prefix: str) -> str:
        return f"{prefix}-{self.run}"

    def tool(self, command: str, *args: str) -> list[dict[str, Any]]:
        return run_tool(self.namesrv, command, *args)

    def topic(self, prefix: str, *attributes: str) -> str:
        topic = self.name(prefix)
        extra = [arg for attribute in attributes for arg in ("--attr", attribute)]
        self.tool("create-topic", "--topic", topic, "--queues", "1", "--brokers", BROKER_A, *extra)
        return topic

    def produce(self, topic: str, count: int, *args: str) -> list[dict[str, Any]]:
        rows = self.tool(
            "produce",
            "--topic",
            topic,
            "--count",
            str(count),
            "--broker",
            BROKER_A,
            "--queue",
            "0",
            "--print-body",
            *args,
        )
        if [row["status"] for row in rows] != ["SEND_OK"] * count:
            raise RuntimeError(f"producing to {topic} failed: {rows}")
        return rows

    def official(self, topic: str, count: int) -> list[dict[str, Any]]:
        """What the official consumer decoded, without the properties it adds itself."""
        rows = self.tool("consume", "--topic", topic, "--count", str(count), "--print")
        for row in rows:
            for key in CONSUMER_ADDED_PROPERTIES:
                row["properties"].pop(key, None)
        return sorted(rows, key=lambda row: row["queueOffset"])

    def address(self, topic: str) -> str:
        address = self.client.topic_route(topic).master_address(BROKER_A)
        if address is None:
            raise RuntimeError(f"no master address for {BROKER_A}")
        return address

    def raw_pull(self, topic: str, group: str, address: str | None = None) -> bytes:
        """The whole response frame, length field included, exactly as the broker sent it."""
        command = RemotingCommand.request(
            codes.RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": group,
                "topic": topic,
                "queueId": 0,
                "queueOffset": 0,
                "maxMsgNums": PULL_BATCH,
                "sysFlag": codes.PULL_FLAG_SUBSCRIPTION,
                "commitOffset": 0,
                "suspendTimeoutMillis": 0,
                "subscription": "*",
                "subVersion": 0,
                "expressionType": "TAG",
                "bname": BROKER_A,
            },
        )
        command.opaque = REQUEST_OPAQUE
        host, _, port = (address or self.address(topic)).rpartition(":")
        with socket.create_connection((host, int(port)), timeout=REQUEST_TIMEOUT_S) as sock:
            sock.sendall(encode_frame(command))
            length = _receive(sock, LENGTH_FIELD_BYTES)
            return length + _receive(sock, int.from_bytes(length, "big"))


def _receive(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            raise RuntimeError("the broker closed the connection mid-frame")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _body(frame: bytes) -> bytes:
    # The word after the length: serialize type in its high byte, header length in the other three.
    header_length = int.from_bytes(frame[LENGTH_FIELD_BYTES + 1 : 2 * LENGTH_FIELD_BYTES], "big")
    return frame[2 * LENGTH_FIELD_BYTES + header_length :]


def _magic(body: bytes) -> str:
    return MAGICS[int.from_bytes(body[MAGIC_AT : MAGIC_AT + 4], "big")]


# ----------------------------------------------------------------------------- cases


def plain(cap: Capture) -> tuple[bytes, dict[str, Any]]:
    topic = cap.topic("capture-plain")
    count = 3
    cap.produce(
        topic,
        count,
        "--tags",
        "TagA,TagB",
        "--keys",
        "order-{i} alt-{i}",
        "--body",
        "plain body {i}",
        "--prop",
        "seq={i}",
    )
    official = cap.official(topic, count)
    (offsets,) = [
        row
        for row in cap.tool("offsets", "--topic", topic, "--group", cap.name("capture-probe"))
        if row["queueId"] == 0
    ]
    frame = cap.raw_pull(topic, cap.name("capture-group"))
    return frame, {
        "frame": True,
        "response": {
            "code": codes.ResponseCode.SUCCESS,
            "remark": "FOUND",
            "opaque": REQUEST_OPAQUE,
            "nextBeginOffset": offsets["maxOffset"],
            "minOffset": offsets["minOffset"],
            "maxOffset": offsets["maxOffset"],
        },
        "messages": official,
    }


def compressed(kind: str) -> Callable[[Capture], tuple[bytes, dict[str, Any]]]:
    def case(cap: Capture) -> tuple[bytes, dict[str, Any]]:
        topic = cap.topic(f"capture-{kind.lower()}")
        count = 2
        cap.produce(
            topic,
            count,
            "--body-size",
            str(COMPRESSIBLE_BODY_BYTES),
            "--compress",
            kind,
            "--tags",
            "Big",
            "--keys",
            "big-{i}",
        )
        official = cap.official(topic, count)
        return _body(cap.raw_pull(topic, cap.name("capture-group"))), {"compression": kind, "messages": official}

    return case


def long_topic(cap: Capture) -> tuple[bytes, dict[str, Any]]:
    source = cap.topic("capture-source")
    group = cap.name("capture-long-group-" + "g" * TOPIC_LENGTH_V1_MAX)
    retry_topic = f"%RETRY%{group}"
    (sent,) = cap.produce(source, 1, "--tags", "TagL", "--keys", "long-key", "--body", "sent back to a long topic")
    address = cap.address(source)
    # A pull creates the group, which the broker wants before it takes a message back.
    cap.client.pull_async(address, PullSpec(MessageQueue(source, BROKER_A, 0), group), 0, 1).result()
    response = cap.client.invoke(
        address,
        CONSUMER_SEND_MSG_BACK,
        {
            "offset": int(sent["offsetMsgId"][OFFSET_MSG_ID_HOST_DIGITS:], 16),
            "group": group,
            "delayLevel": SEND_BACK_DELAY_LEVEL,
            "originMsgId": sent["msgId"],
            "originTopic": source,
            "unitMode": False,
            "maxReconsumeTimes": MAX_RECONSUME_TIMES,
            "bname": BROKER_A,
        },
    )
    if response.code != codes.ResponseCode.SUCCESS:
        raise RuntimeError(f"send-back refused: {response.code} {response.remark}")
    retry_queue = MessageQueue(retry_topic, BROKER_A, 0)
    deadline = time.monotonic() + RETRY_WAIT_S
    while cap.client.call(address, calls.max_offset(retry_queue)) == 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing arrived in {retry_topic}")
        time.sleep(POLL_S)
    official = cap.official(retry_topic, 1)
    return _body(cap.raw_pull(retry_topic, group, address)), {"messages": official}


def unicode(cap: Capture) -> tuple[bytes, dict[str, Any]]:
    topic = cap.topic("capture-unicode")
    count = 3
    cap.produce(
        topic,
        count,
        "--tags",
        "标签",
        "--keys",
        "ключ-{i} キー",
        "--body",
        "héllo wörld ✓ {i}",
        "--prop",
        "città=Zürich-{i}",
    )
    return _body(cap.raw_pull(topic, cap.name("capture-group"))), {"messages": cap.official(topic, count)}


def inner_batch(cap: Capture) -> tuple[bytes, dict[str, Any]]:
    topic = cap.topic("capture-innerbatch", "+queue.type=BatchCQ")
    count = 4
    cap.produce(topic, count, "--batch", str(count), "--tags", "Inner", "--keys", "inner-{i}", "--prop", "seq={i}")
    return _body(cap.raw_pull(topic, cap.name("capture-group"))), {"messages": cap.official(topic, count)}


CASES: dict[str, tuple[Callable[[Capture], tuple[bytes, dict[str, Any]]], str]] = {
    "plain": (plain, "a whole PULL response frame (length, JSON header, body) of three plain messages"),
    "zlib": (compressed("ZLIB"), "a PULL body of two 5000-byte bodies the producer compressed with ZLIB"),
    "lz4": (compressed("LZ4"), "a PULL body of two 5000-byte bodies the producer compressed with LZ4"),
    "zstd": (compressed("ZSTD"), "a PULL body of two 5000-byte bodies the producer compressed with ZSTD"),
    "long_topic": (long_topic, "a PULL body of one record of a retry topic longer than 127 bytes (V2 magic)"),
    "unicode": (unicode, "a PULL body of three messages with non-ASCII tags, keys, property and body"),
    "inner_batch": (inner_batch, "a PULL body of one INNER_BATCH record holding a batch of four"),
}


def write_hex(path: Path, data: bytes, description: str) -> None:
    lines = [
        f"# {description}.",
        "# Captured from Apache RocketMQ 5.3.3 by integration/capture_fixtures.py; hex, '#' starts a comment.",
    ]
    lines += [data[i : i + HEX_BYTES_PER_LINE].hex().upper() for i in range(0, len(data), HEX_BYTES_PER_LINE)]
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namesrv", default="127.0.0.1:9876")
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "data")
    parser.add_argument("cases", nargs="*", help=f"cases to capture (default: all): {', '.join(CASES)}")
    opts = parser.parse_args(argv)
    unknown = set(opts.cases) - set(CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; choose from {', '.join(CASES)}")
    cap = Capture(opts.namesrv)
    expectations_path = opts.out / EXPECTATIONS_FILE
    expectations = json.loads(expectations_path.read_text()) if expectations_path.exists() else {}
    try:
        for name in opts.cases or CASES:
            make, description = CASES[name]
            data, expected = make(cap)
            body = _body(data) if expected.get("frame") else data
            expected["magic"] = _magic(body)
            if (name == "long_topic") != (expected["magic"] == "V2"):
                raise RuntimeError(f"case {name}: the broker wrote magic {expected['magic']}")
            file_name = f"pull_{'frame' if expected.get('frame') else 'body'}_{name}.hex"
            write_hex(opts.out / file_name, data, description)
            expectations[name] = {"file": file_name, "description": description, **expected}
            print(f"{name}: {len(data)} bytes, magic {expected['magic']}, {len(expected['messages'])} messages")
    finally:
        cap.client.close()
    expectations_path.write_text(json.dumps(expectations, indent=2, ensure_ascii=False, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
