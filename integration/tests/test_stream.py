"""The streaming source against the real broker and real Spark (issue: streaming source).

Messages come from the official Java producer and stored offsets are read back with the official
client (the Java tool), so what the connector reads and commits is checked independently.
"""

from __future__ import annotations

import base64
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from integration.constants import POLL_S, QUERY_TIMEOUT_S, WAVE_GAP_S
from integration.support import (
    ClusterHandle,
    collect_available_now,
    create_topic,
    first_offsets,
    max_offsets,
    offsets_and_ends,
    produce,
    run_available_now,
    spark_offsets,
    stored_offsets,
    stream,
)

pytestmark = pytest.mark.integration

Unique = Callable[[str], str]


# --------------------------------------------------------------------------- 1


def test_exactly_once_across_a_restart(spark: Any, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path) -> None:
    topic, group = unique("eo"), unique("eo-group")
    create_topic(rocketmq, topic, queues=4)
    produce(rocketmq, topic, 20_000, "--keys", "first-{i}", "--batch", "100", "--quiet")
    out, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"

    def start() -> Any:
        df = stream(
            spark, rocketmq, topic, group, consumeFromWhere="CONSUME_FROM_FIRST_OFFSET", maxMessagesPerTrigger="3000"
        )
        return (
            df.selectExpr("keys", "brokerName", "queueId", "queueOffset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="1 second")
            .start()
        )

    query = start()
    deadline = time.monotonic() + QUERY_TIMEOUT_S
    while (query.lastProgress is None or query.lastProgress["batchId"] < 2) and time.monotonic() < deadline:
        assert query.exception() is None
        time.sleep(POLL_S)
    query.stop()
    first_run = spark.read.parquet(str(out)).count()
    assert 0 < first_run < 20_000, "the first run should stop part-way"

    produce(rocketmq, topic, 10_000, "--keys", "second-{i}", "--batch", "100", "--quiet")
    df = stream(
        spark, rocketmq, topic, group, consumeFromWhere="CONSUME_FROM_FIRST_OFFSET", maxMessagesPerTrigger="3000"
    )
    restarted = (
        df.selectExpr("keys", "brokerName", "queueId", "queueOffset")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert restarted.awaitTermination(QUERY_TIMEOUT_S)

    keys = Counter(row["keys"] for row in spark.read.parquet(str(out)).select("keys").collect())
    expected = {f"first-{i}" for i in range(20_000)} | {f"second-{i}" for i in range(10_000)}
    assert set(keys) == expected
    assert max(keys.values()) == 1, "a message reached the sink twice"
    stored, ends = offsets_and_ends(rocketmq, topic, group)
    assert stored == ends


# --------------------------------------------------------------------------- 2


def test_each_batch_commits_its_end_offsets(
    spark: Any, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path
) -> None:
    topic, group = unique("commit"), unique("commit-group")
    create_topic(rocketmq, topic, queues=4)
    produce(rocketmq, topic, 400, "--batch", "50", "--quiet")
    seen_at_batch: dict[int, dict[tuple[str, int], int | None]] = {}

    def on_batch(_: Any, batch_id: int) -> None:
        seen_at_batch[batch_id] = stored_offsets(rocketmq, topic, group)

    df = stream(
        spark, rocketmq, topic, group, consumeFromWhere="CONSUME_FROM_FIRST_OFFSET", maxMessagesPerTrigger="100"
    )
    query = run_available_now(df, tmp_path / "checkpoint", on_batch)
    ends = {p["batchId"]: spark_offsets(p["sources"][0]["endOffset"], topic) for p in query.recentProgress}
    assert len(ends) == 4
    # While batch N runs, the broker holds batch N-1's end offsets (the next offsets to read).
    for batch_id in range(1, len(ends)):
        assert seen_at_batch[batch_id] == ends[batch_id - 1]
    # And after the run, the last batch's end, which is every queue's max offset.
    stored, at_end = offsets_and_ends(rocketmq, topic, group)
    assert stored == ends[len(ends) - 1] == at_end


# --------------------------------------------------------------------------- 3


def test_stored_offsets_win_and_other_queues_follow_consume_from_where(
    spark: Any, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path
) -> None:
    topic = unique("start")
    create_topic(rocketmq, topic, queues=2)
    first_wave = produce(rocketmq, topic, 80, "--batch", "10")
    time.sleep(WAVE_GAP_S)
    second_wave = produce(rocketmq, topic, 80, "--batch", "10")
    queues = sorted({(row["broker"], row["queueId"]) for row in first_wave + second_wave})
    stored_queue, unstored = queues[0], queues[1:]
    second_positions = {(r["broker"], r["queueId"], r["queueOffset"]) for r in second_wave}
    boundary = min(
        row["storeTimestamp"]
        for row in rocketmq.tool("consume", "--topic", topic, "--count", "160", "--print")
        if (row["broker"], row["queueId"], row["queueOffset"]) in second_positions
    )
    wave2_first = {}
    for row in second_wave:
        key = (row["broker"], row["queueId"])
        wave2_first[key] = min(wave2_first.get(key, row["queueOffset"]), row["queueOffset"])
    maxima = max_offsets(rocketmq, topic)

    cases = {
        "CONSUME_FROM_FIRST_OFFSET": ({}, lambda q: 0),
        "CONSUME_FROM_LAST_OFFSET": ({}, lambda q: maxima[q]),
        "CONSUME_FROM_TIMESTAMP": ({"consumeTimestamp": str(boundary)}, lambda q: wave2_first[q]),
    }
    for where, (extra, expected_start) in cases.items():
        group = unique("start-group")
        rocketmq.tool(
            "set-offset",
            "--topic",
            topic,
            "--group",
            group,
            "--broker",
            stored_queue[0],
            "--queue",
            str(stored_queue[1]),
            "--offset",
            "3",
        )
        rows = collect_available_now(
            stream(spark, rocketmq, topic, group, consumeFromWhere=where, **extra), tmp_path / where
        )
        firsts = first_offsets(rows)
        assert firsts[stored_queue] == 3, where
        for q in unstored:
            if expected_start(q) < maxima[q]:
                assert firsts[q] == expected_start(q), (where, q)
            else:
                assert q not in firsts, (where, q)
        assert len(rows) == (maxima[stored_queue] - 3) + sum(maxima[q] - expected_start(q) for q in unstored)
        assert stored_offsets(rocketmq, topic, group) == maxima


# A new group on a fresh topic with the default consumeFromWhere (LAST) reads nothing old and
# stores the queues' ends: test_versions.test_last_on_a_fresh_topic_with_messages_in_memory_reads_
# nothing_old, on every release (make test runs it on 5.3.3).


# --------------------------------------------------------------------------- 4


def test_tag_filters(spark: Any, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path) -> None:
    topic = unique("tags")
    create_topic(rocketmq, topic, queues=2)
    sent = produce(rocketmq, topic, 300, "--tags", "TagA,TagB,TagC,Aa,BB", "--keys", "k-{i}", "--batch", "20")

    def read(expression: str, group: str) -> list[Any]:
        df = stream(
            spark, rocketmq, topic, group, consumeFromWhere="CONSUME_FROM_FIRST_OFFSET", subExpression=expression
        )
        return collect_available_now(df, tmp_path / group)

    # A tag whose hash another shares ("Aa" and "BB") is test_versions' case, on every release.
    for expression, wanted in (("TagA || TagB", {"TagA", "TagB"}), ("BB", {"BB"})):
        group = unique("tags-group")
        rows = read(expression, group)
        assert sorted(r.keys for r in rows) == sorted(s["keys"] for s in sent if s["tags"] in wanted)
        stored, ends = offsets_and_ends(rocketmq, topic, group)
        assert stored == ends

    group = unique("tags-none")
    assert read("NoSuchTag", group) == []
    stored, ends = offsets_and_ends(rocketmq, topic, group)
    assert stored == ends, "lag must not grow"


# --------------------------------------------------------------------------- 5

# A SQL92 filter: test_versions.test_sql92_filter, on every release (make test runs it on 5.3.3).


# --------------------------------------------------------------------------- 6


def test_every_column(spark: Any, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path) -> None:
    topic, group = unique("rows"), unique("rows-group")
    create_topic(rocketmq, topic, queues=2)
    sent = produce(
        rocketmq,
        topic,
        6,
        "--tags",
        "标签,TagB",
        "--keys",
        "订单-{i} alt-{i}",
        "--body",
        "héllo wörld ✓ {i}",
        "--prop",
        "seq={i}",
        "--prop",
        "ünï=cödé",
        "--print-body",
    )
    for compress in ("ZLIB", "LZ4", "ZSTD"):
        sent += produce(
            rocketmq,
            topic,
            2,
            "--body",
            f"{compress}-{{i}}-",
            "--body-size",
            "6000",
            "--compress",
            compress,
            "--print-body",
        )
    sent += produce(rocketmq, topic, 5, "--batch", "5", "--body", "batched {i}", "--print-body")
    rows = collect_available_now(
        stream(spark, rocketmq, topic, group, consumeFromWhere="CONSUME_FROM_FIRST_OFFSET"), tmp_path / "c"
    )

    def position(m: dict[str, Any]) -> tuple[str, int, int]:
        return m["broker"], m["queueId"], m["queueOffset"]

    stored = {position(m): m for m in rocketmq.tool("consume", "--topic", topic, "--count", str(len(sent)), "--print")}
    assert len(rows) == len(sent)
    by_position = {(row.brokerName, row.queueId, row.queueOffset): row for row in rows}
    for message in sent:
        row = by_position[position(message)]
        check = stored[position(message)]
        assert row.topic == topic
        # The producer's own id, the one its SendResult gave, also in a batch send, where the
        # broker appends the batch's UNIQ_KEY and the official consumer reports that instead.
        assert row.msgId == message["msgId"] == row.properties["UNIQ_KEY"]
        batched = message["body"].startswith("YmF0Y2hlZC")  # base64 of "batched"
        assert (row.msgId == check["msgId"]) != batched
        assert row.offsetMsgId == message["offsetMsgId"] == check["offsetMsgId"]
        assert row.body == base64.b64decode(message["body"])
        assert row.tags == message["tags"]
        assert row.keys == message["keys"]
        for key, value in message["properties"].items():
            if key != "UNIQ_KEY":
                assert row.properties[key] == value
        assert {k: v for k, v in row.properties.items() if k != "UNIQ_KEY"} == {
            k: v for k, v in check["properties"].items() if k not in ("MIN_OFFSET", "MAX_OFFSET", "UNIQ_KEY")
        }
        assert int(row.storeTimestamp.timestamp() * 1000) == check["storeTimestamp"]
        assert int(row.bornTimestamp.timestamp() * 1000) == check["bornTimestamp"]
        assert row.storeHost.startswith("127.0.0.1:")
        assert row.bornHost.startswith("127.0.0.1:")
        assert (row.reconsumeTimes, row.flag) == (0, 0)
    compressed = [r for r in rows if r.body.startswith((b"ZLIB", b"LZ4", b"ZSTD"))]
    assert len(compressed) == 6 and all(len(r.body) == 6000 for r in compressed)
