"""Faults under a running stream: exactly-once output and exact stored offsets afterwards.

Each test streams 20,000 messages of a fresh topic (two brokers, four queues each) into a
parquet sink with a checkpoint, many batches of ``MAX_PER_TRIGGER``, while the official producer
keeps sending; a fault lands mid-run. A query the fault ended is started again on its checkpoint
once the fault is over, as an operator would. At the end the stream reads up to the end (an
AvailableNow run on the same checkpoint) and the check is exact: every message in the sink once,
at the position the producer was told, and the group's stored offset of every queue equal to the
sink's end and to the queue's max offset.

While a broker is killed or cut off, the producer sends to the other broker only: a send that
reached a dying broker but whose answer was lost would be retried on another one, and the topic
would then hold the message twice, which is the producer's at-least-once, not the source's doing.

The tests run with ``make faults`` (about 5 to 8 minutes on a shared 2-core machine), on a
cluster of their own (two name servers, broker-b behind a relay: integration/faults.py), and
print what each fault cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from integration.cluster import Cluster, namesrv_name
from integration.cluster_config import BROKER_NAMES
from integration.constants import LOOPBACK
from integration.faults import (
    BROKER_PORTS,
    RELAYED_BROKER,
    Outcome,
    Producer,
    StreamJob,
    check_exactly_once,
    fault_cluster,
    gaps,
    namesrv_of,
    produce,
    restart_reason,
    sink_rows,
    wait_stored_at_end,
)
from integration.javatool import run_tool
from integration.relay import DELAY_MS, RELAY_HOST, Mode, Relay
from integration.support import ClusterHandle, create_topic, own_cluster

pytestmark = [pytest.mark.integration, pytest.mark.faults]

QUEUES_PER_BROKER = 4
BEFORE, DURING, AFTER = 6_000, 8_000, 6_000
# Sent to the broker about to be killed, in the broker test, out of DURING's share.
LAST_WORDS = 80
PRODUCE_BATCH = "50"
DURING_RATE = "1000"  # messages per second while the fault lands: about 8 s of sending
MAX_PER_TRIGGER = "2000"
PULL_TIMEOUT_MS = "3000"
# Batches committed before the fault: the stream is running, with a backlog still to read.
WARM_BATCHES = 2
# The fault starts this long after the producer that sends during it has sent its first message.
FAULT_AFTER_S = 1.0
# A run that a fault ended is started again at most this often before the test gives up.
MAX_RUNS = 4
# How long the running query may take to read everything and store its offsets after the fault.
CATCH_UP_TIMEOUT_S = 180.0
CATCH_UP_POLL_S = 2.0
DIRECT_BROKER = BROKER_NAMES[0]
ALL_QUEUES = [(broker, queue) for broker in BROKER_NAMES for queue in range(QUEUES_PER_BROKER)]

BROKER_DOWN_S = 5.0
NAMESRV_DOWN_S = 10.0
DELAY_S = 8.0
STALL_S = 8.0
RESET_S = 4.0
BETWEEN_S = 2.0
CUT_S = 20.0


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterHandle, Relay]]:
    """The fault cluster, with the relay in front of broker-b passing everything through."""
    port = BROKER_PORTS[BROKER_NAMES.index(RELAYED_BROKER)]
    config = fault_cluster(tmp_path_factory.mktemp("fault-cluster"))
    with Relay((RELAY_HOST, port), (LOOPBACK, port)) as relay, own_cluster(config) as handle:
        yield handle, relay


class Scenario:
    """One topic, one group, one checkpoint: the stream and what was sent to it."""

    def __init__(
        self, rocketmq: ClusterHandle, workdir: Path, unique: Callable[[str], str], name_server: str | None = None
    ) -> None:
        self.rocketmq = rocketmq
        self.workdir = workdir
        self.topic, self.group = unique("faults"), unique("faults-group")
        create_topic(rocketmq, self.topic, queues=QUEUES_PER_BROKER)
        self.options = {
            "nameServer": name_server or rocketmq.namesrv_addr,
            "topic": self.topic,
            "consumerGroup": self.group,
            "startingOffsets": "earliest",
            "maxMessagesPerTrigger": MAX_PER_TRIGGER,
            "pullTimeoutMs": PULL_TIMEOUT_MS,
        }
        # The name servers the producer and the offsets probe use (the official client's, which
        # fails to start if the first one it picks is down).
        self.tools_namesrv = rocketmq.namesrv_addr
        self.produced: list[dict[str, Any]] = []
        self.outcome = Outcome()
        self.runs = 0
        self._producers: list[Producer] = []
        self.job = self._start()

    def _start(self) -> StreamJob:
        self.runs += 1
        return StreamJob(self.workdir, self.options, self.runs)

    def send(self, count: int, prefix: str, *args: str) -> Producer:
        producer = Producer(self.tools_namesrv, self.workdir, self.topic, count, prefix, *args)
        self._producers.append(producer)
        return producer

    def sent(self, producer: Producer) -> None:
        self.produced += producer.wait()

    def send_now(self, count: int, prefix: str, *args: str) -> None:
        """Send and wait until every message is sent."""
        self.produced += produce(self.tools_namesrv, self.topic, count, prefix, *args)

    def revive(self) -> None:
        """Start the query again on its checkpoint if the fault ended it."""
        if not self.job.alive():
            self._restart(self.job.answer())

    def _restart(self, answer: dict[str, Any]) -> None:
        self.outcome.restarts.append(restart_reason(answer))
        assert self.runs < MAX_RUNS, f"the query failed {self.runs} times; last:\n{self.job.tail()}"
        self.job.close()
        self.job = self._start()

    def offsets(self) -> list[dict[str, Any]]:
        """Per queue, the group's stored offset and the queue's max offset, as the official client reads them."""
        return run_tool(self.tools_namesrv, "offsets", "--topic", self.topic, "--group", self.group)

    def wait_caught_up(self) -> float:
        """Until the running query has stored every queue's max offset: it read everything, and the
        offsets it stores are right even for queues that saw no message since the fault. Seconds taken."""
        began = time.monotonic()
        while True:
            self.revive()
            offsets = {(o["broker"], o["queueId"]): (o["consumerOffset"], o["maxOffset"]) for o in self.offsets()}
            # A queue the answer lacks (its broker not registered yet, or without the group's
            # offsets of the topic) is behind too.
            behind = {
                queue: offsets.get(queue)
                for queue in ALL_QUEUES
                if queue not in offsets or offsets[queue][0] != offsets[queue][1]
            }
            if not behind:
                return time.monotonic() - began
            if time.monotonic() - began > CATCH_UP_TIMEOUT_S:
                raise AssertionError(
                    f"the running query's stored offsets stay behind (stored, max): {behind}\n{self.job.tail()}"
                )
            time.sleep(CATCH_UP_POLL_S)

    def finish(self) -> None:
        """Read up to the end; a run that fails then is started again, as after a fault."""
        while True:
            self.revive()
            answer = self.job.finish()
            if "result" in answer:
                return
            self._restart(answer)

    def close(self) -> None:
        self.job.close()
        for producer in self._producers:
            producer.close()


def run_scenario(
    scenario: Scenario,
    spark: Any,
    fault: Callable[[Scenario], float],
    during: Sequence[str] = (),
    after: Sequence[str] = (),
    during_count: int = DURING,
) -> Outcome:
    """Send, stream, fault (which returns when it ended, epoch s), recover, catch up, finish, check.

    ``during`` and ``after`` are the producer's extra arguments while the fault lands and after it.
    """
    try:
        scenario.send_now(BEFORE, "before", "--batch", PRODUCE_BATCH)
        scenario.job.wait_commits(WARM_BATCHES)
        producer = scenario.send(during_count, "during", "--rate", DURING_RATE, *during)
        producer.wait_sending()
        time.sleep(FAULT_AFTER_S)
        ended = fault(scenario)
        scenario.sent(producer)
        scenario.revive()
        scenario.send_now(AFTER, "after", "--batch", PRODUCE_BATCH, *after)
        caught_up_s = scenario.wait_caught_up()
        outcome = scenario.outcome
        outcome.longest_gap_s, outcome.recovered_s = gaps(scenario.job.commit_times(), ended)
        scenario.finish()
        check_exactly_once(sink_rows(spark, scenario.job.sink), scenario.produced, scenario.offsets())
        recovered = "none" if outcome.recovered_s is None else f"{outcome.recovered_s:.1f} s"
        print(
            f"\n{scenario.topic}: {len(scenario.produced)} messages exactly once in {scenario.runs} run(s); "
            f"longest pause between batches {outcome.longest_gap_s:.1f} s; first batch after the fault "
            f"ended: {recovered}; caught up {caught_up_s:.0f} s after the last send; restarts: {outcome.restarts}"
        )
        return outcome
    finally:
        scenario.close()


@contextmanager
def running_afterwards(cluster: Cluster, name: str) -> Iterator[None]:
    """Whatever the test did to the server, it runs again afterwards, for the tests that follow."""
    try:
        yield
    finally:
        if not any(s.name == name for s in cluster.servers):
            cluster.restart(name)


def cluster_of(faulty: tuple[ClusterHandle, Relay]) -> Cluster:
    return faulty[0].started


def test_broker_killed_and_restarted(
    spark: Any, faulty: tuple[ClusterHandle, Relay], tmp_path: Path, unique: Callable[[str], str]
) -> None:
    cluster = cluster_of(faulty)

    def fault(scenario: Scenario) -> float:
        # Killed as soon as the stream has stored the end of its queues, which the broker writes to
        # disk only every 5 s; its queues get no message afterwards, so only storing them again
        # once it is back puts their stored offsets right (wait_caught_up checks).
        scenario.send_now(LAST_WORDS, "last", "--broker", DIRECT_BROKER)
        wait_stored_at_end(cluster.config, scenario.topic, DIRECT_BROKER, QUEUES_PER_BROKER, scenario.group)
        cluster.kill(DIRECT_BROKER)
        time.sleep(BROKER_DOWN_S)
        cluster.restart(DIRECT_BROKER)  # on the same store, as the crash left it
        return time.time()

    with running_afterwards(cluster, DIRECT_BROKER):
        outcome = run_scenario(
            Scenario(faulty[0], tmp_path, unique),
            spark,
            fault,
            during=("--broker", RELAYED_BROKER),
            after=("--broker", RELAYED_BROKER),
            during_count=DURING - LAST_WORDS,
        )
    assert not outcome.restarts, "the query should ride out a broker restart within its retry budget"


def test_name_server_killed_and_restarted(
    spark: Any, faulty: tuple[ClusterHandle, Relay], tmp_path: Path, unique: Callable[[str], str]
) -> None:
    cluster = cluster_of(faulty)
    only = namesrv_name(0)  # the stream knows this one name server only; the producer knows both

    def fault(_: Scenario) -> float:
        cluster.kill(only)
        time.sleep(NAMESRV_DOWN_S)
        cluster.restart(only)
        return time.time()

    with running_afterwards(cluster, only):
        outcome = run_scenario(Scenario(faulty[0], tmp_path, unique, namesrv_of(cluster.config, 0)), spark, fault)
    assert not outcome.restarts, "the query should ride out a name server restart within its retry budget"


def test_one_of_two_name_servers_down_for_good(
    spark: Any, faulty: tuple[ClusterHandle, Relay], tmp_path: Path, unique: Callable[[str], str]
) -> None:
    cluster = cluster_of(faulty)
    first = namesrv_name(0)  # the first the nameServer option lists

    def fault(scenario: Scenario) -> float:
        cluster.kill(first)
        scenario.tools_namesrv = namesrv_of(cluster.config, 1)
        return time.time()

    with running_afterwards(cluster, first):
        outcome = run_scenario(Scenario(faulty[0], tmp_path, unique), spark, fault)
    assert not outcome.restarts, "one name server answering is enough"


def test_driver_killed_mid_batch(
    spark: Any, faulty: tuple[ClusterHandle, Relay], tmp_path: Path, unique: Callable[[str], str]
) -> None:
    def fault(scenario: Scenario) -> float:
        batch = scenario.job.wait_mid_batch()
        scenario.job.kill()
        killed = time.time()
        assert batch not in scenario.job.batches("commits"), "the kill should land before the batch commits"
        scenario.revive()  # at once: the time to the next batch is then the new driver's start
        return killed

    outcome = run_scenario(Scenario(faulty[0], tmp_path, unique), spark, fault)
    assert len(outcome.restarts) == 1


def test_network_delay_stall_reset_and_cut(
    spark: Any, faulty: tuple[ClusterHandle, Relay], tmp_path: Path, unique: Callable[[str], str]
) -> None:
    relay = faulty[1]

    def fault(_: Scenario) -> float:
        for mode, seconds in (
            (Mode.DELAY, DELAY_S),
            (Mode.STALL, STALL_S),
            (Mode.RESET, RESET_S),
            (Mode.PASS, BETWEEN_S),
            (Mode.CUT, CUT_S),
        ):
            relay.set_mode(mode, DELAY_MS)
            time.sleep(seconds)
        relay.set_mode(Mode.PASS)
        return time.time()

    try:
        outcome = run_scenario(Scenario(faulty[0], tmp_path, unique), spark, fault, during=("--broker", DIRECT_BROKER))
    finally:
        relay.set_mode(Mode.PASS)
    assert not outcome.restarts, "the query should ride out a 20 s cut within its 60 s retry budget"
