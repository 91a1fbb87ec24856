"""The rocketmq source against RocketMQ's official Java client, on a real two-broker cluster.

Starts its own RocketMQ (two brokers, under integration/work/bench), produces ``--messages``
messages of 1 KiB random bytes over 8 queues with the official Java producer, then measures,
``--repeats`` times each (interleaved, the median is reported):

  a. the official Java ``DefaultLitePullConsumer`` reading every queue from its start
  b. the project's client alone, no Spark: plan with ``RocketMQBatchReader.partitions()``, read
     every partition with ``read_partition`` in 2 worker processes, count the rows
  c. ``spark.read.format("rocketmq")...load()`` written to the ``noop`` sink, local[2]
  d. a ``Trigger.AvailableNow`` stream over the same data into the ``noop`` sink

and once, with a stream running under the default trigger while the Java producer sends at a
steady rate to another topic,

  e. the latency from each row's storeTimestamp to the start of its foreachBatch call

plus the peak memory of the Python worker processes and the CPU time of every process group
(brokers, Java tool, Spark JVM, Python workers). It prints a table and writes it as JSON to
bench/results/latest.json. See docs/development/benchmarks.md (the method) and docs/performance.md (the results).

    python bench/bench_compare.py [--messages N] [--repeats R] [--rate MSG_PER_S]
                                  [--latency-seconds S] [--pull-batch-size N]
                                  [--namesrv-port P] [--broker-ports P1,P2]
                                  [--topic T --skip-produce] [--profile DIR]
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import multiprocessing
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from integration.spark import local_spark
from integration.cluster import (  # noqa: E402
    DEFAULT_BROKER_PORTS, DEFAULT_NAMESRV_PORT, STATE_FILE_NAME, Cluster, ClusterConfig, ClusterError,
)

WORKDIR = ROOT / "integration" / "work" / "bench"
RESULTS = ROOT / "bench" / "results" / "latest.json"
POM = ROOT / "integration" / "pom.xml"

QUEUES_PER_BROKER = 4
BODY_SIZE = 1024
PRODUCE_BATCH = 256  # messages per send while loading the data set (256 KiB)
LATENCY_SENDS_PER_S = 50  # e: the producer sends rate/50 messages every 20 ms
BROKER_DEFAULT_MAX_TRANSFER = 32  # maxTransferCountOnMessageInMemory
WARMUP_MESSAGES = 4000
TOOL_TIMEOUT_S = 1800.0
STREAM_READY_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 120.0
RSS_POLL_S = 0.2
MIB = 1024 * 1024
KIB = 1024


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------- where CPU and memory go


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SPARK_JVM_MARK = b"org.apache.spark.deploy.SparkSubmit"
POOL_MARK = b"spawn_main"
# CPU groups, in the order reports show them.
ROCKETMQ, JAVA_TOOL, DRIVER, SPARK_JVM, SPARK_PYTHON, CLIENT_POOL = (
    "rocketmq", "java_tool", "driver", "spark_jvm", "spark_python", "client_pool")
CPU_GROUPS = (ROCKETMQ, JAVA_TOOL, DRIVER, SPARK_JVM, SPARK_PYTHON, CLIENT_POOL)
CPU_LABELS = {ROCKETMQ: "RocketMQ", JAVA_TOOL: "Java tool", DRIVER: "driver", SPARK_JVM: "Spark JVM",
              SPARK_PYTHON: "Spark py", CLIENT_POOL: "b pool"}


def _proc_table() -> dict[int, tuple[int, float]]:
    """{pid: (parent pid, CPU seconds so far)} of every process on the machine."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            table[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS)
        except (OSError, IndexError, ValueError):
            continue
    return table


def _descendants(table: dict[int, tuple[int, float]], root: int) -> list[int]:
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _) in table.items():
        children[ppid].append(pid)
    out: list[int] = []
    todo = list(children[root])
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children[pid])
    return out


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _status_kib(pid: int, *keys: bytes) -> list[int] | None:
    """Fields of /proc/<pid>/status (or smaps_rollup for Pss) in KiB; None if the process is gone."""
    text = _read(f"/proc/{pid}/smaps_rollup" if keys == (b"Pss:",) else f"/proc/{pid}/status")
    if text is None:
        return None
    values = dict.fromkeys(keys, 0)
    for line in text.splitlines():
        for key in keys:
            if line.startswith(key):
                values[key] = int(line.split()[1])
    return [values[k] for k in keys]


class Sampler:
    """While one timed action runs, samples /proc in a thread (every 0.2 s) for

    * the CPU seconds each group of processes spent: the RocketMQ servers, the Java tool (exited
      children, from getrusage), this driver, the Spark JVM, Spark's Python processes, the b pool;
    * the peak memory of the Python processes that read (``memory_group``): per process its
      VmHWM, reset on entry (``clear_refs`` 5) because Spark reuses its workers from one job to
      the next; and the largest sum of their PSS at one moment (PSS splits pages that forked
      workers share, so the sum is not inflated by copy-on-write).

    Spark's Python processes are recognised as descendants of this driver (through the Spark
    JVM) whose command line is this venv's python running pyspark, so the Spark workers of other
    drivers on the machine are never counted.
    """

    def __init__(self, server_pids: Iterable[int], memory_group: str | None = None) -> None:
        self.server_pids = set(server_pids)
        self.memory_group = memory_group
        self.me = os.getpid()
        self.python = sys.executable.encode()
        self.groups: dict[int, str] = {}
        self.roles: dict[int, str] = {}
        self.cpu_first: dict[int, float] = {}
        self.cpu_last: dict[int, float] = {}
        self.peaks: dict[int, int] = {}
        self.peak_total_kib = 0
        self.wall = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="proc-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._children_cpu = self._reaped_children_cpu()
        table = _proc_table()
        for pid in self._watched(table):
            self.cpu_first[pid] = table[pid][1]
            if self.groups.get(pid) == self.memory_group:
                try:
                    with open(f"/proc/{pid}/clear_refs", "w") as f:
                        f.write("5")
                except OSError:
                    pass
        self._started = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self.wall = time.perf_counter() - self._started
        self.tool_cpu = self._reaped_children_cpu() - self._children_cpu

    @staticmethod
    def _reaped_children_cpu() -> float:
        import resource

        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    def _classify(self, pid: int, table: dict[int, tuple[int, float]]) -> str | None:
        if pid == self.me:
            return DRIVER
        if pid in self.server_pids:
            return ROCKETMQ
        # Unclassified processes are looked at again next time: one just forked may not have
        # exec'd yet and still shows its parent's command line.
        command = _read(f"/proc/{pid}/cmdline") or b""
        parent = table.get(pid, (0, 0.0))[0]
        if SPARK_JVM_MARK in command and parent == self.me:
            return SPARK_JVM
        if command.split(b"\0", 1)[0] == self.python and b"pyspark" in command:
            module = command.rstrip(b"\0").split(b"\0")[-1].decode(errors="replace")
            daemon = b"pyspark.daemon" in command and self.groups.get(parent) == SPARK_JVM
            self.roles[pid] = f"{module} daemon" if daemon else module
            return SPARK_PYTHON
        if POOL_MARK in command:
            self.roles[pid] = "multiprocessing pool worker"
            return CLIENT_POOL
        return None  # the Java tool (counted from getrusage once reaped), shells, trackers

    def _watched(self, table: dict[int, tuple[int, float]]) -> list[int]:
        pids = []
        # Parents first, so a daemon's parent is classified before the daemon.
        for pid in [self.me, *sorted(_descendants(table, self.me))]:
            if pid not in self.groups:
                group = self._classify(pid, table)
                if group is None:
                    continue
                self.groups[pid] = group
            pids.append(pid)
        return pids

    def _run(self) -> None:
        while not self._stop.wait(RSS_POLL_S):
            self._sample()

    def _sample(self) -> None:
        table = _proc_table()
        total = 0
        for pid in self._watched(table):
            if pid not in table:
                continue
            self.cpu_last[pid] = table[pid][1]
            if self.memory_group is None or self.groups[pid] != self.memory_group:
                continue
            hwm = _status_kib(pid, b"VmHWM:")
            pss = _status_kib(pid, b"Pss:")
            if hwm is None or pss is None:
                continue
            self.peaks[pid] = max(self.peaks.get(pid, 0), hwm[0])
            total += pss[0]
        self.peak_total_kib = max(self.peak_total_kib, total)

    def cpu(self) -> dict[str, float]:
        out = dict.fromkeys(CPU_GROUPS, 0.0)
        for pid, last in self.cpu_last.items():
            out[self.groups[pid]] += last - self.cpu_first.get(pid, 0.0)
        out[JAVA_TOOL] += self.tool_cpu
        return out


class Phase:
    """The Sampler readings of every run of one measurement, merged."""

    def __init__(self) -> None:
        self.peaks: dict[int, int] = {}
        self.roles: dict[int, str] = {}
        self.peak_total_kib = 0
        self.cpu_runs: list[dict[str, float]] = []
        self.walls: list[float] = []

    def add(self, sampler: Sampler) -> None:
        for pid, kib in sampler.peaks.items():
            self.peaks[pid] = max(self.peaks.get(pid, 0), kib)
        self.roles.update(sampler.roles)
        self.peak_total_kib = max(self.peak_total_kib, sampler.peak_total_kib)
        self.cpu_runs.append(sampler.cpu())
        self.walls.append(sampler.wall)

    def memory(self) -> dict[str, Any]:
        """The largest peak of one process, the largest PSS total at one moment (MiB), the processes."""
        values = list(self.peaks.values())
        return {
            "processes": len(values),
            "max_process_mib": round(max(values) / KIB, 1) if values else None,
            "peak_total_pss_mib": round(self.peak_total_kib / KIB, 1) if self.peak_total_kib else None,
            "per_process": [{"pid": pid, "role": self.roles.get(pid, ""), "peak_mib": round(kib / KIB, 1)}
                            for pid, kib in sorted(self.peaks.items())],
        }

    def cpu(self, messages: int) -> dict[str, Any]:
        """Mean CPU seconds per run by group, and per message in microseconds."""
        runs = len(self.cpu_runs)
        seconds = {g: sum(r[g] for r in self.cpu_runs) / runs for g in CPU_GROUPS}
        total = sum(seconds.values())
        return {
            "wall_seconds": round(sum(self.walls) / runs, 2),
            "cpu_seconds": {**{g: round(v, 2) for g, v in seconds.items()}, "total": round(total, 2)},
            "cpu_us_per_message": {**{g: round(v / messages * 1e6, 1) for g, v in seconds.items()},
                                   "total": round(total / messages * 1e6, 1)},
        }


# ------------------------------------------------------------- b: client, no Spark


def _pool_warm(_: int) -> int:
    importlib.import_module("rocketmq_spark.source.partition_reader")  # import cost out of the timed runs
    return os.getpid()


def _pool_read(part: Any) -> int:
    """Read one partition in a pool worker; return its row count."""
    from rocketmq_spark.source.partition_reader import read_partition

    rows = 0
    for batch in read_partition(part):
        rows += batch.num_rows
    return rows


def source_options(namesrv: str, topic: str, pull_batch_size: int) -> dict[str, str]:
    return {"nameServer": namesrv, "topic": topic, "pullBatchSize": str(pull_batch_size)}


def plan_partitions(namesrv: str, topic: str, pull_batch_size: int) -> list[Any]:
    from rocketmq_spark.source.batch_reader import RocketMQBatchReader
    from rocketmq_spark.source.options import parse_options

    options = parse_options(source_options(namesrv, topic, pull_batch_size), streaming=False)
    return list(RocketMQBatchReader(options).partitions())


def run_client(pool: Any, namesrv: str, topic: str, pull_batch_size: int) -> tuple[int, float]:
    """b: plan in this process, read the partitions in the pool, 2 at a time: (rows, seconds)."""
    started = time.perf_counter()
    parts = plan_partitions(namesrv, topic, pull_batch_size)
    rows = sum(pool.imap_unordered(_pool_read, parts, chunksize=1))
    return rows, time.perf_counter() - started


# ------------------------------------------------------------------------- Spark


def start_spark() -> Any:
    spark = local_spark("rocketmq-spark-bench", **{"spark.driver.memory": "2g"})
    spark.sparkContext.setLogLevel("WARN")
    return spark


def run_spark_batch(spark: Any, namesrv: str, topic: str, pull_batch_size: int) -> tuple[int, float]:
    """c: spark.read ... write.format("noop"); only the action is timed. (rows, seconds)"""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    reader = spark.read.format("rocketmq")
    for key, value in source_options(namesrv, topic, pull_batch_size).items():
        reader = reader.option(key, value)
    observation = Observation("rows")
    # observe() counts in the JVM as rows pass; it costs next to nothing beside the read.
    df = reader.load().observe(observation, F.count(F.lit(1)).alias("rows"))
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - started
    return int(observation.get["rows"]), seconds


def stream_reader(spark: Any, namesrv: str, topic: str, pull_batch_size: int, group: str) -> Any:
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
    rank = max(1, math.ceil(pct / 100.0 * len(sorted_values)))
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
            time.sleep(0.1)
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
                time.sleep(0.1)
    finally:
        query.stop()
    phase.add(sampler)

    to_batch = sorted(entered * 1000 - ts for entered, _, stamps in batches for ts in stamps)
    to_read = sorted(done * 1000 - ts for _, done, stamps in batches for ts in stamps)
    all_stamps = [ts for _, _, stamps in batches for ts in stamps]
    produced_over_ms = max(all_stamps) - min(all_stamps) if all_stamps else 0
    nonempty = [b for b in batches if b[2]]
    return {
        "rows": len(to_batch),
        "rate_target": rate,
        "rate_stored": round(len(all_stamps) / (produced_over_ms / 1000), 1) if produced_over_ms else None,
        "producer_kept_up": bool(produced_over_ms) and len(all_stamps) / (produced_over_ms / 1000) >= 0.9 * rate,
        "micro_batches": len(nonempty),
        "rows_per_batch_median": round(statistics.median(len(b[2]) for b in nonempty)) if nonempty else 0,
        "collect_seconds_median": round(statistics.median(d - e for e, d, _ in nonempty), 3) if nonempty else None,
        "to_foreach_batch_ms": {"p50": round(percentile(to_batch, 50), 1), "p99": round(percentile(to_batch, 99), 1),
                                "max": round(to_batch[-1], 1)},
        "to_rows_collected_ms": {"p50": round(percentile(to_read, 50), 1), "p99": round(percentile(to_read, 99), 1),
                                 "max": round(to_read[-1], 1)},
    }


# ----------------------------------------------------------------- cluster, data


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


def server_pids(cluster: Cluster) -> list[int]:
    return [server.pid for server in cluster.servers]


def create_topic(cluster: Cluster, topic: str) -> None:
    cluster.tool("create-topic", "--topic", topic, "--queues", str(QUEUES_PER_BROKER))


def produce_data(cluster: Cluster, topic: str, count: int) -> float:
    started = time.perf_counter()
    cluster.tool("produce", "--topic", topic, "--count", str(count), "--body-size", str(BODY_SIZE),
                 "--random-body", "--batch", str(PRODUCE_BATCH), "--quiet", timeout=TOOL_TIMEOUT_S)
    return time.perf_counter() - started


def planned_messages(namesrv: str, topic: str, pull_batch_size: int) -> tuple[int, int]:
    """Messages and queues the planner gives a read of the whole topic (a partition holds ranges)."""
    ranges = [r for part in plan_partitions(namesrv, topic, pull_batch_size) for r in part.ranges]
    return sum(r.end - r.start for r in ranges), len({r.queue for r in ranges})


def wait_planned(namesrv: str, topic: str, pull_batch_size: int, expected: int) -> None:
    """Consume queues trail the commit log by a moment after the producer returns."""
    deadline = time.monotonic() + 60
    while True:
        total, _ = planned_messages(namesrv, topic, pull_batch_size)
        if total >= expected:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic} holds {total} messages, expected {expected}")
        time.sleep(0.5)


def cluster_config(args: argparse.Namespace) -> ClusterConfig:
    extra: dict[str, str] = {}
    max_transfer = None
    if args.pull_batch_size > BROKER_DEFAULT_MAX_TRANSFER:
        # The brokers cap a pull at 32 messages and 256 KiB unless told otherwise.
        max_transfer = args.pull_batch_size
        extra["maxTransferBytesOnMessageInMemory"] = str(args.pull_batch_size * 2 * BODY_SIZE)
    return ClusterConfig(workdir=args.workdir, brokers=2, namesrv_port=args.namesrv_port,
                         broker_ports=args.broker_ports, max_transfer_count_in_memory=max_transfer,
                         extra_broker_settings=extra)


def stop_leftover(workdir: Path) -> None:
    if (workdir / STATE_FILE_NAME).exists():
        log(f"stopping the cluster a previous run left in {workdir}")
        Cluster.load(workdir).stop()


# ------------------------------------------------------------------------ report


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kib = int(next(ln for ln in Path("/proc/meminfo").read_text().splitlines()
                           if ln.startswith("MemTotal")).split()[1])
    except (OSError, StopIteration, ValueError):
        mem_kib = 0
    java = shutil.which("java")
    java_version = "unknown"
    if java:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
        java_version = (out.stderr or out.stdout).splitlines()[0] if (out.stderr or out.stdout) else "unknown"
    import pyarrow
    import pyspark

    rocketmq = "unknown"
    for line in POM.read_text().splitlines():
        if "<rocketmq.version>" in line:
            rocketmq = line.split(">", 1)[1].split("<", 1)[0]
    return {
        "cpus": os.cpu_count(), "cpu_model": cpu, "memory_gib": round(mem_kib / KIB / KIB, 1),
        "kernel": platform.release(), "python": platform.python_version(), "java": java_version,
        "pyspark": pyspark.__version__, "pyarrow": pyarrow.__version__, "rocketmq": rocketmq,
    }


def summarize(runs: list[tuple[int, float]]) -> dict[str, Any]:
    rates = [rows / seconds for rows, seconds in runs]
    return {"median_msgs_per_s": round(statistics.median(rates)), "runs_msgs_per_s": [round(r) for r in rates],
            "runs_seconds": [round(s, 2) for _, s in runs]}


def render(report: dict[str, Any]) -> str:
    p = report["parameters"]
    t = report["throughput"]
    m = report["machine"]
    lines = [
        "",
        f"rocketmq-spark benchmark, {report['finished']}",
        f"{p['messages']:,} messages x {p['body_size']} B random bodies, {p['queues']} queues on 2 brokers, "
        f"pull batch {p['pull_batch_size']}, median of {p['repeats']} run(s); the whole run took "
        f"{p['total_seconds'] // 60} min {p['total_seconds'] % 60} s",
        f"{m['cpus']} x {m['cpu_model']}, {m['memory_gib']} GiB; Python {m['python']}, PySpark {m['pyspark']}, "
        f"{m['java']}, RocketMQ {m['rocketmq']}",
        "",
        f"{'':3}{'reader':46}{'msg/s':>9}{'MiB/s':>7}{'x a':>6}   runs (msg/s)",
    ]
    labels = {
        "a": "Java DefaultLitePullConsumer (official)",
        "b": "project client, no Spark, 2 processes",
        "c": "spark.read -> noop, local[2]",
        "d": "readStream AvailableNow -> noop, local[2]",
    }
    base = t["a"]["median_msgs_per_s"]
    for key, label in labels.items():
        row = t[key]
        rate = row["median_msgs_per_s"]
        lines.append(f"{key + '.':3}{label:46}{rate:>9,}{rate * p['body_size'] / MIB:>7.1f}"
                     f"{rate / base:>6.2f}   {', '.join(f'{r:,}' for r in row['runs_msgs_per_s'])}")
    fixed = report["fixed_cost_seconds"]
    lines.append(f"   fixed cost, same actions on the {fixed['messages']:,}-message warm-up topic: "
                 f"b {fixed['b']:.1f} s, c {fixed['c']:.1f} s, d {fixed['d']:.1f} s")
    lat = report["latency"]
    lines += [
        "",
        f"e. stream, default trigger; Java producer at {lat['rate_target']:,} msg/s for {p['latency_seconds']} s "
        f"(stored at {lat['rate_stored']:,} msg/s{'' if lat['producer_kept_up'] else ': the producer fell behind'})",
        f"   {lat['rows']:,} rows in {lat['micro_batches']} micro-batches "
        f"(median {lat['rows_per_batch_median']:,} rows, {lat['collect_seconds_median']} s to read one)",
        f"   storeTimestamp -> foreachBatch called   p50 {lat['to_foreach_batch_ms']['p50']:>7,.0f} ms"
        f"   p99 {lat['to_foreach_batch_ms']['p99']:>7,.0f} ms",
        f"   storeTimestamp -> its rows collected    p50 {lat['to_rows_collected_ms']['p50']:>7,.0f} ms"
        f"   p99 {lat['to_rows_collected_ms']['p99']:>7,.0f} ms",
        "",
        "ratios: " + "   ".join(f"{k} {v:.3f}" for k, v in report["ratios"].items()),
        "",
        f"{'peak memory of the Python processes':46}{'one (HWM)':>14}{'all (PSS)':>14}{'processes':>11}",
    ]
    for key, label in (("b", "b. client pool"), ("c", "c. Spark workers, batch"),
                       ("d", "d. Spark workers, AvailableNow"), ("e", "e. Spark workers, running stream")):
        mem = report["worker_memory"][key]
        lines.append(f"{label:46}{_mib(mem['max_process_mib']):>14}{_mib(mem['peak_total_pss_mib']):>14}"
                     f"{mem['processes']:>11}")
    lines += ["", f"{'CPU seconds per run, by process group':40}{'wall':>6}"
              + "".join(f"{CPU_LABELS[g]:>11}" for g in CPU_GROUPS) + f"{'total':>8}{'us/msg':>8}"]
    for key, row in report["cpu"].items():
        cpu = row["cpu_seconds"]
        lines.append(f"{key + '.':40}{row['wall_seconds']:>6.1f}" + "".join(f"{cpu[g]:>11.1f}" for g in CPU_GROUPS)
                     + f"{cpu['total']:>8.1f}{row['cpu_us_per_message']['total']:>8.0f}")
    lines.append("")
    return "\n".join(lines)


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} MiB"


# -------------------------------------------------------------------------- main


def parse_args(argv: Iterable[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages to produce (default 1,000,000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each of a-d; the median is reported")
    parser.add_argument("--rate", type=int, default=2000, help="msg/s the producer sends during e")
    parser.add_argument("--latency-seconds", type=int, default=30, help="how long the producer sends during e")
    parser.add_argument("--pull-batch-size", type=int, default=32,
                        help="messages per pull, for the Java consumer and the connector alike")
    parser.add_argument("--namesrv-port", type=int, default=DEFAULT_NAMESRV_PORT)
    parser.add_argument("--broker-ports", default=",".join(map(str, DEFAULT_BROKER_PORTS)),
                        help="listen ports of broker-a,broker-b (each also binds port-2 and port+1)")
    parser.add_argument("--workdir", type=Path, default=WORKDIR, help="the benchmark cluster's own work directory")
    parser.add_argument("--topic", default=None, help="topic of the data set (default bench-<messages>)")
    parser.add_argument("--skip-produce", action="store_true",
                        help="keep the stores of an earlier run and reuse --topic as it is")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="after the repeats, profile one more run of b and of c with py-spy into DIR")
    args = parser.parse_args(argv)
    args.broker_ports = tuple(int(port) for port in args.broker_ports.split(","))
    if len(args.broker_ports) != 2:
        parser.error("--broker-ports wants two ports: broker-a,broker-b")
    if args.skip_produce and not args.topic:
        parser.error("--skip-produce needs --topic, the topic an earlier run produced")
    if args.repeats < 1 or args.messages < 1 or args.rate < 1 or args.latency_seconds < 1:
        parser.error("--repeats, --messages, --rate and --latency-seconds must be positive")
    return args


def _terminate(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: Iterable[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    topic = args.topic or f"bench-{args.messages}"
    stamp = time.strftime("%Y%m%d%H%M%S")
    checkpoints = args.workdir / "checkpoints" / stamp
    stop_leftover(args.workdir)
    shutil.rmtree(args.workdir / "checkpoints", ignore_errors=True)
    cluster = Cluster(cluster_config(args))
    spark = None
    pool = None
    try:
        started = time.monotonic()
        log(f"starting RocketMQ in {args.workdir} (name server :{args.namesrv_port}, brokers {args.broker_ports})")
        cluster.start(keep_data=args.skip_produce)
        namesrv = cluster.namesrv_addr
        pbs = args.pull_batch_size
        produce_seconds = None
        if args.skip_produce:
            messages, queues = planned_messages(namesrv, topic, pbs)
            log(f"reusing {topic}: {messages:,} messages on {queues} queues")
        else:
            create_topic(cluster, topic)
            log(f"producing {args.messages:,} messages of {BODY_SIZE} B to {topic}")
            produce_seconds = produce_data(cluster, topic, args.messages)
            wait_planned(namesrv, topic, pbs, args.messages)
            messages, queues = planned_messages(namesrv, topic, pbs)
            log(f"produced in {produce_seconds:.1f}s ({messages / produce_seconds:,.0f} msg/s with JVM start)")
        if messages == 0:
            raise RuntimeError(f"{topic} holds no messages")

        warmup = f"bench-warmup-{stamp}"
        latency_topic = f"bench-latency-{stamp}"
        for name in (warmup, latency_topic):
            create_topic(cluster, name)
        produce_data(cluster, warmup, WARMUP_MESSAGES)
        wait_planned(namesrv, warmup, pbs, WARMUP_MESSAGES)

        log("warming up the client pool (2 processes) and Spark local[2] on the warm-up topic")
        pool = multiprocessing.get_context("spawn").Pool(2)
        pool.map(_pool_warm, range(2))
        run_client(pool, namesrv, warmup, pbs)
        spark = start_spark()
        run_spark_batch(spark, namesrv, warmup, pbs)
        run_available_now(spark, namesrv, warmup, pbs, checkpoints / "warmup")
        # Warm, the same actions on a tiny topic show what each costs regardless of data.
        fixed = {"messages": WARMUP_MESSAGES,
                 "b": run_client(pool, namesrv, warmup, pbs)[1],
                 "c": run_spark_batch(spark, namesrv, warmup, pbs)[1],
                 "d": run_available_now(spark, namesrv, warmup, pbs, checkpoints / "fixed")[1]}
        log(f"fixed cost on {WARMUP_MESSAGES} messages: b {fixed['b']:.1f}s, c {fixed['c']:.1f}s, d {fixed['d']:.1f}s")

        runs: dict[str, list[tuple[int, float]]] = {k: [] for k in "abcd"}
        java_wall: list[float] = []
        phases = {k: Phase() for k in "abcde"}
        servers = server_pids(cluster)

        def measured(key: str, memory_group: str | None, action: Callable[[], tuple[int, float]]) -> float:
            with Sampler(servers, memory_group) as sampler:
                rows, seconds = action()
            phases[key].add(sampler)
            _check(rows, messages, key)
            runs[key].append((rows, seconds))
            return rows / seconds

        for repeat in range(1, args.repeats + 1):
            with Sampler(servers) as sampler:
                rate, wall = java_consume(cluster, topic, messages, pbs)
            phases["a"].add(sampler)
            runs["a"].append((messages, messages / rate))
            java_wall.append(wall)
            log(f"run {repeat}: a. Java consumer {rate:,.0f} msg/s (tool wall {wall:.1f}s with JVM start)")
            rate = measured("b", CLIENT_POOL, lambda: run_client(pool, namesrv, topic, pbs))
            log(f"run {repeat}: b. client, 2 processes {rate:,.0f} msg/s")
            rate = measured("c", SPARK_PYTHON, lambda: run_spark_batch(spark, namesrv, topic, pbs))
            log(f"run {repeat}: c. spark.read -> noop {rate:,.0f} msg/s")
            rate = measured("d", SPARK_PYTHON, lambda: run_available_now(spark, namesrv, topic, pbs,
                                                                         checkpoints / f"d{repeat}"))
            log(f"run {repeat}: d. AvailableNow -> noop {rate:,.0f} msg/s")

        if args.profile is not None:
            profile(args.profile, pool, spark, namesrv, topic, pbs)

        pool.close()
        pool.join()
        pool = None

        latency = run_latency(spark, cluster, latency_topic, args.rate, args.latency_seconds, pbs,
                              checkpoints / "latency", phases["e"])
        log(f"e. latency p50 {latency['to_foreach_batch_ms']['p50']:.0f} ms, "
            f"p99 {latency['to_foreach_batch_ms']['p99']:.0f} ms")

        throughput = {k: summarize(v) for k, v in runs.items()}
        throughput["a"]["tool_wall_seconds_with_jvm_start"] = [round(w, 2) for w in java_wall]
        base = throughput["a"]["median_msgs_per_s"]
        report = {
            "finished": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "parameters": {
                "messages": messages, "body_size": BODY_SIZE, "queues": queues, "topic": topic,
                "repeats": args.repeats, "pull_batch_size": pbs, "rate": args.rate,
                "latency_seconds": args.latency_seconds,
                "produce_seconds": None if produce_seconds is None else round(produce_seconds, 1),
            },
            "machine": machine(),
            "throughput": throughput,
            "fixed_cost_seconds": {k: (round(v, 2) if isinstance(v, float) else v) for k, v in fixed.items()},
            "ratios": {f"{k}/a": round(throughput[k]["median_msgs_per_s"] / base, 3) for k in "bcd"},
            "latency": latency,
            "worker_memory": {k: phases[k].memory() for k in "bcde"},
            "cpu": {k: phases[k].cpu(latency["rows"] if k == "e" else messages) for k in "abcde"},
        }
        report["parameters"]["total_seconds"] = round(time.monotonic() - started)
        print(render(report))
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=2) + "\n")
        log(f"wrote {args.output}")
        return 0
    finally:
        _shutdown(pool, spark, cluster)


def profile(out_dir: Path, pool: Any, spark: Any, namesrv: str, topic: str, pbs: int) -> None:
    """One more run of b and of c under py-spy; see bench_profiling.py."""
    from bench_profiling import Profiler

    with Profiler(out_dir, "b", [worker.pid for worker in pool._pool], follow_children=False) as profiler:
        run_client(pool, namesrv, topic, pbs)
    log("profile of b:\n" + profiler.summary())
    table = _proc_table()
    daemons = [pid for pid in _descendants(table, os.getpid())
               if b"pyspark.daemon" in (_read(f"/proc/{pid}/cmdline") or b"")]
    with Profiler(out_dir, "c", daemons, follow_children=True) as profiler:
        run_spark_batch(spark, namesrv, topic, pbs)
    log("profile of c:\n" + profiler.summary())
    log(f"profiles in {out_dir}")


def _check(rows: int, expected: int, what: str) -> None:
    if rows != expected:
        raise RuntimeError(f"{what} read {rows} rows, expected {expected}")


def _shutdown(pool: Any, spark: Any, cluster: Cluster) -> None:
    steps: list[tuple[str, Callable[[], None]]] = []
    if pool is not None:
        steps.append(("client pool", pool.terminate))
    if spark is not None:
        def stop_spark() -> None:
            for query in spark.streams.active:
                query.stop()
            spark.stop()
        steps.append(("Spark", stop_spark))
    steps.append(("RocketMQ", cluster.stop))
    for name, step in steps:
        try:
            step()
        except Exception as err:  # noqa: BLE001  (keep stopping the rest)
            log(f"stopping {name} failed: {err}")
    log("cluster stopped")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
