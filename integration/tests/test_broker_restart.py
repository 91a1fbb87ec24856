"""A broker restarted under a running stream (issue: batch and control, item 8).

This needs its own cluster, on ports of its own, so that stopping a broker disturbs no other test.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.cluster import Cluster, ClusterConfig, shifted
from integration.support import ClusterHandle, create_topic, produce, wait_rows

pytestmark = pytest.mark.integration

NAMESRV_PORT = shifted(29876)
BROKER_PORTS = (shifted(30911), shifted(30921))
DOWN_S = 5


@pytest.fixture(scope="module")
def restartable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    config = ClusterConfig(workdir=tmp_path_factory.mktemp("restart-cluster"), brokers=2,
                           namesrv_port=NAMESRV_PORT, broker_ports=BROKER_PORTS)
    cluster = Cluster(config).start()
    try:
        yield ClusterHandle(config.namesrv_addr, None, cluster)
    finally:
        cluster.stop(at_once=True)


def test_stream_rides_out_a_broker_restart(spark: Any, restartable: ClusterHandle, tmp_path: Path) -> None:
    cluster = restartable.cluster
    assert cluster is not None
    topic, group = "restart-topic", "restart-group"
    create_topic(restartable, topic, queues=2)
    produce(restartable, topic, 200, "--keys", "before-{i}", "--batch", "20")
    out = tmp_path / "sink"
    df = (spark.readStream.format("rocketmq").option("nameServer", restartable.namesrv_addr).option("topic", topic)
          .option("consumerGroup", group).option("consumeFromWhere", "CONSUME_FROM_FIRST_OFFSET")
          .option("maxMessagesPerTrigger", "50").option("pullTimeoutMs", "3000").load())
    query = (df.selectExpr("keys").writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(tmp_path / "c")).trigger(processingTime="1 second").start())
    try:
        wait_rows(query, 50)
        cluster.stop_broker("broker-b")
        # Messages keep arriving on broker-a while broker-b is away.
        produce(restartable, topic, 60, "--keys", "during-{i}", "--broker", "broker-a", "--queue", "0")
        time.sleep(DOWN_S)
        cluster.restart("broker-b")
        produce(restartable, topic, 100, "--keys", "after-{i}", "--batch", "20")
        wait_rows(query, 360)
        assert query.exception() is None
    finally:
        query.stop()
    keys = Counter(r.keys for r in spark.read.parquet(str(out)).collect())
    expected = ({f"before-{i}" for i in range(200)} | {f"during-{i}" for i in range(60)}
                | {f"after-{i}" for i in range(100)})
    assert set(keys) == expected
    assert max(keys.values()) == 1, "a message reached the sink twice"
