"""A local Spark Connect server for the tests, and the jobs they run in processes of their own.

The server is an ordinary local Spark with the Connect plugin (``sparkjobs.py serve``), bound to
loopback on a port of its own: ``ROCKETMQ_SPARK_CONNECT_PORT``, else 15002 (Spark's default)
moved by ``ROCKETMQ_PORT_OFFSET`` like every other harness port, so checkouts running their tests
side by side do not meet. ``stop`` ends the process ``start`` started, by its id, with the JVM and
Python workers in its process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from integration.cluster_config import shifted
from integration.constants import LOOPBACK, OUTPUT_TAIL_CHARS, POLL_S, SPARK_READY_TIMEOUT_S, STOP_TIMEOUT_S
from integration.processes import port_open, tail
from integration.sparkjobs import SERVE_READY

SPARKJOBS = Path(__file__).resolve().parent / "sparkjobs.py"
SPARK_CONNECT_DEFAULT_PORT = 15002
CONNECT_PORT = int(os.environ.get("ROCKETMQ_SPARK_CONNECT_PORT", shifted(SPARK_CONNECT_DEFAULT_PORT)))
JOB_TIMEOUT_S = 600.0
# What a Spark Connect client's session reports as its module.
CONNECT_CLIENT = "pyspark.sql.connect.session"
# The tests' own session exports these for its workers; a job or server of another
# interpreter must choose its own, and must not mistake itself for a Connect client.
INHERITED_SPARK_ENV = (
    "PYSPARK_PYTHON",
    "PYSPARK_DRIVER_PYTHON",
    "SPARK_REMOTE",
    "SPARK_CONNECT_MODE_ENABLED",
    "SPARK_LOCAL_REMOTE",
    "SPARK_API_MODE",
)


class ConnectError(RuntimeError):
    """The Connect server would not start, or a job gave no answer."""


def job_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in INHERITED_SPARK_ENV}


class ConnectServer:
    """A Spark Connect server run by ``python`` (whose packages its Python workers see)."""

    def __init__(self, workdir: Path, port: int = CONNECT_PORT, python: str = sys.executable) -> None:
        self.workdir = workdir
        self.port = port
        self.python = python
        self.log = workdir / f"connect-{port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://{LOOPBACK}:{self.port}"

    def start(self) -> ConnectServer:
        if port_open(self.port):
            raise ConnectError(
                f"port {self.port} on {LOOPBACK} is taken; set ROCKETMQ_SPARK_CONNECT_PORT "
                "or ROCKETMQ_PORT_OFFSET to move the Connect server"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [self.python, "-I", str(SPARKJOBS), "serve", "--port", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                env=job_env(),
                start_new_session=True,
            )
        deadline = time.monotonic() + SPARK_READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ConnectError(f"the Connect server exited ({self.process.returncode}):\n{tail(str(self.log))}")
            if SERVE_READY in self.log.read_text(errors="replace") and port_open(self.port):
                return self
            time.sleep(POLL_S)
        self.stop()
        raise ConnectError(f"the Connect server was not ready in {SPARK_READY_TIMEOUT_S:.0f}s:\n{tail(str(self.log))}")

    def stop(self) -> None:
        """SIGTERM (the server stops Spark), then SIGKILL to its process group if it lingers."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> ConnectServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_job(job: str, args: Sequence[str], cwd: Path, python: str = sys.executable) -> dict[str, Any]:
    """Run a ``sparkjobs.py`` job; its JSON answer (``result`` or ``error``)."""
    cwd.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [python, "-I", str(SPARKJOBS), job, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=job_env(),
        timeout=JOB_TIMEOUT_S,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise ConnectError(f"job {job} gave no answer (exit {done.returncode}):\n{done.stderr[-OUTPUT_TAIL_CHARS:]}")
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def job_result(job: str, args: Sequence[str], cwd: Path, python: str = sys.executable) -> dict[str, Any]:
    answer = run_job(job, args, cwd, python)
    if "error" in answer:
        error = answer["error"]
        raise ConnectError(f"job {job} failed: {error['type']}: {error['message'][:OUTPUT_TAIL_CHARS]}")
    result: dict[str, Any] = answer["result"]
    return result


def job_error(job: str, args: Sequence[str], cwd: Path, python: str = sys.executable) -> str:
    """The message of the error a job was expected to end with."""
    answer = run_job(job, args, cwd, python)
    if "error" not in answer:
        raise AssertionError(f"job {job} was expected to fail but returned {str(answer)[:1000]}")
    message: str = answer["error"]["message"]
    return message


def source_options(**options: str) -> list[str]:
    """``-o key=value`` arguments for a job."""
    return [arg for key, value in options.items() for arg in ("-o", f"{key}={value}")]
