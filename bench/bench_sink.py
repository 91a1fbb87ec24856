"""The rocketmq sink against RocketMQ's official Java producer, on a real two-broker cluster.

Starts its own RocketMQ (two brokers, under integration/work/bench-sink), then ``--repeats``
times, interleaved, each to a fresh topic of 8 queues (4 per broker):

  java-sync   the official ``DefaultMQProducer``, 2 threads, one ``send`` at a time each
  java-async  the same, asynchronous sends, ``--window`` in flight per thread
  java-batch  the same, ``send(List)`` of the sink's batch size (``batchMaxBytes``, 1 MiB)
  java-transaction  the official ``TransactionMQProducer``, 2 threads, a local transaction that
              commits, timed until the topic holds every message (its END is one-way)
  sink        ``df.write.format("rocketmq")`` of a cached DataFrame of ``--messages`` rows of
              ``--body-size`` bytes in 2 partitions, local[2]
  sink-exactly-once  the same write with ``deliveryGuarantee=exactly-once``, timed until every
              row is visible

and after each sink run, Spark's share of it: spark-handover, the same rows handed to a Python
function in Arrow batches as to the sink's writer (``mapInArrow``), which only counts them.

The Java runs are timed from the first send to the last answer (the tool's ``produce-bench``),
the sink from the write job's start to its end. Every run is checked: the topic's stored
messages must equal those sent. It prints a table (best and median seconds, msg/s, client CPU per
message, the sink over the best Java mode) and writes it as JSON to bench/results/sink.json. See
docs/development/benchmarks.md (the method) and docs/performance.md (the results). The runs are
in sink_runs.py, the table in sink_report.py.

    python bench/bench_sink.py [--messages N] [--repeats R] [--body-size B] [--window W]
                               [--namesrv-port P] [--broker-ports P1,P2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from common import ROOT, exit_on_sigterm, log

sys.path.insert(0, str(ROOT))

from dataset import (
    BODY_SIZE,
    BROKERS,
    QUEUES_PER_BROKER,
    add_cluster_arguments,
    read_broker_ports,
    server_pids,
    stop_leftover,
)
from integration.cluster import Cluster, ClusterConfig, ClusterError
from integration.cluster_config import BROKER_NAMES, broker_store
from report import machine
from sink_report import render, summarize
from sink_runs import (
    HANDOVER,
    JAVA_MODES,
    SINK,
    SINK_EXACTLY_ONCE,
    THREADS,
    TRANSACTION_TOPIC,
    Run,
    cached_frame,
    create_topic,
    run_handover,
    run_java,
    run_sink,
    start_spark,
    write_sink,
)

WORKDIR = ROOT / "integration" / "work" / "bench-sink"
RESULTS = ROOT / "bench" / "results" / "sink.json"
DEFAULT_MESSAGES = 1_000_000
DEFAULT_REPEATS = 3
# Asynchronous sends in flight per Java thread: the sink keeps up to 64 per task (sink/sender.py: MAX_IN_FLIGHT).
DEFAULT_WINDOW = 64
# Written, untimed, at the start and again just before each timed sink run: Spark stops Python
# workers idle for a minute, and the Java runs take longer than that, so without it the timed
# write would start fresh workers and pay for their start and imports (several CPU seconds,
# tens of microseconds a message on a 200,000-message run), which is no cost of sending.
SINK_WARMUP_MESSAGES = 20_000
# How long a send may wait in a broker's queue before the broker refuses it as busy (200 ms by
# default): on a loaded 2-core machine writers that keep many sends in flight, the Java
# producer's async mode and the sink alike, meet that limit, and a send refused after every
# retry would fail the run. The same brokers serve every contender.
SEND_QUEUE_WAIT_MS = 2000


def parse_args(argv: Iterable[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES, help="messages per run")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="runs of each contender")
    parser.add_argument("--body-size", type=int, default=BODY_SIZE, help="bytes per body")
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="java-async sends in flight per thread")
    add_cluster_arguments(parser, WORKDIR, RESULTS)
    args = parser.parse_args(argv)
    read_broker_ports(parser, args)
    if min(args.repeats, args.messages, args.body_size, args.window) < 1:
        parser.error("--repeats, --messages, --body-size and --window must be positive")
    return args


def main(argv: Iterable[str] | None = None) -> int:
    args = parse_args(argv)
    exit_on_sigterm()
    stamp = time.strftime("%Y%m%d%H%M%S")
    stop_leftover(args.workdir)
    cluster = Cluster(
        ClusterConfig(
            workdir=args.workdir,
            brokers=BROKERS,
            namesrv_port=args.namesrv_port,
            broker_ports=args.broker_ports,
            extra_broker_settings={"waitTimeMillsInSendQueue": str(SEND_QUEUE_WAIT_MS)},
        )
    )
    spark = None
    try:
        started = time.monotonic()
        log(f"starting RocketMQ in {args.workdir} (name server :{args.namesrv_port}, brokers {args.broker_ports})")
        cluster.start()
        servers = server_pids(cluster)
        namesrv = cluster.namesrv_addr
        spark = start_spark()
        log(f"caching {args.messages:,} rows of {args.body_size} B in {THREADS} partitions")
        cache_started = time.perf_counter()
        df = cached_frame(spark, args.messages, args.body_size)
        log(f"cached in {time.perf_counter() - cache_started:.1f}s")
        warm = f"sink-bench-warm-{stamp}"
        create_topic(cluster, warm)
        create_topic(cluster, TRANSACTION_TOPIC)
        warm_df = cached_frame(spark, SINK_WARMUP_MESSAGES, args.body_size)
        write_sink(warm_df, namesrv, warm)

        runs: dict[str, list[Run]] = {f"java-{mode}": [] for mode in JAVA_MODES} | {
            SINK: [],
            HANDOVER: [],
            SINK_EXACTLY_ONCE: [],
        }
        tool_lines: list[dict[str, Any]] = []
        for repeat in range(1, args.repeats + 1):
            for mode in JAVA_MODES:
                topic = f"sink-bench-{stamp}-{repeat}-{mode}"
                create_topic(cluster, topic)
                run, line = run_java(cluster, servers, topic, mode, args.messages, args.body_size, args.window, warm)
                runs[f"java-{mode}"].append(run)
                tool_lines.append(line)
                _logged(repeat, f"java-{mode}", run)
            topic = f"sink-bench-{stamp}-{repeat}-{SINK}"
            create_topic(cluster, topic)
            write_sink(warm_df, namesrv, warm)  # the Python workers again (see SINK_WARMUP_MESSAGES)
            run = run_sink(cluster, servers, df, topic, args.messages)
            runs[SINK].append(run)
            _logged(repeat, SINK, run)
            run_handover(servers, warm_df, SINK_WARMUP_MESSAGES)  # warm as the sink's run was
            run = run_handover(servers, df, args.messages)
            runs[HANDOVER].append(run)
            _logged(repeat, HANDOVER, run)
            topic = f"sink-bench-{stamp}-{repeat}-{SINK_EXACTLY_ONCE}"
            create_topic(cluster, topic)
            write_sink(warm_df, namesrv, warm, exactly_once=True)  # warm, as for the sink
            run = run_sink(cluster, servers, df, topic, args.messages, exactly_once=True)
            runs[SINK_EXACTLY_ONCE].append(run)
            _logged(repeat, SINK_EXACTLY_ONCE, run)

        report = {
            "finished": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "parameters": {
                "messages": args.messages,
                "body_size": args.body_size,
                "queues": BROKERS * QUEUES_PER_BROKER,
                "repeats": args.repeats,
                "threads_or_tasks": THREADS,
                "java_async_window": args.window,
                "total_seconds": round(time.monotonic() - started),
            },
            "machine": machine(),
            **summarize(runs),
            "java_tool_lines": tool_lines,
        }
        print(render(report))
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=2) + "\n")
        log(f"wrote {args.output}")
        return 0
    finally:
        _shutdown(spark, cluster, args.workdir)


def _logged(repeat: int, name: str, run: Run) -> None:
    log(
        f"run {repeat}: {name} {run.messages / run.seconds:,.0f} msg/s ({run.seconds:.1f} s, "
        f"client CPU {run.client_cpu:.1f} s)"
    )


def _shutdown(spark: Any, cluster: Cluster, workdir: Path) -> None:
    """Stop Spark and RocketMQ and delete the brokers' stores (a gibibyte per run), each step even
    if an earlier one failed."""
    try:
        if spark is not None:
            spark.stop()
    except Exception as err:  # noqa: BLE001  (keep stopping the rest)
        log(f"stopping Spark failed: {err}")
    try:
        cluster.stop()
    finally:
        for name in BROKER_NAMES:
            shutil.rmtree(broker_store(workdir, name), ignore_errors=True)
    log("cluster stopped, stores deleted")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
