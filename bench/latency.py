"""e: the latency of a running stream, and where a micro-batch's time goes.

A stream with the default trigger runs while the Java producer sends at a steady rate; each row's
latency is from its ``storeTimestamp`` to the moment ``foreachBatch`` is called with it, and to
the end of collecting its batch. Spark's progress report splits every micro-batch into its
stages: ``latestOffset`` and ``queryPlanning`` are mostly the source's driver side, ``addBatch``
is the batch's job (the source's read tasks and Spark's job around them), ``walCommit`` and
``commitOffsets`` are Spark writing its offset and commit logs into the checkpoint.

The same run can be repeated with Spark's FileSystem-based checkpoint manager: on a local-disk
checkpoint Spark's default one renames each log file through Hadoop's FileContext, which runs a
``readlink`` process for every rename; the other renames in the JVM. Comparing the two shows how
much of a batch is that, not the source.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from common import log
from dataset import BODY_SIZE, TOOL_TIMEOUT_S, server_pids
from integration.cluster import Cluster
from readers import stream_reader
from sampling import SPARK_PYTHON, Phase, Sampler

LATENCY_SENDS_PER_S = 50  # the producer sends rate/50 messages every 20 ms
STREAM_READY_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 120.0
QUERY_POLL_S = 0.1
# The producer kept up if it stored at least this share of the target rate.
KEPT_UP_SHARE = 0.9
MS_PER_S = 1000.0
PERCENT = 100.0
# Spark keeps the last 100 progress reports by default; a 30 s run at 2,000 msg/s makes more.
PROGRESS_KEPT = 100_000
PROGRESS_KEPT_CONF = "spark.sql.streaming.numRecentProgressUpdates"
# The stages of a micro-batch, as Spark's progress report names them, in the order they run.
STAGES = ("latestOffset", "walCommit", "queryPlanning", "addBatch", "commitOffsets", "triggerExecution")
CHECKPOINT_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"
# Spark's FileSystem-based checkpoint manager: the class moved to a sub-package in Spark 4.1.
FILE_SYSTEM_CHECKPOINT_MANAGERS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager",
)


def percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    rank = max(1, math.ceil(pct / PERCENT * len(sorted_values)))
    return sorted_values[rank - 1]


def file_system_checkpoint_manager(spark: Any) -> str | None:
    """The FileSystem-based checkpoint manager's class in this Spark, if the JVM has one."""
    jvm = spark.sparkContext._jvm
    for name in FILE_SYSTEM_CHECKPOINT_MANAGERS:
        try:
            jvm.java.lang.Class.forName(name)
        except Exception:  # noqa: BLE001  (py4j's error for a class this Spark does not have)
            continue
        return name
    return None


def run_latency(
    spark: Any,
    cluster: Cluster,
    topic: str,
    rate: int,
    seconds: int,
    pull_batch_size: int,
    checkpoint: Path,
    phase: Phase | None,
    checkpoint_manager: str | None = None,
) -> dict[str, Any]:
    """A running stream (default trigger) while the Java producer sends ``rate`` msg/s to
    ``topic``; ``checkpoint_manager`` replaces Spark's for this query only."""
    from pyspark.sql import functions as F

    count = int(rate * seconds)
    # One synchronous send per message cannot keep 2,000 msg/s on a busy 2-core machine (it
    # managed ~250); a batch per 20 ms can, and is still steady at the scale of a micro-batch.
    batch = max(1, rate // LATENCY_SENDS_PER_S)
    batches: list[tuple[float, float, list[int]]] = []
    seen = [0]

    def on_batch(batch_df: Any, batch_id: int) -> None:
        entered = time.time()  # the rows reach foreachBatch here; reading happens in collect()
        stamps = [r[0] for r in batch_df.select(F.unix_millis("storeTimestamp")).collect()]
        batches.append((entered, time.time(), stamps))
        seen[0] += len(stamps)

    group = f"bench-latency-{uuid.uuid4().hex[:12]}"
    df = stream_reader(spark, cluster.namesrv_addr, topic, pull_batch_size, group)
    saved = {key: spark.conf.get(key, None) for key in (PROGRESS_KEPT_CONF, CHECKPOINT_MANAGER_CONF)}
    spark.conf.set(PROGRESS_KEPT_CONF, str(PROGRESS_KEPT))
    if checkpoint_manager is not None:
        spark.conf.set(CHECKPOINT_MANAGER_CONF, checkpoint_manager)
    query = None
    try:
        query = df.writeStream.foreachBatch(on_batch).option("checkpointLocation", str(checkpoint)).start()
        _wait_ready(query)
        log(f"e: stream waiting; producing {count} messages at {rate}/s to {topic}")
        with Sampler(server_pids(cluster), SPARK_PYTHON) as sampler:
            _produce(cluster, topic, count, rate, batch)
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            while seen[0] < count:
                if query.exception() is not None:
                    raise RuntimeError(f"latency query failed: {query.exception()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"latency query saw {seen[0]} of {count} rows")
                time.sleep(QUERY_POLL_S)
        progress = query.recentProgress
    finally:
        if query is not None:
            query.stop()
        for key, value in saved.items():  # the settings were the session's for this query only
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    if phase is not None:
        phase.add(sampler)
    return _summary(batches, progress, rate, checkpoint_manager)


def _wait_ready(query: Any) -> None:
    deadline = time.monotonic() + STREAM_READY_TIMEOUT_S
    while query.status.get("message") != "Waiting for data to arrive":
        if query.exception() is not None or not query.isActive:
            raise RuntimeError(f"latency query failed to start: {query.exception()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"latency query not ready: {query.status}")
        time.sleep(QUERY_POLL_S)


def _produce(cluster: Cluster, topic: str, count: int, rate: int, batch: int) -> None:
    """Send ``count`` messages at ``rate`` from the Java tool, in another thread so that the
    caller's sampling covers it; its failure is raised here."""
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            cluster.tool(
                "produce",
                "--topic",
                topic,
                "--count",
                str(count),
                "--rate",
                str(rate),
                "--body-size",
                str(BODY_SIZE),
                "--random-body",
                "--batch",
                str(batch),
                "--quiet",
                timeout=TOOL_TIMEOUT_S,
            )
        except BaseException as err:  # noqa: BLE001  (re-raised in the calling thread)
            failure.append(err)

    producer = threading.Thread(target=produce, name="latency-producer", daemon=True)
    producer.start()
    producer.join()
    if failure:
        raise failure[0]


def _summary(
    batches: list[tuple[float, float, list[int]]], progress: list[Any], rate: int, checkpoint_manager: str | None
) -> dict[str, Any]:
    to_batch = sorted(entered * MS_PER_S - ts for entered, _, stamps in batches for ts in stamps)
    to_read = sorted(done * MS_PER_S - ts for _, done, stamps in batches for ts in stamps)
    all_stamps = [ts for _, _, stamps in batches for ts in stamps]
    produced_over_ms = max(all_stamps) - min(all_stamps) if all_stamps else 0
    rate_stored = len(all_stamps) / (produced_over_ms / MS_PER_S) if produced_over_ms else None
    nonempty = [b for b in batches if b[2]]
    return {
        "checkpoint_manager": checkpoint_manager or "Spark's default",
        "rows": len(to_batch),
        "rate_target": rate,
        "rate_stored": None if rate_stored is None else round(rate_stored, 1),
        "producer_kept_up": rate_stored is not None and rate_stored >= KEPT_UP_SHARE * rate,
        "micro_batches": len(nonempty),
        "rows_per_batch_median": round(statistics.median(len(b[2]) for b in nonempty)) if nonempty else 0,
        "collect_seconds_median": round(statistics.median(d - e for e, d, _ in nonempty), 3) if nonempty else None,
        "to_foreach_batch_ms": _latency_ms(to_batch),
        "to_rows_collected_ms": _latency_ms(to_read),
        "stages_ms": _stages(progress),
    }


def _stages(progress: list[Any]) -> dict[str, dict[str, float]]:
    """p50 and p99 of each stage over the micro-batches that read rows."""
    reading = [p["durationMs"] for p in progress if int(p.get("numInputRows", 0)) > 0]
    out: dict[str, dict[str, float]] = {}
    for stage in STAGES:
        values = sorted(float(d.get(stage, 0)) for d in reading)
        if values:
            out[stage] = {"p50": percentile(values, 50), "p99": percentile(values, 99)}
    return out


def _latency_ms(sorted_ms: list[float]) -> dict[str, float]:
    """p50, p99 and max of sorted latencies, in ms."""
    return {
        "p50": round(percentile(sorted_ms, 50), 1),
        "p99": round(percentile(sorted_ms, 99), 1),
        "max": round(sorted_ms[-1], 1),
    }
