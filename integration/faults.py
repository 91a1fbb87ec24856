"""What the fault tests (integration/tests/test_faults.py) share: their cluster, a producer that
keeps sending while a fault lands, a stream in a process of its own, and the exactly-once check.

The cluster has two name servers (every broker registers with both) and two brokers; broker-b
registers ``RELAY_HOST`` and listens on loopback, so that clients reach it only through a
:class:`~integration.relay.Relay` (see that module for why).

The stream is ``sparkjobs.py follow`` in a session of its own (``start_new_session``), so that a
test can SIGKILL the whole Spark driver (the Python driver, its JVM and its Python workers) as
a crash would, and start it again on the same checkpoint.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from integration.cluster_config import BROKER_NAMES, ClusterConfig, shifted
from integration.connect import SPARKJOBS, job_env
from integration.constants import LOOPBACK, OUTPUT_TAIL_CHARS, POLL_S, STORED_TIMEOUT_S
from integration.javatool import json_lines, run_tool, tool_command
from integration.relay import RELAY_HOST
from rocketmq_spark.model import ClientConfig, MessageQueue
from rocketmq_spark.remoting import calls
from rocketmq_spark.remoting.client import RocketMQClient

NAMESRV_PORTS = (shifted(26876), shifted(26886))
BROKER_PORTS = (shifted(27911), shifted(27921))
RELAYED_BROKER = BROKER_NAMES[1]
# Brokers register every 10 s (the least RocketMQ accepts; 30 s by default), so that a name
# server started again learns the routes soon.
REGISTER_PERIOD_MS = 10_000

# Four attempts per task, as a cluster's spark.task.maxFailures gives (local mode's default is one).
MASTER = "local[2,4]"
JOB_START_TIMEOUT_S = 180.0
JOB_EXIT_TIMEOUT_S = 300.0
PRODUCER_TIMEOUT_S = 180.0
KILL_WAIT_S = 30.0


def fault_cluster(workdir: Path) -> ClusterConfig:
    """Two name servers, two brokers, broker-b behind the relay address."""
    return ClusterConfig(
        workdir=workdir,
        brokers=2,
        namesrv_port=NAMESRV_PORTS[0],
        extra_namesrv_ports=NAMESRV_PORTS[1:],
        broker_ports=BROKER_PORTS,
        extra_broker_settings={"registerNameServerPeriod": str(REGISTER_PERIOD_MS)},
        broker_overrides={RELAYED_BROKER: {"brokerIP1": RELAY_HOST, "bindAddress": LOOPBACK}},
        timer_messages=False,
    )


def namesrv_of(config: ClusterConfig, index: int) -> str:
    return f"{LOOPBACK}:{config.namesrv_ports[index]}"


# ------------------------------------------------------------------ producing


def produce_args(topic: str, count: int, prefix: str, *args: str) -> list[str]:
    """The tool's produce arguments for ``count`` messages with bodies and keys ``<prefix>-<i>``."""
    return [
        "--topic",
        topic,
        "--count",
        str(count),
        "--body",
        f"{prefix}-{{i}}",
        "--keys",
        f"{prefix}-{{i}}",
        "--print-body",
        *args,
    ]


def produce(namesrv_addr: str, topic: str, count: int, prefix: str, *args: str) -> list[dict[str, Any]]:
    """Send as ``Producer`` does, and wait for it: one dict per message sent."""
    return run_tool(namesrv_addr, "produce", *produce_args(topic, count, prefix, *args), timeout=PRODUCER_TIMEOUT_S)


class Producer:
    """The official producer, sending ``count`` messages with bodies ``<prefix>-<i>`` in the
    background, in a JVM of its own; ``wait`` gives one dict per message sent."""

    def __init__(self, namesrv_addr: str, workdir: Path, topic: str, count: int, prefix: str, *args: str) -> None:
        self.out = workdir / f"produce-{prefix}.out"
        self.err = workdir / f"produce-{prefix}.err"
        cmd = tool_command(namesrv_addr, "produce", *produce_args(topic, count, prefix, *args))
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)

    def wait_sending(self, timeout_s: float = PRODUCER_TIMEOUT_S) -> None:
        """Until the first message is sent: the producer has its routes and no longer needs a
        name server for a while."""
        deadline = time.monotonic() + timeout_s
        while not self.out.stat().st_size:
            if self.proc.poll() is not None:
                raise self._failed()
            if time.monotonic() > deadline:
                raise AssertionError(f"the producer sent nothing in {timeout_s:.0f}s")
            time.sleep(POLL_S)

    def wait(self, timeout_s: float = PRODUCER_TIMEOUT_S) -> list[dict[str, Any]]:
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the producer did not finish in {timeout_s:.0f}s") from None
        if code != 0:
            raise self._failed()
        return json_lines(self.out.read_text())

    def _failed(self) -> AssertionError:
        return AssertionError(
            f"the producer failed (exit {self.proc.returncode}):\n{self.err.read_text()[-OUTPUT_TAIL_CHARS:]}"
        )

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# ------------------------------------------------------------------ the stream


class StreamJob:
    """``sparkjobs.py follow`` in a session of its own: the query, its checkpoint and its sink."""

    def __init__(self, workdir: Path, options: Mapping[str, str], attempt: int, remote: str | None = None) -> None:
        """A classic session of its own, or with ``remote`` (sc://host:port) a Spark Connect client."""
        self.workdir = workdir
        self.checkpoint = workdir / "checkpoint"
        self.sink = workdir / "sink"
        self.stop_file = workdir / f"stop-{attempt}"
        self.log = workdir / f"job-{attempt}.log"
        session = ["--classic", "--master", MASTER] if remote is None else ["--remote", remote]
        cmd = [
            sys.executable,
            str(SPARKJOBS),
            "follow",
            *session,
            "--sink",
            str(self.sink),
            "--checkpoint",
            str(self.checkpoint),
            "--stop-file",
            str(self.stop_file),
        ]
        for key, value in options.items():
            cmd += ["-o", f"{key}={value}"]
        env = dict(os.environ) if remote is None else job_env()
        self._log: TextIO = open(self.log, "w")  # noqa: SIM115 - open for the process's life
        self.proc = subprocess.Popen(
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**env, "PYTHONUNBUFFERED": "1"},
        )

    def batches(self, kind: str) -> list[int]:
        """The batch ids in the checkpoint's ``offsets`` (planned) or ``commits`` (done) log."""
        folder = self.checkpoint / kind
        return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.exists() else []

    def commit_times(self) -> list[float]:
        folder = self.checkpoint / "commits"
        return sorted(p.stat().st_mtime for p in folder.iterdir() if p.name.isdigit()) if folder.exists() else []

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_commits(self, count: int, timeout_s: float = JOB_START_TIMEOUT_S) -> None:
        """Until the checkpoint holds ``count`` committed batches in all."""
        deadline = time.monotonic() + timeout_s
        while len(self.batches("commits")) < count:
            if not self.alive():
                raise AssertionError(f"the stream ended early:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"fewer than {count} batches committed in {timeout_s:.0f}s:\n{self.tail()}")
            time.sleep(POLL_S)

    def wait_mid_batch(self, timeout_s: float = JOB_START_TIMEOUT_S) -> int:
        """Until a batch is planned (in the offsets log) and not committed; its id."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            planned, done = self.batches("offsets"), set(self.batches("commits"))
            if planned and planned[-1] not in done:
                return planned[-1]
            time.sleep(POLL_S / 10)
        raise AssertionError(f"no batch was under way within {timeout_s:.0f}s")

    def kill(self) -> None:
        """SIGKILL the driver's whole session: Python driver, its JVM, its Python workers."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(KILL_WAIT_S)

    def finish(self, timeout_s: float = JOB_EXIT_TIMEOUT_S) -> dict[str, Any]:
        """Ask the job to stop following and read up to the end; its answer (result or error)."""
        self.stop_file.touch()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the stream did not finish in {timeout_s:.0f}s:\n{self.tail()}") from None
        return self.answer()

    def answer(self) -> dict[str, Any]:
        lines = [line for line in self.log.read_text(errors="replace").splitlines() if line.startswith('{"')]
        if not lines:
            return {"error": {"type": "exit", "message": f"exit {self.proc.returncode}:\n{self.tail()}"}}
        return dict(json.loads(lines[-1]))

    def tail(self, chars: int = OUTPUT_TAIL_CHARS) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def close(self) -> None:
        if self.alive():
            self.kill()
        self._log.close()


def wait_stored_at_end(
    config: ClusterConfig, topic: str, broker: str, queues: int, group: str, timeout_s: float = STORED_TIMEOUT_S
) -> None:
    """Until the group's stored offset of every queue of the broker is the queue's max offset, as
    the broker answers QUERY_CONSUMER_OFFSET: the stream has read and stored all of it just now."""
    address = f"{LOOPBACK}:{config.broker_ports[BROKER_NAMES.index(broker)]}"
    wanted = [MessageQueue(topic, broker, queue_id) for queue_id in range(queues)]
    deadline = time.monotonic() + timeout_s
    with RocketMQClient(ClientConfig((config.namesrv_addr,))) as client:
        while any(
            client.call(address, calls.query_consumer_offset(q, group)).offset
            != client.call(address, calls.max_offset(q))
            for q in wanted
        ):
            if time.monotonic() > deadline:
                raise AssertionError(f"the stream did not store the end of {broker}'s queues in {timeout_s:.0f}s")
            time.sleep(POLL_S / 2)


# ------------------------------------------------------------------ the check


@dataclass
class Outcome:
    """What a scenario saw, for its report."""

    restarts: list[str] = field(default_factory=list)  # the error that ended each run restarted
    longest_gap_s: float = 0.0  # the longest time between two batch commits
    recovered_s: float | None = None  # from the end of the fault to the next batch commit


# How much of the error that ended a run its report keeps: its head, and the exception the Python
# traceback inside it ends with (which the head cuts off).
ERROR_HEAD_CHARS = 200


def restart_reason(answer: Mapping[str, Any]) -> str:
    """The head of the error that ended a run, and the exception line of the first Python
    traceback in it (the line after its last indented one)."""
    error = str(answer.get("error", answer))
    lines = error.replace("\\n", "\n").splitlines()
    starts = [i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line]
    raised = next((line for line in lines[starts[0] + 1 :] if not line.startswith(" ")), "") if starts else ""
    return error[:ERROR_HEAD_CHARS] + (f" ... {raised[: ERROR_HEAD_CHARS * 2]}" if raised else "")


def gaps(times: Sequence[float], since: float) -> tuple[float, float | None]:
    """The longest gap between commit times, and how long after ``since`` the first came."""
    longest = max((b - a for a, b in zip(times, times[1:])), default=0.0)
    after = [t - since for t in times if t >= since]
    return longest, (min(after) if after else None)


def sink_rows(spark: Any, sink: Path) -> list[Any]:
    """What the parquet sink holds, as Spark reads it: only files its _spark_metadata log committed."""
    return spark.read.parquet(str(sink)).select("body", "brokerName", "queueId", "queueOffset").collect()


def check_exactly_once(
    rows: Sequence[Any], produced: Sequence[Mapping[str, Any]], offsets: Sequence[Mapping[str, Any]]
) -> None:
    """Every produced message in the sink once, where the producer was told it went, and the
    group's stored offset of every queue at the queue's end and the sink's end."""
    sent_at = Counter((m["broker"], m["queueId"], m["queueOffset"]) for m in produced)
    sunk_at = Counter((r.brokerName, r.queueId, r.queueOffset) for r in rows)
    missing, extra = sent_at - sunk_at, sunk_at - sent_at
    assert not missing and not extra, (
        f"{len(rows)} rows for {len(produced)} messages; missing {sorted(missing)[:5]}..., extra {sorted(extra)[:5]}..."
    )
    sent_bodies = Counter(base64.b64decode(m["body"]).decode() for m in produced)
    assert Counter(r.body for r in rows) == sent_bodies, "the sink's bodies differ from what was sent"
    sink_end: dict[tuple[str, int], int] = {}
    for broker, queue, offset in sunk_at:
        sink_end[(broker, queue)] = max(sink_end.get((broker, queue), 0), offset + 1)
    stored = {(o["broker"], o["queueId"]): o["consumerOffset"] for o in offsets}
    maximum = {(o["broker"], o["queueId"]): o["maxOffset"] for o in offsets}
    assert stored == sink_end, f"stored offsets {stored} != the sink's end {sink_end}"
    assert maximum == sink_end, f"the queues' max offsets {maximum} != the sink's end {sink_end}"
