"""What the source must do the same on every RocketMQ release it supports (4.9.7, 5.3.3, 5.5.x).

The fixture's cluster runs the release ``ROCKETMQ_VERSION`` names (``make compat
ROCKETMQ_VERSION=4.9.7``). Expected values come from the official Java client (the test tool),
from the release's own mqadmin, and from the rules of docs/offsets.md, never from the source's
code; the tests are the same on every release, because the contract is.

Where releases differ underneath, the source has to make up for it:

* a 4.9 broker ignores ``setZeroIfNotFound=false`` and answers 0 for a group that stored nothing
  (on any queue whose head is still in memory, even an empty one), so stored offsets must be told
  from "none stored" another way;
* a 4.9 broker answers SEARCH_OFFSET_BY_TIMESTAMP with the entry *nearest* in time, not the first
  at or after it, and ignores ``boundaryType``;
* a 5.x producer gives a batch a UNIQ_KEY of its own, which 4.9.7 and 5.3.3 brokers append to
  every message after the message's own UNIQ_KEY (5.5.0 does not);
* mqadmin lists a group's progress (``consumerProgress -g``) only once the group's retry topic
  exists, which only a heartbeat creates: the stream registers in its group for that;
* authentication is ACL 1.0 (plain_acl.yml) on 4.9 and ACL 2.0 on 5.x;
* 4.9 has no proxy: on 5.x the cases run through the proxy's remoting port as well;
* an operator's offset reset (``mqadmin resetOffsetByTime``, ``skipAccumulatedMessage``) reaches a
  running stream differently: a 5.x broker stores the reset offsets and answers the group's next
  pull on each queue with OFFSET_MOVED, a 4.9 broker sends the online members
  RESET_CONSUMER_CLIENT_OFFSET and stores nothing.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from integration.cluster import ACL_PASSWORD, ACL_USER, CLUSTER_NAME, Cluster
from integration.constants import (
    COMPRESSIBLE_BODY_BYTES,
    CONSUMER_ADDED_PROPERTIES,
    FIRST,
    QUERY_TIMEOUT_S,
    TRIGGER,
    WAVE_GAP_S,
)
from integration.failfast import fail_batch
from integration.support import (
    ClusterHandle,
    batch_read,
    collect_available_now,
    consumer_progress,
    create_topic,
    eventually,
    first_offsets,
    max_offsets,
    offsets_and_ends,
    position,
    produce,
    run_available_now,
    source_members,
    store_times,
    stored_offsets,
    stream,
)

pytestmark = pytest.mark.integration

Unique = Callable[[str], str]
Position = tuple[str, int, int]

LAST = "CONSUME_FROM_LAST_OFFSET"
TIMESTAMP = "CONSUME_FROM_TIMESTAMP"
QUEUES_PER_BROKER = 2
WAVE = 40
SEND_BATCH = 10
# "Aa" and "BB" have the same Java hashCode, so the broker's tag filter lets both through.
COLLIDING_TAGS = ("Aa", "BB")
# --compress picks the algorithm of the bodies the Java producer compresses.
COMPRESSIONS = ("ZLIB", "LZ4", "ZSTD")
BATCH_SIZE = 5
# Properties not compared with the official consumer's: the consumer adds the MIN/MAX ones after
# decoding, and UNIQ_KEY of batch-sent messages has a test of its own.
NOT_COMPARED = ("UNIQ_KEY", *CONSUMER_ADDED_PROPERTIES)
STORED_AT = 3
# Every test but mqadmin's runs on each of support's ENDPOINTS (conftest's ``endpoint``).
# Exactly once across a restart: messages per trigger, and the batch whose sink fails the first run.
PER_TRIGGER = 15
FAILING_BATCH = 2
SINK_FAILURE = "the sink failed on purpose"
# What both releases say of a wrong secret ("Check signature failed for accessKey=..." on 4.9).
ACL_SIGNATURE_FAILED = "check signature failed"
# The broker setting many production brokers turn off: a group must exist before it is used.
AUTO_CREATE_GROUPS = "autoCreateSubscriptionGroup"
# What a broker answers to a pull or commit of a group it does not hold (SUBSCRIPTION_GROUP_NOT_EXIST).
GROUP_NOT_EXIST = "does not exist"


def row_position(row: Any) -> Position:
    return row.brokerName, row.queueId, row.queueOffset


def two_waves(
    rocketmq: ClusterHandle, topic: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[Position, int]]:
    """Two waves of WAVE messages, WAVE_GAP_S apart, and every message's store time."""
    create_topic(rocketmq, topic, queues=QUEUES_PER_BROKER)
    first = produce(rocketmq, topic, WAVE, "--keys", "w1-{i}", "--batch", str(SEND_BATCH))
    time.sleep(WAVE_GAP_S)
    second = produce(rocketmq, topic, WAVE, "--keys", "w2-{i}", "--batch", str(SEND_BATCH))
    times = store_times(rocketmq, topic, 2 * WAVE)
    assert max(times[position(m)] for m in first) < min(times[position(m)] for m in second)
    return first, second, times


# --------------------------------------------------------------------------- where a query starts


def test_first_on_a_fresh_topic_starts_at_each_queues_min_offset(
    spark: Any, rocketmq: ClusterHandle, endpoint: str, unique: Unique, tmp_path: Path
) -> None:
    topic, group = unique("v-first"), unique("v-first-group")
    create_topic(rocketmq, topic, queues=QUEUES_PER_BROKER)
    sent = produce(rocketmq, topic, WAVE)
    df = stream(spark, rocketmq, topic, group, endpoint=endpoint, consumeFromWhere=FIRST)
    rows = collect_available_now(df, tmp_path / "c")
    assert sorted(map(row_position, rows)) == sorted(map(position, sent))
    stored, ends = offsets_and_ends(rocketmq, topic, group)
    assert stored == ends


def test_last_on_a_fresh_topic_with_messages_in_memory_reads_nothing_old(
    spark: Any, rocketmq: ClusterHandle, endpoint: str, unique: Unique, tmp_path: Path
) -> None:
    """The group stored nothing, so LAST, the default consumeFromWhere (the stream names none),
    applies on every queue: none of the messages is read. A 5.x broker would report offset 0 for a
    new group here unless asked not to guess."""
    topic, group = unique("v-last"), unique("v-last-group")
    create_topic(rocketmq, topic, queues=QUEUES_PER_BROKER)
    produce(rocketmq, topic, WAVE)
    df = stream(spark, rocketmq, topic, group, endpoint=endpoint)
    rows = collect_available_now(df, tmp_path / "c")
    assert [row_position(r) for r in rows] == []
    stored, ends = offsets_and_ends(rocketmq, topic, group)
    assert stored == ends


def test_timestamp_start_of_a_new_group_reads_from_the_first_message_at_or_after_it(
    spark: Any, rocketmq: ClusterHandle, endpoint: str, unique: Unique, tmp_path: Path
) -> None:
    topic, group = unique("v-ts"), unique("v-ts-group")
    first, second, times = two_waves(rocketmq, topic)
    # One millisecond after the first wave: the first message at or after it is the second wave's.
    after_first = max(times[position(m)] for m in first) + 1
    df = stream(
        spark, rocketmq, topic, group, endpoint=endpoint, consumeFromWhere=TIMESTAMP, consumeTimestamp=str(after_first)
    )
    rows = collect_available_now(df, tmp_path / "c")
    assert sorted(r.keys for r in rows) == sorted(m["keys"] for m in second)


def test_stored_offsets_mixed_with_unstored_queues(
    spark: Any, rocketmq: ClusterHandle, endpoint: str, unique: Unique, tmp_path: Path
) -> None:
    """Per queue: a stored offset wins, a stored 0 is a stored offset, and only queues with
    nothing stored follow consumeFromWhere (LAST here)."""
    topic, group = unique("v-mixed"), unique("v-mixed-group")
    create_topic(rocketmq, topic, queues=QUEUES_PER_BROKER)
    produce(rocketmq, topic, 2 * WAVE, "--batch", str(SEND_BATCH))
    maxima = max_offsets(rocketmq, topic)
    at_three, at_zero, *unstored = sorted(q for q, top in maxima.items() if top > STORED_AT) + sorted(
        q for q, top in maxima.items() if top <= STORED_AT
    )
    for (broker, queue), offset in ((at_three, STORED_AT), (at_zero, 0)):
        rocketmq.tool(
            "set-offset",
            "--topic",
            topic,
            "--group",
            group,
            "--broker",
            broker,
            "--queue",
            str(queue),
            "--offset",
            str(offset),
        )
    df = stream(spark, rocketmq, topic, group, endpoint=endpoint, consumeFromWhere=LAST)
    rows = collect_available_now(df, tmp_path / "c")
    assert first_offsets(rows) == {at_three: STORED_AT, at_zero: 0}
    assert len(rows) == (maxima[at_three] - STORED_AT) + maxima[at_zero]
    assert {q for q in unstored if maxima[q] > 0}.isdisjoint({(r.brokerName, r.queueId) for r in rows})
    assert stored_offsets(rocketmq, topic, group) == maxima


# --------------------------------------------------------------------------- filters


def test_tag_filter_with_hash_colliding_tags(
    spark: Any, rocketmq: ClusterHandle, endpoint: str, unique: Unique, tmp_path: Path
) -> None:
    topic, group = unique("v-tags"), unique("v-tags-group")
    create_topic(rocketmq, topic, queues=QUEUES_PER_BROKER)
    sent = produce(rocketmq, topic, WAVE, "--tags", ",".join(COLLIDING_TAGS), "--keys", "k-{i}")
    df = stream(
        spark, rocketmq, topic, group, endpoint=endpoint, consumeFromWhere=FIRST, subExpression=COLLIDING_TAGS[0]
    )
    rows = collect_available_now(df, tmp_path / "c")
    assert sorted(r.keys for r in rows) == sorted(m["keys"] for m in sent if m["tags"] == COLLIDING_TAGS[0])
    stored, ends = offsets_and_ends(rocketmq, topic, group)
    assert stored == ends, "filtered offsets are consumed"


def test_sql92_filter(spark: Any, rocketmq: ClusterHandle, endpoint: str, unique: Unique, tmp_path: Path) -> None:
    """The fixture turns enablePropertyFilter on; with it a 4.9 broker evaluates SQL92 as 5.x does."""
    topic, group = unique("v-sql"), unique("v-sql-group")
    create_topic(rocketmq, topic, queues=QUEUES_PER_BROKER)
    produce(rocketmq, topic, WAVE, "--prop", "seq={i}", "--prop", "color=red")
    df = stream(
        spark,
        rocketmq,
        topic,
        group,
        endpoint=endpoint,
        consumeFromWhere=FIRST,
        expressionType="SQL92",
        subExpression="seq >= 10 AND seq < 25 AND color = 'red'",
    )
    rows = collect_available_now(df, tmp_path / "c")
    assert sorted(int(r.properties["seq"]) for r in rows) == list(range(10, 25))
    stored, ends = offsets_and_ends(rocketmq, topic, group)
    assert stored == ends


# --------------------------------------------------------------------------- message shapes


def test_compressed_and_batched_messages_arrive_as_sent(
    spark: Any, rocketmq: ClusterHandle, endpoint: str, unique: Unique, tmp_path: Path
) -> None:
    """Bodies as the producer sent them; properties as the official consumer reads them (a 4.9
    broker drops WAIT=true from single messages it stores, 5.x keeps it)."""
    topic, group = unique("v-shapes"), unique("v-shapes-group")
    create_topic(rocketmq, topic, queues=QUEUES_PER_BROKER)
    sent = []
    for compress in COMPRESSIONS:
        sent += produce(
            rocketmq,
            topic,
            2,
            "--body",
            f"{compress}-{{i}}-",
            "--body-size",
            str(COMPRESSIBLE_BODY_BYTES),
            "--compress",
            compress,
            "--prop",
            "seq={i}",
            "--print-body",
        )
    sent += produce(
        rocketmq,
        topic,
        BATCH_SIZE,
        "--batch",
        str(BATCH_SIZE),
        "--body",
        "batched {i}",
        "--prop",
        "seq={i}",
        "--print-body",
    )
    official = {
        position(m): m for m in rocketmq.tool("consume", "--topic", topic, "--count", str(len(sent)), "--print")
    }
    df = stream(spark, rocketmq, topic, group, endpoint=endpoint, consumeFromWhere=FIRST)
    rows = collect_available_now(df, tmp_path / "c")
    by_position = {row_position(r): r for r in rows}
    assert sorted(by_position) == sorted(map(position, sent))
    for message in sent:
        row = by_position[position(message)]
        assert row.body == base64.b64decode(message["body"])
        assert row.properties["seq"] == message["properties"]["seq"]
        expected = {k: v for k, v in official[position(message)]["properties"].items() if k not in NOT_COMPARED}
        assert {k: v for k, v in row.properties.items() if k not in NOT_COMPARED} == expected


def test_msg_id_of_batch_sent_messages_is_what_the_producer_was_told(
    spark: Any, rocketmq: ClusterHandle, endpoint: str, unique: Unique, tmp_path: Path
) -> None:
    """Each row's msgId is the id the producer's SendResult gave that message, not the batch's own
    id that some brokers append after it."""
    topic, group = unique("v-batchid"), unique("v-batchid-group")
    create_topic(rocketmq, topic, queues=QUEUES_PER_BROKER)
    sent = produce(rocketmq, topic, 2 * BATCH_SIZE, "--batch", str(BATCH_SIZE))
    assert len({m["msgId"] for m in sent}) == len(sent)
    df = stream(spark, rocketmq, topic, group, endpoint=endpoint, consumeFromWhere=FIRST)
    rows = collect_available_now(df, tmp_path / "c")
    assert {row_position(r): r.msgId for r in rows} == {position(m): m["msgId"] for m in sent}


# --------------------------------------------------------------------------- offsets as others see them


def test_commits_show_in_the_releases_own_mqadmin(
    spark: Any, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path
) -> None:
    """`mqadmin consumerProgress -g` lists every queue with the committed offset and no lag."""
    topic, group = unique("v-admin"), unique("v-admin-group")
    create_topic(rocketmq, topic, queues=QUEUES_PER_BROKER)
    produce(rocketmq, topic, WAVE, "--batch", str(SEND_BATCH))
    collect_available_now(stream(spark, rocketmq, topic, group, consumeFromWhere=FIRST), tmp_path / "c")
    maxima = max_offsets(rocketmq, topic)
    assert stored_offsets(rocketmq, topic, group) == maxima
    assert consumer_progress(rocketmq, group, topic) == {q: (top, top) for q, top in maxima.items()}


# --------------------------------------------------------------------------- backfills


def test_time_window_backfill_returns_exactly_the_window(
    spark: Any, rocketmq: ClusterHandle, endpoint: str, unique: Unique
) -> None:
    """[start, end) in store time; both bounds fall between waves, a millisecond after the last
    message before them, so "first at or after" and "nearest" give different answers."""
    topic = unique("v-window")
    first, second, times = two_waves(rocketmq, topic)
    start = max(times[position(m)] for m in first) + 1
    end = max(times[position(m)] for m in second) + 1
    df = batch_read(spark, rocketmq, topic, endpoint=endpoint, startingTimestamp=str(start), endingTimestamp=str(end))
    rows = df.collect()
    assert sorted(r.keys for r in rows) == sorted(m["keys"] for m in second)


# --------------------------------------------------------------------------- restarts


def test_exactly_once_across_a_restart(
    spark: Any, rocketmq: ClusterHandle, endpoint: str, unique: Unique, tmp_path: Path
) -> None:
    """A stream fails in its third batch after its sink took the rows, then starts again from its
    checkpoint with more messages sent meanwhile: Spark runs that batch again over the offsets it
    planned, and every message reaches the sink once (the sink keeps one copy per batch id, as
    Spark's file sink does)."""
    topic, group = unique("v-restart"), unique("v-restart-group")
    create_topic(rocketmq, topic, queues=QUEUES_PER_BROKER)
    first = produce(rocketmq, topic, 2 * WAVE, "--keys", "r1-{i}", "--batch", str(SEND_BATCH))
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"

    def write(batch: Any, batch_id: int) -> None:
        batch.select("keys").write.mode("overwrite").parquet(str(sink / f"batch={batch_id}"))

    def write_then_fail(batch: Any, batch_id: int) -> None:
        write(batch, batch_id)
        if batch_id == FAILING_BATCH:
            raise RuntimeError(SINK_FAILURE)

    def source() -> Any:
        return stream(
            spark,
            rocketmq,
            topic,
            group,
            endpoint=endpoint,
            consumeFromWhere=FIRST,
            maxMessagesPerTrigger=str(PER_TRIGGER),
        )

    failing = (
        source()
        .writeStream.foreachBatch(write_then_fail)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match=SINK_FAILURE):
        failing.awaitTermination(QUERY_TIMEOUT_S)
    written = spark.read.parquet(str(sink)).count()
    assert written == (FAILING_BATCH + 1) * PER_TRIGGER < len(first), "the first run should stop part-way"

    second = produce(rocketmq, topic, WAVE, "--keys", "r2-{i}", "--batch", str(SEND_BATCH))
    run_available_now(source(), checkpoint, write)
    keys = Counter(row.keys for row in spark.read.parquet(str(sink)).select("keys").collect())
    assert keys == Counter(m["keys"] for m in first + second), "a message is missing or came twice"
    stored, ends = offsets_and_ends(rocketmq, topic, group)
    assert stored == ends


# --------------------------------------------------------------------------- an operator's reset


@dataclass
class Running:
    """A stream running a trigger a second into a memory sink, online in its group."""

    query: Any
    spark: Any
    table: str

    def keys(self) -> Counter[str]:
        return Counter(row.keys for row in self.spark.sql(f"SELECT keys FROM {self.table}").collect())

    def rows(self) -> int:
        return sum(self.keys().values())

    def settled(self, rocketmq: ClusterHandle, topic: str, group: str, expected: Counter[str]) -> None:
        """Wait until the sink holds ``expected`` rows in all and the stored offsets are the queues' ends;
        then the sink must hold exactly ``expected`` and the query must still run."""
        total = sum(expected.values())
        try:
            eventually(lambda: self.query.exception() is not None or self.rows() >= total, "", QUERY_TIMEOUT_S)
        except AssertionError:
            batches = {p["batchId"]: p["numInputRows"] for p in self.query.recentProgress if p["numInputRows"]}
            raise AssertionError(
                f"the sink holds {self.rows()} of {total} rows after {QUERY_TIMEOUT_S} s; rows per batch: {batches}"
            ) from None
        assert self.query.exception() is None, self.query.exception()
        ends = max_offsets(rocketmq, topic)
        eventually(lambda: stored_offsets(rocketmq, topic, group) == ends, "stored offsets did not reach the end")
        assert self.keys() == expected
        assert self.query.isActive


@pytest.fixture
def running(spark: Any, rocketmq: ClusterHandle, tmp_path: Path) -> Iterator[Callable[..., Running]]:
    queries: list[Any] = []

    def start(topic: str, group: str, endpoint: str | None = None, **options: str) -> Running:
        table = f"reset_sink_{len(queries)}_{int(time.time() * 1000)}"
        query = (
            stream(spark, rocketmq, topic, group, endpoint=endpoint, consumeFromWhere=FIRST, **options)
            .select("keys")
            .writeStream.format("memory")
            .queryName(table)
            .option("checkpointLocation", str(tmp_path / table))
            .trigger(processingTime=TRIGGER)
            .start()
        )
        queries.append(query)
        return Running(query, spark, table)

    yield start
    for query in queries:
        query.stop()


def keys_of(*waves: list[dict[str, Any]]) -> Counter[str]:
    return Counter(m["keys"] for wave in waves for m in wave)


def just_before(wave: list[dict[str, Any]], times: dict[Position, int]) -> int:
    """A reset time that lands on the wave's first message on every release: 5.x resets to the
    first message stored at or after it, 4.9 to the one stored nearest it, and among messages sent
    in one batch (one store time) to any of them, so the time is the wave's first store time less
    1 ms (the wave before it was stored WAVE_GAP_S earlier)."""
    return min(times[position(m)] for m in wave) - 1


def reset_by_time(rocketmq: ClusterHandle, group: str, topic: str, timestamp_ms: int) -> str:
    return rocketmq.mqadmin("resetOffsetByTime", "-g", group, "-t", topic, "-s", str(timestamp_ms), "-f", "true")


@dataclass
class ResetBack:
    """A stream that read two waves and stored their end, whose group was then reset by time to
    the second wave's first message."""

    stream: Running
    topic: str
    group: str
    first: list[dict[str, Any]]
    second: list[dict[str, Any]]


def caught_up_then_reset_back(
    rocketmq: ClusterHandle, running: Callable[..., Running], unique: Unique, name: str, **options: str | None
) -> ResetBack:
    topic, group = unique(f"v-reset-{name}"), unique(f"v-reset-{name}-group")
    first, second, times = two_waves(rocketmq, topic)
    stream_ = running(topic, group, **options)
    stream_.settled(rocketmq, topic, group, keys_of(first, second))
    reset_by_time(rocketmq, group, topic, just_before(second, times))
    return ResetBack(stream_, topic, group, first, second)


def test_reset_by_time_back_replays_the_reset_over_messages_once_more(
    rocketmq: ClusterHandle, running: Callable[..., Running], unique: Unique, endpoint: str
) -> None:
    """Through a 5.x proxy too: there the stream is the proxy's client, not the brokers', so the
    reset reaches it only as the stored offsets the proxy reads from the brokers for it."""
    reset = caught_up_then_reset_back(rocketmq, running, unique, "back", endpoint=endpoint)
    third = produce(rocketmq, reset.topic, WAVE, "--keys", "w3-{i}", "--batch", str(SEND_BATCH))
    reset.stream.settled(rocketmq, reset.topic, reset.group, keys_of(reset.first, reset.second, reset.second, third))


@pytest.mark.parametrize("tool", ["resetOffsetByTime", "skipAccumulatedMessage"])
def test_reset_forward_skips_what_it_passes_over(
    rocketmq: ClusterHandle, running: Callable[..., Running], unique: Unique, tool: str
) -> None:
    """The stream waits for more messages than there are (minMessagesPerTrigger), online in its
    group, so that the operator's reset passes over messages it has not read; its next batch, when
    enough have come after the reset offsets, starts there."""
    topic, group = unique("v-reset-fwd"), unique("v-reset-fwd-group")
    first, second, times = two_waves(rocketmq, topic)
    # What the stream reads after the reset: the second wave, where a reset by time goes back to,
    # then a third wave. minMessagesPerTrigger is all of it: more than the two waves there
    # before the reset, and reached only once the third wave is in whole. A lower one fires
    # part-way through a slow producer's wave and leaves the rest waiting for maxTriggerDelay.
    by_time = tool == "resetOffsetByTime"
    read = [second] if by_time else []
    third_size = 3 * WAVE
    stream_ = running(topic, group, minMessagesPerTrigger=str(sum(map(len, read)) + third_size))
    eventually(
        lambda: stored_offsets(rocketmq, topic, group) == first_offsets_of(rocketmq, topic),
        "the waiting stream did not store where it stands",
    )
    if by_time:
        reset_by_time(rocketmq, group, topic, just_before(second, times))
    else:
        rocketmq.mqadmin("skipAccumulatedMessage", "-g", group, "-t", topic)
    third = produce(rocketmq, topic, third_size, "--keys", "w3-{i}", "--batch", str(SEND_BATCH))
    stream_.settled(rocketmq, topic, group, keys_of(*read, third))


def first_offsets_of(rocketmq: ClusterHandle, topic: str) -> dict[tuple[str, int], int]:
    """Where each queue of a topic never trimmed starts: 0."""
    return {queue: 0 for queue in max_offsets(rocketmq, topic)}


def test_an_ignored_reset_keeps_the_streams_position_and_its_own_stored_offsets(
    rocketmq: ClusterHandle, running: Callable[..., Running], unique: Unique
) -> None:
    reset = caught_up_then_reset_back(rocketmq, running, unique, "ignore", onOffsetReset="ignore")
    third = produce(rocketmq, reset.topic, WAVE, "--keys", "w3-{i}", "--batch", str(SEND_BATCH))
    reset.stream.settled(rocketmq, reset.topic, reset.group, keys_of(reset.first, reset.second, third))


def test_fail_stops_the_query_naming_the_reset_and_the_option(
    rocketmq: ClusterHandle, running: Callable[..., Running], unique: Unique
) -> None:
    reset = caught_up_then_reset_back(rocketmq, running, unique, "fail", onOffsetReset="fail")
    query, topic = reset.stream.query, reset.topic
    eventually(lambda: query.exception() is not None, "the query did not stop", QUERY_TIMEOUT_S)
    message = str(query.exception())
    assert "onOffsetReset=fail" in message and f"consumer group '{reset.group}'" in message
    # mqadmin resets one broker after the other: the first trigger after any of them stops the query.
    assert any(f"{topic}/{m['broker']}/{m['queueId']}: " in message for m in reset.second)


def consumer_status_offsets(
    rocketmq: ClusterHandle, group: str, client_id: str, topic: str
) -> dict[tuple[str, int], int]:
    """The queue offsets ``mqadmin consumerStatus -g <group> -i <client>`` prints under #Consumer Offset#."""
    printed = rocketmq.mqadmin("consumerStatus", "-g", group, "-i", client_id)
    section = printed.split("#Consumer Offset#", 1)[1].split("#Consumer MQ Detail#", 1)[0]
    rows = (line.split() for line in section.splitlines())
    return {(row[1], int(row[2])): int(row[3]) for row in rows if len(row) == 4 and row[0] == topic}


def test_consumer_status_shows_the_running_streams_subscription_and_queues(
    rocketmq: ClusterHandle,
    running: Callable[..., Running],
    unique: Unique,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # consumerStatus writes each member's running info under the current directory
    topic, group = unique("v-status"), unique("v-status-group")
    first, second, _ = two_waves(rocketmq, topic)
    stream_ = running(topic, group)
    stream_.settled(rocketmq, topic, group, keys_of(first, second))
    (member,) = eventually(lambda: source_members(rocketmq, group), "the stream is not listed as online")
    summary = rocketmq.mqadmin("consumerStatus", "-g", group)
    assert member in summary and "Same subscription in the same group of consumer" in summary
    assert consumer_status_offsets(rocketmq, group, member, topic) == max_offsets(rocketmq, topic)


# --------------------------------------------------------------------------- brokers that create no groups


def user_groups(rocketmq: ClusterHandle, directory: Path) -> set[str]:
    """The subscription groups the cluster's brokers hold, but their built-in ones, as the
    release's mqadmin exports them."""
    rocketmq.mqadmin("exportMetadata", "-c", CLUSTER_NAME, "-g", "-f", str(directory))
    return set(json.loads((directory / "subscriptionGroup.json").read_text())["subscriptionGroupTable"])


@pytest.fixture
def strict_brokers(rocketmq: ClusterHandle) -> Iterator[None]:
    """Every broker switched to autoCreateSubscriptionGroup=false, and back after the test."""
    rocketmq.mqadmin("updateBrokerConfig", "-c", CLUSTER_NAME, "-k", AUTO_CREATE_GROUPS, "-v", "false")
    try:
        yield
    finally:
        rocketmq.mqadmin("updateBrokerConfig", "-c", CLUSTER_NAME, "-k", AUTO_CREATE_GROUPS, "-v", "true")


def test_a_batch_read_without_a_group_works_on_a_strict_broker_and_creates_no_group(
    spark: Any, rocketmq: ClusterHandle, strict_brokers: None, endpoint: str, unique: Unique, tmp_path: Path
) -> None:
    """The brokers refuse a group they do not hold (a made-up one fails), yet a read without a
    group gets exactly the messages and leaves the brokers' groups as they were."""
    topic = unique("v-strict-batch")
    create_topic(rocketmq, topic, queues=QUEUES_PER_BROKER)
    sent = produce(rocketmq, topic, WAVE // 2)
    before = user_groups(rocketmq, tmp_path / "before")
    _, error = fail_batch(spark, {"nameServer": endpoint, "topic": topic, "consumerGroup": unique("v-strict-none")})
    assert GROUP_NOT_EXIST in error, error
    rows = batch_read(spark, rocketmq, topic, endpoint=endpoint).collect()
    assert sorted(map(row_position, rows)) == sorted(map(position, sent))
    assert user_groups(rocketmq, tmp_path / "after") == before


def test_a_stream_reads_and_commits_as_a_group_the_operator_created_on_a_strict_broker(
    spark: Any, rocketmq: ClusterHandle, strict_brokers: None, unique: Unique, tmp_path: Path
) -> None:
    topic, group = unique("v-strict-stream"), unique("v-strict-group")
    create_topic(rocketmq, topic, queues=QUEUES_PER_BROKER)
    sent = produce(rocketmq, topic, WAVE // 2)
    rocketmq.mqadmin("updateSubGroup", "-c", CLUSTER_NAME, "-g", group)
    rows = collect_available_now(stream(spark, rocketmq, topic, group, consumeFromWhere=FIRST), tmp_path / "c")
    assert sorted(map(row_position, rows)) == sorted(map(position, sent))
    stored, ends = offsets_and_ends(rocketmq, topic, group)
    assert stored == ends


# --------------------------------------------------------------------------- authentication


@dataclass
class Secured:
    """A one-broker cluster of the release with authentication on, and a topic on it."""

    cluster: Cluster
    topic: str
    sent: list[dict[str, Any]]  # as the official consumer reads them, store times included

    def options(self, secret_key: str = ACL_PASSWORD, **more: str) -> dict[str, str]:
        return {
            "nameServer": self.cluster.namesrv_addr,
            "topic": self.topic,
            "accessKey": ACL_USER,
            "secretKey": secret_key,
            **more,
        }


@pytest.fixture(scope="module")
def secured(acl_cluster: Cluster) -> Secured:
    """conftest's cluster with authentication on: ACL 1.0 on 4.9 (aclEnable, plain_acl.yml), ACL
    2.0 on 5.x (authenticationEnabled); both take the same signature, which the official client's
    RPC hook and the source compute."""
    keys = ("--access-key", ACL_USER, "--secret-key", ACL_PASSWORD)
    topic = f"v-acl-topic-{uuid.uuid4().hex[:8]}"
    acl_cluster.tool("create-topic", "--topic", topic, "--queues", str(QUEUES_PER_BROKER), *keys)
    acl_cluster.tool("produce", "--topic", topic, "--count", str(WAVE), "--keys", "acl-{i}", *keys)
    sent = acl_cluster.tool("consume", "--topic", topic, "--count", str(WAVE), "--print", *keys)
    assert len(sent) == WAVE
    return Secured(acl_cluster, topic, sent)


def read_keys(spark: Any, options: dict[str, str]) -> list[str]:
    reader = spark.read.format("rocketmq")
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted(row.keys for row in reader.load().select("keys").collect())


def test_signed_reads_on_the_releases_acl(spark: Any, secured: Secured) -> None:
    """With the user's keys a read gets every message, and from a time on too (on 4.9 the pulls
    that settle the search are signed as well); with a wrong secret the broker refuses it."""
    assert read_keys(spark, secured.options()) == sorted(m["keys"] for m in secured.sent)
    middle = sorted(m["storeTimestamp"] for m in secured.sent)[len(secured.sent) // 2]
    from_middle = read_keys(spark, secured.options(startingTimestamp=str(middle)))
    assert from_middle == sorted(m["keys"] for m in secured.sent if m["storeTimestamp"] >= middle)
    wrong = ACL_PASSWORD + "-wrong"
    _, error = fail_batch(spark, secured.options(secret_key=wrong))
    assert f"from {secured.cluster.config.broker_addr(0)}" in error and ACL_SIGNATURE_FAILED in error.lower(), error
    assert wrong not in error
