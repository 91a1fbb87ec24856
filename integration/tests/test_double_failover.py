"""A DLedger group losing two leaders in a row under steady sends: what a new master lacks.

The official producer keeps sending; the leader is SIGKILLed, restarted once a new one leads,
and then the new leader is SIGKILLed, so that the replica restarted earlier may win the election.
RocketMQ can then answer sends SEND_OK that no replica holds afterwards (an operator's probe lost
1,309 of 600,000 that way). RocketMQ's own client counts what the topic holds at the end, once
the replicas are in step.

The election decides which of these happens, and the test checks each (it prints which):
- nothing is lost: the stream reads every message once;
- acknowledged messages are lost: the stream (failOnDataLoss=true) stops naming the broker name,
  its queues and offsets, as the driver (with the count) or a task (a batch planned on the old
  master, the new one shorter, or holding its own messages there) found it; restarted on its
  checkpoint with failOnDataLoss=false it reads every message the topic holds once;
- the replica elected serves an index that points at messages stored as other offsets (its store
  logs '[BUG]logic queue order maybe wrong'): RocketMQ's consumer miscounts then, so the stream
  must stop naming the queue and both offsets, or, where it never reads that part of the index,
  hold a row at every position the index serves, none twice.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from integration.cluster_config import LAYOUT_CONTROLLER, LAYOUT_DLEDGER, ClusterError
from integration.failover import SINK_COLUMNS, Clusters, Sent, Stream, cluster_pool, handle_of
from integration.faults import Producer
from integration.javatool import json_lines
from integration.replicated import ReplicatedCluster
from integration.replicated_config import UNCLEAN_CATCHUP_MS
from integration.support import create_topic, max_offsets, produce

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.double_failover]

BROKER = "broker-a"
QUEUES = 4
STEADY_RATE = "200"  # messages per second, while the leaders are killed
STEADY_RUN = 1_000  # messages per producer run: a run a failover ends is followed by the next
IN_SYNC = 200  # messages both replicas of the controller layout hold
ALONE = 200  # messages the master acknowledges alone, then loses to the slave elected unclean
AFTER = 40  # messages the slave elected stores at offsets of those it lacks
ROWS_BEFORE_FAILURE = 300
SETTLE_S = 10.0  # between the steps: a new leader takes writes, a restarted replica rejoins
ERROR_WAIT_S = 180.0  # the driver asks a short new master again for retryBudgetMs first
POLL_S = 0.5
IN_STEP_S = 60.0
# What RocketMQ's store logs when it writes an index entry at another offset than the message's.
INDEX_LOG = "[BUG]logic queue order maybe wrong"
INDEX_ERROR = "consume queue and its messages disagree"
# The Java tool's word when a topic holds fewer messages than it was asked to read.
ARRIVED = re.compile(r"only (\d+) of \d+ messages arrived")


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    with cluster_pool(tmp_path_factory.mktemp("double-failover")) as pool:
        yield pool


class Steady:
    """The official producer, run after run in a thread until stopped; a run a failover ends
    counts what it was told it sent."""

    def __init__(self, cluster: ReplicatedCluster, topic: str, workdir: Path) -> None:
        self.messages: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(cluster.namesrv_addr, topic, workdir), daemon=True)
        self._thread.start()

    def _run(self, namesrv: str, topic: str, workdir: Path) -> None:
        run = 0
        while not self._stop.is_set():
            producer = Producer(namesrv, workdir, topic, STEADY_RUN, f"steady{run}", "--rate", STEADY_RATE)
            try:
                producer.wait()
            except AssertionError:
                pass  # no leader for a while: the next run sends once there is one
            finally:
                producer.close()
            self.messages += json_lines(producer.out.read_text())
            run += 1

    def stop(self) -> list[dict[str, Any]]:
        """Every message a run was told was stored (SEND_OK)."""
        self._stop.set()
        self._thread.join()
        return [m for m in self.messages if m["status"] == "SEND_OK"]


KeyPosition = tuple[str, tuple[str, int, int]]
# The sink's columns: the test's (key, position), and which master stored each row and when.
COLUMNS = (*SINK_COLUMNS, "storeHost", "storeTimestamp")


def held(cluster: ReplicatedCluster, topic: str) -> dict[KeyPosition, str]:
    """(key, position) of every message the topic holds, as RocketMQ's own client reads them from
    each queue's first offset, with the master that stored it and when. The max offsets bound that
    count; where the Java consumer finds fewer (it says how many), it reads that many."""
    handle = handle_of(cluster)
    count = sum(max_offsets(handle, topic).values())  # nothing expired: every queue starts at 0
    try:
        rows = handle.tool("consume", "--topic", topic, "--count", str(count), "--print")
    except ClusterError as err:
        found = ARRIVED.search(str(err))
        if found is None:
            raise
        print(f"\nthe Java consumer finds {found.group(1)} messages below max offsets summing to {count}")
        rows = handle.tool("consume", "--topic", topic, "--count", found.group(1), "--print")
    return {(m["keys"], (m["broker"], m["queueId"], m["queueOffset"])): stored_by(m) for m in rows}


def stored_by(row: Mapping[str, Any]) -> str:
    return f"{row['storeHost']} at {row['storeTimestamp']}"


def wait_holding(stream: Stream, expected: Mapping[KeyPosition, str]) -> str | None:
    """Until the sink holds every message of ``expected`` (key and position: a lost message read
    before the failover is not the new one at its offset); the stream's error if it fails."""
    deadline = time.monotonic() + ERROR_WAIT_S
    while not set(expected) <= set(rows := stream.rows()):
        if (error := stream.query.exception()) is not None:
            return str(error)
        if time.monotonic() >= deadline:
            missing = sorted(set(expected) - set(rows), key=lambda kp: kp[1])
            sink = stream.spark.read.parquet(str(stream.sink)).collect()
            there = {(r.brokerName, r.queueId, r.queueOffset): f"{r.keys} by {stored_by(r.asDict())}" for r in sink}
            sample = [
                f"{key} at {position} by {expected[(key, position)]} (the sink: {there.get(position)})"
                for key, position in missing[:20]
            ]
            raise AssertionError(f"the stream did not read {len(missing)} of the messages the topic holds: {sample}")
        time.sleep(POLL_S)
    return None


def index_mismatches(cluster: ReplicatedCluster, replica: str, topic: str) -> list[str]:
    """The lines in which the replica's store logged that a queue of the topic got index entries at
    other offsets than its messages were stored as (a replica that does not serve may log them
    too, and matters to no one until it is elected)."""
    log = cluster.config.workdir / "home" / replica / "logs" / "rocketmqlogs" / "storeerror.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return [line for line in lines if INDEX_LOG in line and topic in line]


def check_index_error(said: str, cluster: ReplicatedCluster, master: str, topic: str) -> None:
    """The stream stopped because the master's consume queue disagrees with its messages: so
    RocketMQ's store says too, and the error names the queue and both offsets."""
    logged = index_mismatches(cluster, master, topic)
    assert logged, f"the stream says an index disagrees with its messages, which {master} did not log: {said[:2000]}"
    assert re.search(
        rf"{topic}/{BROKER}/\d+: the broker's consume queue and its messages disagree: offset \d+ holds", said
    )
    print(
        f"{master}'s consume queue disagrees with its messages ({len(logged)} lines, first: {logged[0]}); "
        f"the stream stopped: {said[:600]}"
    )


def wait_covering(stream: Stream, ends: Mapping[tuple[str, int], int]) -> str | None:
    """Until the sink holds a row at every position below the queues' ends; the stream's error if
    it fails."""
    wanted = {(broker, queue, offset) for (broker, queue), end in ends.items() for offset in range(end)}
    deadline = time.monotonic() + ERROR_WAIT_S
    while not wanted <= {position for _, position in stream.rows()}:
        if (error := stream.query.exception()) is not None:
            return str(error)
        missing = sorted(wanted - {position for _, position in stream.rows()})
        assert time.monotonic() < deadline, f"the sink lacks {len(missing)} positions, first {missing[:10]}"
        time.sleep(POLL_S)
    return None


def wait_failed(stream: Stream) -> str:
    deadline = time.monotonic() + ERROR_WAIT_S
    while stream.query.exception() is None:
        assert time.monotonic() < deadline, "the stream went on past a new master that lacks messages it read"
        time.sleep(POLL_S)
    return str(stream.query.exception())


def test_dledger_double_failover(spark: Any, clusters: Clusters, tmp_path: Path, unique: Callable[[str], str]) -> None:
    cluster = clusters.get(LAYOUT_DLEDGER)
    topic, group = unique("double-failover"), unique("double-failover-group")
    create_topic(handle_of(cluster), topic, queues=QUEUES)
    cluster.spread_topic(topic)
    steady = Steady(cluster, topic, tmp_path)
    stream = Stream(spark, handle_of(cluster), topic, group, tmp_path, COLUMNS, startingOffsets="earliest")
    try:
        stream.wait_rows(ROWS_BEFORE_FAILURE, "the rows before the first failure")
        first = cluster.master(BROKER)
        assert first is not None
        cluster.kill(first)
        second = cluster.wait_master(BROKER, other_than=first)
        time.sleep(SETTLE_S)
        cluster.restart(first)
        time.sleep(SETTLE_S)
        cluster.kill(second)
        third = cluster.wait_master(BROKER, other_than=second)
        time.sleep(SETTLE_S)
    finally:
        sent = steady.stop()
    try:
        cluster.wait_in_step(topic, IN_STEP_S)
    except ClusterError as err:
        print(f"\nthe replicas are not in step: {err}")
    stored = held(cluster, topic)
    lost = {(m["keys"], (m["broker"], m["queueId"], m["queueOffset"])) for m in sent} - set(stored)
    # Where a replica's index points at messages stored as other offsets, RocketMQ's consumer counts
    # wrong too: the sink must then hold a row at every position the index serves, none twice.
    mismatched = index_mismatches(cluster, third, topic)
    ends = max_offsets(handle_of(cluster), topic)
    print(
        f"\nleaders {first}, {second}, then {third}: {len(sent)} sent SEND_OK, {len(stored)} held, {len(lost)} lost; "
        f"{len(mismatched)} index entries logged at other offsets than their messages"
    )

    def wait_done() -> str | None:
        return wait_covering(stream, ends) if mismatched else wait_holding(stream, stored)

    try:
        said = wait_failed(stream) if lost and not mismatched else wait_done()
        if said is not None and INDEX_ERROR not in said:
            print(f"the stream stopped: {said[:1000]}")
            check_loss_error(said, topic)
            stream.stop()
            stream = Stream(
                spark,
                handle_of(cluster),
                topic,
                group,
                tmp_path,
                COLUMNS,
                startingOffsets="earliest",
                failOnDataLoss="false",
            )
            said = wait_done()
        if said is not None:
            assert INDEX_ERROR in said, f"the stream failed: {said[:2000]}"
            check_index_error(said, cluster, third, topic)
            return
        rows = stream.rows()
    finally:
        stream.stop()
    assert all(count == 1 for count in rows.values()), "a row is in the sink twice"
    if mismatched:
        print(f"the sink holds a row at each of the {sum(ends.values())} positions the index serves, none twice")
        return
    assert {key_position for key_position in stored if rows[key_position] != 1} == set()
    print(f"read each of the {len(stored)} messages the topic holds once")


def check_loss_error(said: str, topic: str) -> None:
    """The stream stopped on acknowledged messages RocketMQ lost, naming the broker name, the
    queues, the offsets and (where the driver decided) the count."""
    if "a new master of" in said:  # decided when a batch was planned: every fact named
        assert f"a new master of {BROKER}" in said, said[:2000]
        assert re.search(rf"{topic}/{BROKER}/\d+: offsets \[\d+, \d+\) \(\d+: \d+ read, \d+ not\)", said)
        assert re.search(r"In all \d+ messages", said), said[:2000]
    elif "beyond the queue's end" in said:  # planned on the old master, the new one shorter
        assert re.search(rf"{topic}/{BROKER}/\d+: offsets \[\d+, \d+\) are beyond the queue's end", said)
        assert "a new master that lacks them" in said, said[:2000]
    else:  # planned on the old master, the new one holding its own messages at those offsets
        assert re.search(rf"{topic}/{BROKER}/\d+: offsets \[\d+, \d+\) hold other messages", said), said[:2000]
        assert "stored its own at their offsets" in said, said[:2000]


def test_unclean_election_loses_acknowledged_messages(
    spark: Any, clusters: Clusters, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    """The loss made certain: a controller that may elect a slave outside the sync state set,
    the slave frozen while the master acknowledges sends alone, then the master killed and the
    slave thawed and elected. The stream read what it lost; it stops naming the loss, and with
    failOnDataLoss=false it reads what the new master holds, its own messages at the lost
    offsets included, each once (counted against RocketMQ's own consumer)."""
    cluster = clusters.get(LAYOUT_CONTROLLER, unclean_election=True)
    handle = handle_of(cluster)
    topic, group = unique("unclean"), unique("unclean-group")
    create_topic(handle, topic, queues=QUEUES)
    cluster.spread_topic(topic)
    sent = Sent()
    sent.add(handle, topic, IN_SYNC, "in-sync")
    cluster.wait_in_step(topic)
    stream = Stream(spark, handle, topic, group, tmp_path, COLUMNS, startingOffsets="earliest")
    try:
        stream.wait_read(sent.ends(), "the messages both replicas hold")
        master = cluster.master(BROKER)
        slave = next(r.name for r in cluster.replicas(BROKER) if r.name != master)
        assert master is not None
        cluster.freeze(slave)
        try:
            time.sleep(2 * UNCLEAN_CATCHUP_MS / 1000)  # the master leaves the slave out of the set
            alone = produce(handle, topic, ALONE, "--keys", "alone-{i}")
            statuses = {m["status"] for m in alone}
            stream.wait_read(Sent([*sent.messages, *alone]).ends(), "the messages the master holds alone")
            cluster.kill(master)
        finally:
            cluster.thaw(slave)
        elected = cluster.wait_master(BROKER, other_than=master)
        produce(handle, topic, AFTER, "--keys", "after-{i}")
        said = wait_failed(stream)
    finally:
        stream.stop()
    print(f"\nsent alone: {sorted(statuses)}; elected {elected}; the stream stopped: {said[:600]}")
    assert elected == slave
    check_loss_error(said, topic)
    stored = held(cluster, topic)
    lost = {(m["keys"], (m["broker"], m["queueId"], m["queueOffset"])) for m in alone} - set(stored)
    assert lost, "the slave elected holds every message the master acknowledged alone"
    if "a new master of" in said:  # the driver decided: it counts what the new master lacks
        assert f"In all {len(lost)} messages" in said, f"{len(lost)} lost: {said[:2000]}"
    stream = Stream(spark, handle, topic, group, tmp_path, COLUMNS, startingOffsets="earliest", failOnDataLoss="false")
    try:
        failed = wait_holding(stream, stored)
        rows = stream.rows()
    finally:
        stream.stop()
    assert failed is None, f"the stream failed: {failed[:2000]}"
    assert [kp for kp in stored if rows[kp] != 1] == [], "a message the topic holds is not in the sink once"
    assert all(count == 1 for count in rows.values()), "a row is in the sink twice"
    print(f"{len(lost)} acknowledged messages lost; the sink holds each of the {len(stored)} the topic holds once")
