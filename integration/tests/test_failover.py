"""Replicated RocketMQ losing its master under a running stream: exactly-once output, and stored
offsets at the queues' ends on whichever master serves at the end.

Each test runs on a replicated cluster (integration/replicated.py; one at a time, see
``failover.Clusters``) with a topic of ``QUEUES`` queues created on every replica, and sends
``MESSAGES`` with the official producer. A stream reads it ``MAX_PER_TRIGGER`` rows per batch into
a parquet sink; once it has read ``ROWS_BEFORE_FAILURE`` rows and every replica holds what its
master holds, the master is SIGKILLed. At the end the sink holds every message exactly once, at
the position the producer was told, and the group's offset of every queue stored on the master
is the queue's max offset there. No query is restarted: the stream rides out each failover.

Each test prints what the failover cost (from the SIGKILL to the first rows read after it; see
integration/failover.py); none asserts on times. They run with ``make faults``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.cluster_config import LAYOUT_CONTROLLER, LAYOUT_DLEDGER, LAYOUT_MASTER_SLAVE
from integration.failover import (
    SINK_COLUMNS,
    Clusters,
    Failure,
    Sent,
    Stream,
    assert_exact,
    cluster_pool,
    handle_of,
    positions,
    report,
)
from integration.replicated import ReplicatedCluster
from integration.support import batch_read, create_topic, wait_stored_at_max

pytestmark = [pytest.mark.integration, pytest.mark.faults]

BROKER = "broker-a"
QUEUES = 4
MESSAGES = 2_000
# Of MESSAGES, sent once a new master is elected or promoted: it takes writes, and the stream
# reads them from it.
AFTER_ELECTION = 400
MAX_PER_TRIGGER = "100"
# A topic the slave has not copied: a few messages, and a short budget to wait for a replica.
UNCOPIED_MESSAGES = 40
UNCOPIED_BUDGET_MS = 4_000
ROWS_BEFORE_FAILURE = 300
# How long the master stays out of the routes where no replica serves reads: less than the
# stream's retryBudgetMs (60 s by default), which a pull waits for a replica that serves it. It
# is started again RESTART_ALLOWANCE_S earlier, about what a restart takes until the broker is
# registered (5 to 30 s on a 2-core machine, with the load): the test prints when it was back.
MASTER_DOWN_S = 30.0
RESTART_ALLOWANCE_S = 10.0
HOLD_POLL_S = 0.5
OLD_RELEASE = "4.9.7"


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    with cluster_pool(tmp_path_factory.mktemp("failover")) as pool:
        yield pool


class Scenario:
    """A topic on every replica, a group, what was sent, and the stream once started."""

    def __init__(self, cluster: ReplicatedCluster, unique: Callable[[str], str], label: str) -> None:
        self.cluster = cluster
        self.handle = handle_of(cluster)
        self.topic, self.group = unique(f"failover-{label}"), unique(f"failover-{label}-group")
        create_topic(self.handle, self.topic, queues=QUEUES)
        cluster.spread_topic(self.topic)
        self.sent = Sent()

    def send(self, count: int, prefix: str) -> None:
        self.sent.add(self.handle, self.topic, count, prefix)

    def stream(self, spark: Any, workdir: Path) -> Stream:
        """The stream, started once every replica holds what was sent (a 4.9 slave copies the
        topic only within 10 s), so that it still has most of it to read at the failure."""
        self.cluster.wait_in_step(self.topic)
        return Stream(
            spark,
            self.handle,
            self.topic,
            self.group,
            workdir,
            startingOffsets="earliest",
            maxMessagesPerTrigger=MAX_PER_TRIGGER,
        )

    def kill_master(self, stream: Stream) -> tuple[str, Failure]:
        """Once the stream has read a few batches and the replicas are in step, SIGKILL the
        master; which replica it was, and when."""
        stream.wait_rows(ROWS_BEFORE_FAILURE, "the rows before the failure")
        self.cluster.wait_in_step(self.topic)
        master = self.cluster.master(BROKER)
        assert master is not None, f"{BROKER} has no master"
        failure = Failure(time.time(), stream.planned())
        self.cluster.kill(master)
        return master, failure

    def read_all(self, stream: Stream, what: str) -> float:
        """Until the stream has read every message sent; seconds since the epoch."""
        stream.wait_read(self.sent.ends(), what)
        return time.time()

    def stored_at_max(self) -> float:
        wait_stored_at_max(self.handle, self.topic, self.group, self.sent.ends())
        return time.time()


def since(failure: Failure, at: float) -> float:
    return at - failure.at


def test_dledger_leader_killed(spark: Any, clusters: Clusters, tmp_path: Path, unique: Callable[[str], str]) -> None:
    """A DLedger group of three loses its leader: the other two elect a new one, the stream
    reads on from it, new messages included, and the old leader, restarted, rejoins."""
    cluster = clusters.get(LAYOUT_DLEDGER)
    scenario = Scenario(cluster, unique, "dledger")
    scenario.send(MESSAGES - AFTER_ELECTION, "before")
    stream = scenario.stream(spark, tmp_path)
    try:
        leader, failure = scenario.kill_master(stream)
        new_leader = cluster.wait_master(BROKER, other_than=leader)
        elected = time.time()
        scenario.send(AFTER_ELECTION, "after")
        everything = scenario.read_all(stream, "every message, from the new leader")
        cluster.restart(leader)
        rejoined = time.time()
        stored = scenario.stored_at_max()
        leading = cluster.master(BROKER)
        first = stream.first_rows_after(failure)
    finally:
        stream.stop()
    assert_exact(stream.rows(), scenario.sent, "the sink")
    report(
        f"DLedger leader {leader} SIGKILLed, {new_leader} elected, {leading} leading at the end",
        [
            ("new leader registered after", since(failure, elected)),
            ("first rows after", first),
            ("everything read after", since(failure, everything)),
            ("old leader rejoined after", since(failure, rejoined)),
            ("offsets stored after", since(failure, stored)),
        ],
    )


def test_master_killed_slave_serves_reads(
    spark: Any, clusters: Clusters, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    """A SYNC_MASTER with a slave that serves reads (``slaveReadEnable``): while the master is
    down the stream reads everything from the slave; once the master is back, the stream's
    offsets are stored on it."""
    cluster = clusters.get(LAYOUT_MASTER_SLAVE, slave_read=True)
    scenario = Scenario(cluster, unique, "slave-reads")
    scenario.send(MESSAGES, "before")
    stream = scenario.stream(spark, tmp_path)
    try:
        master, failure = scenario.kill_master(stream)
        everything = scenario.read_all(stream, "every message, from the slave")
        assert not cluster.running(master)
        assert_exact(stream.rows(), scenario.sent, "the sink, read while the master is down")
        cluster.restart(master)
        cluster.wait_master(BROKER, replica=master)
        back = time.time()
        stored = scenario.stored_at_max()
        first = stream.first_rows_after(failure)
    finally:
        stream.stop()
    assert_exact(stream.rows(), scenario.sent, "the sink")
    report(
        "master SIGKILLed, its slave serving reads",
        [
            ("first rows after", first),
            ("everything read after", since(failure, everything)),
            ("master back after", since(failure, back)),
            ("offsets stored on it after", since(failure, stored)),
        ],
    )


def test_batch_read_while_the_master_is_down(spark: Any, clusters: Clusters, unique: Callable[[str], str]) -> None:
    """A batch read of a topic whose master is down is planned on the slave's offsets and read
    from the slave."""
    cluster = clusters.get(LAYOUT_MASTER_SLAVE, slave_read=True)
    scenario = Scenario(cluster, unique, "batch")
    scenario.send(MESSAGES, "batch")
    cluster.wait_in_step(scenario.topic)
    master = cluster.master(BROKER)
    assert master is not None
    cluster.kill(master)
    began = time.monotonic()
    rows = batch_read(spark, scenario.handle, scenario.topic).select(*SINK_COLUMNS).collect()
    read_s = time.monotonic() - began
    assert_exact(positions(rows), scenario.sent, "the batch read")
    report("batch read with the master down, from its slave", [("read in", read_s)])


def test_batch_read_of_a_topic_the_slave_has_not_copied(
    spark: Any, clusters: Clusters, unique: Callable[[str], str]
) -> None:
    """A topic created just before its master dies is unknown to a 5.x slave, which answers its
    max offsets with 0: a batch read waits for a replica that serves it for retryBudgetMs, then
    fails naming the broker name; it never reads the topic as empty. (Should the slave's copy of
    the master's topics have come between the creation and the kill, the read is exact.)"""
    cluster = clusters.get(LAYOUT_MASTER_SLAVE, slave_read=True)
    handle = handle_of(cluster)
    topic = unique("failover-uncopied")
    create_topic(handle, topic, queues=QUEUES)  # on the master only, as an operator creates it
    sent = Sent()
    sent.add(handle, topic, UNCOPIED_MESSAGES, "uncopied")
    master = cluster.master(BROKER)
    assert master is not None
    cluster.kill(master)
    slave = next(r.name for r in cluster.replicas(BROKER) if r.name != master)
    began = time.monotonic()
    if cluster.knows_topic(slave, topic):
        rows = batch_read(spark, handle, topic).select(*SINK_COLUMNS).collect()
        assert_exact(positions(rows), sent, "the batch read of a topic the slave copied in time")
        outcome = "read exactly, the slave had copied the topic"
    else:
        with pytest.raises(Exception, match=rf"no replica of broker {BROKER} serves its queues now") as failed:
            batch_read(spark, handle, topic, retryBudgetMs=str(UNCOPIED_BUDGET_MS)).collect()
        assert "tried" in str(failed.value), failed.value
        outcome = "failed naming the broker name, as the slave lacks the topic"
    report(f"batch read of a topic the slave has not copied: {outcome}", [("answered in", time.monotonic() - began)])


def test_master_down_no_slave_reads(
    spark: Any, clusters: Clusters, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    """A SYNC_MASTER whose slave refuses reads (no ``slaveReadEnable``, 5.x) is out of the
    routes for about ``MASTER_DOWN_S``: the stream waits for it without an error and reads
    everything once it is back."""
    cluster = clusters.get(LAYOUT_MASTER_SLAVE)
    scenario = Scenario(cluster, unique, "no-slave-reads")
    scenario.send(MESSAGES, "before")
    stream = scenario.stream(spark, tmp_path)
    try:
        master, failure = scenario.kill_master(stream)
        rows_at_failure = stream.rows_read()
        while time.time() < failure.at + MASTER_DOWN_S - RESTART_ALLOWANCE_S:
            stream.check_alive("while the master is down")
            time.sleep(HOLD_POLL_S)
        read_while_down = stream.rows_read() - rows_at_failure
        cluster.restart(master)
        cluster.wait_master(BROKER, replica=master)
        back = time.time()
        everything = scenario.read_all(stream, "every message, once the master is back")
        stored = scenario.stored_at_max()
        first = stream.first_rows_after(failure)
    finally:
        stream.stop()
    assert_exact(stream.rows(), scenario.sent, "the sink")
    report(
        f"master SIGKILLed, restarted {MASTER_DOWN_S - RESTART_ALLOWANCE_S:.0f} s later, its slave refusing reads",
        [
            ("master back after", since(failure, back)),
            ("first rows after", first),
            ("everything read after", since(failure, everything)),
            ("offsets stored after", since(failure, stored)),
        ],
    )
    print(f"rows read after the SIGKILL, before the restart (batches whose pulls were answered): {read_while_down}")


def test_controller_promotes_the_slave(
    spark: Any, clusters: Clusters, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    """5.x controller mode: the controller promotes the in-sync slave when the master dies; the
    stream reads on from it, new messages included, and stores its offsets there."""
    cluster = clusters.get(LAYOUT_CONTROLLER)
    scenario = Scenario(cluster, unique, "controller")
    scenario.send(MESSAGES - AFTER_ELECTION, "before")
    stream = scenario.stream(spark, tmp_path)
    try:
        master, failure = scenario.kill_master(stream)
        cluster.wait_master(BROKER, other_than=master)
        promoted = time.time()
        scenario.send(AFTER_ELECTION, "after")
        everything = scenario.read_all(stream, "every message, from the promoted slave")
        stored = scenario.stored_at_max()
        first = stream.first_rows_after(failure)
    finally:
        stream.stop()
    assert_exact(stream.rows(), scenario.sent, "the sink")
    report(
        "controller mode, master SIGKILLed",
        [
            ("slave promoted after", since(failure, promoted)),
            ("first rows after", first),
            ("everything read after", since(failure, everything)),
            ("offsets stored after", since(failure, stored)),
        ],
    )


def test_old_release_slave_serves_reads(
    spark: Any, clusters: Clusters, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    """4.9: a slave always serves reads, so the stream reads everything from it while the
    master is down, and stores its offsets on the master once it is back."""
    cluster = clusters.get(LAYOUT_MASTER_SLAVE, version=OLD_RELEASE)
    scenario = Scenario(cluster, unique, "old-release")
    scenario.send(MESSAGES, "before")
    stream = scenario.stream(spark, tmp_path)
    try:
        master, failure = scenario.kill_master(stream)
        everything = scenario.read_all(stream, "every message, from the 4.9 slave")
        assert_exact(stream.rows(), scenario.sent, "the sink, read while the master is down")
        cluster.restart(master)
        cluster.wait_master(BROKER, replica=master)
        back = time.time()
        stored = scenario.stored_at_max()
        first = stream.first_rows_after(failure)
    finally:
        stream.stop()
    assert_exact(stream.rows(), scenario.sent, "the sink")
    report(
        f"RocketMQ {OLD_RELEASE}, master SIGKILLed, its slave serving reads",
        [
            ("first rows after", first),
            ("everything read after", since(failure, everything)),
            ("master back after", since(failure, back)),
            ("offsets stored on it after", since(failure, stored)),
        ],
    )
