"""The rocketmq source against RocketMQ's official Java client, on a real two-broker cluster.

Starts its own RocketMQ (two brokers, under integration/work/bench), produces ``--messages``
messages of 1 KiB random bytes over 8 queues with the official Java producer, then measures,
``--repeats`` times each (interleaved; the median and the best run are reported):

  a. the official Java ``DefaultLitePullConsumer`` reading every queue from its start
  b. the project's client alone, no Spark: plan with ``RocketMQBatchReader.partitions()``, read
     every partition with ``read_partition`` in 2 worker processes, count the rows
  c. ``spark.read.format("rocketmq")...load()`` written to the ``noop`` sink, local[2]
  c-narrow. the same with a user schema of the body and the offset columns only
  d. a ``Trigger.AvailableNow`` stream over the same data into the ``noop`` sink
  p. a window of about 10% of the data by storeTimestamp, ``spark.read`` ... ``where`` into the
     ``noop`` sink, with filter pushdown and without (pushdown_window.py)

and once, with a stream running under the default trigger while the Java producer sends at a
steady rate to another topic,

  e. the latency from each row's storeTimestamp to the start of its foreachBatch call, and the
     stages of each micro-batch from Spark's progress reports (latency.py)
  e-fs. the same with Spark's FileSystem-based checkpoint manager, which renames the checkpoint's
     log files without running a process per rename

plus the peak memory of the Python worker processes and the CPU time of every process group
(brokers, Java tool, Spark JVM, Python workers). It prints a table and writes it as JSON to
bench/results/latest.json. See docs/development/benchmarks.md (the method) and docs/performance.md
(the results). The readers are in readers.py, the sampling of /proc in sampling.py, the table in
report.py.

    python bench/bench_compare.py [--messages N] [--repeats R] [--rate MSG_PER_S]
                                  [--latency-seconds S] [--pull-batch-size N]
                                  [--namesrv-port P] [--broker-ports P1,P2]
                                  [--topic T --skip-produce] [--profile DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from common import ROOT, exit_on_sigterm, log

sys.path.insert(0, str(ROOT))

from dataset import (
    BODY_SIZE,
    add_cluster_arguments,
    cluster_config,
    create_topic,
    planned_messages,
    produce_data,
    read_broker_ports,
    server_pids,
    source_options,
    stop_leftover,
    wait_planned,
)
from integration.cluster import (
    Cluster,
    ClusterError,
)
from latency import file_system_checkpoint_manager, run_latency
from pushdown_window import PushdownCase
from readers import (
    NARROW_SCHEMA,
    java_consume,
    pool_warm,
    run_available_now,
    run_client,
    run_spark_batch,
    start_spark,
)
from report import READERS, machine, ratios, render, summarize, target
from sampling import CLIENT_POOL, SPARK_PYTHON, Phase, Sampler, descendants, proc_table, read_proc

WORKDIR = ROOT / "integration" / "work" / "bench"
RESULTS = ROOT / "bench" / "results" / "latest.json"
WARMUP_MESSAGES = 4000
POOL_PROCESSES = 2  # like local[2]'s two task slots
DEFAULT_MESSAGES = 1_000_000
DEFAULT_REPEATS = 3
DEFAULT_RATE = 2000
DEFAULT_LATENCY_SECONDS = 30
DEFAULT_PULL_BATCH_SIZE = 32
# The readers that read the whole data set in every repeat, and the process group whose memory
# each one's row reports.
MEMORY_GROUPS: dict[str, str | None] = {
    "a": None,
    "b": CLIENT_POOL,
    "c": SPARK_PYTHON,
    "c-narrow": SPARK_PYTHON,
    "d": SPARK_PYTHON,
}
LATENCY = "e"
PUSHDOWN_NEEDS = "filter pushdown to Python sources needs PySpark 4.1 or later"


def parse_args(argv: Iterable[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--messages", type=int, default=DEFAULT_MESSAGES, help=f"messages to produce (default {DEFAULT_MESSAGES:,})"
    )
    parser.add_argument(
        "--repeats", type=int, default=DEFAULT_REPEATS, help="runs of each reader; the median and the best are reported"
    )
    parser.add_argument("--rate", type=int, default=DEFAULT_RATE, help="msg/s the producer sends during e")
    parser.add_argument(
        "--latency-seconds", type=int, default=DEFAULT_LATENCY_SECONDS, help="how long the producer sends during e"
    )
    parser.add_argument(
        "--pull-batch-size",
        type=int,
        default=DEFAULT_PULL_BATCH_SIZE,
        help="messages per pull, for the Java consumer and the connector alike",
    )
    add_cluster_arguments(parser, WORKDIR, RESULTS)
    parser.add_argument("--topic", default=None, help="topic of the data set (default bench-<messages>)")
    parser.add_argument(
        "--skip-produce", action="store_true", help="keep the stores of an earlier run and reuse --topic as it is"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        metavar="DIR",
        help="after the repeats, profile one more run of b, c and d with py-spy into DIR",
    )
    args = parser.parse_args(argv)
    read_broker_ports(parser, args)
    if args.skip_produce and not args.topic:
        parser.error("--skip-produce needs --topic, the topic an earlier run produced")
    if args.repeats < 1 or args.messages < 1 or args.rate < 1 or args.latency_seconds < 1:
        parser.error("--repeats, --messages, --rate and --latency-seconds must be positive")
    return args


def main(argv: Iterable[str] | None = None) -> int:
    args = parse_args(argv)
    exit_on_sigterm()
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
        latency_fs_topic = f"bench-latency-fs-{stamp}"
        for name in (warmup, latency_topic, latency_fs_topic):
            create_topic(cluster, name)
        produce_data(cluster, warmup, WARMUP_MESSAGES)
        wait_planned(namesrv, warmup, pbs, WARMUP_MESSAGES)

        log(f"warming up the client pool ({POOL_PROCESSES} processes) and Spark local[2] on the warm-up topic")
        pool = multiprocessing.get_context("spawn").Pool(POOL_PROCESSES)
        pool.map(pool_warm, range(POOL_PROCESSES))
        run_client(pool, namesrv, warmup, pbs)
        spark = start_spark()
        run_spark_batch(spark, namesrv, warmup, pbs)
        run_spark_batch(spark, namesrv, warmup, pbs, NARROW_SCHEMA)
        run_available_now(spark, namesrv, warmup, pbs, checkpoints / "warmup")
        warm_pushdown = _pushdown_case(spark, source_options(namesrv, warmup, pbs), WARMUP_MESSAGES)
        if warm_pushdown is not None:  # the first pushed read plans in a cold process
            warm_pushdown.run_once()
        # Warm, the same actions on a tiny topic show what each costs regardless of data.
        fixed = {
            "messages": WARMUP_MESSAGES,
            "b": run_client(pool, namesrv, warmup, pbs)[1],
            "c": run_spark_batch(spark, namesrv, warmup, pbs)[1],
            "d": run_available_now(spark, namesrv, warmup, pbs, checkpoints / "fixed")[1],
        }
        log(f"fixed cost on {WARMUP_MESSAGES} messages: b {fixed['b']:.1f}s, c {fixed['c']:.1f}s, d {fixed['d']:.1f}s")

        runs: dict[str, list[tuple[int, float]]] = {k: [] for k in READERS}
        java_wall: list[float] = []
        phases = {k: Phase() for k in [*READERS, LATENCY]}
        servers = server_pids(cluster)
        pushdown = _pushdown_case(spark, source_options(namesrv, topic, pbs), messages)
        reads: dict[str, Callable[[int], tuple[int, float]]] = {
            "b": lambda _: run_client(pool, namesrv, topic, pbs),
            "c": lambda _: run_spark_batch(spark, namesrv, topic, pbs),
            "c-narrow": lambda _: run_spark_batch(spark, namesrv, topic, pbs, NARROW_SCHEMA),
            "d": lambda repeat: run_available_now(spark, namesrv, topic, pbs, checkpoints / f"d{repeat}"),
        }

        for repeat in range(1, args.repeats + 1):
            with Sampler(servers) as sampler:
                rate, wall = java_consume(cluster, topic, messages, pbs)
            phases["a"].add(sampler)
            runs["a"].append((messages, messages / rate))
            java_wall.append(wall)
            log(f"run {repeat}: a. Java consumer {rate:,.0f} msg/s (tool wall {wall:.1f}s with JVM start)")
            for key, read in reads.items():
                with Sampler(servers, MEMORY_GROUPS[key]) as sampler:
                    rows, seconds = read(repeat)
                phases[key].add(sampler)
                _check(rows, messages, key)
                runs[key].append((rows, seconds))
                log(f"run {repeat}: {key}. {READERS[key]} {rows / seconds:,.0f} msg/s")
            if pushdown is not None:
                pushed_s, plain_s = pushdown.run_once()
                log(f"run {repeat}: p. window with pushdown {pushed_s:.2f}s, without {plain_s:.2f}s")

        if args.profile is not None:
            profile(args.profile, pool, spark, namesrv, topic, pbs, checkpoints)

        pool.close()
        pool.join()
        pool = None

        latency = run_latency(
            spark,
            cluster,
            latency_topic,
            args.rate,
            args.latency_seconds,
            pbs,
            checkpoints / "latency",
            phases[LATENCY],
        )
        log(
            f"e. latency p50 {latency['to_foreach_batch_ms']['p50']:.0f} ms, "
            f"p99 {latency['to_foreach_batch_ms']['p99']:.0f} ms"
        )
        manager = file_system_checkpoint_manager(spark)
        latency_fs = None
        if manager is None:
            log("e-fs: skipped, this Spark has no FileSystem-based checkpoint manager")
        else:
            latency_fs = run_latency(
                spark,
                cluster,
                latency_fs_topic,
                args.rate,
                args.latency_seconds,
                pbs,
                checkpoints / "latency-fs",
                None,
                checkpoint_manager=manager,
            )
            log(
                f"e-fs. latency p50 {latency_fs['to_foreach_batch_ms']['p50']:.0f} ms, "
                f"p99 {latency_fs['to_foreach_batch_ms']['p99']:.0f} ms"
            )

        throughput = {k: summarize(v) for k, v in runs.items()}
        throughput["a"]["tool_wall_seconds_with_jvm_start"] = [round(w, 2) for w in java_wall]
        ratio_table = ratios(throughput)
        report = {
            "finished": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "parameters": {
                "messages": messages,
                "body_size": BODY_SIZE,
                "queues": queues,
                "topic": topic,
                "repeats": args.repeats,
                "pull_batch_size": pbs,
                "rate": args.rate,
                "latency_seconds": args.latency_seconds,
                "narrow_schema": NARROW_SCHEMA,
                "produce_seconds": None if produce_seconds is None else round(produce_seconds, 1),
            },
            "machine": machine(),
            "throughput": throughput,
            "fixed_cost_seconds": {k: (round(v, 2) if isinstance(v, float) else v) for k, v in fixed.items()},
            "ratios": ratio_table,
            "target": target(ratio_table),
            "pushdown": {"skipped": PUSHDOWN_NEEDS} if pushdown is None else pushdown.report(),
            "latency": latency,
            "latency_fs_checkpoint": latency_fs,
            "worker_memory": {
                k: phases[k].memory()
                for k, group in [*MEMORY_GROUPS.items(), (LATENCY, SPARK_PYTHON)]
                if group is not None
            },
            "cpu": {k: phases[k].cpu(latency["rows"] if k == LATENCY else messages) for k in phases},
        }
        report["parameters"]["total_seconds"] = round(time.monotonic() - started)
        print(render(report))
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=2) + "\n")
        log(f"wrote {args.output}")
        return 0
    finally:
        _shutdown(pool, spark, cluster)


def _pushdown_case(spark: Any, options: dict[str, str], messages: int) -> PushdownCase | None:
    """p, where this PySpark can push filters to a Python source (4.1 and later)."""
    from rocketmq_spark.source.spark_api import FILTER_PUSHDOWN

    if not FILTER_PUSHDOWN:
        log(f"p: skipped, {PUSHDOWN_NEEDS}")
        return None
    started = time.perf_counter()
    case = PushdownCase(spark, options, messages)
    log(f"p: window chosen in {time.perf_counter() - started:.1f}s")
    return case


def profile(out_dir: Path, pool: Any, spark: Any, namesrv: str, topic: str, pbs: int, checkpoints: Path) -> None:
    """One more run of b, c and d under py-spy; see bench_profiling.py."""
    from bench_profiling import Profiler

    with Profiler(out_dir, "b", [worker.pid for worker in pool._pool], follow_children=False) as profiler:
        run_client(pool, namesrv, topic, pbs)
    log("profile of b:\n" + profiler.summary())
    # Spark's Python daemons fork the task workers, and the stream's reader process for d.
    daemons = [
        pid
        for pid in descendants(proc_table(), os.getpid())
        if b"pyspark.daemon" in (read_proc(f"/proc/{pid}/cmdline") or b"")
    ]
    with Profiler(out_dir, "c", daemons, follow_children=True) as profiler:
        run_spark_batch(spark, namesrv, topic, pbs)
    log("profile of c:\n" + profiler.summary())
    with Profiler(out_dir, "d", daemons, follow_children=True) as profiler:
        run_available_now(spark, namesrv, topic, pbs, checkpoints / "profile")
    log("profile of d:\n" + profiler.summary())
    log(f"profiles in {out_dir}")


def _check(rows: int, expected: int, what: str) -> None:
    if rows != expected:
        raise RuntimeError(f"{what} read {rows} rows, expected {expected}")


def _shutdown(pool: Any, spark: Any, cluster: Cluster) -> None:
    """Stop what the run started, each step even if an earlier one failed."""
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
