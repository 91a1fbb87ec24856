"""Batch backfills and stream control against the real broker and Spark (issue: batch and control)."""

from __future__ import annotations

import json
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from integration.constants import POLL_S, QUERY_TIMEOUT_S, WAVE_GAP_S
from integration.support import (
    ClusterHandle,
    batch_read,
    collect_available_now,
    create_topic,
    offsets_and_ends,
    position,
    produce,
    run_available_now,
    store_times,
    stored_offsets,
    stream,
    wait_rows,
)

pytestmark = pytest.mark.integration

Unique = Callable[[str], str]


# --------------------------------------------------------------------------- 1


def test_backfill_of_a_time_window_returns_exactly_that_wave(
    spark: Any, rocketmq: ClusterHandle, unique: Unique
) -> None:
    topic, group = unique("waves"), unique("waves-group")
    create_topic(rocketmq, topic, queues=2)
    waves: list[list[dict[str, Any]]] = []
    for wave in range(3):
        if waves:
            time.sleep(WAVE_GAP_S)
        waves.append(produce(rocketmq, topic, 60, "--keys", f"w{wave}-{{i}}", "--batch", "10"))
    times = store_times(rocketmq, topic, 180)
    start = min(times[position(m)] for m in waves[1])
    end = min(times[position(m)] for m in waves[2])
    assert max(times[position(m)] for m in waves[0]) < start

    rows = batch_read(
        spark, rocketmq, topic, consumerGroup=group, startingTimestamp=str(start), endingTimestamp=str(end)
    ).collect()
    assert sorted(r.keys for r in rows) == sorted(m["keys"] for m in waves[1])
    # A batch read never stores offsets, even with a group.
    assert set(stored_offsets(rocketmq, topic, group).values()) == {None}

    # The same window as JSON offsets, queue by queue.
    first = {(m["broker"], m["queueId"]): m["queueOffset"] for m in reversed(waves[1])}
    after = {(m["broker"], m["queueId"]): m["queueOffset"] for m in reversed(waves[2])}

    def as_json(offsets: dict[tuple[str, int], int]) -> str:
        return json.dumps(
            {topic: {b: {str(q): o for (bb, q), o in offsets.items() if bb == b} for b in {b for b, _ in offsets}}}
        )

    rows = batch_read(spark, rocketmq, topic, startingOffsets=as_json(first), endingOffsets=as_json(after)).collect()
    assert sorted(r.keys for r in rows) == sorted(m["keys"] for m in waves[1])


# --------------------------------------------------------------------------- 2, 3


def test_available_now_reads_what_existed_in_limited_batches(
    spark: Any, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path
) -> None:
    topic, group = unique("avail"), unique("avail-group")
    create_topic(rocketmq, topic, queues=2)
    # Uneven backlog: 300 on one queue, 100 on another, none elsewhere.
    produce(rocketmq, topic, 300, "--broker", "broker-a", "--queue", "0", "--keys", "a-{i}", "--batch", "50")
    produce(rocketmq, topic, 100, "--broker", "broker-b", "--queue", "1", "--keys", "b-{i}", "--batch", "50")
    per_batch: dict[int, Counter[tuple[str, int]]] = {}

    def on_batch(batch: Any, batch_id: int) -> None:
        per_batch[batch_id] = Counter(
            (r.brokerName, r.queueId) for r in batch.select("brokerName", "queueId").collect()
        )
        if batch_id == 0:  # arrives after the run started: left for the next run
            produce(rocketmq, topic, 20, "--keys", "late-{i}")

    df = stream(
        spark, rocketmq, topic, group, consumeFromWhere="CONSUME_FROM_FIRST_OFFSET", maxMessagesPerTrigger="100"
    )
    run_available_now(df, tmp_path / "checkpoint", on_batch)
    assert len(per_batch) == 4
    assert all(sum(c.values()) == 100 for c in per_batch.values()), "maxMessagesPerTrigger exceeded or unused"
    # Shared by backlog: three to one in the first batch.
    assert per_batch[0] == Counter({("broker-a", 0): 75, ("broker-b", 1): 25})
    assert sum(sum(c.values()) for c in per_batch.values()) == 400

    later = collect_available_now(
        stream(spark, rocketmq, topic, group, maxMessagesPerTrigger="100"), tmp_path / "checkpoint"
    )
    assert sorted(r.keys for r in later) == sorted(f"late-{i}" for i in range(20))
    stored, ends = offsets_and_ends(rocketmq, topic, group)
    assert stored == ends


def test_min_messages_waits_for_max_trigger_delay(
    spark: Any, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path
) -> None:
    topic, group = unique("minmsg"), unique("minmsg-group")
    create_topic(rocketmq, topic, queues=1)
    produce(rocketmq, topic, 50)
    delay_s = 8
    df = stream(
        spark,
        rocketmq,
        topic,
        group,
        consumeFromWhere="CONSUME_FROM_FIRST_OFFSET",
        minMessagesPerTrigger="1000",
        maxTriggerDelay=f"{delay_s}s",
    )
    started = time.time()
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "c"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        fired = None
        while fired is None and time.monotonic() < deadline:
            assert query.exception() is None
            for progress in query.recentProgress:
                if progress["numInputRows"] > 0:
                    fired = progress
            time.sleep(POLL_S)
    finally:
        query.stop()
    assert fired is not None, "the batch never fired after maxTriggerDelay"
    assert fired["numInputRows"] == 50
    fired_at = time.mktime(time.strptime(fired["timestamp"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    assert fired_at - started >= delay_s - 2, "fired before maxTriggerDelay with fewer than minMessagesPerTrigger"


# --------------------------------------------------------------------------- 4


def test_splitting_keeps_order_and_loses_nothing(spark: Any, rocketmq: ClusterHandle, unique: Unique) -> None:
    from pyspark.sql.functions import spark_partition_id

    topic = unique("split")
    create_topic(rocketmq, topic, queues=2)
    sent = produce(rocketmq, topic, 400, "--tags", "Keep,Drop", "--keys", "k-{i}", "--batch", "25")
    for options in (
        {"minPartitions": "16"},
        {"maxMessagesPerPartition": "7"},
        {"minPartitions": "40", "maxMessagesPerPartition": "30", "subExpression": "Keep"},
    ):
        df = batch_read(spark, rocketmq, topic, **options)
        rows = df.withColumn("part", spark_partition_id()).collect()
        wanted = [m for m in sent if options.get("subExpression") in (None, m["tags"])]
        assert sorted(r.keys for r in rows) == sorted(m["keys"] for m in wanted), options
        assert df.rdd.getNumPartitions() >= int(options.get("minPartitions", 1))
        last: dict[tuple[int, str, int], int] = {}
        for r in rows:  # within a partition, offsets of a queue only increase
            key = (r.part, r.brokerName, r.queueId)
            assert r.queueOffset > last.get(key, -1)
            last[key] = r.queueOffset
        if "maxMessagesPerPartition" in options:
            spans: dict[int, list[int]] = defaultdict(list)
            for r in rows:
                spans[r.part].append(r.queueOffset)
            assert all(max(s) - min(s) < int(options["maxMessagesPerPartition"]) for s in spans.values())


# --------------------------------------------------------------------------- 5


TRIGGER_S = 1
EMPTY_TOPIC_TRIGGERS = 3


def test_data_loss_under_a_running_query_fails_or_skips(
    spark: Any, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path
) -> None:
    """The topic is deleted and recreated while the stream runs: its offsets are gone."""
    for fail in (True, False):
        topic, group = unique("loss"), unique("loss-group")
        create_topic(rocketmq, topic, queues=1, brokers="broker-a")
        produce(rocketmq, topic, 30, "--keys", "before-{i}")
        keys: list[str] = []  # this round's: its query is stopped before the loop moves on
        df = stream(
            spark,
            rocketmq,
            topic,
            group,
            consumeFromWhere="CONSUME_FROM_FIRST_OFFSET",
            failOnDataLoss=str(fail).lower(),
        )
        query = (
            df.writeStream.option("checkpointLocation", str(tmp_path / f"c-{fail}"))
            .foreachBatch(lambda batch, _: keys.extend(r.keys for r in batch.select("keys").collect()))  # noqa: B023
            .trigger(processingTime=f"{TRIGGER_S} seconds")
            .start()
        )
        try:
            wait_rows(query, 30)
            rocketmq.tool("delete-topic", "--topic", topic)
            create_topic(rocketmq, topic, queues=1, brokers="broker-a")
            # Triggers run on the new, empty topic, whose consume stats read 0 for the group (its
            # offsets went with the old topic): that is no operator's reset to 0.
            time.sleep(EMPTY_TOPIC_TRIGGERS * TRIGGER_S)
            produce(rocketmq, topic, 5, "--keys", "after-{i}")
            deadline = time.monotonic() + QUERY_TIMEOUT_S
            if fail:
                while query.exception() is None and time.monotonic() < deadline:
                    time.sleep(POLL_S)
                assert query.exception() is not None, "the query went on past lost data"
                assert re.search(rf"{topic}/broker-a/0: offsets .*failOnDataLoss=false", str(query.exception()))
            else:
                while not {f"after-{i}" for i in range(5)} <= set(keys) and time.monotonic() < deadline:
                    assert query.exception() is None, query.exception()
                    time.sleep(POLL_S)
                assert sorted(keys) == sorted([f"before-{i}" for i in range(30)] + [f"after-{i}" for i in range(5)])
        finally:
            query.stop()


# --------------------------------------------------------------------------- 6, 7


def test_new_queues_and_several_topics(spark: Any, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path) -> None:
    grow, other, group = unique("grow"), unique("other"), unique("grow-group")
    create_topic(rocketmq, grow, queues=2, brokers="broker-a")
    create_topic(rocketmq, other, queues=1)
    produce(rocketmq, grow, 40, "--keys", "g1-{i}")
    produce(rocketmq, other, 10, "--keys", "o-{i}")
    out = tmp_path / "sink"
    df = stream(spark, rocketmq, f"{grow},{other}", group, consumeFromWhere="CONSUME_FROM_FIRST_OFFSET")
    query = (
        df.selectExpr("topic", "keys", "brokerName", "queueId")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "c"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        wait_rows(query, 50)
        # The topic grows: two more queues on broker-a and four on broker-b.
        create_topic(rocketmq, grow, queues=4, brokers="broker-a")
        create_topic(rocketmq, grow, queues=4, brokers="broker-b")
        sent = produce(rocketmq, grow, 80, "--keys", "g2-{i}")
        assert {(m["broker"], m["queueId"]) for m in sent} >= {("broker-a", 3), ("broker-b", 0)}
        wait_rows(query, 130)
    finally:
        query.stop()
    rows = spark.read.parquet(str(out)).collect()
    keys = Counter(r.keys for r in rows)
    assert set(keys) == {f"g1-{i}" for i in range(40)} | {f"g2-{i}" for i in range(80)} | {f"o-{i}" for i in range(10)}
    assert max(keys.values()) == 1
    assert {r.topic for r in rows} == {grow, other}


def read_batch_cq_topic(spark: Any, rocketmq: ClusterHandle, topic: str, count: int, **options: str) -> None:
    """Send ``count`` messages in batch sends of 20 to a one-queue BatchCQ topic (each send is one
    record the broker returns whole), read them back with ``options``: each exactly once."""
    rocketmq.tool(
        "create-topic", "--topic", topic, "--queues", "1", "--brokers", "broker-a", "--attr", "+queue.type=BatchCQ"
    )
    produce(rocketmq, topic, count, "--batch", "20", "--keys", "inner-{i}", "--broker", "broker-a", "--queue", "0")
    rows = batch_read(spark, rocketmq, topic, **options).collect()
    assert sorted(r.queueOffset for r in rows) == list(range(count))
    assert sorted(r.keys for r in rows) == sorted(f"inner-{i}" for i in range(count))


def test_splits_inside_inner_batch_records(spark: Any, rocketmq: ClusterHandle, unique: Unique) -> None:
    """On a BatchCQ topic a batch send is one record; a split inside it must not repeat messages."""
    read_batch_cq_topic(spark, rocketmq, unique("batchcq"), 60, maxMessagesPerPartition="7")


# --------------------------------------------------------------------------- pulls in flight


def test_pulls_in_flight_read_every_message_once(spark: Any, rocketmq: ClusterHandle, unique: Unique) -> None:
    """A task keeps several pulls on the wire. Spans smaller than what the broker returns, larger
    (the broker answers at most 32: each answer is short and the rest of its span is pulled next),
    and, on a BatchCQ topic, spans that start inside a batch record the broker returns whole."""
    topic = unique("inflight")
    create_topic(rocketmq, topic, queues=2)
    sent = produce(rocketmq, topic, 3000, "--keys", "f-{i}", "--batch", "100")
    for size in ("7", "100"):
        rows = batch_read(spark, rocketmq, topic, pullBatchSize=size).collect()
        assert sorted(r.keys for r in rows) == sorted(m["keys"] for m in sent), size
        per_queue: dict[tuple[str, int], list[int]] = defaultdict(list)
        for r in rows:
            per_queue[(r.brokerName, r.queueId)].append(r.queueOffset)
        assert all(sorted(o) == list(range(len(o))) for o in per_queue.values()), size

    read_batch_cq_topic(spark, rocketmq, unique("inflight-batchcq"), 200, pullBatchSize="3")
