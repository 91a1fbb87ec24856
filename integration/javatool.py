"""The Java test tool (integration/tool): the official RocketMQ client, run as a command.

The tests produce, consume and read offsets with it, so what they check the source against comes
from RocketMQ's own client, not from the package under test. ``tool_command`` gives the command
line (for a tool that runs alongside a test, such as a producer that keeps sending while a fault
is injected), ``run_tool`` runs it to the end: in a JVM of its own, or once
``toolserver.serve_commands`` was called (the tests do) in a JVM that stays for the next command.
``run_mqadmin`` runs a release's own mqadmin the same two ways.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from integration.build import TOOL_JAR, BuildError, tool_classpath
from integration.cluster_config import DEFAULT_WORKDIR, ClusterError, jar_logback_config
from integration.constants import OUTPUT_TAIL_CHARS
from integration.processes import ProcessError, java_command
from integration.tls_setup import client_properties
from integration.toolserver import SERVERS, serving
from integration.versions import JDK17_FLAGS

TOOL_MAIN = "io.rocketmqspark.it.Tool"
TOOL_SERVE = "serve"
MQADMIN_MAIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
# mqadmin kept running: the tool jar's AdminServe in front of a release's own classpath.
ADMIN_SERVE_MAIN = "io.rocketmqspark.it.AdminServe"
MQADMIN_SERVE = "mqadmin"
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
    if serving():
        key = (TOOL_SERVE, str(tls))
        status, stdout, stderr = SERVERS.run(key, partial(java_tool, [TOOL_SERVE], tls=tls), argv, timeout)
    else:
        result = subprocess.run(
            java_tool(argv, workdir, tls), capture_output=True, text=True, check=False, timeout=timeout
        )
        status, stdout, stderr = result.returncode, result.stdout, result.stderr
    if check and status != 0:
        raise ClusterError(f"tool {command} failed (exit {status}):\n{stderr[-OUTPUT_TAIL_CHARS:]}")
    return json_lines(stdout)


def run_mqadmin(
    classpath: str, jvm_flags: Sequence[str], props: Mapping[str, str], argv: Sequence[str], workdir: Path
) -> tuple[int, str, str]:
    """Run mqadmin on a release's ``classpath`` with a cluster's settings (its ``workdir``):
    the exit status, stdout and stderr. Once ``serve_commands`` was called, in a JVM that stays for
    the cluster's next mqadmin command (``AdminServe``, with the release's classes only)."""
    if serving():
        cmd = java_command(ADMIN_SERVE_MAIN, f"{TOOL_JAR}{os.pathsep}{classpath}", TOOL_HEAP, jvm_flags, props, [])
        key = (MQADMIN_SERVE, str(workdir), *cmd)
        return SERVERS.run(key, lambda _: cmd, argv, None)
    result = subprocess.run(
        java_command(MQADMIN_MAIN, classpath, TOOL_HEAP, jvm_flags, props, argv),
        capture_output=True,
        text=True,
        check=False,
    )
    return result.returncode, result.stdout, result.stderr


def forget_mqadmin(workdir: Path) -> None:
    """Ends the mqadmin JVMs kept for the cluster of ``workdir`` (it stopped)."""
    SERVERS.close((MQADMIN_SERVE, str(workdir)))
