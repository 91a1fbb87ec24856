"""What the failover tests (integration/tests/test_failover.py) share: one replicated cluster at a
time, what was sent, a stream run by the tests' own Spark (the ``spark`` fixture), and the
exactly-once checks.

A failover is timed from the SIGKILL to the end of the first batch planned after it that read
rows: that batch's ranges were planned on the routes after the failure and every row of it came
from whichever replica served then. Spark's progress reports give each batch's start and its
duration, so the time does not depend on how often the test looks.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from integration.cluster_config import BROKER_NAMES, ClusterConfig, shifted
from integration.replicated import ReplicatedCluster
from integration.replicated_config import MASTER_ID
from integration.support import ClusterHandle, produce, spark_offsets, stream
from integration.versions import DEFAULT_VERSION

# The clusters' ports (a block no other test module uses); replicas and the controller derive
# theirs from these (integration/replicated.py). Below 32768, where Linux starts handing out
# ephemeral ports to outgoing connections: a replica's port taken by one of those fails its start.
NAMESRV_PORT = shifted(31876)
BROKER_PORT = shifted(29911)

PRODUCE_BATCH = "20"
TRIGGER = "500 milliseconds"
SINK_COLUMNS = ("keys", "brokerName", "queueId", "queueOffset")
SINK_SCHEMA = "keys STRING, brokerName STRING, queueId INT, queueOffset BIGINT"
# Spark's progress timestamps: ISO 8601 in UTC, with milliseconds.
PROGRESS_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"
MS_PER_S = 1000.0
READ_TIMEOUT_S = 240.0
STORED_TIMEOUT_S = 120.0
POLL_S = 0.5
SAMPLE = 5

Queue = tuple[str, int]  # (broker name, queue id)
Position = tuple[str, int, int]  # (broker name, queue id, queue offset)


class Clusters:
    """One replicated cluster at a time: a test gets the running one if it has the layout,
    release and slave reads it asks for (every replica running again), else a fresh one, after
    the last one is stopped. Tests that share a kind of cluster run one after the other."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._current: ReplicatedCluster | None = None
        self._started = 0

    def get(
        self,
        layout: str,
        version: str = DEFAULT_VERSION,
        slave_read: bool = False,
        unclean_election: bool = False,
        async_master: bool = False,
        short_transaction_checks: bool = False,
    ) -> ReplicatedCluster:
        """``async_master``: master-slave only, the master an ASYNC_MASTER (it acknowledges before
        its slave has copied); ``short_transaction_checks``: halves checked back within seconds
        (``SHORT_TRANSACTION_CHECKS``), for the exactly-once sink's tests."""
        overrides = {f"{BROKER_NAMES[0]}-{MASTER_ID}": {"brokerRole": "ASYNC_MASTER"}} if async_master else {}
        cluster = self._current
        if cluster is not None:
            config = cluster.config
            wanted = (layout, version, slave_read, unclean_election, overrides, short_transaction_checks)
            if (
                config.layout,
                config.version,
                config.slave_read,
                config.unclean_election,
                config.broker_overrides,
                config.short_transaction_checks,
            ) == wanted:
                for replica in cluster.replicas():
                    if not cluster.running(replica.name):
                        cluster.restart(replica.name)
                return cluster
        self.stop()
        self._started += 1
        config = ClusterConfig(
            workdir=self.root / f"{self._started}-{layout}-{version}",
            version=version,
            brokers=1,
            namesrv_port=NAMESRV_PORT,
            broker_ports=(BROKER_PORT,),
            layout=layout,
            slave_read=slave_read,
            timer_messages=False,
            unclean_election=unclean_election,
            broker_overrides=overrides,
            short_transaction_checks=short_transaction_checks,
        )
        began = time.monotonic()
        self._current = ReplicatedCluster(config).start()
        print(f"\n{layout} cluster of RocketMQ {version} started in {time.monotonic() - began:.1f} s")
        return self._current

    def stop(self) -> None:
        if self._current is not None:
            self._current.stop(at_once=True)
            self._current = None


@contextmanager
def cluster_pool(root: Path) -> Iterator[Clusters]:
    """A module's replicated clusters under ``root``, stopped when the module ends."""
    pool = Clusters(root)
    try:
        yield pool
    finally:
        pool.stop()


def handle_of(cluster: ReplicatedCluster) -> ClusterHandle:
    return ClusterHandle(cluster.namesrv_addr, None, cluster, cluster.version)


@dataclass
class Sent:
    """Every message the producer was told it stored, and where."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)

    def add(self, handle: ClusterHandle, topic: str, count: int, prefix: str) -> None:
        """Send ``count`` messages keyed ``<prefix>-<i>``. Each is stored on the master whatever
        its status says; SLAVE_NOT_AVAILABLE or FLUSH_SLAVE_TIMEOUT (a slave not connected yet,
        or slow) only means the master did not wait for the slave, which ``wait_in_step`` does."""
        messages = produce(handle, topic, count, "--keys", f"{prefix}-{{i}}", "--batch", PRODUCE_BATCH)
        assert len(messages) == count, f"{len(messages)} of {count} messages sent"
        self.messages += messages
        self.statuses.update(m["status"] for m in messages)

    def positions(self) -> Counter[tuple[str, Position]]:
        return Counter((m["keys"], (m["broker"], m["queueId"], m["queueOffset"])) for m in self.messages)

    def ends(self) -> dict[Queue, int]:
        ends: dict[Queue, int] = {}
        for m in self.messages:
            queue = (m["broker"], m["queueId"])
            ends[queue] = max(ends.get(queue, 0), m["queueOffset"] + 1)
        return ends


@dataclass(frozen=True)
class Failure:
    """When a replica was killed (epoch seconds), and the newest batch planned by then."""

    at: float
    planned: int


class Stream:
    """A processing-time query of the topic into a parquet sink with a checkpoint, run by the
    tests' own Spark: the sink holds each row once however often Spark runs a batch again."""

    def __init__(
        self,
        spark: Any,
        handle: ClusterHandle,
        topic: str,
        group: str,
        workdir: Path,
        columns: Sequence[str] = SINK_COLUMNS,
        **options: str,
    ) -> None:
        self.spark = spark
        self.topic = topic
        self.sink = workdir / "sink"
        self.checkpoint = workdir / "checkpoint"
        df = stream(spark, handle, topic, group, **options).select(*columns)
        self.query = (
            df.writeStream.format("parquet")
            .option("path", str(self.sink))
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(processingTime=TRIGGER)
            .start()
        )

    def check_alive(self, what: str) -> None:
        error = self.query.exception()
        assert error is None, f"{what}: the query failed: {str(error)[:2000]}"
        assert self.query.isActive, f"{what}: the query stopped"

    def rows_read(self) -> int:
        return sum(p["numInputRows"] for p in self.query.recentProgress)

    def ends(self) -> dict[Queue, int]:
        """Where the last completed batch ended, per queue."""
        progress = self.query.lastProgress
        if not progress or not progress["sources"] or not progress["sources"][0]["endOffset"]:
            return {}
        return spark_offsets(progress["sources"][0]["endOffset"], self.topic)

    def planned(self) -> int:
        """The newest batch in the checkpoint's offset log (-1: none yet)."""
        folder = self.checkpoint / "offsets"
        ids = [int(p.name) for p in folder.iterdir() if p.name.isdigit()] if folder.exists() else []
        return max(ids, default=-1)

    def wait_rows(self, count: int, what: str) -> None:
        """Until completed batches have read ``count`` rows in all."""
        self._wait(lambda: self.rows_read() >= count, what)

    def wait_read(self, ends: Mapping[Queue, int], what: str) -> None:
        """Until completed batches reach ``ends`` on every queue."""
        self._wait(lambda: not behind(self.ends(), ends), what, lambda: behind(self.ends(), ends))

    def _wait(self, done: Any, what: str, why: Any = None) -> None:
        deadline = time.monotonic() + READ_TIMEOUT_S
        while not done():
            self.check_alive(what)
            assert time.monotonic() < deadline, f"{what}: not in time" + (f"; behind: {why()}" if why else "")
            time.sleep(POLL_S)

    def first_rows_after(self, failure: Failure) -> float | None:
        """Seconds from the failure to the end of the first batch planned after it that read rows."""
        for progress in self.query.recentProgress:
            if progress["batchId"] > failure.planned and progress["numInputRows"] > 0:
                started = datetime.strptime(progress["timestamp"], PROGRESS_TIME).replace(tzinfo=timezone.utc)
                took_s = float(progress["durationMs"]["triggerExecution"]) / MS_PER_S
                return started.timestamp() + took_s - failure.at
        return None

    def rows(self) -> Counter[tuple[str, Position]]:
        """What the sink holds (only the files its log committed): (key, position) -> count."""
        return positions(self.spark.read.schema(SINK_SCHEMA).parquet(str(self.sink)).collect())

    def stop(self) -> None:
        self.query.stop()


def positions(rows: Sequence[Any]) -> Counter[tuple[str, Position]]:
    """Rows of ``SINK_COLUMNS`` as (key, position) -> how many rows have it."""
    return Counter((r.keys, (r.brokerName, r.queueId, r.queueOffset)) for r in rows)


def behind(got: Mapping[Queue, int], ends: Mapping[Queue, int]) -> dict[Queue, tuple[int | None, int]]:
    """The queues not read up to their end: (read up to, end)."""
    return {q: (got.get(q), end) for q, end in sorted(ends.items()) if got.get(q, -1) < end}


def assert_exact(rows: Counter[tuple[str, Position]], sent: Sent, what: str) -> None:
    """Every message sent exactly once, at the position the producer was told, and nothing else."""
    wanted = sent.positions()
    missing, surplus = wanted - rows, rows - wanted
    assert not missing and not surplus, (
        f"{what}: {len(missing)} messages missing (e.g. {sorted(missing)[:SAMPLE]}), {len(surplus)} rows not "
        f"expected or repeated (e.g. {sorted(surplus)[:SAMPLE]})"
    )


def seconds(value: float | None) -> str:
    return "none" if value is None else f"{value:.1f} s"


def report(scenario: str, timings: Sequence[tuple[str, float | None]]) -> None:
    """One line per scenario with its measured times (pytest -s shows it)."""
    print(f"\nfailover, {scenario}: " + "; ".join(f"{label} {seconds(value)}" for label, value in timings))
