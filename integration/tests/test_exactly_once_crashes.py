"""The exactly-once sink's driver SIGKILLed at each moment of its protocol, and the query
restarted on its checkpoint each time: what RocketMQ's Java consumer finds at the end is each
source message once. Between the kill after the decision and the next run, the brokers check
back every decided half until they set it aside (the session's brokers do so within seconds):
the restart commits originals whose checks gave up. Each kill lands at its moment, not near it: the process is started with the
moment named in its environment (``sink/crash_points.py``), stops there, and says so in a file
the test waits for; the test then checks on the brokers and in the checkpoint that the moment
was the one meant.

One Spark process per run (``sparkjobs.py drive``), killed with its whole process group (the
Python driver, its JVM and its Python workers), as a crashed host would leave it.

A broker, too, is SIGKILLed at the decision: the paused driver is then let go on (a resume file)
and meets it dead, and a run on the checkpoint after its restart finishes the batch; so is the
master of a DLedger group and of a controller-mode pair, whose successor holds what the batch
needs. A broker holding the batch's records is lost the same way, and the batch is finished
without it. A rerun of a committed ``writeId`` finds its records while the broker of their
first copy is down.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from integration.cluster_config import (
    BROKER_NAMES,
    LAYOUT_CONTROLLER,
    LAYOUT_DLEDGER,
    LAYOUT_MASTER_SLAVE,
    PAST_THE_CHECKS_S,
    ClusterConfig,
    shifted,
)
from integration.constants import POLL_S
from integration.failover import Clusters, cluster_pool, handle_of
from integration.lines import Driver
from integration.support import ClusterHandle, create_topic, eventually, own_cluster, produce
from integration.tests.test_exactly_once import WAIT_S, halves_stored, java_bodies, stored_count, topics
from integration.versions import release, selected_version
from rocketmq_spark.model import ClientConfig, MessageQueue
from rocketmq_spark.remoting import calls
from rocketmq_spark.remoting.client import RocketMQClient
from rocketmq_spark.remoting.errors import RocketMQError
from rocketmq_spark.remoting.replicas import ROUTE_REFRESH_S
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.sink.commit import Committer
from rocketmq_spark.sink.crash_points import PAUSE_AT_ENV, PAUSED_FILE_ENV, RESUME_FILE_ENV, Point
from rocketmq_spark.sink.decision_record import PROPERTY_ATTEMPT, Decision
from rocketmq_spark.sink.decisions import State
from rocketmq_spark.sink.exactly_once import ExactlyOnceBatchWriter, async_replicated
from rocketmq_spark.sink.ledger import Ledger, ranked
from rocketmq_spark.sink.options import parse_sink_options
from rocketmq_spark.sink.scans import scan

pytestmark = pytest.mark.integration

ROWS = 400
# From a run's start to its pause: a Spark start, the plan and the tasks' sends.
PAUSE_WITHIN_S = 180.0
RUN_TIMEOUT_S = 240.0
# Where a broker puts a half it has checked transactionCheckMax times
# (TopicValidator.RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC; one queue).
SET_ASIDE_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SET_ASIDE_WAIT_S = 4 * PAST_THE_CHECKS_S
READER_GROUP = "eo-set-aside-reader"
# The cluster of the broker-kill test: ports no other cluster of a run uses.
KILL_NAMESRV_PORT = shifted(13876)
KILL_BROKER_PORTS = (shifted(13911), shifted(13921))
# The broker killed under the commit holds part of the target; the other one keeps the ledger.
KILLED_BROKER, SURVIVOR = BROKER_NAMES
KILL_QUEUES = 4
# The replicated clusters' one broker name.
REPLICATED_BROKER = BROKER_NAMES[0]
# From the resume to the commit's first failed COMMITs: the ENDs to a dead broker fail as soon as
# they are sent.
COMMIT_FAILS_WITHIN_S = 60.0
# What the driver logs when its COMMITs failed and it goes on to retry them (``Committer._commit``).
RETRYING = "looking up which halves are stored"
# The line of a Python traceback that names the connector's exception and says what failed.
CONNECTOR_ERROR = re.compile(r"rocketmq_spark\.[\w.]+Error: .*")


def set_aside(rocketmq: ClusterHandle, topic: str, marks: set[str]) -> int:
    """How many distinct halves of the attempts ``marks`` the brokers serving ``topic`` set aside."""
    seen: set[str] = set()
    with RocketMQClient(ClientConfig(name_servers=(rocketmq.namesrv_addr,))) as client:
        route = client.topic_route(topic)
        for broker in route.brokers:
            address = route.master_address(broker)
            assert address is not None
            queue = MessageQueue(SET_ASIDE_TOPIC, broker, 0)
            try:
                end = client.call(address, calls.max_offset(queue))
            except RocketMQError:
                continue  # the broker has set nothing aside yet: no such topic
            for message in scan(client, address, queue, READER_GROUP, 0, end, Retry()):
                if message.properties.get(PROPERTY_ATTEMPT) in marks and message.unique_key:
                    seen.add(message.unique_key)
    return len(seen)


def copy_job(
    handle: ClusterHandle, origin: str, target: str, ledger: str, prefix: str, checkpoint: Path
) -> dict[str, Any]:
    """The arguments of a run that copies ``origin``'s bodies into ``target`` exactly once, from
    each queue's first offset, as the group ``{prefix}-group`` and the producers ``{prefix}-producer``."""
    sink = {
        "nameServer": handle.namesrv_addr,
        "topic": target,
        "deliveryGuarantee": "exactly-once",
        "producerGroup": f"{prefix}-producer",
        "transactionTopic": ledger,
    }
    source = {
        "nameServer": handle.namesrv_addr,
        "topic": origin,
        "consumerGroup": f"{prefix}-group",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
    }
    return {
        "source": source,
        "sink": sink,
        "checkpoint": str(checkpoint),
        "columns": ["body"],
        "timeout_s": RUN_TIMEOUT_S,
    }


def wait_paused(driver: Driver, number: int, paused: Path, point: Point) -> None:
    """Until the run says it stopped at ``point``; fails if it ended or died before."""
    deadline = time.monotonic() + PAUSE_WITHIN_S
    while not paused.exists():
        assert not driver.answered(number), f"the run ended before '{point.value}':\n{driver.notices()}"
        assert driver.process.poll() is None, f"the run died before '{point.value}':\n{driver.notices()}"
        assert time.monotonic() < deadline, f"no pause at '{point.value}':\n{driver.notices()}"
        time.sleep(POLL_S)


def paused_at_decision(
    handle: ClusterHandle, copy: dict[str, Any], records: Ledger, run_dir: Path
) -> tuple[Driver, int, Decision, Path]:
    """A run of ``copy`` stopped at its batch's decision, with nothing committed yet: its driver
    (to end), its request, the decision, and the file that lets it go on."""
    paused, resume = run_dir / "paused", run_dir / "resume"
    env = {PAUSE_AT_ENV: Point.DECIDED.value, PAUSED_FILE_ENV: str(paused), RESUME_FILE_ENV: str(resume)}
    driver = Driver(sys.executable, run_dir / "run", env)
    try:
        number = driver.submit("copy_available_now", **copy)
        wait_paused(driver, number, paused, Point.DECIDED)
        state, decision = batch_state(records)
        assert state is State.DECIDED and decision is not None
        assert stored_count(handle, copy["sink"]["topic"]) == 0, "a COMMIT came before the pause at the decision"
    except BaseException:
        driver.end()
        raise
    return driver, number, decision, resume


def run_on_checkpoint(copy: dict[str, Any], run_dir: Path) -> None:
    """Run ``copy`` again on its checkpoint, to its end; it must not fail."""
    driver = Driver(sys.executable, run_dir)
    try:
        finished = driver.answer(driver.submit("copy_available_now", **copy))
        assert "error" not in finished, f"the run on the checkpoint failed: {finished}\n{driver.notices()}"
    finally:
        driver.end()


@pytest.mark.eo_faults
def test_a_driver_killed_at_each_moment_of_a_commit_and_restarted_publishes_each_row_once(
    rocketmq: ClusterHandle, unique: Any, tmp_path: Path
) -> None:
    """(a) while tasks send, (b) after the decision and before any COMMIT, (c) after the sink's
    commit and before Spark's commit log; then a run to the end. Every run replays batch 0: the
    offsets log has it and the commit log does not."""
    origin, target, ledger = topics(rocketmq, unique, "eo-kill-in", "eo-kill-out", "eo-kill-ledger")
    checkpoint = tmp_path / "checkpoint"
    copy = copy_job(rocketmq, origin, target, ledger, unique("eo-kill"), checkpoint)
    produce(rocketmq, origin, ROWS, "--body", "row-{i}", "--quiet")
    records = Committer(parse_sink_options(copy["sink"]), "test").ledger

    for point in (Point.SENDING, Point.DECIDED, Point.DONE):
        paused = tmp_path / f"paused-{point.value}"
        halves_before = halves_stored(rocketmq, target)
        driver = Driver(
            sys.executable, tmp_path / f"run-{point.value}", {PAUSE_AT_ENV: point.value, PAUSED_FILE_ENV: str(paused)}
        )
        try:
            wait_paused(driver, driver.submit("copy_available_now", **copy), paused, point)
        finally:
            driver.kill()
        commits = (
            sorted(p.name for p in (checkpoint / "commits").glob("[0-9]*")) if (checkpoint / "commits").exists() else []
        )
        assert commits == [], f"Spark committed batches {commits}: the kill at '{point.value}' came too late"
        state, _ = batch_state(records)
        stored = stored_count(rocketmq, target)
        print(f"killed at '{point.value}': batch 0 {state.value}, {stored} message(s) in the target")
        if point is Point.SENDING:
            assert state is State.UNDECIDED and halves_stored(rocketmq, target) > halves_before
            assert stored == 0
        elif point is Point.DECIDED:
            assert state is State.DECIDED and stored == 0
            # The next run starts only once the brokers gave up checking every decided half.
            decision = next(d for k, d in records.read(whole=True).decisions.items() if k.endswith("/0"))
            marks = {task.mark for task in decision.tasks}
            eventually(
                lambda marks=marks, count=decision.count: set_aside(rocketmq, target, marks) == count,  # type: ignore[misc]
                f"the brokers did not set the {decision.count} decided halves aside",
                SET_ASIDE_WAIT_S,
            )
            print(f"the brokers set the {decision.count} decided halves aside")
        else:
            assert state is State.DONE
    run_on_checkpoint(copy, tmp_path / "run-end")
    assert (checkpoint / "commits" / "0").exists(), "the last run did not commit batch 0"
    expected = sorted(f"row-{i}" for i in range(ROWS))
    assert java_bodies(rocketmq, target, ROWS) == expected


def raised(message: str) -> str:
    """The connector's own error in a failed query's message (Spark wraps it in a traceback)."""
    found = CONNECTOR_ERROR.search(message)
    return found.group(0) if found else message.splitlines()[0]


def batch_state(records: Ledger) -> tuple[State, Decision | None]:
    """What the ledger says of batch 0 of the test's query, and its decision if recorded."""
    entries = records.read(whole=True)
    keys = [k for k in entries.decisions if k.endswith("/0")]
    return (entries.state(keys[0]), entries.decisions[keys[0]]) if keys else (State.UNDECIDED, None)


def copies(records: Ledger, decision: Decision) -> set[str]:
    """The brokers on which the ledger holds a record of ``decision``'s batch."""
    return {name for name, first in records.read(whole=True).first.items() if decision.key in first}


def across_both_brokers(
    handle: ClusterHandle, unique: Any, prefix: str, rows: int, tmp_path: Path
) -> tuple[dict[str, Any], Ledger, Path]:
    """A copy job of ``rows`` messages whose origin and target lie on both brokers and whose ledger
    on SURVIVOR alone, so that what befalls KILLED_BROKER hits the COMMITs and not the records:
    its arguments, its ledger and its checkpoint."""
    origin, target, ledger = unique(f"{prefix}-in"), unique(f"{prefix}-out"), unique(f"{prefix}-ledger")
    create_topic(handle, origin, queues=KILL_QUEUES)
    create_topic(handle, target, queues=KILL_QUEUES)
    create_topic(handle, ledger, queues=KILL_QUEUES, brokers=SURVIVOR)
    checkpoint = tmp_path / "checkpoint"
    copy = copy_job(handle, origin, target, ledger, unique(prefix), checkpoint)
    produce(handle, origin, rows, "--body", "row-{i}", "--quiet")
    return copy, Committer(parse_sink_options(copy["sink"]), "test").ledger, checkpoint


def halves_on(decision: Decision, broker: str) -> int:
    """How many of the decision's halves lie on ``broker``."""
    return sum(s.count for task in decision.tasks for s in task.spans if s.broker_name == broker)


@pytest.fixture(scope="module")
def eo_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """The broker-kill tests' cluster: two brokers of their own, checking halves back within seconds."""
    config = ClusterConfig(
        workdir=tmp_path_factory.mktemp("eo-two-brokers") / "cluster",
        brokers=len(BROKER_NAMES),
        namesrv_port=KILL_NAMESRV_PORT,
        broker_ports=KILL_BROKER_PORTS,
        short_transaction_checks=True,
        timer_messages=False,
    )
    with own_cluster(config) as handle:
        yield handle


@pytest.mark.eo_faults
def test_a_broker_killed_while_the_driver_commits_and_restarted_publishes_each_row_once(
    eo_brokers: ClusterHandle, unique: Any, tmp_path: Path
) -> None:
    """Two brokers hold the target's queues; broker-a is SIGKILLed once the batch's decision is
    recorded and before its first COMMIT, the commit then meets it dead, and it is started again
    on its store once the commit says it retries. The commit retries (``Committer._commit``):
    past the time a live broker could still put a failed END, it looks up which halves are stored
    and COMMITs the others, until the broker is back; the query goes on, with no run on the
    checkpoint. The ledger lies on broker-b alone, so that the kill hits the COMMITs and not the
    records."""
    handle = eo_brokers
    cluster = handle.started
    copy, records, checkpoint = across_both_brokers(handle, unique, "eo-broker", ROWS, tmp_path)
    target = copy["sink"]["topic"]
    driver, number, decision, resume = paused_at_decision(handle, copy, records, tmp_path)
    try:
        on_killed = halves_on(decision, KILLED_BROKER)
        assert on_killed > 0, f"no decided half lies on {KILLED_BROKER}: the kill would miss the commit"
        cluster.kill(KILLED_BROKER)
        print(f"{KILLED_BROKER} killed with batch 0 decided, {on_killed} of {decision.count} halves on it")
        resume.touch()
        resumed = time.monotonic()
        deadline = resumed + COMMIT_FAILS_WITHIN_S
        while RETRYING not in driver.notices() and not driver.answered(number) and time.monotonic() < deadline:
            assert driver.process.poll() is None, f"the run died:\n{driver.notices()}"
            time.sleep(POLL_S)
        retrying = RETRYING in driver.notices()
        ended_while_down = driver.answered(number)
        assert retrying and not ended_while_down, f"the commit did not retry at the dead broker:\n{driver.notices()}"
        failed = time.monotonic()
        cluster.restart(KILLED_BROKER)  # on its store, as the kill left it, once the COMMITs met it dead
        restarted = time.monotonic()
        answer = driver.answer(number)
        print(
            f"the COMMITs failed {failed - resumed:.1f} s after the resume; {KILLED_BROKER} restarted in "
            f"{restarted - failed:.1f} s; the commit answered {time.monotonic() - restarted:.1f} s after that"
        )
    finally:
        driver.end()
    said = f": {raised(answer['error']['message'])}" if "error" in answer else ""
    assert "error" not in answer, f"the commit did not go on once {KILLED_BROKER} was back{said}"
    assert (checkpoint / "commits" / "0").exists(), "Spark did not commit batch 0"
    state, _ = batch_state(records)
    assert state is State.DONE
    assert java_bodies(handle, target, ROWS) == sorted(f"row-{i}" for i in range(ROWS))


@pytest.mark.eo_faults
def test_a_broker_holding_the_records_lost_while_the_driver_commits_publishes_each_row_once(
    eo_brokers: ClusterHandle, unique: Any, tmp_path: Path
) -> None:
    """The transaction topic lies on both brokers, so the decision has a copy on each; the source
    and the target lie on one. The other broker, first in the group's order (its lock's, and
    its first copy's), is SIGKILLed once the decision is recorded, and stays down. The commit
    goes on: its COMMITs go to the survivor, and its done record, failing at the lost broker, to
    the survivor alone (``Ledger._write``). Each row once; and once the broker is back, its copy
    of the decision reads as done too."""
    handle, cluster = eo_brokers, eo_brokers.started
    prefix = unique("eo-lost")
    lost, survivor = ranked(f"{prefix}-producer", BROKER_NAMES)
    origin, target, ledger = unique("eo-lost-in"), unique("eo-lost-out"), unique("eo-lost-ledger")
    create_topic(handle, origin, queues=KILL_QUEUES, brokers=survivor)
    create_topic(handle, target, queues=KILL_QUEUES, brokers=survivor)
    create_topic(handle, ledger, queues=KILL_QUEUES)
    checkpoint = tmp_path / "checkpoint"
    copy = copy_job(handle, origin, target, ledger, prefix, checkpoint)
    produce(handle, origin, ROWS, "--body", "row-{i}", "--quiet")
    records = Committer(parse_sink_options(copy["sink"]), "test").ledger
    driver, number, decision, resume = paused_at_decision(handle, copy, records, tmp_path)
    try:
        assert copies(records, decision) == set(BROKER_NAMES), "the decision's copies are not on both brokers"
        cluster.kill(lost)
        killed = time.monotonic()
        resume.touch()
        answer = driver.answer(number)
        ended = time.monotonic() - killed
    finally:
        driver.end()
    try:
        assert "error" not in answer, f"the commit failed {ended:.1f} s after {lost} was lost: {answer['error']}"
        print(f"the commit went on without {lost}, {ended:.1f} s after it was lost")
        assert (checkpoint / "commits" / "0").exists(), "batch 0 was never committed"
        assert java_bodies(handle, target, ROWS) == sorted(f"row-{i}" for i in range(ROWS))
        time.sleep(ROUTE_REFRESH_S)  # the route this process holds is asked again
        state, _ = batch_state(records)
        assert state is State.DONE, f"batch 0 is {state.value} on {survivor} alone"
    finally:
        cluster.restart(lost)  # on its store: its copy holds the decision and perhaps no done
    time.sleep(ROUTE_REFRESH_S)
    eventually(lambda: copies(records, decision) == set(BROKER_NAMES), f"{lost}'s copy did not come back", WAIT_S)
    state, _ = batch_state(records)
    assert state is State.DONE, f"with {lost} back, batch 0 of {decision.count} rows reads as {state.value}"


@pytest.mark.eo_faults
def test_a_rerun_finds_its_write_while_a_broker_holding_its_records_is_down(
    eo_brokers: ClusterHandle, unique: Any
) -> None:
    """A write's records go to both brokers of the transaction topic. Once the write committed,
    the broker first in the group's order of them (its lock's, and its first copy's) is SIGKILLed,
    and the name server drops it; the rerun of the writeId finds the other copy and writes
    nothing. Run without Spark: the batch writer's driver side (its start, which decides whether
    to write, and its commit) and a task's sends, against the real brokers."""
    handle, cluster = eo_brokers, eo_brokers.started
    target, ledger, group = unique("eo-down-out"), unique("eo-down-ledger"), unique("eo-down-group")
    first, other = ranked(group, BROKER_NAMES)
    create_topic(handle, target, queues=KILL_QUEUES, brokers=other)
    create_topic(handle, ledger, queues=KILL_QUEUES)
    options = parse_sink_options(
        {
            "nameServer": handle.namesrv_addr,
            "topic": target,
            "deliveryGuarantee": "exactly-once",
            "producerGroup": group,
            "transactionTopic": ledger,
            "writeId": "down-1",
        }
    )
    bodies = [f"down-{i}" for i in range(ROWS)]
    writer = ExactlyOnceBatchWriter(options, {"body": "body"})
    assert not writer.skip, "a writeId never written is written"
    written = writer.write(iter([pa.record_batch({"body": pa.array([b.encode() for b in bodies])})]))
    writer.commit([written])
    assert java_bodies(handle, target, ROWS) == sorted(bodies)
    cluster.kill(first)
    try:
        with RocketMQClient(ClientConfig(name_servers=(handle.namesrv_addr,))) as client:
            eventually(
                lambda: set(client.topic_route(ledger).brokers) == {other}, f"{first} stayed in the route", WAIT_S
            )
        time.sleep(ROUTE_REFRESH_S)  # the route this process holds is asked again
        assert ExactlyOnceBatchWriter(options, {"body": "body"}).skip, "the rerun did not find its write committed"
    finally:
        cluster.restart(first)


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    with cluster_pool(tmp_path_factory.mktemp("eo-replicated")) as pool:
        yield pool


@pytest.mark.eo_faults
def test_masters_that_replicate_asynchronously_are_named_and_others_are_not(
    rocketmq: ClusterHandle, clusters: Clusters, unique: Any
) -> None:
    """A master that acknowledges before its slave copied (ASYNC_MASTER) may lose halves in a
    failover: exactly-once names its broker before sending. The session's masters have no slave,
    and lose nothing to a failover they cannot have: not named."""
    cluster = clusters.get(LAYOUT_MASTER_SLAVE, async_master=True)
    replicated = handle_of(cluster)
    target, ledger = unique("eo-async"), unique("eo-async-ledger")
    for topic in (target, ledger):
        create_topic(replicated, topic, queues=2)
    cluster.spread_topic(target)
    cluster.spread_topic(ledger)
    options = {"topic": target, "deliveryGuarantee": "exactly-once", "producerGroup": unique("eo-async-group")}
    lossy = parse_sink_options({**options, "nameServer": replicated.namesrv_addr, "transactionTopic": ledger})
    assert async_replicated(lossy) == ["broker-a"]
    (local_target, local_ledger) = topics(rocketmq, unique, "eo-sync", "eo-sync-ledger")
    alone = {**options, "topic": local_target, "nameServer": rocketmq.namesrv_addr, "transactionTopic": local_ledger}
    assert async_replicated(parse_sink_options(alone)) == []


# The selected release's replicated layouts.
FAILOVER_LAYOUTS = [LAYOUT_DLEDGER] + ([LAYOUT_CONTROLLER] if release(selected_version()).has_controller_mode else [])


@pytest.mark.eo_faults
@pytest.mark.parametrize("layout", FAILOVER_LAYOUTS)
def test_a_failover_while_the_driver_commits_publishes_each_row_once(
    clusters: Clusters, unique: Any, tmp_path: Path, layout: str
) -> None:
    """A replicated broker holds the source, the target and the ledger: a DLedger group of three,
    or a master and its slave in controller mode (a send acknowledged once the in-sync slave has
    it). Its master is SIGKILLed once the batch's decision is recorded and before the first
    COMMIT. The new master (a DLedger group's elected leader, or the slave the controller promotes)
    holds the halves and the decision at the same commit-log offsets: the commit goes on against
    it (where its first COMMITs met the dead master, it looks up which halves are stored and
    COMMITs the others there), with no run on the checkpoint; each row once. On the release
    ROCKETMQ_VERSION selects, as the other tests of the module."""
    cluster = clusters.get(layout, version=selected_version(), short_transaction_checks=True)
    handle = handle_of(cluster)
    origin, target, ledger = unique("eo-fo-in"), unique("eo-fo-out"), unique("eo-fo-ledger")
    for topic in (origin, target, ledger):
        create_topic(handle, topic, queues=KILL_QUEUES)
        cluster.spread_topic(topic)
    checkpoint = tmp_path / "checkpoint"
    copy = copy_job(handle, origin, target, ledger, unique("eo-fo"), checkpoint)
    produce(handle, origin, ROWS, "--body", "row-{i}", "--quiet")
    records = Committer(parse_sink_options(copy["sink"]), "test").ledger
    driver, number, _, resume = paused_at_decision(handle, copy, records, tmp_path)
    try:
        master = cluster.master(REPLICATED_BROKER)
        assert master is not None, f"{REPLICATED_BROKER} has no master"
        cluster.kill(master)
        killed = time.monotonic()
        successor = cluster.wait_master(REPLICATED_BROKER, other_than=master)
        print(
            f"{layout}: {master} killed with batch 0 decided; {successor} master in {time.monotonic() - killed:.1f} s"
        )
        resume.touch()
        answer = driver.answer(number)
    finally:
        driver.end()
    said = f": {raised(answer['error']['message'])}" if "error" in answer else ""
    assert "error" not in answer, f"the commit did not go on against {successor}{said}"
    print(f"the commit went on against {successor}")
    assert (checkpoint / "commits" / "0").exists(), "batch 0 was never committed"
    state, _ = batch_state(records)
    assert state is State.DONE
    assert java_bodies(handle, target, ROWS) == sorted(f"row-{i}" for i in range(ROWS))
