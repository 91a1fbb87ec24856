"""What the benchmark's processes cost while one timed action runs: CPU seconds by group of
processes and the peak memory of the Python processes that read, both from /proc.

Kept apart from the readers so that bench_compare.py and bench_big_topic.py sample alike.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from common import KIB

RSS_POLL_S = 0.2
# clear_refs value that resets a process's VmHWM (peak resident set) to its current size.
CLEAR_PEAK_RSS = "5"
US_PER_S = 1e6


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SPARK_JVM_MARK = b"org.apache.spark.deploy.SparkSubmit"
POOL_MARK = b"spawn_main"
# CPU groups, in the order reports show them.
ROCKETMQ, JAVA_TOOL, DRIVER, SPARK_JVM, SPARK_PYTHON, CLIENT_POOL = (
    "rocketmq",
    "java_tool",
    "driver",
    "spark_jvm",
    "spark_python",
    "client_pool",
)
CPU_GROUPS = (ROCKETMQ, JAVA_TOOL, DRIVER, SPARK_JVM, SPARK_PYTHON, CLIENT_POOL)
CPU_LABELS = {
    ROCKETMQ: "RocketMQ",
    JAVA_TOOL: "Java tool",
    DRIVER: "driver",
    SPARK_JVM: "Spark JVM",
    SPARK_PYTHON: "Spark py",
    CLIENT_POOL: "b pool",
}


def proc_table() -> dict[int, tuple[int, float]]:
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


def descendants(table: dict[int, tuple[int, float]], root: int) -> list[int]:
    """Every process below ``root``: Spark's Python workers are its grandchildren and further."""
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


def read_proc(path: str) -> bytes | None:
    """A /proc file's bytes, or None once the process has gone."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _status_kib(pid: int, *keys: bytes) -> list[int] | None:
    """Fields of /proc/<pid>/status (or smaps_rollup for Pss) in KiB; None if the process is gone."""
    text = read_proc(f"/proc/{pid}/smaps_rollup" if keys == (b"Pss:",) else f"/proc/{pid}/status")
    if text is None:
        return None
    values = dict.fromkeys(keys, 0)
    for line in text.splitlines():
        for key in keys:
            if line.startswith(key):
                values[key] = int(line.split()[1])
    return [values[k] for k in keys]


class Sampler:
    """While one timed action runs, samples /proc in a thread (every ``RSS_POLL_S``) for

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
        table = proc_table()
        for pid in self._watched(table):
            self.cpu_first[pid] = table[pid][1]
            if self.groups.get(pid) == self.memory_group:
                try:
                    with open(f"/proc/{pid}/clear_refs", "w") as f:
                        f.write(CLEAR_PEAK_RSS)
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
        command = read_proc(f"/proc/{pid}/cmdline") or b""
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
        for pid in [self.me, *sorted(descendants(table, self.me))]:
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
        table = proc_table()
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
        """CPU seconds each group spent between entry and exit."""
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
            "per_process": [
                {"pid": pid, "role": self.roles.get(pid, ""), "peak_mib": round(kib / KIB, 1)}
                for pid, kib in sorted(self.peaks.items())
            ],
        }

    def cpu(self, messages: int) -> dict[str, Any]:
        """Mean CPU seconds per run by group, and per message in microseconds."""
        runs = len(self.cpu_runs)
        seconds = {g: sum(r[g] for r in self.cpu_runs) / runs for g in CPU_GROUPS}
        total = sum(seconds.values())
        return {
            "wall_seconds": round(sum(self.walls) / runs, 2),
            "cpu_seconds": {**{g: round(v, 2) for g, v in seconds.items()}, "total": round(total, 2)},
            "cpu_us_per_message": {
                **{g: round(v / messages * US_PER_S, 1) for g, v in seconds.items()},
                "total": round(total / messages * US_PER_S, 1),
            },
        }
