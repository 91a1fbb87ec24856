"""The JVMs the launcher starts: spawning, readiness, and stopping exactly what it started.

Every server runs in its own session with its console in ``<workdir>/logs/<name>.out``; the
launcher records its pid, and stopping checks that the pid still belongs to that workdir before
signalling, so a pid reused by a stranger is never touched.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from integration.cds import dump
from integration.constants import LOOPBACK, POLL_S, STOP_TIMEOUT_S

READY_TIMEOUT_S = 120.0
LOG_TAIL_LINES = 40


class ProcessError(RuntimeError):
    """A server exited during start-up, never became ready, or Java is missing."""


@dataclass
class Server:
    """One JVM the launcher started: enough to wait for it, report on it and stop it."""

    role: str
    name: str
    pid: int
    ports: list[int]
    out_file: str
    ready_line: list[str]
    # Where this run's console output starts in out_file: a restarted server appends to the file
    # its earlier run wrote, ready lines included.
    out_start: int = 0
    # The class-data archive to write once it is ready (integration/cds.py), if none was there.
    archive: str = ""

    def alive(self) -> bool:
        return process_is(self.pid, self.out_file)


def process_is(pid: int, marker: str) -> bool:
    """True if pid is alive and is the process we started, not a stranger that reused the pid.

    The java launcher may re-exec itself right after start, and for that moment its command line
    reads empty; an empty command line therefore counts as ours. A zombie counts as gone once
    its last thread has exited: a killed JVM's main thread turns zombie first, and its sockets
    stay open (its ports taken) until the other threads are gone too.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    if state == "Z":
        if threads(pid) > 1:
            return True
        reap(pid)
        return False
    workdir = str(Path(marker).parent.parent)
    return not cmdline or workdir.encode() in cmdline


def threads(pid: int) -> int:
    """How many threads the process has left (0: none, or it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(POLL_S)
        return sock.connect_ex((LOOPBACK, port)) == 0


def tail(path: str, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no output)"


def java_command(
    main: str,
    classpath: str,
    heap: Sequence[str],
    jvm_flags: Sequence[str],
    system_props: Mapping[str, str],
    args: Sequence[str],
) -> list[str]:
    java = shutil.which("java")
    if java is None:
        raise ProcessError("java is not on PATH; RocketMQ needs a JDK (17 is tested)")
    props = [f"-D{k}={v}" for k, v in system_props.items()]
    return [java, *heap, *jvm_flags, *props, "-cp", classpath, main, *args]


def spawn(
    workdir: Path, role: str, name: str, cmd: Sequence[str], ports: list[int], ready: list[str], archive: str = ""
) -> Server:
    """Start one server in its own session, its console appended to ``logs/<name>.out``;
    ``archive``: the class-data archive to dump once it is ready."""
    out_file = workdir / "logs" / f"{name}.out"
    with open(out_file, "ab") as out:
        out_start = out.tell()
        proc = subprocess.Popen(
            list(cmd),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=str(workdir),
            start_new_session=True,
            env={**os.environ, "ROCKETMQ_HOME": str(workdir)},
        )
    return Server(
        role=role,
        name=name,
        pid=proc.pid,
        ports=ports,
        out_file=str(out_file),
        ready_line=ready,
        out_start=out_start,
        archive=archive,
    )


def wait_ready(server: Server, deadline: float) -> None:
    """Until its ready lines are on its console and all its ports answer, or it dies, or time is up."""
    while time.monotonic() < deadline:
        if not server.alive():
            raise ProcessError(f"{server.role} (pid {server.pid}) exited during start-up:\n{tail(server.out_file)}")
        with open(server.out_file, "rb") as out:
            out.seek(server.out_start)
            text = out.read().decode(errors="replace")
        if all(line in text for line in server.ready_line) and all(port_open(p) for p in server.ports):
            if server.archive:
                dump(server.pid, Path(server.archive))
            return
        time.sleep(POLL_S)
    raise ProcessError(
        f"{server.role} (pid {server.pid}) not ready after {READY_TIMEOUT_S:.0f}s:\n{tail(server.out_file)}"
    )


def terminate(servers: list[Server]) -> None:
    """SIGTERM each server, wait for all, SIGKILL what is still there after STOP_TIMEOUT_S."""
    for server in servers:
        if server.alive():
            os.kill(server.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for server in servers:
        while server.alive() and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if server.alive():
            os.kill(server.pid, signal.SIGKILL)
        reap(server.pid)


def kill(server: Server) -> None:
    """SIGKILL a server, as a crash would, and wait until it is gone (its ports closed with it)."""
    if server.alive():
        os.kill(server.pid, signal.SIGKILL)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while server.alive() and time.monotonic() < deadline:
        time.sleep(POLL_S)
    reap(server.pid)
    if server.alive():
        raise ProcessError(f"{server.role} (pid {server.pid}) still runs {STOP_TIMEOUT_S:.0f}s after SIGKILL")


def send_signal(server: Server, signum: int) -> None:
    """Send a signal to a server the launcher started, after checking the pid is still its own."""
    if not server.alive():
        raise ProcessError(f"{server.role} (pid {server.pid}) is not running")
    os.kill(server.pid, signum)


def reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
