"""Topology changes under a stream: a broker that goes away or hangs, and queues that stop being
readable, each while queries start, restart or run.

Every test has a topic and a group of its own, streams into a parquet sink with a checkpoint (so
the sink holds what the source read, exactly once, even where Spark runs a batch again) and checks
two things at the end: the sink holds every key sent exactly once and nothing else, and the
group's stored offset of every queue is the queue's max offset. Each prints how long recovery
took, from the broker's return (or the queues' return) to its first rows in the sink and to
everything read; no test asserts on times.

The tests run with ``make faults``, on the two brokers of a cluster of the module's own
(conftest's ``two_brokers``, on ports no other cluster uses, both brokers running again after each
test), so that killing, freezing or reconfiguring a broker disturbs no other test.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from integration.cluster_config import BROKER_A, BROKER_B, BROKER_NAMES
from integration.constants import FIRST, POLL_S, TRIGGER
from integration.faults import Producer, produce
from integration.javatool import json_lines
from integration.support import ClusterHandle, create_topic, spark_offsets, stream, wait_stored_at_max
from rocketmq_spark.source.routes import ROUTE_REFRESH_S

pytestmark = [pytest.mark.integration, pytest.mark.faults]

QUEUES_PER_BROKER = 4

# Messages per step. The producer sends PRODUCE_BATCH at a time, to one queue each; to one broker
# it takes that broker's queues in turn, so a multiple of QUEUES_PER_BROKER * PRODUCE_BATCH gives
# each queue the same share.
BEFORE = 200
DURING = 80
AFTER = 80
LAST = 40
LATE = 10
PRODUCE_BATCH = 10

PULL_TIMEOUT_MS = "2000"
# The frozen-broker test: the retry budget, and a freeze well past it.
RETRY_BUDGET_MS = 10_000
FREEZE_S = 25.0
# The read-queues test: readable queues while lowered, and how long they stay lowered: longer
# than the source's route cache (10 s) and a trigger, so that a batch is planned on the new route.
LOWERED_READ_QUEUES = 2
LOWERED_S = 15.0
# When the source's routes surely show a topic change: its route cache, and a trigger or two more.
ROUTE_SEEN_S = ROUTE_REFRESH_S + 2.0
# The replay test: how long the query must live with the replayed batch planned and its broker
# down (a planning failure shows at once), and a retry budget that outlasts the broker's restart
# on a loaded machine, since the replayed batch must wait for it.
REPLAY_HOLD_S = 5.0
REPLAY_RETRY_BUDGET_MS = 180_000

READ_TIMEOUT_S = 120.0
ROUTE_TIMEOUT_S = 120.0
FLUSH_TIMEOUT_S = 30.0
SAMPLE = 5
ERROR_CHARS = 300
# The last line of a Python traceback: ``package.module.SomeError: message``.
ERROR_LINE = re.compile(r"^[\w.]+(Error|Exception): ")

SINK_COLUMNS = ("keys", "brokerName", "queueId", "queueOffset")
SINK_SCHEMA = "keys STRING, brokerName STRING, queueId INT, queueOffset BIGINT"
BATCH_DIR_PREFIX = "batch="
# A broker writes its consumer offsets to this file of its store every flushConsumerOffsetInterval (5 s).
CONSUMER_OFFSETS_FILE = Path("config") / "consumerOffset.json"
# The offset log of a checkpoint: a version line, the batch's metadata, then one line per source.
OFFSET_LOG_SOURCE_LINE = 2
CHECKSUM_SUFFIX = ".crc"
# mqadmin topicRoute prints the route as JSON whose queue entries hold no nested object.
FLAT_OBJECT = re.compile(r"\{[^{}]*\}")
BROKER_NAME_FIELD = re.compile(r'"brokerName"\s*:\s*"([^"]+)"')
READ_QUEUES_FIELD = re.compile(r'"readQueueNums"\s*:\s*(\d+)')
# A broker's offset table entries are written ``queueId:offset``, the key unquoted.
OFFSET_ENTRY = re.compile(r'"?(\d+)"?\s*:\s*(\d+)')

Queue = tuple[str, int]  # (broker, queue id), as the Java tool and the progress reports name a queue


# ------------------------------------------------------------------ what was sent


class Sent:
    """What the producer was told of each message: its key (each sent once) and each queue's end."""

    def __init__(self, brokers: Sequence[str]) -> None:
        self.keys: list[str] = []
        self.ends: dict[Queue, int] = {(broker, q): 0 for broker in brokers for q in range(QUEUES_PER_BROKER)}

    def add(self, messages: Sequence[Mapping[str, Any]]) -> list[str]:
        """Record messages sent; their keys."""
        keys = [str(m["keys"]) for m in messages]
        self.keys += keys
        for m in messages:
            queue = (m["broker"], m["queueId"])
            self.ends[queue] = max(self.ends.get(queue, 0), m["queueOffset"] + 1)
        return keys

    def of(self, broker: str) -> dict[Queue, int]:
        return {q: end for q, end in self.ends.items() if q[0] == broker}


def send(handle: ClusterHandle, topic: str, count: int, prefix: str, *args: str) -> list[dict[str, Any]]:
    """Send ``count`` messages keyed ``<prefix>-<i>`` with the official producer; one dict per message."""
    return produce(handle.namesrv_addr, topic, count, prefix, "--batch", str(PRODUCE_BATCH), *args)


def wait_all_sent(producer: Producer, count: int, deadline: float) -> list[dict[str, Any]]:
    """The producer's report of every message, as soon as it has sent them all (it may take a
    while longer to exit: it says goodbye to every broker of the route, a frozen one included)."""
    while True:
        messages = json_lines(producer.out.read_text()) if producer.out.exists() else []
        if len(messages) >= count:
            return messages
        code = producer.proc.poll()
        assert code is None or code == 0, (
            f"the producer failed (exit {code}):\n{producer.err.read_text()[-ERROR_CHARS:]}"
        )
        assert time.monotonic() < deadline, f"the producer sent {len(messages)} of {count} messages in time"
        time.sleep(POLL_S)


# ------------------------------------------------------------------ the stream


class Stream:
    """A query of the topic into a sink with a checkpoint, started and stopped at will.

    The sink is exactly-once either way, so it holds what the source read: Spark's parquet sink,
    which skips a batch it already has when Spark runs it again (so the source does not read it
    again), or with ``per_batch`` a foreachBatch sink that writes each batch to a directory of its
    own, replaced when Spark runs the batch again (which the source then reads again)."""

    def __init__(
        self,
        spark: Any,
        handle: ClusterHandle,
        topic: str,
        group: str,
        workdir: Path,
        per_batch: bool = False,
        **options: str,
    ) -> None:
        self.spark, self.handle, self.topic, self.group = spark, handle, topic, group
        self.sink = workdir / "sink"
        self.checkpoint = workdir / "checkpoint"
        self.per_batch = per_batch
        self.options = {"consumeFromWhere": FIRST, "pullTimeoutMs": PULL_TIMEOUT_MS, **options}
        self.query: Any = None

    def start(self, available_now: bool = False) -> None:
        df = stream(self.spark, self.handle, self.topic, self.group, **self.options).select(*SINK_COLUMNS)
        writer = df.writeStream.option("checkpointLocation", str(self.checkpoint))
        if self.per_batch:
            writer = writer.foreachBatch(self._write_batch)
        else:
            writer = writer.format("parquet").option("path", str(self.sink))
        writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=TRIGGER)
        self.query = writer.start()

    def _write_batch(self, batch: Any, batch_id: int) -> None:
        """Writes the batch where a run of it again replaces it."""
        batch.write.mode("overwrite").parquet(str(self.sink / f"{BATCH_DIR_PREFIX}{batch_id}"))

    def run_available_now(self) -> None:
        """One Trigger.AvailableNow run on the checkpoint, to its end (its error raised)."""
        self.start(available_now=True)
        assert self.query.awaitTermination(READ_TIMEOUT_S), f"the AvailableNow run did not end in {READ_TIMEOUT_S:.0f}s"

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()

    def check_alive(self, what: str) -> None:
        error = self.query.exception()
        assert error is None, f"{what}: the query failed: {error_summary(str(error))}"
        assert self.query.isActive, f"{what}: the query stopped"

    def ends(self) -> dict[Queue, int]:
        """Where the last completed batch ended, per queue: what is in the sink."""
        progress = self.query.lastProgress
        if not progress or not progress["sources"] or not progress["sources"][0]["endOffset"]:
            return {}
        return spark_offsets(progress["sources"][0]["endOffset"], self.topic)

    def wait_read(self, ends: Mapping[Queue, int], what: str, deadline: float | None = None) -> None:
        """Until completed batches reach ``ends`` on each queue named."""
        deadline = time.monotonic() + READ_TIMEOUT_S if deadline is None else deadline
        while True:
            self.check_alive(what)
            got = self.ends()
            behind = {q: (got.get(q), end) for q, end in sorted(ends.items()) if got.get(q, -1) < end}
            if not behind:
                return
            assert time.monotonic() < deadline, (
                f"{what}: not all read in time; (read up to, end) of the queues behind: {behind}"
            )
            time.sleep(POLL_S)

    def keys(self) -> Counter[str]:
        """The keys in the sink, as Spark reads it: only the files its metadata log committed, or
        every batch's directory."""
        paths = sorted(self.sink.glob(f"{BATCH_DIR_PREFIX}*")) if self.per_batch else [self.sink]
        rows = self.spark.read.schema(SINK_SCHEMA).parquet(*map(str, paths)).select("keys").collect()
        return Counter(str(r.keys) for r in rows)

    def wait_processing(self, what: str) -> None:
        """Until the query runs a batch: past its start, it plans that batch's ranges now."""
        deadline = time.monotonic() + READ_TIMEOUT_S
        while not (self.query.status["isDataAvailable"] and self.query.status["isTriggerActive"]):
            self.check_alive(what)
            assert time.monotonic() < deadline, f"{what}: the query ran no batch in time"
            time.sleep(POLL_S)

    def hold(self, seconds: float, what: str) -> None:
        """Check for ``seconds`` that the query lives."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.check_alive(what)
            time.sleep(POLL_S)
        self.check_alive(what)


def error_summary(text: str) -> str:
    """A query's error in short: its first line, and the line that names the source's own error
    in the Python traceback Spark wraps it in."""
    lines = text.splitlines()
    named = [line.strip() for line in lines if ERROR_LINE.match(line.strip())]
    return "\n".join([lines[0][:ERROR_CHARS], *named[-1:]]) if lines else text


@dataclass(frozen=True)
class Recovery:
    """Seconds from an event (a broker back, a freeze ended, queues readable again)."""

    first_row_s: float  # to the first batch that read past where the queues stood before it
    caught_up_s: float  # to the batch that read everything sent


def wait_recovery(
    query: Stream, stood: Mapping[Queue, int], ends: Mapping[Queue, int], since: float, what: str
) -> Recovery:
    """Until the query has read up to ``ends``; when it first read past ``stood`` (the queues that
    were away, where they stood) and when it had read everything."""
    deadline = time.monotonic() + READ_TIMEOUT_S
    first: float | None = None
    while True:
        query.check_alive(what)
        got, now = query.ends(), time.monotonic()
        if first is None and any(got.get(q, -1) > offset for q, offset in stood.items()):
            first = now - since
        behind = {q: (got.get(q), end) for q, end in sorted(ends.items()) if got.get(q, -1) < end}
        if not behind:
            return Recovery(now - since if first is None else first, now - since)
        assert now < deadline, f"{what}: not all read in time; (read up to, end) of the queues behind: {behind}"
        time.sleep(POLL_S)


def assert_exact(keys: Counter[str], expected: Iterable[str], what: str) -> None:
    """Every expected key exactly once, and nothing else."""
    wanted = Counter(expected)
    assert all(n == 1 for n in wanted.values()), "the test sent a key twice"
    missing = sorted(wanted - keys)
    surplus = keys - wanted
    repeated = sorted(k for k in surplus if k in wanted)
    unexpected = sorted(k for k in surplus if k not in wanted)
    exact = not missing and not surplus
    assert exact, (
        f"{what}: {len(missing)} keys missing (e.g. {missing[:SAMPLE]}), {len(repeated)} read more than once "
        f"(e.g. {repeated[:SAMPLE]}), {len(unexpected)} not expected (e.g. {unexpected[:SAMPLE]})"
    )


# ------------------------------------------------------------------ the brokers


def read_queue_nums(handle: ClusterHandle, topic: str) -> dict[str, int]:
    """readQueueNums per broker in the name server's route of the topic (none: not routed)."""
    out = handle.started.mqadmin("topicRoute", "-t", topic, check=False)
    nums = {}
    for entry in FLAT_OBJECT.findall(out):
        name, reads = BROKER_NAME_FIELD.search(entry), READ_QUEUES_FIELD.search(entry)
        if name and reads:
            nums[name.group(1)] = int(reads.group(1))
    return nums


def wait_route(handle: ClusterHandle, topic: str, broker: str, read_queues: int | None) -> None:
    """Until the topic's route gives the broker ``read_queues`` readable queues (None: no route)."""
    deadline = time.monotonic() + ROUTE_TIMEOUT_S
    while (found := read_queue_nums(handle, topic).get(broker)) != read_queues:
        assert time.monotonic() < deadline, (
            f"the route of {topic} gives {broker} {found} read queues, not {read_queues}"
        )
        time.sleep(POLL_S)


def take_down(handle: ClusterHandle, broker: str, topic: str) -> float:
    """SIGKILL the broker and wait until the topic's route no longer has it; the seconds that took."""
    began = time.monotonic()
    handle.started.kill(broker)  # returns once the name server no longer lists it
    wait_route(handle, topic, broker, None)
    return time.monotonic() - began


def bring_back(handle: ClusterHandle, broker: str, topic: str) -> float:
    """Restart the broker on its store and wait until the topic's route has it again; the time
    (monotonic) the name server was seen to list it, which recovery times count from."""
    handle.started.restart(broker)  # returns once the name server lists it
    back = time.monotonic()
    wait_route(handle, topic, broker, QUEUES_PER_BROKER)
    return back


def wait_offsets_flushed(handle: ClusterHandle, broker: str, topic: str, group: str, ends: Mapping[Queue, int]) -> None:
    """Until the broker has written the group's offsets of its queues to disk: a broker killed
    before that comes back with older ones, and a query started from them would rightly read
    those messages again."""
    path = handle.started.broker_store(broker) / CONSUMER_OFFSETS_FILE
    table = re.compile(rf'"{re.escape(topic)}@{re.escape(group)}"\s*:\s*\{{([^}}]*)\}}')
    wanted = {q: end for q, end in ends.items() if q[0] == broker}
    deadline = time.monotonic() + FLUSH_TIMEOUT_S
    while True:
        found = table.search(path.read_text()) if path.exists() else None
        flushed = {(broker, int(q)): int(o) for q, o in OFFSET_ENTRY.findall(found.group(1))} if found else {}
        if flushed == wanted:
            return
        assert time.monotonic() < deadline, f"{broker} wrote {flushed} to {path.name}, not {wanted}"
        time.sleep(POLL_S)


def read_by_the_group(spark: Any, handle: ClusterHandle, workdir: Path, topic: str, group: str) -> Sent:
    """A topic on both brokers whose messages the group has read, its offsets stored at the end of
    every queue and on disk: where a new query of the group starts."""
    create_topic(handle, topic, queues=QUEUES_PER_BROKER)
    sent = Sent(BROKER_NAMES)
    before = sent.add(send(handle, topic, BEFORE, "before"))
    first = Stream(spark, handle, topic, group, workdir / "first")
    first.run_available_now()
    assert_exact(first.keys(), before, "the first query")
    wait_stored_at_max(handle, topic, group, sent.ends)
    wait_offsets_flushed(handle, BROKER_B, topic, group, sent.ends)
    return sent


def print_recovery(scenario: str, event: str, recovery: Recovery, sent_s: float | None = None) -> None:
    sending = "" if sent_s is None else f", its new messages sent after {sent_s:.1f} s"
    print(
        f"\n{scenario}: {event}{sending}; first rows read after {recovery.first_row_s:.1f} s, "
        f"everything after {recovery.caught_up_s:.1f} s"
    )


# ------------------------------------------------------------------ the tests


def test_new_query_while_a_broker_is_down(
    spark: Any, two_brokers: ClusterHandle, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    """A new query of a group that stored offsets on every queue, started while broker-b is out
    of the routes: once broker-b is back its queues start at the group's stored offsets, as they
    would have had it been there at the start, not at their min offsets (which reads again all
    that the group has read there)."""
    topic, group = unique("topo-new"), unique("topo-new-group")
    sent = read_by_the_group(spark, two_brokers, tmp_path, topic, group)
    stood = sent.of(BROKER_B)
    out_s = take_down(two_brokers, BROKER_B, topic)
    second = Stream(spark, two_brokers, topic, group, tmp_path / "second")
    second.start()
    try:
        new = sent.add(send(two_brokers, topic, DURING, "during", "--broker", BROKER_A))
        second.wait_read(sent.of(BROKER_A), "broker-a's messages while broker-b is down")
        back = bring_back(two_brokers, BROKER_B, topic)
        new += sent.add(send(two_brokers, topic, AFTER, "after", "--broker", BROKER_B))
        sent_s = time.monotonic() - back
        recovery = wait_recovery(second, stood, sent.ends, back, "broker-b's queues once it is back")
        wait_stored_at_max(two_brokers, topic, group, sent.ends)
    finally:
        second.stop()
    print(f"\nbroker-b out of the routes {out_s:.1f} s after SIGKILL")
    print_recovery("new query, broker-b down at its start", "broker-b routed again", recovery, sent_s)
    assert_exact(second.keys(), new, "the new query's sink")


def test_available_now_runs_while_a_broker_is_down(
    spark: Any, two_brokers: ClusterHandle, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    """The same for Trigger.AvailableNow: a first run while broker-b is down reads broker-a's new
    messages; the next run on the checkpoint, once broker-b is back, starts its queues at the
    group's stored offsets and reads only what is new there."""
    topic, group = unique("topo-now"), unique("topo-now-group")
    sent = read_by_the_group(spark, two_brokers, tmp_path, topic, group)
    take_down(two_brokers, BROKER_B, topic)
    runs = Stream(spark, two_brokers, topic, group, tmp_path / "runs")
    new = sent.add(send(two_brokers, topic, DURING, "during", "--broker", BROKER_A))
    runs.run_available_now()
    assert_exact(runs.keys(), new, "the run while broker-b is down")
    bring_back(two_brokers, BROKER_B, topic)
    new += sent.add(send(two_brokers, topic, AFTER, "after", "--broker", BROKER_B))
    runs.run_available_now()
    assert_exact(runs.keys(), new, "both runs")
    wait_stored_at_max(two_brokers, topic, group, sent.ends)


def drop_last_commit(checkpoint: Path, broker: str, topic: str) -> int:
    """Delete the newest batch's entry in the commit log, as a driver dying between Spark's offset
    log and its commit log leaves it: the batch is planned, and runs again at the next start (the
    file sink, which has it, skips it). Checks that the batch reads the broker's queues, the
    case under test. The batch's id."""
    commits = sorted((int(p.name), p) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    batch, newest = commits[-1]
    newest.unlink()
    # Its checksum too, which Spark's local file system writes beside it: a crash leaves neither.
    newest.with_name(f".{newest.name}{CHECKSUM_SUFFIX}").unlink(missing_ok=True)

    def planned(batch_id: int) -> dict[Queue, int]:
        lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
        return spark_offsets(lines[OFFSET_LOG_SOURCE_LINE], topic)

    start, end = planned(batch - 1), planned(batch)
    assert any(end[q] > start.get(q, 0) for q in end if q[0] == broker), (
        f"batch {batch} reads nothing of {broker}: {start} -> {end}"
    )
    return batch


def test_restart_on_checkpoint_while_a_broker_is_down(
    spark: Any, two_brokers: ClusterHandle, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    """A query restarted on its checkpoint while broker-b is out of the routes lives: first with
    its last batch planned but not committed (it read broker-b, and runs again at the start),
    then restarted once more with every batch committed. It reads broker-a meanwhile, and once
    broker-b is back reads its queues from where the checkpoint has them."""
    topic, group = unique("topo-restart"), unique("topo-restart-group")
    create_topic(two_brokers, topic, queues=QUEUES_PER_BROKER)
    sent = Sent(BROKER_NAMES)
    sent.add(send(two_brokers, topic, BEFORE, "before"))
    query = Stream(spark, two_brokers, topic, group, tmp_path / "stream")
    query.start()
    try:
        query.wait_read(sent.ends, "the messages sent before")
        sent.add(send(two_brokers, topic, LAST, "last", "--broker", BROKER_B))
        query.wait_read(sent.ends, "the last messages, on broker-b")
    finally:
        query.stop()
    stood = sent.of(BROKER_B)
    replayed = drop_last_commit(query.checkpoint, BROKER_B, topic)
    take_down(two_brokers, BROKER_B, topic)
    query.start()
    try:
        sent.add(send(two_brokers, topic, DURING, "during", "--broker", BROKER_A))
        query.wait_read(sent.of(BROKER_A), f"broker-a's messages after a restart that runs batch {replayed} again")
        query.stop()
        query.start()
        sent.add(send(two_brokers, topic, DURING, "during-again", "--broker", BROKER_A))
        query.wait_read(sent.of(BROKER_A), "broker-a's messages after a restart with every batch committed")
        back = bring_back(two_brokers, BROKER_B, topic)
        sent.add(send(two_brokers, topic, AFTER, "after"))
        sent_s = time.monotonic() - back
        recovery = wait_recovery(query, stood, sent.ends, back, "broker-b's queues once it is back")
        wait_stored_at_max(two_brokers, topic, group, sent.ends)
    finally:
        query.stop()
    print_recovery("restarted on its checkpoint, broker-b down", "broker-b routed again", recovery, sent_s)
    assert_exact(query.keys(), sent.keys, "the sink")


def test_restart_replays_a_batch_of_a_broker_that_is_down(
    spark: Any, two_brokers: ClusterHandle, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    """A query restarted on its checkpoint while broker-b is out of the routes, whose last batch
    read broker-b and is not committed (a driver that died between Spark's offset log and its
    commit log): Spark runs that batch again, its ranges fixed by the offset log. Planning it
    must not fail for want of broker-b's address: the batch waits for broker-b (within
    retryBudgetMs), and reads the same rows once it is back. The sink replaces a batch run
    again, so its keys are exact."""
    topic, group = unique("topo-replay"), unique("topo-replay-group")
    create_topic(two_brokers, topic, queues=QUEUES_PER_BROKER)
    sent = Sent(BROKER_NAMES)
    sent.add(send(two_brokers, topic, BEFORE, "before"))
    query = Stream(
        spark, two_brokers, topic, group, tmp_path / "stream", per_batch=True, retryBudgetMs=str(REPLAY_RETRY_BUDGET_MS)
    )
    query.start()
    try:
        query.wait_read(sent.ends, "the messages sent before")
        sent.add(send(two_brokers, topic, LAST, "last", "--broker", BROKER_B))
        query.wait_read(sent.ends, "the last messages, on broker-b")
    finally:
        query.stop()
    stood = sent.of(BROKER_B)
    replayed = drop_last_commit(query.checkpoint, BROKER_B, topic)
    take_down(two_brokers, BROKER_B, topic)
    query.start()
    try:
        what = f"batch {replayed}, run again while broker-b is down"
        query.wait_processing(what)
        query.hold(REPLAY_HOLD_S, what)
        back = bring_back(two_brokers, BROKER_B, topic)
        sent.add(send(two_brokers, topic, AFTER, "after"))
        sent_s = time.monotonic() - back
        recovery = wait_recovery(query, stood, sent.ends, back, "broker-b's queues once it is back")
        wait_stored_at_max(two_brokers, topic, group, sent.ends)
    finally:
        query.stop()
    print_recovery("batch of broker-b run again while it is down", "broker-b routed again", recovery, sent_s)
    assert_exact(query.keys(), sent.keys, "the sink")


def test_broker_frozen_past_the_retry_budget(
    spark: Any, two_brokers: ClusterHandle, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    """A broker that hangs (SIGSTOP) stays in the routes with its connections open, and answers
    nothing for longer than retryBudgetMs: the query reads the other broker meanwhile, lives, and
    reads the hung broker's queues once it answers again."""
    cluster = two_brokers.started
    topic, group = unique("topo-frozen"), unique("topo-frozen-group")
    create_topic(two_brokers, topic, queues=QUEUES_PER_BROKER)
    sent = Sent(BROKER_NAMES)
    sent.add(send(two_brokers, topic, BEFORE, "before"))
    query = Stream(spark, two_brokers, topic, group, tmp_path / "stream", retryBudgetMs=str(RETRY_BUDGET_MS))
    query.start()
    try:
        query.wait_read(sent.ends, "the messages sent before")
        stood = sent.of(BROKER_B)
        frozen_at = time.monotonic()
        cluster.freeze(BROKER_B)
        producer = Producer(
            two_brokers.namesrv_addr,
            tmp_path,
            topic,
            DURING,
            "during",
            "--batch",
            str(PRODUCE_BATCH),
            "--broker",
            BROKER_A,
        )
        try:
            thaw_at = frozen_at + FREEZE_S
            sent.add(wait_all_sent(producer, DURING, thaw_at))
            query.wait_read(sent.of(BROKER_A), "broker-a's messages while broker-b is frozen", thaw_at)
            time.sleep(max(0.0, thaw_at - time.monotonic()))
        finally:
            cluster.thaw(BROKER_B)
            producer.close()
        thawed = time.monotonic()
        sent.add(send(two_brokers, topic, AFTER, "after"))
        sent_s = time.monotonic() - thawed
        recovery = wait_recovery(query, stood, sent.ends, thawed, "broker-b's queues once it answers again")
        wait_stored_at_max(two_brokers, topic, group, sent.ends)
    finally:
        query.stop()
    print_recovery(f"broker-b frozen {FREEZE_S:.0f} s, retryBudgetMs={RETRY_BUDGET_MS}", "SIGCONT", recovery, sent_s)
    assert_exact(query.keys(), sent.keys, "the sink")


def set_read_queues(handle: ClusterHandle, topic: str, broker: str, read_queues: int) -> float:
    """Change the topic's readQueueNums on one broker (writeQueueNums stays), as an operator does
    with mqadmin, and wait until the name server's route says so; the time (monotonic) mqadmin
    returned, which recovery times count from (the broker tells the name server at once)."""
    cluster = handle.started
    address = cluster.config.broker_addr(BROKER_NAMES.index(broker))
    cluster.mqadmin("updateTopic", "-b", address, "-t", topic, "-r", str(read_queues), "-w", str(QUEUES_PER_BROKER))
    changed = time.monotonic()
    wait_route(handle, topic, broker, read_queues)
    return changed


def test_read_queues_lowered_then_raised(
    spark: Any, two_brokers: ClusterHandle, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    """readQueueNums lowered below writeQueueNums: the queues above it still take messages but
    cannot be read. That is no data loss (failOnDataLoss=true): the query reads the other queues
    meanwhile, and once readQueueNums is raised again reads the held queues from where it was,
    each message once."""
    topic, group = unique("topo-readq"), unique("topo-readq-group")
    create_topic(two_brokers, topic, QUEUES_PER_BROKER, BROKER_A)
    sent = Sent([BROKER_A])
    sent.add(send(two_brokers, topic, BEFORE, "before", "--broker", BROKER_A))
    query = Stream(spark, two_brokers, topic, group, tmp_path / "stream", failOnDataLoss="true")
    query.start()
    try:
        query.wait_read(sent.ends, "the messages sent before")
        held = [(BROKER_A, q) for q in range(LOWERED_READ_QUEUES, QUEUES_PER_BROKER)]
        readable = [(BROKER_A, q) for q in range(LOWERED_READ_QUEUES)]
        stood = {q: sent.ends[q] for q in held}
        lowered_at = set_read_queues(two_brokers, topic, BROKER_A, LOWERED_READ_QUEUES)
        # A batch planned on routes from before the change would read the hidden queues, and its
        # tasks wait for them to be readable again (unit-tested in test_partition_reader): send
        # once the source's routes surely show the change.
        time.sleep(max(0.0, lowered_at + ROUTE_SEEN_S - time.monotonic()))
        sent.add(send(two_brokers, topic, DURING, "during", "--broker", BROKER_A))
        assert all(sent.ends[q] > stood[q] for q in held), "the producer sent nothing to the unreadable queues"
        query.wait_read({q: sent.ends[q] for q in readable}, "the readable queues while the others are not")
        time.sleep(max(0.0, lowered_at + LOWERED_S - time.monotonic()))
        sent.add(send(two_brokers, topic, LATE, "late", "--broker", BROKER_A, "--queue", "0"))
        query.wait_read({q: sent.ends[q] for q in readable}, "a readable queue, once the route is surely seen")
        raised = set_read_queues(two_brokers, topic, BROKER_A, QUEUES_PER_BROKER)
        recovery = wait_recovery(query, stood, sent.ends, raised, "the held queues once readable again")
        wait_stored_at_max(two_brokers, topic, group, sent.ends)
    finally:
        query.stop()
    print_recovery(f"readQueueNums {LOWERED_READ_QUEUES} for {LOWERED_S:.0f} s", "readQueueNums raised", recovery)
    assert_exact(query.keys(), sent.keys, "the sink")
