"""The Java test tool (integration/tool): the official RocketMQ client, run as a command.

The tests produce, consume and read offsets with it, so what they check the source against comes
from RocketMQ's own client, not from the package under test. ``tool_command`` gives the command
line (for a tool that runs alongside a test, such as a producer that keeps sending while a fault
is injected), ``run_tool`` runs it to the end: in a JVM of its own, or once ``serve_commands``
was called (the tests do) in a JVM that stays for the next command (integration/toolserver.py).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from integration.build import BuildError, tool_classpath
from integration.cluster_config import DEFAULT_WORKDIR, ClusterError, jar_logback_config
from integration.constants import OUTPUT_TAIL_CHARS
from integration.processes import ProcessError, java_command
from integration.tls_setup import client_properties
from integration.toolserver import SERVERS
from integration.versions import JDK17_FLAGS

TOOL_MAIN = "io.rocketmqspark.it.Tool"
# The tool runs on the official 5.x client, whatever release the brokers run.
TOOL_LOGBACK_DIR = "tool"
TOOL_HEAP = ("-Xms64m", "-Xmx512m")


def tool_command(
    namesrv_addr: str, command: str, *args: str, workdir: Path = DEFAULT_WORKDIR, tls: bool = False
) -> list[str]:
    """The java command line that runs one tool command against ``namesrv_addr``; ``tls``: it
    connects with TLS, trusting any certificate."""
    return java_tool([command, "--ns", namesrv_addr, *args], workdir, tls)


def java_tool(argv: Sequence[str], workdir: Path, tls: bool = False) -> list[str]:
    """The java command line of the tool with ``argv``, its home and logs under ``workdir``."""
    home = workdir / "home" / "tool"
    home.mkdir(parents=True, exist_ok=True)
    try:
        classpath = tool_classpath()
        logback = jar_logback_config(workdir, classpath, "tools", TOOL_LOGBACK_DIR)
        return java_command(
            TOOL_MAIN,
            classpath,
            TOOL_HEAP,
            JDK17_FLAGS,
            {
                "user.home": str(home),
                "rmq.logback.configurationFile": str(logback),
                **(client_properties() if tls else {}),
            },
            list(argv),
        )
    except (BuildError, ProcessError) as err:
        raise ClusterError(str(err)) from err


def json_lines(stdout: str) -> list[dict[str, Any]]:
    """The tool's answer: one JSON object per line it printed (other lines are its logging)."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


class _Mode:
    """Whether this process keeps tool JVMs running for the next command (``serve_commands``)."""

    serving = False


def serve_commands() -> None:
    """From now on this process runs tool commands in JVMs that stay for the next command
    (integration/toolserver.py), as the tests do. The benchmark, which times the tool's own
    consumer, and the command line keep a JVM per command."""
    _Mode.serving = True


def run_tool(
    namesrv_addr: str,
    command: str,
    *args: str,
    workdir: Path = DEFAULT_WORKDIR,
    check: bool = True,
    timeout: float | None = None,
    tls: bool = False,
) -> list[dict[str, Any]]:
    """Run the Java test tool against any name server; return its JSON lines.

    The tool is the same whatever release the brokers run: the official 5.x client, which
    speaks to 4.9 brokers as well. ``tls``: as for ``tool_command``.
    """
    argv = [command, "--ns", namesrv_addr, *args]
    if _Mode.serving:
        status, stdout, stderr = SERVERS.run(partial(java_tool, tls=tls), tls, argv, timeout)
    else:
        result = subprocess.run(
            java_tool(argv, workdir, tls), capture_output=True, text=True, check=False, timeout=timeout
        )
        status, stdout, stderr = result.returncode, result.stdout, result.stderr
    if check and status != 0:
        raise ClusterError(f"tool {command} failed (exit {status}):\n{stderr[-OUTPUT_TAIL_CHARS:]}")
    return json_lines(stdout)
