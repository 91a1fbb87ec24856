"""The timed readers, each reading the whole data set once and returning (rows, seconds):

  a. the official Java ``DefaultLitePullConsumer`` (``java_consume``)
  b. the project's client without Spark, in a pool of 2 processes (``run_client``)
  c. ``spark.read`` into the ``noop`` sink (``run_spark_batch``), and c-narrow, the same with a
     user schema of the body and offset columns only
  d. a ``Trigger.AvailableNow`` stream into the ``noop`` sink (``run_available_now``)

and e, the latency of a running stream (``run_latency``). Kept apart from the argument handling
and the report, so each reader reads on its own.
"""

from __future__ import annotations

import importlib
import math
import os
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from common import log
from dataset import BODY_SIZE, TOOL_TIMEOUT_S, plan_partitions, server_pids, source_options
from integration.cluster import Cluster
from integration.spark import local_spark
from sampling import SPARK_PYTHON, Phase, Sampler

LATENCY_SENDS_PER_S = 50  # e: the producer sends rate/50 messages every 20 ms
STREAM_READY_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 120.0
QUERY_POLL_S = 0.1
# e: the producer kept up if it stored at least this share of the target rate.
KEPT_UP_SHARE = 0.9
SPARK_DRIVER_MEMORY = "2g"
MS_PER_S = 1000.0
PERCENT = 100.0
# c-narrow: the body and the columns that place a message, nothing the decoder must build
# (properties, ids, hosts, timestamps).
NARROW_SCHEMA = "topic string, brokerName string, queueId int, queueOffset long, body binary"


# ------------------------------------------------------------- b: client, no Spark


def pool_warm(_: int) -> int:
    """Start a pool worker and import the reader, keeping both out of the timed runs."""
    importlib.import_module("rocketmq_spark.source.partition_reader")
    return os.getpid()


def _pool_read(part: Any) -> int:
    """Read one partition in a pool worker; return its row count."""
    from rocketmq_spark.source.partition_reader import read_partition

    rows = 0
    for batch in read_partition(part):
        rows += batch.num_rows
    return rows


def run_client(pool: Any, namesrv: str, topic: str, pull_batch_size: int) -> tuple[int, float]:
    """b: plan in this process, read the partitions in the pool, 2 at a time: (rows, seconds)."""
    started = time.perf_counter()
    parts = plan_partitions(namesrv, topic, pull_batch_size)
    rows = sum(pool.imap_unordered(_pool_read, parts, chunksize=1))
    return rows, time.perf_counter() - started


# ------------------------------------------------------------------------- Spark


def start_spark() -> Any:
    """The warm local[2] session every Spark reader shares."""
    spark = local_spark("rocketmq-spark-bench", **{"spark.driver.memory": SPARK_DRIVER_MEMORY})
    spark.sparkContext.setLogLevel("WARN")
    return spark


def batch_frame(spark: Any, options: dict[str, str], schema: str | None = None) -> Any:
    """A freshly loaded ``spark.read`` DataFrame: Spark keeps the read it planned for a loaded
    DataFrame, so every query that pushes filters needs its own."""
    reader = spark.read.format("rocketmq")
    if schema is not None:
        reader = reader.schema(schema)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def timed_noop(df: Any) -> tuple[int, float]:
    """Write ``df`` to the ``noop`` sink, timing only the action: (rows written, seconds). The rows
    are counted by observe(), in the JVM as they pass, which costs next to nothing beside the read."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation("rows")
    observed = df.observe(observation, F.count(F.lit(1)).alias("rows"))
    started = time.perf_counter()
    observed.write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - started
    return int(observation.get["rows"]), seconds


def run_spark_batch(spark: Any, namesrv: str, topic: str, pull_batch_size: int,
                    schema: str | None = None) -> tuple[int, float]:
    """c: spark.read ... write.format("noop"), all columns or (c-narrow) those ``schema`` names."""
    return timed_noop(batch_frame(spark, source_options(namesrv, topic, pull_batch_size), schema))


def stream_reader(spark: Any, namesrv: str, topic: str, pull_batch_size: int, group: str) -> Any:
    """A stream of the whole topic from its first offset, as a new consumer group."""
    reader = (spark.readStream.format("rocketmq").option("consumerGroup", group)
              .option("consumeFromWhere", "CONSUME_FROM_FIRST_OFFSET"))
    for key, value in source_options(namesrv, topic, pull_batch_size).items():
        reader = reader.option(key, value)
    return reader.load()


def run_available_now(spark: Any, namesrv: str, topic: str, pull_batch_size: int,
                      checkpoint: Path) -> tuple[int, float]:
    """d: Trigger.AvailableNow into noop, new group and checkpoint; start() to termination."""
    group = f"bench-available-now-{uuid.uuid4().hex[:12]}"
    df = stream_reader(spark, namesrv, topic, pull_batch_size, group)
    started = time.perf_counter()
    query = (df.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    seconds = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"AvailableNow query failed: {query.exception()}")
    rows = sum(int(p["numInputRows"]) for p in query.recentProgress)
    return rows, seconds


def percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    rank = max(1, math.ceil(pct / PERCENT * len(sorted_values)))
    return sorted_values[rank - 1]


def run_latency(spark: Any, cluster: Cluster, topic: str, rate: int, seconds: int, pull_batch_size: int,
                checkpoint: Path, phase: Phase) -> dict[str, Any]:
    """e: a running stream (default trigger) while the Java producer sends ``rate`` msg/s."""
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
    query = df.writeStream.foreachBatch(on_batch).option("checkpointLocation", str(checkpoint)).start()
    try:
        deadline = time.monotonic() + STREAM_READY_TIMEOUT_S
        while query.status.get("message") != "Waiting for data to arrive":
            if query.exception() is not None or not query.isActive:
                raise RuntimeError(f"latency query failed to start: {query.exception()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"latency query not ready: {query.status}")
            time.sleep(QUERY_POLL_S)
        log(f"e: stream waiting; producing {count} messages at {rate}/s to {topic}")
        producer_error: list[BaseException] = []

        def produce() -> None:
            try:
                cluster.tool("produce", "--topic", topic, "--count", str(count), "--rate", str(rate),
                             "--body-size", str(BODY_SIZE), "--random-body",
                             "--batch", str(batch), "--quiet", timeout=TOOL_TIMEOUT_S)
            except BaseException as err:  # noqa: BLE001  (re-raised in the main thread)
                producer_error.append(err)

        producer = threading.Thread(target=produce, name="latency-producer", daemon=True)
        with Sampler(server_pids(cluster), SPARK_PYTHON) as sampler:
            producer.start()
            producer.join()
            if producer_error:
                raise producer_error[0]
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            while seen[0] < count:
                if query.exception() is not None:
                    raise RuntimeError(f"latency query failed: {query.exception()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"latency query saw {seen[0]} of {count} rows")
                time.sleep(QUERY_POLL_S)
    finally:
        query.stop()
    phase.add(sampler)

    to_batch = sorted(entered * MS_PER_S - ts for entered, _, stamps in batches for ts in stamps)
    to_read = sorted(done * MS_PER_S - ts for _, done, stamps in batches for ts in stamps)
    all_stamps = [ts for _, _, stamps in batches for ts in stamps]
    produced_over_ms = max(all_stamps) - min(all_stamps) if all_stamps else 0
    rate_stored = len(all_stamps) / (produced_over_ms / MS_PER_S) if produced_over_ms else None
    nonempty = [b for b in batches if b[2]]
    return {
        "rows": len(to_batch),
        "rate_target": rate,
        "rate_stored": None if rate_stored is None else round(rate_stored, 1),
        "producer_kept_up": rate_stored is not None and rate_stored >= KEPT_UP_SHARE * rate,
        "micro_batches": len(nonempty),
        "rows_per_batch_median": round(statistics.median(len(b[2]) for b in nonempty)) if nonempty else 0,
        "collect_seconds_median": round(statistics.median(d - e for e, d, _ in nonempty), 3) if nonempty else None,
        "to_foreach_batch_ms": _latency_ms(to_batch),
        "to_rows_collected_ms": _latency_ms(to_read),
    }


def _latency_ms(sorted_ms: list[float]) -> dict[str, float]:
    """p50, p99 and max of sorted latencies, in ms."""
    return {"p50": round(percentile(sorted_ms, 50), 1), "p99": round(percentile(sorted_ms, 99), 1),
            "max": round(sorted_ms[-1], 1)}


# ------------------------------------------------------------------ a: Java client


def java_consume(cluster: Cluster, topic: str, count: int, pull_batch_size: int) -> tuple[float, float]:
    """a: the tool's DefaultLitePullConsumer; (messages/s from its own clock, wall seconds with JVM)."""
    started = time.perf_counter()
    lines = cluster.tool("consume", "--topic", topic, "--count", str(count), "--batch-size", str(pull_batch_size),
                         timeout=TOOL_TIMEOUT_S)
    wall = time.perf_counter() - started
    summary = next(line for line in reversed(lines) if "messagesPerSecond" in line)
    if int(summary["messages"]) != count:
        raise RuntimeError(f"Java consumer read {summary['messages']} messages, expected {count}")
    return float(summary["messagesPerSecond"]), wall

