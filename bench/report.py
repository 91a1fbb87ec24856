"""The benchmark's report: the machine it ran on, each reader's runs summed up, the ratios the
project's targets are stated in, and the table printed at the end (the JSON holds the same)."""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
from pathlib import Path
from typing import Any

from common import KIB, MIB, ROOT
from sampling import CPU_GROUPS, CPU_LABELS

POM = ROOT / "integration" / "pom.xml"
SECONDS_PER_MINUTE = 60

# The readers of the throughput table, in its order, and what each one is.
READERS = {
    "a": "Java DefaultLitePullConsumer (official)",
    "b": "project client, no Spark, 2 processes",
    "c": "spark.read -> noop, local[2]",
    "c-narrow": "spark.read, body + offset columns -> noop",
    "d": "readStream AvailableNow -> noop, local[2]",
}
BASELINE = "a"
NARROW, FULL = "c-narrow", "c"
# The project's acceptance target: spark.read at least this many times the Java client, best runs.
TARGET_RATIO = "c/a"
TARGET_AT_LEAST = 1.5
TARGET_ON = "best"
MEMORY_ROWS = (
    ("b", "b. client pool"),
    ("c", "c. Spark workers, batch"),
    ("c-narrow", "c-narrow. Spark workers, batch"),
    ("d", "d. Spark workers, AvailableNow"),
    ("e", "e. Spark workers, running stream"),
)


def machine() -> dict[str, Any]:
    """What the numbers were measured on: CPU, memory, kernel, and the versions that matter."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kib = int(
            next(ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal")).split()[1]
        )
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
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "memory_gib": round(mem_kib / KIB / KIB, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "java": java_version,
        "pyspark": pyspark.__version__,
        "pyarrow": pyarrow.__version__,
        "rocketmq": rocketmq,
    }


def summarize(runs: list[tuple[int, float]]) -> dict[str, Any]:
    """One reader's runs: the median and the best rate (msg/s), every run's rate and seconds."""
    rates = [rows / seconds for rows, seconds in runs]
    return {
        "median_msgs_per_s": round(statistics.median(rates)),
        "best_msgs_per_s": round(max(rates)),
        "runs_msgs_per_s": [round(r) for r in rates],
        "runs_seconds": [round(s, 2) for _, s in runs],
    }


def ratios(throughput: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Every reader over a, and c-narrow over c, on medians and on best runs (best over best)."""
    pairs = [(key, BASELINE) for key in READERS if key != BASELINE] + [(NARROW, FULL)]
    return {
        kind: {
            f"{top}/{bottom}": round(
                throughput[top][f"{kind}_msgs_per_s"] / throughput[bottom][f"{kind}_msgs_per_s"], 3
            )
            for top, bottom in pairs
        }
        for kind in ("median", "best")
    }


def target(ratio_table: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Where the run stands against the acceptance target."""
    value = ratio_table[TARGET_ON][TARGET_RATIO]
    return {
        "ratio": TARGET_RATIO,
        "on": f"{TARGET_ON} runs",
        "at_least": TARGET_AT_LEAST,
        "value": value,
        "met": value >= TARGET_AT_LEAST,
    }


def render(report: dict[str, Any]) -> str:
    """The table printed at the end of a run."""
    p = report["parameters"]
    m = report["machine"]
    lines = [
        "",
        f"rocketmq-spark benchmark, {report['finished']}",
        f"{p['messages']:,} messages x {p['body_size']} B random bodies, {p['queues']} queues on 2 brokers, "
        f"pull batch {p['pull_batch_size']}, {p['repeats']} run(s) each; the whole run took "
        f"{p['total_seconds'] // SECONDS_PER_MINUTE} min {p['total_seconds'] % SECONDS_PER_MINUTE} s",
        f"{m['cpus']} x {m['cpu_model']}, {m['memory_gib']} GiB; Python {m['python']}, PySpark {m['pyspark']}, "
        f"{m['java']}, RocketMQ {m['rocketmq']}",
        "",
        *_throughput(report),
        *_pushdown(report.get("pushdown")),
        *_latency(report["latency"], p["latency_seconds"], "e", "stream, default trigger"),
        *_latency(
            report.get("latency_fs_checkpoint"),
            p["latency_seconds"],
            "e-fs",
            "the same, Spark's FileSystem-based checkpoint manager",
        ),
        "",
        f"{'peak memory of the Python processes':46}{'one (HWM)':>14}{'all (PSS)':>14}{'processes':>11}",
    ]
    for key, label in MEMORY_ROWS:
        mem = report["worker_memory"][key]
        lines.append(
            f"{label:46}{_mib(mem['max_process_mib']):>14}{_mib(mem['peak_total_pss_mib']):>14}{mem['processes']:>11}"
        )
    lines += [
        "",
        f"{'CPU seconds per run, by process group':40}{'wall':>6}"
        + "".join(f"{CPU_LABELS[g]:>11}" for g in CPU_GROUPS)
        + f"{'total':>8}{'us/msg':>8}",
    ]
    for key, row in report["cpu"].items():
        cpu = row["cpu_seconds"]
        lines.append(
            f"{key + '.':40}{row['wall_seconds']:>6.1f}"
            + "".join(f"{cpu[g]:>11.1f}" for g in CPU_GROUPS)
            + f"{cpu['total']:>8.1f}{row['cpu_us_per_message']['total']:>8.0f}"
        )
    lines.append("")
    return "\n".join(lines)


def _throughput(report: dict[str, Any]) -> list[str]:
    p = report["parameters"]
    t = report["throughput"]
    r = report["ratios"]
    lines = [
        f"{'':10}{'reader (msg/s)':42}{'median':>9}{'best':>9}{'MiB/s':>7}{'x a':>7}{'x a best':>9}   runs (msg/s)"
    ]
    for key, label in READERS.items():
        row = t[key]
        ratio = f"{key}/{BASELINE}"
        median_x, best_x = (
            ("1.00", "1.00") if key == BASELINE else (f"{r['median'][ratio]:.2f}", f"{r['best'][ratio]:.2f}")
        )
        lines.append(
            f"{key + '.':10}{label:42}{row['median_msgs_per_s']:>9,}{row['best_msgs_per_s']:>9,}"
            f"{row['median_msgs_per_s'] * p['body_size'] / MIB:>7.1f}{median_x:>7}{best_x:>9}"
            f"   {', '.join(f'{v:,}' for v in row['runs_msgs_per_s'])}"
        )
    narrow = f"{NARROW}/{FULL}"
    goal = report["target"]
    fixed = report["fixed_cost_seconds"]
    return lines + [
        f"{'':10}x a: median over a's median; x a best: best run over a's best run",
        f"{'':10}{NARROW} x {FULL}: median {r['median'][narrow]:.2f}, best {r['best'][narrow]:.2f}",
        f"{'':10}fixed cost, same actions on the {fixed['messages']:,}-message warm-up topic: "
        f"b {fixed['b']:.1f} s, c {fixed['c']:.1f} s, d {fixed['d']:.1f} s",
        "",
        f">>> target {goal['ratio']} >= {goal['at_least']:.2f} on {goal['on']}: {goal['ratio']} = "
        f"{goal['value']:.3f} (on medians {r['median'][goal['ratio']]:.3f}), {'met' if goal['met'] else 'NOT met'}",
        "",
        "ratios, medians: " + "   ".join(f"{k} {v:.3f}" for k, v in r["median"].items()),
        "ratios, best:    " + "   ".join(f"{k} {v:.3f}" for k, v in r["best"].items()),
    ]


def _pushdown(case: dict[str, Any] | None) -> list[str]:
    if case is None:
        return []
    if "skipped" in case:
        return ["", f"p. filter pushdown: skipped ({case['skipped']})"]
    window = case["window"]
    lines = [
        "",
        f"p. spark.read, where storeTimestamp between two times -> noop, local[2]: {window['rows']:,} rows, "
        f"{window['rows'] / window['topic_rows']:.1%} of the topic",
        f"   window {window['from']} .. {window['until']}; seconds: median of {len(case['with']['runs_seconds'])}",
    ]
    for key, label in (("with", "with pushdown"), ("without", "without")):
        row = case[key]
        lines.append(
            f"   {label:15}{row['median_seconds']:>6.2f} s   rows returned {row['rows_returned']:>9,}"
            f"   rows pulled {row['rows_pulled']:>9,} ({row['pulled_from']})"
            f"   runs {', '.join(f'{s:.2f}' for s in row['runs_seconds'])} s"
        )
    lines.append(
        f"   speedup {case['speedup']:.2f}x (median without / median with), "
        f"{case['pulled_share']:.1%} of the rows pulled"
    )
    return lines


def _latency(lat: dict[str, Any] | None, seconds: int, name: str, title: str) -> list[str]:
    if lat is None:
        return ["", f"{name}. {title}: skipped (this Spark has no FileSystem-based checkpoint manager)"]
    kept_up = "" if lat["producer_kept_up"] else ": the producer fell behind"
    stages = lat.get("stages_ms", {})
    return [
        "",
        f"{name}. {title}; Java producer at {lat['rate_target']:,} msg/s for {seconds} s "
        f"(stored at {lat['rate_stored']:,} msg/s{kept_up})",
        f"   {lat['rows']:,} rows in {lat['micro_batches']} micro-batches "
        f"(median {lat['rows_per_batch_median']:,} rows, {lat['collect_seconds_median']} s to read one)",
        f"   storeTimestamp -> foreachBatch called   p50 {lat['to_foreach_batch_ms']['p50']:>7,.0f} ms"
        f"   p99 {lat['to_foreach_batch_ms']['p99']:>7,.0f} ms",
        f"   storeTimestamp -> its rows collected    p50 {lat['to_rows_collected_ms']['p50']:>7,.0f} ms"
        f"   p99 {lat['to_rows_collected_ms']['p99']:>7,.0f} ms",
        "   a micro-batch's stages (ms)      " + "".join(f"{stage:>17}" for stage in stages),
        f"   {'p50':33}" + "".join(f"{v['p50']:>17,.0f}" for v in stages.values()),
        f"   {'p99':33}" + "".join(f"{v['p99']:>17,.0f}" for v in stages.values()),
    ]


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} MiB"
