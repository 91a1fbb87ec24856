"""A Spark standalone cluster on loopback from the installed PySpark: a master and two workers.

pip's PySpark has ``bin/spark-class`` but not ``sbin/start-master.sh``, so each daemon is a
``spark-class`` process of its own, in a session of its own so that stopping it ends its JVM;
``stop`` ends exactly the processes ``start`` started, by their ids. The ports sit in a block of
their own moved by ``ROCKETMQ_PORT_OFFSET`` like every harness port, and the web UIs get ports
there too (the daemons have no switch to turn theirs off).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pyspark

from integration.cluster_config import shifted
from integration.connect import job_env
from integration.constants import LOOPBACK, POLL_S, SPARK_READY_TIMEOUT_S, STOP_TIMEOUT_S
from integration.processes import port_open, tail

SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
MASTER_MAIN = "org.apache.spark.deploy.master.Master"
WORKER_MAIN = "org.apache.spark.deploy.worker.Worker"
MASTER_PORT = shifted(32077)
MASTER_UI_PORT = shifted(32080)
WORKER_PORTS = (shifted(32078), shifted(32079))
WORKER_UI_PORTS = (shifted(32081), shifted(32082))
WORKER_CORES = 1
WORKER_MEMORY = "1g"
# How the master's log says a worker joined.
WORKER_REGISTERED = "Registering worker"


class StandaloneError(RuntimeError):
    """A daemon exited or never became ready."""


def spark_env() -> dict[str, str]:
    """What the daemons and spark-submit run with: loopback only, none of the tests' PYSPARK_*,
    and SPARK_HOME as a Spark installation sets it (pip's spark-submit would otherwise look for
    it with the PYSPARK_DRIVER_PYTHON the recipe sets, which has no PySpark)."""
    return {**job_env(), "SPARK_LOCAL_IP": LOOPBACK, "SPARK_HOME": str(SPARK_HOME)}


class StandaloneCluster:
    """A master and two workers of one core each; ``with`` starts and stops them."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{MASTER_PORT}"

    def _spawn(self, name: str, *args: str) -> Path:
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as out:
            self.processes.append(
                subprocess.Popen(
                    [str(SPARK_CLASS), *args],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=self.workdir,
                    env=spark_env(),
                    start_new_session=True,
                )
            )
        return log

    def start(self) -> StandaloneCluster:
        taken = [p for p in (MASTER_PORT, MASTER_UI_PORT, *WORKER_PORTS, *WORKER_UI_PORTS) if port_open(p)]
        if taken:
            raise StandaloneError(f"ports {taken} on {LOOPBACK} are taken; set ROCKETMQ_PORT_OFFSET to move them")
        self.workdir.mkdir(parents=True, exist_ok=True)
        master_log = self._spawn(
            "master", MASTER_MAIN, "--host", LOOPBACK, "--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI_PORT)
        )
        try:
            for index, (port, ui_port) in enumerate(zip(WORKER_PORTS, WORKER_UI_PORTS)):
                work = self.workdir / f"worker-{index}"
                work.mkdir(exist_ok=True)
                self._spawn(
                    f"worker-{index}",
                    WORKER_MAIN,
                    "--host",
                    LOOPBACK,
                    "--port",
                    str(port),
                    "--webui-port",
                    str(ui_port),
                    "--cores",
                    str(WORKER_CORES),
                    "--memory",
                    WORKER_MEMORY,
                    "--work-dir",
                    str(work),
                    self.master_url,
                )
            self._wait_workers(master_log)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_workers(self, master_log: Path) -> None:
        deadline = time.monotonic() + SPARK_READY_TIMEOUT_S
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise StandaloneError(f"a Spark daemon exited ({process.returncode}):\n{tail(str(master_log))}")
            if master_log.read_text(errors="replace").count(WORKER_REGISTERED) >= len(WORKER_PORTS):
                return
            time.sleep(POLL_S)
        raise StandaloneError(f"the workers did not register in {SPARK_READY_TIMEOUT_S:.0f}s:\n{tail(str(master_log))}")

    def stop(self) -> None:
        """SIGTERM to each daemon's process group, SIGKILL to any that lingers."""
        processes, self.processes = self.processes, []
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
