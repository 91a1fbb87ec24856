"""The Spark half of bench_big_topic.py: a stream's first micro-batch and its idle triggers, the
batch read, and the check that every row arrived exactly once.

Kept apart from the cluster and driver-side measurements so each module stays readable; every
function here takes a running SparkSession and plain values.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from sampling import DRIVER, ROCKETMQ, SPARK_JVM, SPARK_PYTHON, Sampler

# Queue key of a row: (brokerName, queueId); a row's identity adds its queueOffset.
QueueKey = tuple[str, int]
RowKey = tuple[str, int, int]
Ranges = dict[QueueKey, tuple[int, int]]  # each queue's offsets [min, max)

KEY_COLUMNS = ("brokerName", "queueId", "queueOffset")
FIRST_BATCH_TIMEOUT_S = 300.0
QUERY_POLL_S = 0.05
MS_PER_S = 1000.0
# Spark reports a trigger that found no data only every 10 s by default; every one is wanted.
SPARK_CONF = {"spark.sql.streaming.noDataProgressEventInterval": "0"}
# How many missing or duplicated rows an error message names before it says "and N more".
SHOWN_IN_ERRORS = 5
# The process groups whose CPU time tells Spark's share from the source's and the brokers'
# (the source runs in Spark's Python processes; this benchmark's own process only waits).
CPU_SHOWN = (ROCKETMQ, SPARK_JVM, SPARK_PYTHON, DRIVER)


class ExactlyOnceError(RuntimeError):
    """Rows went missing, came twice, or came from outside the ranges that were produced."""


def check_exactly_once(keys: Iterable[RowKey], expected: Ranges, what: str) -> dict[str, int]:
    """Every offset [start, end) of every expected queue exactly once, nothing else; else raise.

    Returns the row count and the distinct (brokerName, queueId, queueOffset) count.
    """
    counts = Counter(keys)
    rows = sum(counts.values())
    duplicated = sorted(k for k, n in counts.items() if n > 1)
    wanted = {(b, q, o) for (b, q), (start, end) in expected.items() for o in range(start, end)}
    missing = sorted(wanted - counts.keys())
    stray = sorted(counts.keys() - wanted)
    problems = [
        f"{label}: {len(found)} ({_some(found)})"
        for label, found in (("duplicated", duplicated), ("missing", missing), ("unexpected", stray))
        if found
    ]
    if problems:
        raise ExactlyOnceError(
            f"{what}: {rows} rows, {len(counts)} distinct, {len(wanted)} expected; " + "; ".join(problems)
        )
    return {"rows": rows, "distinct": len(counts)}


def _some(keys: list[Any]) -> str:
    shown = ", ".join(map(str, keys[:SHOWN_IN_ERRORS]))
    return shown if len(keys) <= SHOWN_IN_ERRORS else f"{shown} and {len(keys) - SHOWN_IN_ERRORS} more"


def _reader(spark: Any, options: dict[str, str], streaming: bool) -> Any:
    reader = (spark.readStream if streaming else spark.read).format("rocketmq")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def stream_options(options: dict[str, str]) -> dict[str, str]:
    """A fresh group that starts at each queue's first message: the whole topic in one batch."""
    return {
        **options,
        "consumerGroup": f"bench-big-{uuid.uuid4().hex[:12]}",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
    }


def _cpu(samplers: list[Sampler], per: int = 1) -> dict[str, float]:
    """Mean CPU seconds per sampled run by process group, divided by ``per``."""
    runs = [sampler.cpu() for sampler in samplers]
    return {group: round(sum(run[group] for run in runs) / len(runs) / per, 4) for group in CPU_SHOWN}


def _keys(df: Any) -> list[RowKey]:
    return [(r[0], r[1], r[2]) for r in df.select(*KEY_COLUMNS).collect()]


# ------------------------------------------------------------------------ batch read


def batch_read(
    spark: Any, options: dict[str, str], expected: Ranges, repeats: int, servers: list[int]
) -> dict[str, Any]:
    """Check the rows once (that job is also the warm-up), then time ``count()`` ``repeats`` times."""
    checked = check_exactly_once(_keys(_reader(spark, options, streaming=False)), expected, "spark.read")
    rows = checked["rows"]
    seconds = []
    samplers = []
    for _ in range(repeats):
        with Sampler(servers) as sampler:
            started = time.perf_counter()
            counted = _reader(spark, options, streaming=False).count()
            seconds.append(time.perf_counter() - started)
        samplers.append(sampler)
        if counted != rows:
            raise ExactlyOnceError(f"spark.read count gave {counted} rows, expected {rows}")
    return {
        **checked,
        "spark_partitions": _reader(spark, options, streaming=False).rdd.getNumPartitions(),
        "count_seconds_median": round(statistics.median(seconds), 3),
        "count_seconds_runs": [round(s, 3) for s in seconds],
        "cpu_seconds": _cpu(samplers),
    }


# --------------------------------------------------------------------------- streams


def _epoch_s(timestamp: str) -> float:
    """A progress timestamp (ISO 8601 with a Z) as epoch seconds."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def _durations(progress: Any) -> dict[str, int]:
    return {str(k): int(v) for k, v in dict(progress["durationMs"]).items()}


def _median_durations(progresses: list[Any]) -> dict[str, float]:
    keys = sorted({k for p in progresses for k in _durations(p)})
    return {k: statistics.median(_durations(p).get(k, 0) for p in progresses) for k in keys}


def first_batch_and_idle(
    spark: Any, options: dict[str, str], rows: int, checkpoint: Path, trigger_ms: int, idle_s: float, servers: list[int]
) -> dict[str, Any]:
    """A stream into ``noop`` with a processing-time trigger: its first micro-batch must hold all
    ``rows``; then it runs ``idle_s`` more seconds with nothing new, and every idle trigger's
    progress is kept. The wall time runs from just before ``start()`` to the end of that batch
    (its trigger's start plus its triggerExecution, from its progress). CPU time is sampled from
    ``start()`` until the batch is seen done, and over the idle seconds."""
    df = _reader(spark, stream_options(options), streaming=True)
    writer = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=f"{trigger_ms} milliseconds")
    )
    query = None
    try:
        with Sampler(servers) as to_batch:
            started = time.time()
            query = writer.start()
            deadline = time.monotonic() + FIRST_BATCH_TIMEOUT_S
            while not any(int(p["numInputRows"]) for p in query.recentProgress):
                if query.exception() is not None or not query.isActive:
                    raise RuntimeError(f"stream failed: {query.exception()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no micro-batch with rows after {FIRST_BATCH_TIMEOUT_S:.0f} s: {query.status}")
                time.sleep(QUERY_POLL_S)
        with Sampler(servers) as idling:
            idle_from = time.time()
            time.sleep(idle_s)
        if query.exception() is not None:
            raise RuntimeError(f"stream failed: {query.exception()}")
        progress = list(query.recentProgress)
    finally:
        if query is not None:
            query.stop()
    with_rows = [p for p in progress if int(p["numInputRows"])]
    if len(with_rows) != 1 or int(with_rows[0]["numInputRows"]) != rows:
        raise ExactlyOnceError(
            f"expected one micro-batch of {rows} rows, got batches of "
            f"{[int(p['numInputRows']) for p in with_rows]} rows"
        )
    batch = with_rows[0]
    durations = _durations(batch)
    done = _epoch_s(batch["timestamp"]) + durations["triggerExecution"] / MS_PER_S
    # Triggers after the batch that found nothing new (they repeat the next batch's id).
    after = _epoch_s(batch["timestamp"])
    idle = [p for p in progress if not int(p["numInputRows"]) and _epoch_s(p["timestamp"]) > after]
    sampled = [p for p in idle if _epoch_s(p["timestamp"]) >= idle_from]  # those the idle CPU covers
    if not sampled:
        raise RuntimeError(f"no idle trigger reported in {idle_s} s")
    return {
        "batch": {
            "rows": rows,
            "duration_ms": durations,
            "wall_seconds_from_start": round(done - started, 3),
            "cpu_seconds_from_start": _cpu([to_batch]),
        },
        "idle": {
            "triggers": len(idle),
            "median_duration_ms": _median_durations(idle),
            "latest_offset_ms_runs": [_durations(p).get("latestOffset", 0) for p in idle],
            "cpu_seconds_per_trigger": _cpu([idling], per=len(sampled)),
        },
    }


def stream_rows(spark: Any, options: dict[str, str], expected: Ranges, checkpoint: Path) -> dict[str, int]:
    """An AvailableNow stream with a fresh group into foreachBatch, keeping every row's key:
    checks the stream path delivers each message exactly once (the timed run's sink keeps none)."""
    keys: list[RowKey] = []

    def collect(batch_df: Any, _batch_id: int) -> None:
        keys.extend(_keys(batch_df))

    df = _reader(spark, stream_options(options), streaming=True)
    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"stream failed: {query.exception()}")
    return check_exactly_once(keys, expected, "readStream")
