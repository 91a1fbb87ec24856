"""The test cluster itself: two brokers take a topic, store what the official client sends.

Everything here goes through the Java tool (the official RocketMQ client) and mqadmin, never
through project code, so it checks the ground the connector's own tests stand on.
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Callable

import pytest

from integration.constants import TAGS
from integration.support import ClusterHandle

pytestmark = pytest.mark.integration

QUEUES_PER_BROKER = 4
MESSAGES = 1_000


def test_two_brokers_store_what_the_official_client_sent(rocketmq: ClusterHandle, unique: Callable[[str], str]) -> None:
    topic = unique("it-cluster")
    created = rocketmq.tool("create-topic", "--topic", topic, "--queues", str(QUEUES_PER_BROKER))
    assert sorted(created[0]["brokers"]) == ["broker-a", "broker-b"]

    sent = rocketmq.tool(
        "produce",
        "--topic",
        topic,
        "--count",
        str(MESSAGES),
        "--tags",
        ",".join(TAGS),
        "--keys",
        "order-{i}",
        "--body",
        "payload-{i}",
        "--print-body",
    )
    assert len(sent) == MESSAGES
    assert {row["status"] for row in sent} == {"SEND_OK"}
    # The producer spreads messages over all eight queues of the two brokers.
    assert {(row["broker"], row["queueId"]) for row in sent} == {
        (broker, q) for broker in ("broker-a", "broker-b") for q in range(QUEUES_PER_BROKER)
    }

    stored = rocketmq.tool("consume", "--topic", topic, "--count", str(MESSAGES), "--print")
    assert len(stored) == MESSAGES
    by_id = {row["msgId"]: row for row in stored}
    assert len(by_id) == MESSAGES
    for row in sent:
        got = by_id[row["msgId"]]
        assert (got["broker"], got["queueId"], got["queueOffset"]) == (
            row["broker"],
            row["queueId"],
            row["queueOffset"],
        )
        assert got["tags"] == row["tags"]
        assert got["keys"] == row["keys"]
        assert got["body"] == row["body"]
    index = {base64.b64decode(row["body"]).decode(): row for row in stored}
    assert index["payload-7"]["keys"] == "order-7"
    assert index["payload-7"]["tags"] == TAGS[7 % len(TAGS)]
    assert Counter(row["tags"] for row in stored) == Counter(TAGS[i % len(TAGS)] for i in range(MESSAGES))

    # The broker's max offsets account for every message, queue by queue.
    offsets = rocketmq.tool("offsets", "--topic", topic, "--group", unique("it-nobody"))
    per_queue = Counter((row["broker"], row["queueId"]) for row in sent)
    assert {(o["broker"], o["queueId"]): o["maxOffset"] for o in offsets} == dict(per_queue)
    assert all(o["consumerOffset"] is None for o in offsets)


def test_mqadmin_sees_both_brokers(rocketmq: ClusterHandle) -> None:
    listing = rocketmq.mqadmin("clusterList")
    assert "broker-a" in listing and "broker-b" in listing
