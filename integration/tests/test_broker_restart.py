"""A broker restarted under a running stream (issue: batch and control, item 8).

It runs on the two brokers of a cluster of the module's own (conftest's ``two_brokers``), so that
stopping a broker disturbs no other test.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from integration.support import ClusterHandle, create_topic, produce, wait_rows

pytestmark = pytest.mark.integration

DOWN_S = 5


def test_stream_rides_out_a_broker_restart(spark: Any, two_brokers: ClusterHandle, tmp_path: Path) -> None:
    cluster = two_brokers.started
    topic, group = "restart-topic", "restart-group"
    create_topic(two_brokers, topic, queues=2)
    produce(two_brokers, topic, 200, "--keys", "before-{i}", "--batch", "20")
    out = tmp_path / "sink"
    df = (
        spark.readStream.format("rocketmq")
        .option("nameServer", two_brokers.namesrv_addr)
        .option("topic", topic)
        .option("consumerGroup", group)
        .option("consumeFromWhere", "CONSUME_FROM_FIRST_OFFSET")
        .option("maxMessagesPerTrigger", "50")
        .option("pullTimeoutMs", "3000")
        .load()
    )
    query = (
        df.selectExpr("keys")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "c"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        wait_rows(query, 50)
        cluster.stop_broker("broker-b")
        # Messages keep arriving on broker-a while broker-b is away.
        produce(two_brokers, topic, 60, "--keys", "during-{i}", "--broker", "broker-a", "--queue", "0")
        time.sleep(DOWN_S)
        cluster.restart("broker-b")
        produce(two_brokers, topic, 100, "--keys", "after-{i}", "--batch", "20")
        wait_rows(query, 360)
        assert query.exception() is None
    finally:
        query.stop()
    keys = Counter(r.keys for r in spark.read.parquet(str(out)).collect())
    expected = (
        {f"before-{i}" for i in range(200)} | {f"during-{i}" for i in range(60)} | {f"after-{i}" for i in range(100)}
    )
    assert set(keys) == expected
    assert max(keys.values()) == 1, "a message reached the sink twice"
