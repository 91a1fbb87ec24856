"""The report of bench_sink.py: each contender's runs summed up, the sink against the fastest Java
mode, and the table printed at the end (the JSON holds the same)."""

from __future__ import annotations

import statistics
from typing import Any

from common import MIB
from sink_runs import HANDOVER, JAVA_TRANSACTION, SINK, SINK_EXACTLY_ONCE, Run

US_PER_S = 1e6
SECONDS_PER_MINUTE = 60
# The project's target: the sink at least as fast as the Java producer's fastest mode, best runs.
TARGET_AT_LEAST = 1.0
# Exactly once against RocketMQ's Java transactional producer, both timed until visible.
EXACTLY_ONCE_TARGET = 2.0
LABELS = {
    "java-sync": "Java DefaultMQProducer, sync sends, 2 threads",
    "java-async": "Java DefaultMQProducer, async sends, 2 threads",
    "java-batch": "Java DefaultMQProducer, batch sends, 2 threads",
    JAVA_TRANSACTION: "Java TransactionMQProducer, 2 threads, to visible",
    SINK: "df.write.format(rocketmq), local[2], 2 tasks",
    SINK_EXACTLY_ONCE: "the same, exactly-once, to visible",
    HANDOVER: "  Spark's hand-over alone (mapInArrow, counts)",
}
JAVA_PREFIX = "java-"


def _contender(runs: list[Run]) -> dict[str, Any]:
    rates = [r.messages / r.seconds for r in runs]
    best = max(range(len(runs)), key=lambda k: rates[k])
    cpu = [r.client_cpu / r.messages * US_PER_S for r in runs]
    return {
        "best_seconds": round(runs[best].seconds, 2),
        "median_seconds": round(statistics.median(r.seconds for r in runs), 2),
        "best_msgs_per_s": round(rates[best]),
        "median_msgs_per_s": round(statistics.median(rates)),
        "client_cpu_us_per_message_best_run": round(cpu[best], 1),
        "client_cpu_us_per_message_median": round(statistics.median(cpu), 1),
        "broker_cpu_seconds_median": round(statistics.median(r.broker_cpu for r in runs), 1),
        "runs_seconds": [round(r.seconds, 2) for r in runs],
        "runs_client_cpu_seconds": [round(r.client_cpu, 2) for r in runs],
        "client_cpu_us_per_message_by_group_median": {
            group: round(statistics.median(r.client_cpu_groups[group] / r.messages * US_PER_S for r in runs), 1)
            for group in runs[0].client_cpu_groups
        },
    }


def summarize(runs: dict[str, list[Run]]) -> dict[str, Any]:
    """Every contender's numbers, and the sink over the fastest Java mode (best over best, median
    over median)."""
    table = {name: _contender(rs) for name, rs in runs.items()}
    java = {name: row for name, row in table.items() if name.startswith(JAVA_PREFIX) and name != JAVA_TRANSACTION}
    fastest = max(java, key=lambda name: java[name]["best_msgs_per_s"])
    sink = table[SINK]
    ratio = sink["best_msgs_per_s"] / java[fastest]["best_msgs_per_s"]
    return {
        "contenders": table,
        "fastest_java": fastest,
        "ratio": {
            "sink/fastest_java_best": round(ratio, 3),
            "sink/fastest_java_median": round(sink["median_msgs_per_s"] / java[fastest]["median_msgs_per_s"], 3),
            "at_least": TARGET_AT_LEAST,
            "met": ratio >= TARGET_AT_LEAST,
        },
        "cpu_us_per_message_median": _cpu_split(table, fastest),
        "exactly_once": _exactly_once(table),
    }


def _exactly_once(table: dict[str, Any]) -> dict[str, Any] | None:
    """Exactly once over the Java transactional producer (best over best, median over median)."""
    if SINK_EXACTLY_ONCE not in table or JAVA_TRANSACTION not in table:
        return None
    mine, java = table[SINK_EXACTLY_ONCE], table[JAVA_TRANSACTION]
    ratio = mine["best_msgs_per_s"] / java["best_msgs_per_s"]
    return {
        "sink-exactly-once/java-transaction_best": round(ratio, 3),
        "sink-exactly-once/java-transaction_median": round(mine["median_msgs_per_s"] / java["median_msgs_per_s"], 3),
        "at_least": EXACTLY_ONCE_TARGET,
        "met": ratio >= EXACTLY_ONCE_TARGET,
    }


def _cpu_split(table: dict[str, Any], fastest: str) -> dict[str, float] | None:
    """The sink's CPU per message split into Spark's hand-over and the sink's own, beside the
    fastest Java mode's (medians), when the hand-over ran."""
    if HANDOVER not in table:
        return None
    sink = table[SINK]["client_cpu_us_per_message_median"]
    handover = table[HANDOVER]["client_cpu_us_per_message_median"]
    return {
        "sink": sink,
        "spark_handover": handover,
        "sink_own": round(sink - handover, 1),
        fastest: table[fastest]["client_cpu_us_per_message_median"],
    }


def render(report: dict[str, Any]) -> str:
    """The table printed at the end of a run."""
    p = report["parameters"]
    m = report["machine"]
    r = report["ratio"]
    lines = [
        "",
        f"rocketmq-spark sink benchmark, {report['finished']}",
        f"{p['messages']:,} messages x {p['body_size']} B per run, {p['queues']} queues on 2 brokers, "
        f"{p['repeats']} run(s) each, a fresh topic per run; the whole run took "
        f"{p['total_seconds'] // SECONDS_PER_MINUTE} min {p['total_seconds'] % SECONDS_PER_MINUTE} s",
        f"{m['cpus']} x {m['cpu_model']}, {m['memory_gib']} GiB; Python {m['python']}, PySpark {m['pyspark']}, "
        f"{m['java']}, RocketMQ {m['rocketmq']}",
        "",
        f"{'writer':48}{'best s':>8}{'median s':>10}{'best msg/s':>12}{'median':>9}{'MiB/s':>7}"
        f"{'CPU us/msg':>11}   runs (s)",
    ]
    for name, row in report["contenders"].items():
        lines.append(
            f"{LABELS.get(name, name):48}{row['best_seconds']:>8.1f}{row['median_seconds']:>10.1f}"
            f"{row['best_msgs_per_s']:>12,}{row['median_msgs_per_s']:>9,}"
            f"{row['best_msgs_per_s'] * p['body_size'] / MIB:>7.1f}"
            f"{row['client_cpu_us_per_message_median']:>11.0f}   {', '.join(f'{s:.1f}' for s in row['runs_seconds'])}"
        )
    lines += [
        "CPU us/msg: the client's CPU per message, median run (Java: the JVM's own over the timed span;"
        " sink: the Spark JVM and its Python workers, from /proc)",
        "sink CPU us/msg by process group, median run: "
        + ", ".join(
            f"{group} {value:.0f}"
            for group, value in report["contenders"][SINK]["client_cpu_us_per_message_by_group_median"].items()
        ),
        *_split_line(report.get("cpu_us_per_message_median"), report["fastest_java"]),
        "",
        f">>> target sink / fastest Java mode ({report['fastest_java']}) >= {TARGET_AT_LEAST:.2f} on best runs: "
        f"{r['sink/fastest_java_best']:.3f} (on medians {r['sink/fastest_java_median']:.3f}), "
        f"{'met' if r['met'] else 'NOT met'}",
        *_exactly_once_line(report.get("exactly_once")),
        "",
    ]
    return "\n".join(lines)


def _exactly_once_line(eo: dict[str, Any] | None) -> list[str]:
    if eo is None:
        return []
    return [
        f">>> target exactly-once sink / Java TransactionMQProducer >= {EXACTLY_ONCE_TARGET:.2f} on best runs: "
        f"{eo['sink-exactly-once/java-transaction_best']:.3f} "
        f"(on medians {eo['sink-exactly-once/java-transaction_median']:.3f}), {'met' if eo['met'] else 'NOT met'}"
    ]


def _split_line(split: dict[str, float] | None, fastest: str) -> list[str]:
    if split is None:
        return []
    return [
        f"sink CPU us/msg, median runs: {split['sink']:.1f} = Spark's hand-over {split['spark_handover']:.1f}"
        f" + the sink's own {split['sink_own']:.1f}; {fastest}: {split[fastest]:.1f}"
    ]
