"""Costs that must grow with the data, not with the number of queues: a big topic.

Starts its own RocketMQ (two brokers, under integration/work/bench-big), creates a topic of
``--queues-per-broker`` queues on each broker and puts ``--messages-per-queue`` messages in
every queue, then measures, for that topic and for a small one of ``--compare-queues-per-broker``
queues a broker with as many messages per queue:

  1. an idle trigger's ``latestOffset``: from a running stream's progress, and called directly
  2. one micro-batch of the whole topic into ``noop``, from a fresh group's first offsets
  3. ``spark.read`` ... ``count()`` after the session's first job, median of ``--read-repeats``
  4. the tasks of a batch: the planner's partitions, and Spark's
  5. the driver's requests per idle trigger, in all and per broker per topic

and the source alone in this process (planning, the offset commit, reading every partition in
one thread), to tell the source's time from Spark's. Every read is checked to deliver each
message exactly once. Prints a table, writes JSON to bench/results/big_topic.json. The Spark
measurements are in big_topic_spark.py; docs/development/benchmarks.md ("Big topics") explains each figure.

    python bench/bench_big_topic.py [--queues-per-broker 512] [--messages-per-queue 10]
                                    [--compare-queues-per-broker 8] [--namesrv-port P]
                                    [--broker-ports P1,P2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from big_topic_spark import (  # noqa: E402
    CPU_SHOWN,
    KEY_COLUMNS,
    SHOWN_IN_ERRORS,
    SPARK_CONF,
    Ranges,
    batch_read,
    check_exactly_once,
    first_batch_and_idle,
    stream_options,
    stream_rows,
)
from common import exit_on_sigterm, log  # noqa: E402
from dataset import add_cluster_arguments, read_broker_ports, stop_leftover  # noqa: E402
from integration.cluster import (  # noqa: E402
    BROKER_NAMES,
    Cluster,
    ClusterConfig,
    ClusterError,
)
from integration.spark import local_spark  # noqa: E402
from report import machine  # noqa: E402
from sampling import CPU_LABELS, SPARK_JVM, SPARK_PYTHON, Sampler  # noqa: E402

WORKDIR = ROOT / "integration" / "work" / "bench-big"
RESULTS = ROOT / "bench" / "results" / "big_topic.json"
BROKERS = len(BROKER_NAMES)
TOPICS = 1  # the source reads one topic here; requests are reported per broker per topic
BODY_SIZE = 1024  # random bytes, as in dataset.py
TOOL_TIMEOUT_S = 600.0
DISPATCH_TIMEOUT_S = 60.0  # consume queues trail the commit log by a moment after a send
DISPATCH_POLL_S = 0.5
MS_PER_S = 1000.0
# CPU the processes burn with nothing to do (the brokers' own housekeeping, Spark's heartbeats),
# sampled this long before the cases, so the CPU figures can be read net of it.
AT_REST_S = 5.0
# What the big topic must do on a 2-core machine.
TARGETS = {
    "idle_latest_offset_ms": 50.0,
    "micro_batch_seconds": 2.0,
    "batch_read_seconds": 3.0,
    "requests_per_broker_topic": 3.0,
}

T = TypeVar("T")


# ------------------------------------------------------------------------ the data


def create_and_fill(cluster: Cluster, topic: str, queues_per_broker: int, per_queue: int) -> Ranges:
    """The topic with ``per_queue`` messages in each queue; returns each queue's [min, max).

    The producer sends ``per_queue`` messages at a time and picks queues round-robin, so one send
    lands on each queue; the brokers' offsets are checked, not assumed.
    """
    cluster.tool("create-topic", "--topic", topic, "--queues", str(queues_per_broker))
    count = BROKERS * queues_per_broker * per_queue
    started = time.perf_counter()
    cluster.tool(
        "produce",
        "--topic",
        topic,
        "--count",
        str(count),
        "--body-size",
        str(BODY_SIZE),
        "--random-body",
        "--batch",
        str(per_queue),
        "--quiet",
        timeout=TOOL_TIMEOUT_S,
    )
    log(f"{topic}: {count:,} messages sent in {time.perf_counter() - started:.1f} s")
    return wait_filled(cluster.namesrv_addr, topic, BROKERS * queues_per_broker, per_queue)


def wait_filled(namesrv: str, topic: str, queues: int, per_queue: int) -> Ranges:
    """Wait until every queue holds ``per_queue`` messages; fail on a queue with more, or on timeout."""
    from rocketmq_spark.source.offset_reader import OffsetReader
    from rocketmq_spark.source.option_model import ReadKind
    from rocketmq_spark.source.options import parse_options

    reader = OffsetReader(parse_options({"nameServer": namesrv, "topic": topic}, kind=ReadKind.BATCH))
    deadline = time.monotonic() + DISPATCH_TIMEOUT_S
    while True:
        listed = sorted(reader.queues(suspect=True))
        latest = reader.max_offsets(listed)
        earliest = reader.min_offsets(listed)
        sizes = {q: latest[q] - earliest[q] for q in listed}
        over = [str(q) for q, n in sizes.items() if n > per_queue]
        if over:
            raise RuntimeError(f"{topic}: queues hold more than {per_queue} messages: {over}")
        if len(listed) == queues and all(n == per_queue for n in sizes.values()):
            return {(q.broker_name, q.queue_id): (earliest[q], latest[q]) for q in listed}
        if time.monotonic() > deadline:
            short = [f"{q}: {n}" for q, n in sizes.items() if n < per_queue]
            raise RuntimeError(
                f"{topic}: {len(listed)} of {queues} queues listed; short queues: {short[:SHOWN_IN_ERRORS]}"
            )
        time.sleep(DISPATCH_POLL_S)


# ------------------------------------------------------------- the source, no Spark


def _timed(action: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    value = action()
    return value, time.perf_counter() - started


def source_alone(namesrv: str, topic: str, expected: Ranges, trigger_ms: int, idle_calls: int) -> dict[str, Any]:
    """The driver's and a task's work in this process, timed and with the requests counted."""
    from rocketmq_spark.remoting.cluster import shared_cluster
    from rocketmq_spark.source.batch_reader import RocketMQBatchReader
    from rocketmq_spark.source.offset_reader import OffsetReader
    from rocketmq_spark.source.option_model import ReadKind
    from rocketmq_spark.source.options import parse_options
    from rocketmq_spark.source.partition_reader import read_partition
    from rocketmq_spark.source.spark_api import ReadAllAvailable
    from rocketmq_spark.source.stream_reader import RocketMQStreamReader

    batch_options = parse_options({"nameServer": namesrv, "topic": topic}, kind=ReadKind.BATCH)
    planners: list[OffsetReader] = []

    def open_planner(options: Any) -> OffsetReader:
        planners.append(OffsetReader(options))
        return planners[-1]

    # The process's one client for this cluster also serves what ran before: count the plan's own.
    before_plan = shared_cluster(batch_options.client).client.requests_sent
    parts, plan_s = _timed(lambda: list(RocketMQBatchReader(batch_options, open_offsets=open_planner).partitions()))
    out: dict[str, Any] = {
        "batch_plan": {
            "partitions": len(parts),
            "ms": round(plan_s * MS_PER_S, 1),
            "requests": planners[0].client.requests_sent - before_plan,
        }
    }

    options = parse_options(stream_options({"nameServer": namesrv, "topic": topic}), kind=ReadKind.STREAM)
    reader = OffsetReader(options)
    stream = RocketMQStreamReader(options, open_offsets=lambda _: reader)
    everything = ReadAllAvailable()

    def step(name: str, action: Callable[[], T]) -> T:
        before = reader.client.requests_sent
        value, seconds = _timed(action)
        out[name] = {"ms": round(seconds * MS_PER_S, 1), "requests": reader.client.requests_sent - before}
        return value

    try:
        start = step("initial_offset", stream.initialOffset)
        end = step("first_latest_offset", lambda: stream.latestOffset(start, everything))
        stream_parts = step("stream_partitions", lambda: list(stream.partitions(start, end)))
        out["stream_partitions"]["partitions"] = len(stream_parts)
        step("commit", lambda: stream.commit(end))
        # A driver restarted on this checkpoint, given the batch it logged but did not plan: it
        # compares every queue with the batch's store times (a search by time and a pull each).
        restarted = RocketMQStreamReader(options, open_offsets=lambda o: OffsetReader(o))
        try:
            step("restart_partitions", lambda: list(restarted.partitions(start, end)))
        finally:
            restarted.stop()
        # Idle triggers, paced like a stream's so the route refresh falls among them as it would.
        # Spark asks reportLatestOffset() after each latestOffset(): timed apart, its requests
        # (none today) counted with the trigger's.
        walls, cpus, reports = [], [], []
        before = reader.client.requests_sent
        for _ in range(idle_calls):
            cpu_before = time.process_time()
            _, seconds = _timed(lambda: stream.latestOffset(end, everything))
            cpus.append((time.process_time() - cpu_before) * MS_PER_S)
            walls.append(seconds * MS_PER_S)
            reports.append(_timed(stream.reportLatestOffset)[1] * MS_PER_S)
            time.sleep(max(0.0, trigger_ms / MS_PER_S - seconds))
        per_trigger = (reader.client.requests_sent - before) / idle_calls
        out["idle_latest_offset"] = {
            "calls": idle_calls,
            "median_ms": round(statistics.median(walls), 2),
            "max_ms": round(max(walls), 2),
            "median_cpu_ms": round(statistics.median(cpus), 2),
            "report_latest_offset_median_ms": round(statistics.median(reports), 2),
            "requests_per_trigger": round(per_trigger, 3),
            "requests_per_broker_topic": round(per_trigger / BROKERS / TOPICS, 3),
        }
    finally:
        stream.stop()

    def read_all() -> tuple[list[Any], int]:
        """Every partition in turn, as one task would; only the key columns are kept (no bodies)."""
        keys = []
        batches = 0
        for part in stream_parts:
            for batch in read_partition(part):
                batches += 1
                keys.append(batch.select(list(KEY_COLUMNS)))
        return keys, batches

    cpu_before = time.process_time()
    (key_batches, batches), read_s = _timed(read_all)
    cpu_s = time.process_time() - cpu_before
    columns = [batch.to_pydict() for batch in key_batches]
    check_exactly_once(
        (key for c in columns for key in zip(*(c[name] for name in KEY_COLUMNS))), expected, "read_partition"
    )
    out["read"] = {
        "partitions": len(stream_parts),
        "seconds": round(read_s, 3),
        "cpu_seconds": round(cpu_s, 3),
        "arrow_batches": batches,
    }
    return out


# ------------------------------------------------------------------------ one case


def run_case(
    cluster: Cluster, spark: Any, args: argparse.Namespace, queues_per_broker: int, stamp: str
) -> dict[str, Any]:
    """One topic: fill it, measure the source alone, then spark.read and a stream, each checked."""
    topic = f"big-{queues_per_broker}x{args.messages_per_queue}-{stamp}"
    namesrv = cluster.namesrv_addr
    expected = create_and_fill(cluster, topic, queues_per_broker, args.messages_per_queue)
    rows = sum(end - start for start, end in expected.values())
    options = {"nameServer": namesrv, "topic": topic}
    log(f"{topic}: the source alone")
    alone = source_alone(namesrv, topic, expected, args.trigger_ms, args.idle_calls)
    log(f"{topic}: spark.read")
    servers = [server.pid for server in cluster.servers]
    read = batch_read(spark, options, expected, args.read_repeats, servers)
    log(f"{topic}: a stream's first micro-batch, then {args.idle_seconds} s idle")
    checkpoints = args.workdir / "checkpoints" / topic
    stream = first_batch_and_idle(
        spark, options, rows, checkpoints / "timed", args.trigger_ms, args.idle_seconds, servers
    )
    checked = stream_rows(spark, options, expected, checkpoints / "checked")
    return {
        "topic": topic,
        "queues": len(expected),
        "queues_per_broker": queues_per_broker,
        "messages_per_queue": args.messages_per_queue,
        "rows": rows,
        "source_alone": alone,
        "spark_read": read,
        "stream": stream,
        "stream_rows_checked": checked,
        "targets_met": targets_met(alone, read, stream),
    }


def targets_met(alone: dict[str, Any], read: dict[str, Any], stream: dict[str, Any]) -> dict[str, bool]:
    """Each target against its figure; the micro-batch is judged by its triggerExecution."""
    return {
        "idle_latest_offset_ms": stream["idle"]["median_duration_ms"].get("latestOffset", 0)
        <= TARGETS["idle_latest_offset_ms"],
        "micro_batch_seconds": stream["batch"]["duration_ms"]["triggerExecution"] / MS_PER_S
        <= TARGETS["micro_batch_seconds"],
        "batch_read_seconds": read["count_seconds_median"] <= TARGETS["batch_read_seconds"],
        "requests_per_broker_topic": alone["idle_latest_offset"]["requests_per_broker_topic"]
        <= TARGETS["requests_per_broker_topic"],
    }


# ------------------------------------------------------------------------ report


def render(report: dict[str, Any]) -> str:
    cases = report["cases"]
    p = report["parameters"]
    m = report["machine"]
    width, cell = 50, 24
    head = "".join(f"{'2 x {} queues'.format(c['queues_per_broker']):>{cell}}" for c in cases)
    lines = [
        "",
        f"rocketmq-spark big-topic benchmark, {report['finished']}",
        f"{p['messages_per_queue']} messages of {BODY_SIZE} B per queue, 2 brokers, local[2]; trigger "
        f"{p['trigger_ms']} ms, {p['idle_seconds']} s idle, {p['idle_calls']} direct calls",
        f"{m['cpus']} x {m['cpu_model']}; Python {m['python']}, PySpark {m['pyspark']}, RocketMQ {m['rocketmq']}",
        "",
        f"{'':{width}}{head}{'target':>10}  met (largest)",
    ]

    def row(label: str, value: Callable[[dict[str, Any]], Any], target: str = "", met: str | None = None) -> None:
        cells = "".join(f"{value(c):>{cell}}" for c in cases)
        verdict = "" if met is None else ("yes" if cases[-1]["targets_met"][met] else "NO")
        lines.append(f"{label:{width}}{cells}{target:>10}  {verdict}")

    row("rows (each checked exactly once)", lambda c: f"{c['rows']:,}")
    row(
        "1. idle latestOffset, Spark progress (ms)",
        lambda c: c["stream"]["idle"]["median_duration_ms"].get("latestOffset", 0),
        "<= 50",
        "idle_latest_offset_ms",
    )
    row(
        "   idle latestOffset, called directly (ms / CPU ms)",
        lambda c: (
            f"{c['source_alone']['idle_latest_offset']['median_ms']:.1f} / "
            f"{c['source_alone']['idle_latest_offset']['median_cpu_ms']:.1f}"
        ),
    )
    row(
        "   reportLatestOffset, called directly (ms)",
        lambda c: f"{c['source_alone']['idle_latest_offset']['report_latest_offset_median_ms']:.1f}",
    )
    row(
        "   idle trigger, triggerExecution (ms)",
        lambda c: c["stream"]["idle"]["median_duration_ms"].get("triggerExecution", 0),
    )
    row(
        "2. micro-batch triggerExecution (s)",
        lambda c: f"{c['stream']['batch']['duration_ms']['triggerExecution'] / MS_PER_S:.2f}",
        "<= 2",
        "micro_batch_seconds",
    )
    row("   micro-batch addBatch (s)", lambda c: f"{c['stream']['batch']['duration_ms']['addBatch'] / MS_PER_S:.2f}")
    row("   start() to the batch's end (s)", lambda c: f"{c['stream']['batch']['wall_seconds_from_start']:.2f}")
    row(
        "3. spark.read count, median (s)",
        lambda c: f"{c['spark_read']['count_seconds_median']:.2f}",
        "<= 3",
        "batch_read_seconds",
    )
    row(
        "4. partitions: planner / df.rdd / micro-batch",
        lambda c: (
            f"{c['source_alone']['batch_plan']['partitions']} / {c['spark_read']['spark_partitions']} / "
            f"{c['source_alone']['stream_partitions']['partitions']}"
        ),
    )
    row(
        "5. driver requests per idle trigger", lambda c: c["source_alone"]["idle_latest_offset"]["requests_per_trigger"]
    )
    row(
        "   per broker per topic",
        lambda c: c["source_alone"]["idle_latest_offset"]["requests_per_broker_topic"],
        "<= 3",
        "requests_per_broker_topic",
    )
    lines.append("the source alone, in this process:")
    for key, label in (
        ("initial_offset", "initialOffset"),
        ("first_latest_offset", "first latestOffset"),
        ("stream_partitions", "micro-batch partitions()"),
        ("commit", "commit"),
        ("restart_partitions", "restarted: first partitions()"),
        ("batch_plan", "spark.read partitions()"),
    ):
        row(
            f"   {label} (ms / requests)",
            lambda c, k=key: f"{c['source_alone'][k]['ms']:.0f} / {c['source_alone'][k]['requests']}",
        )
    row(
        "   read every partition, one thread (s / CPU s)",
        lambda c: f"{c['source_alone']['read']['seconds']:.2f} / {c['source_alone']['read']['cpu_seconds']:.2f}",
    )
    row("   Arrow batches handed out", lambda c: c["source_alone"]["read"]["arrow_batches"])
    lines.append(f"CPU seconds by process group ({' / '.join(CPU_LABELS[g] for g in CPU_SHOWN)}):")
    for label, cpu in (
        ("micro-batch, start() to its end", lambda c: c["stream"]["batch"]["cpu_seconds_from_start"]),
        ("spark.read count, mean", lambda c: c["spark_read"]["cpu_seconds"]),
    ):
        row(f"   {label}", lambda c, f=cpu: " / ".join(f"{f(c)[g]:.1f}" for g in CPU_SHOWN))
    rest = report["cpu_seconds_per_second_at_rest"]
    lines.append(
        f"{'   at rest, per second (the same for all)':{width}}"
        f"{' / '.join(f'{rest[g]:.2f}' for g in CPU_SHOWN):>{cell}}"
    )
    # The brokers' and this process's own background work dwarfs an idle trigger's; not shown.
    idle_groups = (SPARK_JVM, SPARK_PYTHON)
    row(
        f"   an idle trigger, ms ({' / '.join(CPU_LABELS[g] for g in idle_groups)})",
        lambda c: " / ".join(
            f"{c['stream']['idle']['cpu_seconds_per_trigger'][g] * MS_PER_S:.1f}" for g in idle_groups
        ),
    )
    lines.append("")
    return "\n".join(lines)


# -------------------------------------------------------------------------- main


def parse_args(argv: Iterable[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues-per-broker", type=int, default=512, help="queues of the big topic on each broker")
    parser.add_argument("--messages-per-queue", type=int, default=10, help="messages in every queue")
    parser.add_argument(
        "--compare-queues-per-broker",
        type=int,
        default=8,
        help="queues per broker of the small topic measured alongside (0: none)",
    )
    parser.add_argument("--trigger-ms", type=int, default=300, help="processing-time trigger of the idle stream")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="how long the stream runs idle")
    parser.add_argument(
        "--idle-calls",
        type=int,
        default=40,
        help="direct idle latestOffset calls, one per trigger interval (40 x 300 ms spans a route refresh)",
    )
    parser.add_argument("--read-repeats", type=int, default=3, help="timed spark.read counts; the median is reported")
    add_cluster_arguments(parser, WORKDIR, RESULTS)
    args = parser.parse_args(argv)
    read_broker_ports(parser, args)
    if min(args.queues_per_broker, args.messages_per_queue, args.trigger_ms, args.idle_calls, args.read_repeats) < 1:
        parser.error(
            "--queues-per-broker, --messages-per-queue, --trigger-ms, --idle-calls and --read-repeats must be positive"
        )
    if args.compare_queues_per_broker < 0 or args.idle_seconds <= 0:
        parser.error("--compare-queues-per-broker must not be negative, --idle-seconds must be positive")
    return args


def main(argv: Iterable[str] | None = None) -> int:
    args = parse_args(argv)
    exit_on_sigterm()
    stamp = time.strftime("%Y%m%d%H%M%S")
    stop_leftover(args.workdir)
    shutil.rmtree(args.workdir / "checkpoints", ignore_errors=True)
    cluster = Cluster(
        ClusterConfig(
            workdir=args.workdir, brokers=BROKERS, namesrv_port=args.namesrv_port, broker_ports=args.broker_ports
        )
    )
    spark = None
    try:
        started = time.monotonic()
        log(f"starting RocketMQ in {args.workdir} (name server :{args.namesrv_port}, brokers {args.broker_ports})")
        cluster.start()
        spark = local_spark("rocketmq-big-topic-bench", **SPARK_CONF)
        with Sampler([server.pid for server in cluster.servers]) as resting:
            time.sleep(AT_REST_S)
        sizes = [n for n in (args.compare_queues_per_broker, args.queues_per_broker) if n]
        cases = [run_case(cluster, spark, args, n, stamp) for n in sizes]
        report = {
            "finished": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "parameters": {
                "messages_per_queue": args.messages_per_queue,
                "body_size": BODY_SIZE,
                "trigger_ms": args.trigger_ms,
                "idle_seconds": args.idle_seconds,
                "idle_calls": args.idle_calls,
                "read_repeats": args.read_repeats,
                "total_seconds": round(time.monotonic() - started),
            },
            "machine": machine(),
            "targets": TARGETS,
            "cpu_seconds_per_second_at_rest": {
                g: round(v / resting.wall, 4) for g, v in resting.cpu().items() if g in CPU_SHOWN
            },
            "cases": cases,
        }
        print(render(report))
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=2) + "\n")
        log(f"wrote {args.output}")
        return 0
    finally:
        for name, stop in (("Spark", spark.stop if spark is not None else None), ("RocketMQ", cluster.stop)):
            if stop is None:
                continue
            try:
                stop()
            except Exception as err:  # noqa: BLE001  (keep stopping the rest)
                log(f"stopping {name} failed: {err}")
        log("stopped Spark and RocketMQ")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
