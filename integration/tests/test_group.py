"""The stream's consumer group as RocketMQ's own tools see it, and what the stream does about
other members of its group (docs/operations.md, "The consumer group on the brokers").

Against the real brokers of the release ``ROCKETMQ_VERSION`` names, read directly (a 5.x proxy
keeps a heartbeat to itself; see the docs). The other members are the official Java client's
push consumers (the tool's ``push-consume``), which print every rebalance with the members it
counted, and other streams of this source.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.constants import FIRST, TRIGGER
from integration.failfast import fail_stream
from integration.support import (
    ClusterHandle,
    consumer_connections,
    consumer_progress,
    create_topic,
    eventually,
    max_offsets,
    produce,
    push_consumer,
    source_members,
    spark_job_with_source_log,
    stored_offsets,
    stream,
    wait_rows,
)

pytestmark = pytest.mark.integration

Unique = Callable[[str], str]

QUEUES_PER_BROKER = 2
MESSAGES = 40
# Long enough for what a test does while the push consumer is online, on a loaded machine.
PUSH_ONLINE_S = 240
FIX = "a consumer group of its own"


@pytest.fixture
def topic(rocketmq: ClusterHandle, unique: Unique) -> str:
    name = unique("g-topic")
    create_topic(rocketmq, name, queues=QUEUES_PER_BROKER)
    produce(rocketmq, name, MESSAGES, "--quiet")
    return name


@pytest.fixture
def running(spark: Any, rocketmq: ClusterHandle, tmp_path: Path) -> Iterator[Callable[[str, str], Any]]:
    """Start streams that run until the test ends (a trigger a second, into a no-op sink)."""
    queries: list[Any] = []

    def start(topic: str, group: str) -> Any:
        query = (
            stream(spark, rocketmq, topic, group, consumeFromWhere=FIRST)
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / f"c{len(queries)}"))
            .trigger(processingTime=TRIGGER)
            .start()
        )
        queries.append(query)
        return query

    yield start
    for query in queries:
        query.stop()


def test_a_running_stream_is_an_online_member_and_its_progress_shows_in_mqadmin(
    rocketmq: ClusterHandle, running: Callable[[str, str], Any], topic: str, unique: Unique
) -> None:
    group = unique("g-visible")
    query = running(topic, group)
    wait_rows(query, MESSAGES)
    (member,) = eventually(lambda: source_members(rocketmq, group), "the stream is not listed as online")
    maxima = max_offsets(rocketmq, topic)
    eventually(
        lambda: consumer_progress(rocketmq, group, topic) == {q: (top, top) for q, top in maxima.items()},
        "consumerProgress -g does not show every queue committed with no lag",
    )
    query.stop()
    eventually(lambda: member not in consumer_connections(rocketmq, group), "the stopped stream is still listed")
    assert stored_offsets(rocketmq, topic, group) == maxima


def test_a_push_consumer_in_the_group_is_named_and_not_disturbed(
    rocketmq: ClusterHandle, topic: str, unique: Unique, tmp_path: Path
) -> None:
    """Default: a warning naming the push consumer; the stream reads all the same, never
    registers, and the push consumer never counts it among the members it shares queues with."""
    group = unique("g-push")
    with push_consumer(rocketmq, topic, group, PUSH_ONLINE_S) as push:
        # The push consumer has stored its offsets (the end of each queue) for the group already.
        options = {
            "nameServer": rocketmq.namesrv_addr,
            "topic": topic,
            "consumerGroup": group,
            "startingOffsets": "earliest",
        }
        result, log = spark_job_with_source_log(
            "stream", options, tmp_path, "--sink", str(tmp_path / "sink"), "--checkpoint", str(tmp_path / "c")
        )
        assert result["result"]["rows"] == MESSAGES, result
        assert consumer_connections(rocketmq, group) == [push.client_id]
        warnings = [line for line in log.splitlines() if " WARNING " in line and push.client_id in line]
        assert warnings, log[-3000:]
        assert "overwrite each other's" in warnings[0] and "failOnSharedGroup" in warnings[0]
        counted = {tuple(a["consumers"]) for a in push.allocations(topic)}
        assert counted == {(push.client_id,)}, "the push consumer rebalanced with another member counted"


def test_with_fail_on_shared_group_a_push_consumer_fails_the_query_before_its_first_batch(
    spark: Any, rocketmq: ClusterHandle, topic: str, unique: Unique, tmp_path: Path
) -> None:
    group = unique("g-push-fail")
    with push_consumer(rocketmq, topic, group, PUSH_ONLINE_S) as push:
        options = {
            "nameServer": rocketmq.namesrv_addr,
            "topic": topic,
            "consumerGroup": group,
            "consumeFromWhere": FIRST,
            "failOnSharedGroup": "true",
        }
        _, error = fail_stream(spark, options, tmp_path / "c")
        assert "option 'consumerGroup'" in error and push.client_id in error and FIX in error, error
        assert not (tmp_path / "c" / "offsets" / "0").exists(), "a batch was planned"
        assert consumer_connections(rocketmq, group) == [push.client_id]


def test_a_second_query_on_the_same_group_names_the_first(
    spark: Any, rocketmq: ClusterHandle, running: Callable[[str, str], Any], topic: str, unique: Unique, tmp_path: Path
) -> None:
    group = unique("g-two")
    wait_rows(running(topic, group), MESSAGES)
    (first,) = eventually(lambda: source_members(rocketmq, group), "the first query is not listed")
    options = {"nameServer": rocketmq.namesrv_addr, "topic": topic, "consumerGroup": group, "failOnSharedGroup": "true"}
    _, error = fail_stream(spark, options, tmp_path / "second")
    assert "another query of this source" in error and first in error and FIX in error, error
    assert source_members(rocketmq, group) == [first], "the second query registered"
