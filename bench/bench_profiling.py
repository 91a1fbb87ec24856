"""Sampling profiles of reader processes with py-spy, and a text summary of where they spend time.

``bench_compare.py --profile DIR`` attaches ``py-spy record`` to the b pool's processes and to
Spark's Python daemons (following the workers they fork) for one extra run of b and of c, then
writes each profile as collapsed stacks (``<run>-<pid>.txt``, the input of flamegraph tools) and
``<run>-summary.txt``: the functions with the most samples, by own time and including callees.
Only the thread holding the GIL is sampled (``--gil``): the profile shows where Python code runs,
not threads waiting on a socket or a lock. Work in C that releases the GIL (Arrow kernels, system
calls) is not in it; the CPU table of bench_compare.py gives each process group's total. Samples
are taken without pausing the process (``--nonblocking``), so the profile costs the reader little.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

SAMPLES_PER_S = 250
STOP_TIMEOUT_S = 30.0
TOP = 25
# "function (path/to/file.py:123)" -> "function (file.py)": lines of one function add up.
_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>[^():]*)(?::\d+)?\)$")


def py_spy() -> str:
    """The py-spy executable next to this interpreter, or on PATH."""
    local = Path(sys.executable).with_name("py-spy")
    found = str(local) if local.exists() else shutil.which("py-spy")
    if found is None:
        raise SystemExit("--profile needs py-spy: pip install py-spy (make bench installs it)")
    return found


class Profiler:
    """``py-spy record`` on a set of processes for as long as the ``with`` block runs."""

    def __init__(self, out_dir: Path, run: str, pids: Iterable[int], follow_children: bool) -> None:
        self.out_dir = out_dir
        self.run = run
        self.pids = sorted(pids)
        self.follow_children = follow_children
        self.recorders: list[tuple[Path, subprocess.Popen[bytes]]] = []

    def __enter__(self) -> Profiler:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for pid in self.pids:
            output = self.out_dir / f"{self.run}-{pid}.txt"
            command = [
                py_spy(),
                "record",
                "--pid",
                str(pid),
                "--format",
                "raw",
                "--output",
                str(output),
                "--rate",
                str(SAMPLES_PER_S),
                "--nonblocking",
                "--gil",
            ]
            if self.follow_children:
                command.append("--subprocesses")
            self.recorders.append(
                (output, subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            )
        return self

    def __exit__(self, *exc: object) -> None:
        for _, recorder in self.recorders:
            recorder.send_signal(signal.SIGINT)  # py-spy writes its output when interrupted
        for output, recorder in self.recorders:
            try:
                _, err = recorder.communicate(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                recorder.kill()
                _, err = recorder.communicate()
            if not output.exists():
                print(
                    f"py-spy wrote no profile for {output.name}: {err.decode(errors='replace').strip()}",
                    file=sys.stderr,
                )

    def summary(self) -> str:
        stacks: Counter[tuple[str, ...]] = Counter()
        for output, _ in self.recorders:
            if output.exists():
                stacks.update(read_collapsed(output))
        text = summarize(
            stacks,
            f"{self.run}: processes {', '.join(map(str, self.pids))}"
            f"{' and the workers they forked' if self.follow_children else ''}",
        )
        (self.out_dir / f"{self.run}-summary.txt").write_text(text)
        return text


def read_collapsed(path: Path) -> Counter[tuple[str, ...]]:
    """Collapsed stacks (``frame;frame;... count``), frames reduced to function and file."""
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        frames, _, count = line.rpartition(" ")
        if not frames or not count.isdigit():
            continue
        stacks[tuple(_short(frame) for frame in frames.split(";"))] += int(count)
    return stacks


def _short(frame: str) -> str:
    match = _FRAME.match(frame)
    if match is None:
        return frame
    return f"{match['function']} ({os.path.basename(match['path'])})"


def summarize(stacks: Counter[tuple[str, ...]], title: str) -> str:
    total = sum(stacks.values())
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for frames, count in stacks.items():
        if frames:
            own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    lines = [title, f"{total} samples at {SAMPLES_PER_S}/s of the thread holding the GIL", ""]
    for heading, counter in (("own time", own), ("including callees", inclusive)):
        lines.append(f"top {TOP} by {heading}:")
        for frame, count in counter.most_common(TOP):
            lines.append(f"  {100 * count / max(total, 1):5.1f}%  {frame}")
        lines.append("")
    return "\n".join(lines)
