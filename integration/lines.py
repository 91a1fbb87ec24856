"""The built wheel on each PySpark 4 line it supports, in virtualenvs of their own.

A user installs PySpark first and the package after it, and expects pip to leave that PySpark
alone. ``line_venv`` does just that in a fresh virtualenv: PySpark of one line (with the unit
tests' own needs) first, its version and location recorded, then the wheel with a plain
``pip install``, and both recorded again with pip's output. ``LineVenvs`` builds the lines in
the background, one after another; ``UnitRun`` runs the unit tests against a line's installed
wheel in the background; ``Driver`` runs one ``sparkjobs.py drive`` process with a line's
interpreter, so a whole module of Spark scenarios costs one Spark start per line, and the test
can produce messages or read the broker between steps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from integration.connect import SPARKJOBS, job_env
from integration.constants import OUTPUT_TAIL_CHARS, POLL_S
from integration.drivejobs import ANSWER_SUFFIX, END_OP, REQUEST_SUFFIX, write_whole

# The newest release of each PySpark 4 line the suite's own virtualenv (4.3) does not cover.
LINES = ("4.0.5", "4.1.4", "4.2.1")
# What the unit tests need besides PySpark; pandas 3 makes PySpark 4.0 to 4.2 warn at import.
TEST_REQUIREMENTS = ("pytest", "pytest-timeout", "hypothesis", "pandas<3")
INSTALL_TIMEOUT_S = 1200.0
PROBE_TIMEOUT_S = 120.0
ANSWER_TIMEOUT_S = 600.0
END_TIMEOUT_S = 60.0
FIND_PYSPARK = "import pyspark, os; print(pyspark.__version__); print(os.path.dirname(pyspark.__file__))"
# pip's lines that name the packages it fetches, removes or installs.
PIP_ACTIVITY = re.compile(
    r"^(Collecting|Downloading|Uninstalling|Successfully uninstalled|Installing collected "
    r"packages:|Successfully installed)\s*(.*)$"
)
# PySpark in such a line's list: a requirement, a name, or a name-version (not pyspark_rocketmq).
PYSPARK_TOKEN = re.compile(r"pyspark(?:$|[\[=<>~!;:]|-\d)", re.IGNORECASE)
# A Java stack trace's frame lines, left out of the log a failure shows.
STACK_FRAME = re.compile(r"^\s+(at |\.\.\. \d+ more)")
# What pip adds to say which requirement pulled a package in: "(from pyspark[sql]...)".
WHY = re.compile(r"\s*\(from .*\)\s*$")


class LineError(RuntimeError):
    """A virtualenv could not be built, or a driven Spark process gave no answer."""


@dataclass(frozen=True)
class Dist:
    """The sdist and wheel ``python -m build`` made of the working tree, and twine's verdict."""

    wheel: Path
    sdist: Path
    twine: str


def build_dist(repo: Path, out: Path) -> Dist:
    run(sys.executable, "-m", "build", "--outdir", str(out), str(repo), cwd=out)
    wheel, sdist = next(out.glob("*.whl")), next(out.glob("*.tar.gz"))
    twine = run(sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist), cwd=out)
    return Dist(wheel, sdist, twine)


@dataclass(frozen=True)
class PySparkInstall:
    version: str
    location: str


@dataclass(frozen=True)
class LineVenv:
    """A virtualenv with one PySpark line and the wheel, and what installing the wheel did."""

    line: str
    root: Path
    before: PySparkInstall
    after: PySparkInstall
    wheel_output: str

    @property
    def python(self) -> str:
        return str(self.root / "bin" / "python")

    def run(self, *args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
        """This interpreter in isolated mode: only what is installed here can be imported."""
        return subprocess.run(
            [self.python, "-I", *args],
            capture_output=True,
            text=True,
            cwd=cwd,
            env=job_env(),
            timeout=timeout,
            check=False,
        )

    def pip_touched_pyspark(self) -> list[str]:
        """pip's lines of the wheel's install that fetched, removed or installed PySpark."""
        return [
            line
            for line in self.wheel_output.splitlines()
            if (match := PIP_ACTIVITY.match(line.strip()))
            and any(PYSPARK_TOKEN.match(token) for token in re.split(r"[,\s]+", WHY.sub("", match.group(2))))
        ]


def run(*cmd: str, cwd: Path, timeout: float = INSTALL_TIMEOUT_S) -> str:
    """Run a command; its output (stdout and stderr), or an error that shows it."""
    done = subprocess.run(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
        env=job_env(),
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise LineError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-OUTPUT_TAIL_CHARS:]}")
    return done.stdout


def find_pyspark(python: str, cwd: Path) -> PySparkInstall:
    version, location = run(python, "-I", "-c", FIND_PYSPARK, cwd=cwd, timeout=PROBE_TIMEOUT_S).split()
    return PySparkInstall(version, location)


def line_venv(line: str, wheel: Path, root: Path) -> LineVenv:
    """A fresh virtualenv: PySpark ``line`` first, then the wheel with a plain ``pip install``."""
    run(sys.executable, "-m", "venv", str(root), cwd=root.parent)
    python = str(root / "bin" / "python")
    pip = (python, "-m", "pip", "install", "--disable-pip-version-check")
    run(*pip, "-q", f"pyspark[sql]=={line}", *TEST_REQUIREMENTS, cwd=root.parent)
    before = find_pyspark(python, root.parent)
    output = run(*pip, str(wheel), cwd=root.parent)
    return LineVenv(line, root, before, find_pyspark(python, root.parent), output)


class LineVenvs:
    """Each line's virtualenv, built once per test run (the wheel test and the line tests share
    the 4.2 one) and removed at the end. ``prepare`` builds them one after another in the
    background, so that pip unpacking the next line's PySpark overlaps the current line's Spark
    scenarios, which mostly wait on triggers and brokers."""

    def __init__(self, wheel: Path, workdir: Path) -> None:
        self.wheel = wheel
        self.workdir = workdir
        self.builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="line-venvs")
        self.builds: dict[str, Future[LineVenv]] = {}

    def prepare(self, lines: Sequence[str]) -> None:
        for line in lines:
            if line not in self.builds:
                self.builds[line] = self.builder.submit(self._build, line)

    def get(self, line: str) -> LineVenv:
        self.prepare([line])
        return self.builds[line].result(timeout=INSTALL_TIMEOUT_S * len(self.builds))

    def _build(self, line: str) -> LineVenv:
        folder = self.workdir / line
        folder.mkdir(parents=True)
        return line_venv(line, self.wheel, folder / "venv")

    def remove(self) -> None:
        for build in self.builds.values():
            build.cancel()
        self.builder.shutdown(wait=True)
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.builds.clear()


class UnitRun:
    """The unit tests against a virtualenv's installed wheel, run in the background: a copy of
    tests/ in a folder of its own, so that the checkout's package is not on the path beside them."""

    def __init__(self, venv: LineVenv, tests: Path, workdir: Path) -> None:
        shutil.copytree(tests, workdir / tests.name)
        self.output = workdir / "unit.log"
        self.venv = venv
        with open(self.output, "wb") as out:
            self.process = subprocess.Popen(
                [venv.python, "-I", "-m", "pytest", "-q", "-p", "no:cacheprovider", tests.name],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=workdir,
                env=job_env(),
                start_new_session=True,
            )

    def wait(self, timeout: float) -> tuple[int, str]:
        """The run's exit code and the end of its output."""
        code = self.process.wait(timeout)
        return code, self.output.read_text(errors="replace")[-OUTPUT_TAIL_CHARS:]

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


class Driver:
    """A ``sparkjobs.py drive`` process run by a virtualenv's interpreter: each ``call`` is one
    request, answered in order by the same classic Spark session."""

    def __init__(self, python: str, workdir: Path, env: Mapping[str, str] | None = None) -> None:
        """``env``: variables added to the process's environment (a fault test's pause point)."""
        self.inbox = workdir / "inbox"
        self.inbox.mkdir(parents=True)
        self.log = workdir / "drive.log"
        self.sent = 0
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [python, "-I", str(SPARKJOBS), "drive", "--classic", "--inbox", str(self.inbox)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=workdir,
                env={**job_env(), **(env or {})},
                start_new_session=True,
            )

    def call(self, op: str, **args: Any) -> Any:
        """Send one request and wait for its answer; Spark's error, if it refused, as LineError."""
        answer = self.answer(self.submit(op, **args))
        if "error" in answer:
            error = answer["error"]
            raise LineError(
                f"{op} failed: {error['type']}: {error['message'][:OUTPUT_TAIL_CHARS]}\n"
                f"The Spark process's log, stack traces left out:\n{self.notices()}"
            )
        return answer["result"]

    def submit(self, op: str, **args: Any) -> int:
        """Send one request and return at once: its number, for ``answer``."""
        number, self.sent = self.sent, self.sent + 1
        write_whole(self.inbox / f"{number}{REQUEST_SUFFIX}", json.dumps({"op": op, "args": args}))
        return number

    def answered(self, number: int) -> bool:
        return (self.inbox / f"{number}{ANSWER_SUFFIX}").exists()

    def kill(self) -> None:
        """SIGKILL the whole process group: the Python driver, its JVM and its Python workers."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def answer(self, number: int) -> dict[str, Any]:
        """The answer to request ``number`` (its result or Spark's error), once written."""
        path = self.inbox / f"{number}{ANSWER_SUFFIX}"
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while not path.exists():
            if self.process.poll() is not None:
                raise LineError(f"the Spark process exited ({self.process.returncode}):\n{self.output()}")
            if time.monotonic() > deadline:
                raise LineError(f"no answer to request {number} in {ANSWER_TIMEOUT_S:.0f}s:\n{self.output()}")
            time.sleep(POLL_S)
        answer: dict[str, Any] = json.loads(path.read_text())
        return answer

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-OUTPUT_TAIL_CHARS:]

    def notices(self) -> str:
        """The end of the log without Java stack frames: the warnings and errors a failure follows."""
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(line for line in lines if not STACK_FRAME.match(line))[-OUTPUT_TAIL_CHARS:]

    def end(self) -> None:
        """Ask the process to stop its queries and Spark; end its process group if it lingers."""
        if self.process.poll() is None:
            write_whole(self.inbox / f"{self.sent}{REQUEST_SUFFIX}", json.dumps({"op": END_OP, "args": {}}))
            try:
                self.process.wait(END_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()
