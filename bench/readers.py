"""The timed readers, each reading the whole data set once and returning (rows, seconds):

  a. the official Java ``DefaultLitePullConsumer`` (``java_consume``)
  b. the project's client without Spark, in a pool of 2 processes (``run_client``)
  c. ``spark.read`` into the ``noop`` sink (``run_spark_batch``), and c-narrow, the same with a
     user schema of the body and offset columns only
  d. a ``Trigger.AvailableNow`` stream into the ``noop`` sink (``run_available_now``)

The latency of a running stream (e) is in latency.py. Kept apart from the argument handling and
the report, so each reader reads on its own.
"""

from __future__ import annotations

import importlib
import os
import time
import uuid
from pathlib import Path
from typing import Any

from dataset import TOOL_TIMEOUT_S, plan_partitions, source_options
from integration.cluster import Cluster
from integration.spark import local_spark

SPARK_DRIVER_MEMORY = "2g"
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


def run_spark_batch(
    spark: Any, namesrv: str, topic: str, pull_batch_size: int, schema: str | None = None
) -> tuple[int, float]:
    """c: spark.read ... write.format("noop"), all columns or (c-narrow) those ``schema`` names."""
    return timed_noop(batch_frame(spark, source_options(namesrv, topic, pull_batch_size), schema))


def stream_reader(spark: Any, namesrv: str, topic: str, pull_batch_size: int, group: str) -> Any:
    """A stream of the whole topic from its first offset, as a new consumer group."""
    reader = (
        spark.readStream.format("rocketmq")
        .option("consumerGroup", group)
        .option("consumeFromWhere", "CONSUME_FROM_FIRST_OFFSET")
    )
    for key, value in source_options(namesrv, topic, pull_batch_size).items():
        reader = reader.option(key, value)
    return reader.load()


def run_available_now(
    spark: Any, namesrv: str, topic: str, pull_batch_size: int, checkpoint: Path
) -> tuple[int, float]:
    """d: Trigger.AvailableNow into noop, new group and checkpoint; start() to termination."""
    group = f"bench-available-now-{uuid.uuid4().hex[:12]}"
    df = stream_reader(spark, namesrv, topic, pull_batch_size, group)
    started = time.perf_counter()
    query = (
        df.writeStream.format("noop").option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"AvailableNow query failed: {query.exception()}")
    rows = sum(int(p["numInputRows"]) for p in query.recentProgress)
    return rows, seconds


# ------------------------------------------------------------------ a: Java client


def java_consume(cluster: Cluster, topic: str, count: int, pull_batch_size: int) -> tuple[float, float]:
    """a: the tool's DefaultLitePullConsumer; (messages/s from its own clock, wall seconds with JVM)."""
    started = time.perf_counter()
    lines = cluster.tool(
        "consume", "--topic", topic, "--count", str(count), "--batch-size", str(pull_batch_size), timeout=TOOL_TIMEOUT_S
    )
    wall = time.perf_counter() - started
    summary = next(line for line in reversed(lines) if "messagesPerSecond" in line)
    if int(summary["messages"]) != count:
        raise RuntimeError(f"Java consumer read {summary['messages']} messages, expected {count}")
    return float(summary["messagesPerSecond"]), wall
