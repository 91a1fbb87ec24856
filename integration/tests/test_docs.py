"""The documentation's blocks, as a reader runs them (integration/snippets.py has the markers).

Every fenced block of README.md and docs/ is marked tested or illustrative; this module runs the
quickstart's hello world on its launcher path (``make cluster-start``, RocketMQ's mqadmin and the
project's producer, ``hello.py`` with ``python``, the batch count, the write back into the topic
read by RocketMQ's Java consumer), progress.md's lag on a run of
that topic, and the demo from the built
wheel in a fresh virtualenv, outside the checkout; test_cluster_recipe.py runs the cluster
recipe of docs/operations.md. The only changes to a block are the substitutions each test lists:
the name server's address, and the commands' interpreter where the block names a checkout's.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from integration.cluster import run_tool
from integration.cluster_config import PORT_OFFSET
from integration.connect import job_env
from integration.constants import LOOPBACK, OUTPUT_TAIL_CHARS, POLL_S, REPO
from integration.lines import Dist, run
from integration.snippets import ILLUSTRATIVE, TESTED, all_blocks, documented, shell, substitute
from integration.support import ClusterHandle

pytestmark = [pytest.mark.integration, pytest.mark.docs]

# Every label a test here or in test_cluster_recipe.py runs.
TESTED_LABELS = {
    "hello-start",
    "hello-produce",
    "hello-program",
    "hello-run",
    "hello-batch",
    "hello-write",
    "demo",
    "cluster-pack",
    "cluster-backfill",
    "cluster-stream",
    "progress-read",
    "progress-lag",
}
DOCUMENTED_NAMESRV = "127.0.0.1:9876"
DOCUMENTED_NAMESRV_PORT = 9876
# The hello world's own RocketMQ (make cluster-start) sits this far above the run's other ports,
# clear of the tests' cluster and of every port block the harness uses.
HELLO_PORT_SHIFT = 3000
HELLO_MESSAGES = 10
HELLO_TIMEOUT_S = 300.0
DEMO_TIMEOUT_S = 900.0
DEMO_PAID = 1500
CONSOLE_BODY = re.compile(r"\|(message \d+)\s*\|")
PYTHON_BIN = str(Path(sys.executable).parent)
# The query progress.md's blocks read: the hello world's topic to the end, a few messages a batch.
PROGRESS_STREAM = """query = (spark.readStream.format("rocketmq").option("nameServer", "{namesrv}")
         .option("topic", "TopicTest").option("consumerGroup", "hello-progress")
         .option("consumeFromWhere", "CONSUME_FROM_FIRST_OFFSET").option("maxMessagesPerTrigger", "4").load()
         .writeStream.format("noop").option("checkpointLocation", "{checkpoint}")
         .trigger(availableNow=True).start())
query.awaitTermination()
"""


def reader_env(**extra: str) -> dict[str, str]:
    """A shell as the quickstart's reader has it: the checkout's virtualenv activated."""
    return {
        **job_env(),
        "PATH": os.pathsep.join([PYTHON_BIN, os.environ.get("PATH", "")]),
        "VIRTUAL_ENV": str(Path(PYTHON_BIN).parent),
        **extra,
    }


def test_every_block_is_tested_or_illustrative() -> None:
    blocks = all_blocks()
    unmarked = [b.where for b in blocks if b.kind is None]
    assert not unmarked, f"blocks with neither '<!-- tested: label -->' nor '<!-- illustrative: why -->': {unmarked}"
    reasonless = [b.where for b in blocks if b.kind == ILLUSTRATIVE and not b.note]
    assert not reasonless, f"illustrative blocks without a reason: {reasonless}"
    labels = sorted(b.note for b in blocks if b.kind == TESTED)
    assert labels == sorted(TESTED_LABELS), f"labels in the docs {labels}, run by tests {sorted(TESTED_LABELS)}"


def test_quickstart_hello_world(tmp_path: Path) -> None:
    offset = PORT_OFFSET + HELLO_PORT_SHIFT
    namesrv = f"{LOOPBACK}:{DOCUMENTED_NAMESRV_PORT + offset}"
    env = reader_env(ROCKETMQ_PORT_OFFSET=str(offset))
    try:
        shell(documented("hello-start"), REPO, env)
        shell(documented("hello-produce"), REPO, env)
        program = substitute(documented("hello-program"), {DOCUMENTED_NAMESRV: namesrv})
        (tmp_path / "hello.py").write_text(program)
        bodies = console_bodies(documented("hello-run"), tmp_path, env)
        assert bodies == {f"message {i}" for i in range(HELLO_MESSAGES)}
        count = substitute(documented("hello-batch"), {DOCUMENTED_NAMESRV: namesrv}).strip()
        # The snippet is one expression in the hello world's session: the program up to it.
        lines = program.splitlines()
        session = "\n".join(lines[: next(i for i, line in enumerate(lines) if line.startswith("spark = ")) + 1])
        # The progress page's blocks after an AvailableNow run of the hello world's stream, in
        # batches of a few messages, in the same session.
        stream = PROGRESS_STREAM.format(namesrv=namesrv, checkpoint=tmp_path / "checkpoint")
        write = substitute(documented("hello-write"), {DOCUMENTED_NAMESRV: namesrv})
        (tmp_path / "count.py").write_text(
            f"{session}\n\nprint('count', {count})\n\n{stream}\n"
            f"{documented('progress-read')}\n{documented('progress-lag')}\n{write}"
        )
        output = shell("python count.py", tmp_path, env)
        assert f"count {HELLO_MESSAGES}" in output, output
        assert re.search(r"^0 messages behind on [1-9]\d* queues$", output, re.MULTILINE), output
        # The write sent each message once more, upper-cased, with its tag.
        ends = run_tool(namesrv, "offsets", "--topic", "TopicTest", "--group", "hello-probe")
        assert sum(row["maxOffset"] for row in ends) == 2 * HELLO_MESSAGES, ends
        stored = run_tool(namesrv, "consume", "--topic", "TopicTest", "--count", str(2 * HELLO_MESSAGES), "--print")
        bodies = sorted(base64.b64decode(m["body"]).decode() for m in stored)
        expected = [f"{case} {i}" for case in ("MESSAGE", "message") for i in range(HELLO_MESSAGES)]
        assert bodies == sorted(expected) and {m["tags"] for m in stored} == {"TagA"}
    finally:
        shell("make cluster-stop", REPO, env)


def console_bodies(command: str, cwd: Path, env: dict[str, str]) -> set[str]:
    """Run the stream until its console shows every message's body, then end it as Ctrl-C would;
    the bodies it showed."""
    log = cwd / "hello.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + HELLO_TIMEOUT_S
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            bodies = set(CONSOLE_BODY.findall(text)) if "Batch: 0" in text else set()
            if len(bodies) >= HELLO_MESSAGES:
                return bodies
            assert process.poll() is None, f"{command} exited ({process.returncode}):\n{text[-OUTPUT_TAIL_CHARS:]}"
            time.sleep(POLL_S)
        raise AssertionError(
            f"{command} showed no batch of {HELLO_MESSAGES} in {HELLO_TIMEOUT_S:.0f}s:\n{text[-OUTPUT_TAIL_CHARS:]}"
        )
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def test_demo_from_the_installed_wheel(dist: Dist, rocketmq: ClusterHandle, tmp_path: Path) -> None:
    """A fresh virtualenv with the wheel and PyPI's PySpark, and the demo's two files copied
    out of the checkout: nothing of integration/ can be imported there."""
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", str(venv), cwd=tmp_path)
    run(
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
        f"{dist.wheel}[spark]",
        cwd=tmp_path,
    )
    examples = tmp_path / "docs" / "examples"
    examples.mkdir(parents=True)
    for name in ("demo.py", "demo_client.py"):
        shutil.copy(REPO / "docs" / "examples" / name, examples / name)
    env = {**job_env(), "PATH": os.pathsep.join([str(venv / "bin"), os.environ.get("PATH", "")])}
    output = shell(
        substitute(documented("demo"), {DOCUMENTED_NAMESRV: rocketmq.namesrv_addr}), tmp_path, env, DEMO_TIMEOUT_S
    )
    assert f"parquet sink: {DEMO_PAID} paid orders ({DEMO_PAID} distinct), expected {DEMO_PAID}" in output, output
    lags = [line.split() for line in output.splitlines() if line.startswith("broker-")]
    assert lags and all(row[2] == row[3] and row[4] == "0" for row in lags), output
