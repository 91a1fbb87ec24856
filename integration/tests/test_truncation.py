"""A broker whose store was truncated by a dirty restart, as every consume queue store answers for
it: the broker's new ends, a stream restarted on a checkpoint past them, and a batch read
(docs/offsets.md, "Data loss").

A one-broker cluster of its own and two topics, each read to its end by two streams (two
checkpoints, two groups); one topic is also read by two streams that keep running
(failOnDataLoss true and false). Then the broker is SIGKILLed, the tail of its commit log is zeroed from
the commit-log offset of the first of the last ``CUT`` messages of each topic on (a crash that lost
the commit log's last pages: the page cache survives a SIGKILL, so the cut stands in for what a
power loss takes), and the broker is restarted on its store. Its recovery after an abnormal
shutdown (``CommitLog.recoverAbnormally``) stops at the first invalid message and cuts the consume
queue entries past it (``truncateDirtyLogicFiles``; RocksDB truncates its offset table), so the
queues end below what the streams read, and new messages are stored at those offsets again:
fewer than were lost on one topic (``SHORT``: its queues still end below the checkpoints), more
on the other (``REFILLED``: its offsets look healthy, and only the messages' store times tell).
The streams restarted on their checkpoints find the loss by the store times in their offset log
("since this query's checkpoint was written"), the running ones by their new connection to the
broker ("a new master ... holds fewer messages"). ``ROCKETMQ_VERSION`` and ``ROCKETMQ_STORE`` pick the release and the consume queue store.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from integration.cluster_config import BROKER_A, ClusterConfig, shifted
from integration.constants import POLL_S, QUERY_TIMEOUT_S
from integration.failfast import fail_stream
from integration.support import (
    ClusterHandle,
    batch_read,
    create_topic,
    own_cluster,
    produce,
    run_available_now,
    stream,
    wait_stored_at_max,
)
from rocketmq_spark.model import ClientConfig, MessageQueue
from rocketmq_spark.remoting import calls
from rocketmq_spark.remoting.client import RocketMQClient

pytestmark = pytest.mark.integration

NAMESRV_PORT = shifted(16876)
BROKER_PORT = shifted(16911)
QUEUES = 2
BEFORE = 40
# Each topic's last CUT messages are cut from the commit log: each topic sends BEFORE - CUT, then
# CUT, so that the last CUT of both lie together at the commit log's end.
CUT = 10
# The topics, by how many messages they are sent after the restart: fewer than each queue lost
# (CUT // QUEUES, round robin), so every queue still ends below the checkpoints, or twice the
# cut, so every queue ends past them.
SHORT, REFILLED = "short", "refilled"
SENT_AFTER = {SHORT: CUT // 2 - 1, REFILLED: 2 * CUT}
# The topic streams keep running through the kill and the restart: the refilled one, whose loss
# only the store times show. Two streams, not one per topic and setting: four queries starting
# at once on a loaded CI host missed Spark's 10 s for a Python worker to connect back.
RUNNING = REFILLED
# Sent once the stream that goes on has read what was sent after the restart: its next run on the
# checkpoint reads these alone.
LATER = 2
# The restarted queries' retryBudgetMs. A restarted driver asks a queue that ends below its
# checkpoint again for up to retryBudgetMs before it calls that loss (docs/offsets.md, "Data
# loss"); the default (60 s) would cost each restart on a shorter queue a minute of waiting.
RETRY_BUDGET_MS = "5000"
# The running streams' trigger, and their retryBudgetMs: the default, long enough to hold the
# broker's queues while it is away (a one-broker topic whose broker does not answer for that long
# fails the query), so a shorter queue is also asked again that long before it counts as loss.
RUNNING_TRIGGER_S = 2
RUNNING_TRIGGER = f"{RUNNING_TRIGGER_S} seconds"
# Triggers a running stream is given, once it read what it should, to read anything twice.
SETTLE_TRIGGERS = 2
# An offsetMsgId is hex: the store host's IPv4 address and port (8 bytes), then the commit-log
# offset (8 bytes, the last 16 hex digits).
COMMIT_LOG_OFFSET_HEX_DIGITS = 16
HEX = 16
# A commit-log record starts with its total size, a big-endian int; zero where nothing was written.
RECORD_SIZE_FORMAT = ">i"
RECORD_SIZE_BYTES = struct.calcsize(RECORD_SIZE_FORMAT)
# The line of Spark's error that carries the source's own.
DATA_LOSS_ERROR = "DataLossError:"
# How the source's data-loss errors name this cause beside a failover.
RECOVERED_SHORTER = "a restart after a crash that recovered a shorter store"

# (broker, queue id), as the Java tool and support's helpers name a queue.
Queue = tuple[str, int]
# (min offset, max offset) of a queue, as the broker answers them.
Bounds = tuple[int, int]
# (queue id, queue offset, keys) of a message, as the tests compare what was read.
Row = tuple[int, int, str]


@dataclass(frozen=True)
class Truncated:
    """One of the module's topics, what it held and holds, and the checkpoints that read it."""

    handle: ClusterHandle
    topic: str
    fail_group: str  # read to the end before the kill; its checkpoint is ``fail_checkpoint``
    fail_checkpoint: Path
    go_group: str  # the same, for the stream that goes on with failOnDataLoss=false
    go_checkpoint: Path
    before: dict[Queue, Bounds]  # the broker's bounds before the kill: what was produced
    after: dict[Queue, Bounds]  # its bounds after the restart, before anything was sent again
    refilled: dict[Queue, Bounds]  # its bounds once the messages sent after the restart are stored
    cut_keys: list[str]  # the messages zeroed out of the commit log
    kept: dict[Queue, int]  # per queue, how many of its messages were stored before the cut
    sent_before: list[Row]  # the messages sent before the kill, where the Java producer was told they went
    sent_after: list[Row]  # the messages sent after the restart, where the Java producer was told they went
    running_fail: Any  # RUNNING's stream (failOnDataLoss=true) that ran from before the kill on; else None
    running_go: Any  # the same with failOnDataLoss=false
    running_rows: list[Row]  # what ``running_go`` read, as it read it
    running_read_at: list[tuple[float, int]]  # per batch of ``running_go``: when, and rows read by then
    restarted_at: float  # time.monotonic() once the broker was back

    def options(self, group: str, **more: str) -> dict[str, str]:
        return {"nameServer": self.handle.namesrv_addr, "topic": self.topic, "consumerGroup": group, **more}

    @property
    def shorter(self) -> dict[Queue, tuple[int, int]]:
        """Per queue that lost messages, its end after the restart and its end before the kill."""
        ends = {queue: (high, self.before[queue][1]) for queue, (_, high) in self.after.items()}
        return {queue: (new, old) for queue, (new, old) in ends.items() if new < old}


def bounds(handle: ClusterHandle, topic: str) -> dict[Queue, Bounds]:
    """(min, max) offset per queue of the topic, as its broker answers them."""
    with RocketMQClient(ClientConfig(name_servers=(handle.namesrv_addr,))) as client:
        address = client.topic_route(topic).master_address(BROKER_A)
        assert address is not None
        answered: dict[Queue, Bounds] = {}
        for queue_id in range(QUEUES):
            queue = MessageQueue(topic, BROKER_A, queue_id)
            answered[(BROKER_A, queue_id)] = (
                client.call(address, calls.min_offset(queue)),
                client.call(address, calls.max_offset(queue)),
            )
        return answered


def commit_log_offset(offset_msg_id: str) -> int:
    """Where the broker stored a message in its commit log, from the id the producer was sent."""
    return int(offset_msg_id[-COMMIT_LOG_OFFSET_HEX_DIGITS:], HEX)


def zero_commit_log_from(store: Path, cut: int) -> int:
    """Zero a stopped broker's commit log from offset ``cut`` to the end of what it wrote (record by
    record, up to the first zero size); return how many bytes were zeroed."""
    files = sorted((store / "commitlog").iterdir(), key=lambda path: int(path.name))
    holding = max((path for path in files if int(path.name) <= cut), key=lambda path: int(path.name))
    start = cut - int(holding.name)
    with holding.open("r+b") as log:
        end = start
        while True:
            log.seek(end)
            (size,) = struct.unpack(RECORD_SIZE_FORMAT, log.read(RECORD_SIZE_BYTES))
            if size <= 0:
                break
            end += size
        log.seek(start)
        log.write(bytes(end - start))
    return end - start


def row(message: dict[str, Any]) -> Row:
    """A message the Java tool printed, as the tests compare it."""
    return message["queueId"], message["queueOffset"], message["keys"]


def read_to_the_end(spark: Any, handle: ClusterHandle, topic: str, group: str, checkpoint: Path) -> list[str]:
    """Run a stream of the topic in the group to the topic's end; the keys it read."""
    rows: list[Any] = []
    df = stream(spark, handle, topic, group, consumeFromWhere="CONSUME_FROM_FIRST_OFFSET")
    run_available_now(df.select("keys"), checkpoint, lambda batch, _: rows.extend(batch.collect()))
    return sorted(row.keys for row in rows)


def start_running(
    spark: Any,
    handle: ClusterHandle,
    topic: str,
    group: str,
    checkpoint: Path,
    fail_on_data_loss: bool,
    read_at: list[tuple[float, int]],
) -> tuple[Any, list[Row]]:
    """Start a stream of the topic from its first offset on a processing-time trigger; the query
    and the list it appends each row it reads to. Each batch appends to ``read_at`` when it was
    read (``time.monotonic()``) and how many rows had been read by then."""
    rows: list[Row] = []

    def sink(batch: Any, _: int) -> None:
        rows.extend(tuple(r) for r in batch.collect())
        read_at.append((time.monotonic(), len(rows)))

    df = stream(
        spark,
        handle,
        topic,
        group,
        consumeFromWhere="CONSUME_FROM_FIRST_OFFSET",
        failOnDataLoss=str(fail_on_data_loss).lower(),
    )
    query = (
        df.select("queueId", "queueOffset", "keys")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=RUNNING_TRIGGER)
        .start()
    )
    return query, rows


def wait_read(query: Any, rows: list[Row], count: int) -> None:
    """Until the running query has read ``count`` rows (it must not fail meanwhile)."""
    deadline = time.monotonic() + QUERY_TIMEOUT_S
    while len(rows) < count:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"the running stream read {len(rows)} rows, not {count}"
        time.sleep(POLL_S)


@pytest.fixture(scope="module")
def truncated(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Truncated]]:
    """The module's cluster and its topics (by kind), each read to the end by two streams, then
    the broker killed, its commit log cut and the broker restarted; each topic is sent its
    SENT_AFTER messages once the broker is back."""
    workdir = tmp_path_factory.mktemp("truncation")
    config = ClusterConfig(
        workdir=workdir / "cluster",
        brokers=1,
        namesrv_port=NAMESRV_PORT,
        broker_ports=(BROKER_PORT,),
        timer_messages=False,
    )
    with own_cluster(config) as handle, ExitStack() as stops:
        suffix = uuid.uuid4().hex[:8]
        topics = {kind: f"t-{kind}-{suffix}" for kind in SENT_AFTER}
        for topic in topics.values():
            create_topic(handle, topic, queues=QUEUES, brokers=BROKER_A)
        # Each topic's messages before the tail, then each topic's tail: the cut takes both tails.
        sent: dict[str, list[dict[str, Any]]] = {kind: [] for kind in topics}
        for count, keys in ((BEFORE - CUT, "before-{i}"), (CUT, "tail-{i}")):
            for kind, topic in topics.items():
                sent[kind] += produce(handle, topic, count, "--keys", keys)
        before = {kind: bounds(handle, topic) for kind, topic in topics.items()}
        groups = {kind: (f"t-fail-{kind}-{suffix}", f"t-go-{kind}-{suffix}") for kind in topics}
        checkpoints = {kind: (workdir / f"fail-{kind}", workdir / f"go-{kind}") for kind in topics}
        for kind, topic in topics.items():
            for group, checkpoint in zip(groups[kind], checkpoints[kind], strict=True):
                read = read_to_the_end(spark, handle, topic, group, checkpoint)
                assert read == sorted(message["keys"] for message in sent[kind]), read
        # RUNNING's streams, by failOnDataLoss, each started once the one before it has read what
        # was sent; stopped before the cluster is.
        running: dict[bool, tuple[Any, list[Row]]] = {}
        read_at: list[tuple[float, int]] = []
        for fails in (True, False):
            group, checkpoint = f"t-run-{fails}-{suffix}", workdir / f"run-{fails}"
            query, rows = start_running(
                spark, handle, topics[RUNNING], group, checkpoint, fails, [] if fails else read_at
            )
            stops.callback(query.stop)
            wait_read(query, rows, BEFORE)
            running[fails] = query, rows
        print(f"{config.consume_queue_store} store: produced {BEFORE} to each topic, bounds before the kill {before}")

        cluster = handle.started
        began = time.monotonic()
        cluster.kill(BROKER_A)
        print(f"broker killed (and gone from the name server) in {time.monotonic() - began:.1f} s")
        tails = [message for kind in topics for message in sent[kind][-CUT:]]
        cut = min(commit_log_offset(message["offsetMsgId"]) for message in tails)
        zeroed = zero_commit_log_from(cluster.broker_store(BROKER_A), cut)
        print(f"zeroed the commit log from offset {cut} on: {zeroed} bytes, the last {CUT} messages of each topic")
        began = time.monotonic()
        cluster.restart(BROKER_A)
        restarted_at = time.monotonic()
        print(f"broker restarted on its store (and registered) in {restarted_at - began:.1f} s")
        after = {kind: bounds(handle, topic) for kind, topic in topics.items()}
        print(f"bounds after the restart {after}")

        truncated: dict[str, Truncated] = {}
        for kind, topic in topics.items():
            kept = [m for m in sent[kind] if commit_log_offset(m["offsetMsgId"]) < cut]
            new = [row(m) for m in produce(handle, topic, SENT_AFTER[kind], "--keys", "after-{i}")]
            truncated[kind] = Truncated(
                handle=handle,
                topic=topic,
                fail_group=groups[kind][0],
                fail_checkpoint=checkpoints[kind][0],
                go_group=groups[kind][1],
                go_checkpoint=checkpoints[kind][1],
                before=before[kind],
                after=after[kind],
                refilled=bounds(handle, topic),
                cut_keys=sorted(m["keys"] for m in sent[kind] if m not in kept),
                kept={queue: sum(1 for m in kept if (m["broker"], m["queueId"]) == queue) for queue in before[kind]},
                sent_before=sorted(row(m) for m in sent[kind]),
                sent_after=sorted(new),
                running_fail=running[True][0] if kind == RUNNING else None,
                running_go=running[False][0] if kind == RUNNING else None,
                running_rows=running[False][1] if kind == RUNNING else [],
                running_read_at=read_at if kind == RUNNING else [],
                restarted_at=restarted_at,
            )
            print(f"{kind}: sent {new} after the restart, bounds then {truncated[kind].refilled}")
        yield truncated


@pytest.fixture(params=list(SENT_AFTER))
def topic(request: pytest.FixtureRequest, truncated: dict[str, Truncated]) -> Truncated:
    """Each of the module's topics in turn."""
    return truncated[request.param]


def rows_of(df: Any) -> list[Row]:
    """(queue id, queue offset, keys) of every row, sorted."""
    return sorted(
        (row.queueId, row.queueOffset, row.keys) for row in df.select("queueId", "queueOffset", "keys").collect()
    )


def test_the_restarted_broker_ends_below_what_was_produced(topic: Truncated) -> None:
    """The premise: recovery cut each queue's entries past the first zeroed message, so every queue
    ends where its messages stored before the cut end, below what was produced, and the starts
    stay; the messages sent after the restart took offsets the lost ones had, and on the refilled
    topic every queue then ends past where it ended before the kill."""
    for queue, (low, high) in topic.after.items():
        before_low, before_high = topic.before[queue]
        print(
            f"{topic.topic} {queue}: offsets [{before_low}, {before_high}) before the kill, [{low}, {high}) after "
            f"the restart, up to {topic.refilled[queue][1]} once sent {len(topic.sent_after)} more"
        )
        assert low == before_low, (queue, topic.before, topic.after)
        assert high == topic.kept[queue], (queue, topic.kept, topic.after)
    assert sum(old - new for new, old in topic.shorter.values()) == CUT, (topic.before, topic.after)
    reused = [(queue_id, offset) for queue_id, offset, _ in topic.sent_after]
    assert any(offset < topic.before[(BROKER_A, queue_id)][1] for queue_id, offset in reused), topic.sent_after
    refilled = [topic.refilled[queue][1] >= topic.before[queue][1] for queue in topic.before]
    assert all(refilled) if len(topic.sent_after) > CUT else not any(refilled), (topic.before, topic.refilled)


def test_a_restarted_stream_fails_naming_the_offsets_lost(spark: Any, topic: Truncated) -> None:
    """The checkpoint read every queue to its end before the kill: with failOnDataLoss=true the
    restarted query fails naming each queue that lost messages, the offsets gone and how many of
    them it had read."""
    options = topic.options(topic.fail_group, failOnDataLoss="true", retryBudgetMs=RETRY_BUDGET_MS)
    seconds, error = fail_stream(spark, options, topic.fail_checkpoint)
    said_first = next((line for line in error.splitlines() if DATA_LOSS_ERROR in line), error)
    print(f"the restarted stream failed after {seconds:.1f} s: {said_first}")
    assert (
        f"since this query's checkpoint was written, {BROKER_A} came to hold other messages, or none, "
        "at offsets the query had read or planned" in error
    ), error
    for (broker, queue_id), (new, old) in sorted(topic.shorter.items()):
        count = old - new
        said = f"{topic.topic}/{broker}/{queue_id}: offsets [{new}, {old}) ({count}: {count} read, 0 not)"
        assert said in error, error
    assert f"In all {CUT} messages the checkpoint counted on are gone" in error, error
    assert RECOVERED_SHORTER in error, "the error should name a crash's recovery among the causes"
    assert "failOnDataLoss=false" in error, error


def test_with_fail_on_data_loss_false_the_stream_reads_the_new_messages_once(spark: Any, topic: Truncated) -> None:
    """failOnDataLoss=false: the restarted query skips the lost offsets and reads the messages
    stored at them since, once; its next run on the checkpoint reads only what came after."""
    began = time.monotonic()
    read = run_restarted(spark, topic)
    print(f"the restarted stream read {read} in {time.monotonic() - began:.1f} s")
    assert read == topic.sent_after

    later = produce(topic.handle, topic.topic, LATER, "--keys", "later-{i}")
    assert run_restarted(spark, topic) == sorted(row(message) for message in later)
    ends = {queue: high for queue, (_, high) in bounds(topic.handle, topic.topic).items()}
    wait_stored_at_max(topic.handle, topic.topic, topic.go_group, ends)


def run_restarted(spark: Any, topic: Truncated) -> list[Row]:
    """Run the stream that goes on (failOnDataLoss=false) on its checkpoint to the topic's end;
    what it read, sorted."""
    rows: list[Any] = []
    df = stream(spark, topic.handle, topic.topic, topic.go_group, failOnDataLoss="false", retryBudgetMs=RETRY_BUDGET_MS)
    run_available_now(
        df.select("queueId", "queueOffset", "keys"), topic.go_checkpoint, lambda b, _: rows.extend(b.collect())
    )
    return sorted((row.queueId, row.queueOffset, row.keys) for row in rows)


def test_a_batch_read_returns_what_the_java_consumer_returns(spark: Any, topic: Truncated) -> None:
    """Both read the topic as the broker now holds it: what survived the cut and what came after,
    none of the messages cut."""
    count = sum(high - low for low, high in bounds(topic.handle, topic.topic).values())
    java = sorted(
        row(m) for m in topic.handle.tool("consume", "--topic", topic.topic, "--count", str(count), "--print")
    )
    read = rows_of(batch_read(spark, topic.handle, topic.topic))
    print(f"{topic.topic}: a batch read and the Java consumer each found {len(read)} and {len(java)} messages")
    assert read == java
    assert not {key for _, _, key in read} & set(topic.cut_keys)


@pytest.fixture
def running(truncated: dict[str, Truncated]) -> Truncated:
    """The topic whose streams ran through the kill and the restart."""
    return truncated[RUNNING]


def test_a_running_stream_fails_naming_the_restarted_master(running: Truncated) -> None:
    """A stream that ran through the kill and the restart sees a new connection to the broker, a
    new master of its broker name: with failOnDataLoss=true it fails naming each queue that lost
    messages, the offsets gone and how many of them it had read."""
    with pytest.raises(Exception) as failed:  # Spark wraps the source's error in its own
        running.running_fail.awaitTermination(QUERY_TIMEOUT_S)
    error = str(failed.value)
    said_first = next((line for line in error.splitlines() if DATA_LOSS_ERROR in line), error)
    print(
        f"the running stream had failed by {time.monotonic() - running.restarted_at:.1f} s after the restart (when "
        f"this test looked): {said_first}"
    )
    assert f"a new master of {BROKER_A} (elected, or restarted) holds fewer messages than the one before it" in error
    assert RECOVERED_SHORTER in error, "the error should name a crash's recovery among the causes"
    for (broker, queue_id), (new, old) in sorted(running.shorter.items()):
        count = old - new
        said = f"{running.topic}/{broker}/{queue_id}: offsets [{new}, {old}) ({count}: {count} read, 0 not)"
        assert said in error, error
    assert "failOnDataLoss=false" in error, error


def test_a_running_stream_with_fail_on_data_loss_false_reads_each_message_once(running: Truncated) -> None:
    """A stream that ran through the kill and the restart with failOnDataLoss=false: what it read
    before the kill (the lost messages too), then each message stored at the lost offsets or past
    them since, once, as the Java consumer finds them now."""
    count = sum(high - low for low, high in bounds(running.handle, running.topic).values())
    now = running.handle.tool("consume", "--topic", running.topic, "--count", str(count), "--print")
    since = [row(m) for m in now if m["queueOffset"] >= running.after[(m["broker"], m["queueId"])][1]]
    wait_read(running.running_go, running.running_rows, len(running.sent_before) + len(since))
    first_new = next(at for at, count in running.running_read_at if count > len(running.sent_before))
    print(
        f"the running stream read its first message stored since the restart {first_new - running.restarted_at:.1f} s after it"
    )
    time.sleep(SETTLE_TRIGGERS * RUNNING_TRIGGER_S)  # a message read twice would come by now
    assert running.running_go.exception() is None, running.running_go.exception()
    assert sorted(running.running_rows) == sorted(running.sent_before + since)
