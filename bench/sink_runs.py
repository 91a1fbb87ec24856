"""The timed writers of bench_sink.py, each sending ``messages`` bodies to a fresh topic once:

  java-sync, java-async, java-batch: the official ``DefaultMQProducer`` in the tool's
      ``produce-bench`` command, 2 threads, timed by the JVM from the first send to the last
      answer, with the JVM's own CPU over that span;
  java-transaction: the official ``TransactionMQProducer``, 2 threads, one
      ``sendMessageInTransaction`` at a time each (its END is one-way), timed until the topic holds
      every message;
  sink: ``df.write.format("rocketmq")`` of a cached DataFrame in 2 partitions on local[2], timed
      from the write job's start to its end, with the CPU of the Spark JVM and its Python workers
      sampled from /proc;
  sink-exactly-once: the same with ``deliveryGuarantee=exactly-once``, timed until every row is
      visible;
  spark-handover: no writer, but what Spark spends on any Python writer: the same cached rows
      handed to a Python function in Arrow batches (``mapInArrow``, the path a Python data source's
      writer is fed by), which only counts them; timed and sampled as the sink.

Every run is checked against the brokers: the topic's stored messages (max offsets summed) must
equal what was sent. Kept apart from the arguments and the report of bench_sink.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from dataset import QUEUES_PER_BROKER, TOOL_TIMEOUT_S
from integration.cluster import Cluster
from integration.spark import local_spark

# The sink's defaults (rocketmq_spark/sink/options.py): a batch send holds up to 1 MiB.
from rocketmq_spark.sink.options import DEFAULT_BATCH_MAX_BYTES
from sampling import SPARK_JVM, SPARK_PYTHON, Sampler

JAVA_MODES = ("sync", "async", "batch", "transaction")
JAVA_TRANSACTION = "java-transaction"
SINK = "sink"
SINK_EXACTLY_ONCE = "sink-exactly-once"
# Exactly-once's producer group and the topic its transaction records go to (made once a run).
EXACTLY_ONCE_GROUP = "bench-sink-exactly-once"
TRANSACTION_TOPIC = "bench-sink-transactions"
HANDOVER = "spark-handover"
THREADS = 2  # the sink's two tasks
# Room for the 1 GiB DataFrame cached in the driver's heap, beside Spark's own needs.
SPARK_DRIVER_MEMORY = "4g"
OFFSETS_GROUP = "bench-sink-offsets"
# Consume queues trail the commit log by a moment after the last answer.
STORED_TIMEOUT_S = 60.0
STORED_POLL_S = 0.5
# The Java producer's warm-up before its timed span: a fiftieth of the run, at least this many.
WARMUP_SHARE = 50
WARMUP_MIN = 4000


@dataclass
class Run:
    """One timed run: messages stored, seconds, the client's CPU seconds (and by process group,
    for the sink), the brokers' CPU seconds."""

    messages: int
    seconds: float
    client_cpu: float
    broker_cpu: float
    client_cpu_groups: dict[str, float] = field(default_factory=dict)


def start_spark() -> Any:
    """The warm local[2] session of the sink's runs."""
    spark = local_spark("rocketmq-spark-sink-bench", **{"spark.driver.memory": SPARK_DRIVER_MEMORY})
    spark.sparkContext.setLogLevel("WARN")
    return spark


def cached_frame(spark: Any, messages: int, body_size: int) -> Any:
    """``messages`` rows of one BINARY ``body`` column of ``body_size`` bytes, distinct per row, in
    2 partitions, built and cached in memory before any timing: the timed writes read the cache,
    so making rows costs them nothing.

    A body is the row's SHA-256 in hex, repeated to ``body_size`` bytes (64 hex characters each),
    made in the JVM; the Java producer's bodies are random bytes. Neither is compressed: both are
    below the sink's and the client's 4 KiB threshold.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    hex_chars = 64
    repeats = -(-body_size // hex_chars)
    body = F.substring(F.repeat(F.sha2(F.col("id").cast("string"), 256), repeats), 1, body_size)
    df = spark.range(0, messages, 1, THREADS).select(body.cast("binary").alias("body"))
    df = df.persist(StorageLevel.MEMORY_ONLY)
    if df.count() != messages:
        raise RuntimeError("the cached DataFrame lost rows")
    return df


def create_topic(cluster: Cluster, topic: str) -> None:
    cluster.tool("create-topic", "--topic", topic, "--queues", str(QUEUES_PER_BROKER))


def stored(cluster: Cluster, topic: str) -> int:
    """Messages the brokers hold on ``topic``: its queues' max offsets summed."""
    lines = cluster.tool("offsets", "--topic", topic, "--group", OFFSETS_GROUP)
    return sum(int(line["maxOffset"]) for line in lines)


def check_stored(cluster: Cluster, topic: str, expected: int, what: str) -> None:
    """Fail loudly unless the topic holds exactly ``expected`` messages (after dispatch)."""
    deadline = time.monotonic() + STORED_TIMEOUT_S
    while True:
        count = stored(cluster, topic)
        if count == expected:
            return
        if count > expected or time.monotonic() > deadline:
            raise RuntimeError(f"{what}: topic {topic} holds {count:,} messages, {expected:,} were sent")
        time.sleep(STORED_POLL_S)


def run_java(
    cluster: Cluster, servers: list[int], topic: str, mode: str, messages: int, body_size: int, window: int, warm: str
) -> tuple[Run, dict[str, Any]]:
    """One ``produce-bench`` run of ``mode``; the tool's own summary beside the Run."""
    args = [
        "--topic",
        topic,
        "--mode",
        mode,
        "--threads",
        str(THREADS),
        "--messages",
        str(messages),
        "--body-size",
        str(body_size),
        "--window",
        str(window),
        "--batch-bytes",
        str(DEFAULT_BATCH_MAX_BYTES),
    ]
    if warm:
        args += ["--warmup", str(warm_messages(messages)), "--warmup-topic", warm]
    with Sampler(servers) as sampler:
        lines = cluster.tool("produce-bench", *args, timeout=TOOL_TIMEOUT_S)
    summary = next(line for line in reversed(lines) if "cpuSeconds" in line)
    if int(summary["failed"]) or int(summary["messages"]) != messages:
        raise RuntimeError(f"java-{mode}: {summary}")
    check_stored(cluster, topic, messages, f"java-{mode}")
    # The brokers' CPU spans the JVM's start and warm-up too; reported for context only.
    run = Run(messages, float(summary["seconds"]), float(summary["cpuSeconds"]), sampler.cpu()["rocketmq"])
    return run, summary


def warm_messages(messages: int) -> int:
    """Warm-up sends before a timed span: a fiftieth of the run, at least a few thousand."""
    return max(messages // WARMUP_SHARE, WARMUP_MIN)


def sink_options(namesrv: str, topic: str, exactly_once: bool = False) -> dict[str, str]:
    if not exactly_once:
        return {"nameServer": namesrv, "topic": topic}
    return {
        "nameServer": namesrv,
        "topic": topic,
        "deliveryGuarantee": "exactly-once",
        "producerGroup": EXACTLY_ONCE_GROUP,
        "transactionTopic": TRANSACTION_TOPIC,
    }


def write_sink(df: Any, namesrv: str, topic: str, exactly_once: bool = False) -> float:
    """``df.write.format("rocketmq")``: seconds from the job's start to its end."""
    writer = df.write.format("rocketmq").mode("append")
    for key, value in sink_options(namesrv, topic, exactly_once).items():
        writer = writer.option(key, value)
    started = time.perf_counter()
    writer.save()
    return time.perf_counter() - started


def run_sink(
    cluster: Cluster, servers: list[int], df: Any, topic: str, messages: int, exactly_once: bool = False
) -> Run:
    """One write of the cached DataFrame; CPU of the Spark JVM and its Python workers. Exactly
    once is timed until every row is visible, as the Java transactional producer is."""
    name = SINK_EXACTLY_ONCE if exactly_once else SINK
    with Sampler(servers) as sampler:
        started = time.perf_counter()
        write_sink(df, cluster.namesrv_addr, topic, exactly_once)
        if exactly_once:
            check_stored(cluster, topic, messages, name)
        seconds = time.perf_counter() - started
    check_stored(cluster, topic, messages, name)
    return _spark_run(messages, seconds, sampler)


def run_handover(servers: list[int], df: Any, messages: int) -> Run:
    """The cached DataFrame handed to Python as a sink's writer gets it, nothing sent: Spark's own
    share of the sink's time and CPU."""

    def count_rows(batches: Any) -> Any:  # nested: pickled by value, the workers cannot import this module
        import pyarrow as pa

        rows = sum(batch.num_rows for batch in batches)
        yield pa.record_batch([pa.array([rows], pa.int64())], names=["rows"])

    with Sampler(servers) as sampler:
        started = time.perf_counter()
        counted = sum(row["rows"] for row in df.mapInArrow(count_rows, "rows long").collect())
        seconds = time.perf_counter() - started
    if counted != messages:
        raise RuntimeError(f"{HANDOVER}: {counted:,} rows handed over, {messages:,} cached")
    return _spark_run(messages, seconds, sampler)


def _spark_run(messages: int, seconds: float, sampler: Sampler) -> Run:
    """A Spark run's Run: the client's CPU is the Spark JVM's and its Python workers'."""
    cpu = sampler.cpu()
    groups = {group: cpu[group] for group in (SPARK_JVM, SPARK_PYTHON)}
    return Run(messages, seconds, sum(groups.values()), cpu["rocketmq"], groups)
