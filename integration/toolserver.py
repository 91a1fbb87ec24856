"""The Java test tool kept running: ``Tool serve`` runs its commands one after another in one JVM.

Each run of the tool as a command of its own starts a JVM and loads RocketMQ's client, two to three
seconds of CPU before it sends a request; a test run sends hundreds of tool commands. A
``ToolServer`` is one such JVM, fed a command a line on stdin; its answer is the command's output,
up to the line the tool prints when the command ended. The tool stays the same independent party:
the same commands on the same official client, only the JVM lives on.

Servers are pooled per TLS switch (the client's TLS settings are system properties, read once per
JVM); a thread that finds none idle starts another, so threads that run the tool at once each get
their own. Each server is retired after ``COMMANDS_PER_SERVER`` commands, so that whatever the
client's threads and caches leave behind never piles up, and every server ends with its process.
"""

from __future__ import annotations

import atexit
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from integration.cluster_config import ClusterError
from integration.constants import OUTPUT_TAIL_CHARS, STOP_TIMEOUT_S

SERVE = "serve"
# What the tool reads between a command's arguments, and what ends a command's output on stderr,
# then on stdout: "#END 0" (done) or "#END 1" (failed, its error on stderr before it).
SEPARATOR = "\t"
END = "#END "
# A fresh JVM after this many commands.
COMMANDS_PER_SERVER = 200
# How long a command may run when its caller names no timeout (the tool's own waits are shorter).
COMMAND_TIMEOUT_S = 600.0

Command = Callable[[Sequence[str], Path], list[str]]


class ToolServer:
    """One ``Tool serve`` JVM, its stdout and stderr read by threads of its own."""

    def __init__(self, java_command: Command) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="rocketmq-tool-"))
        self.process = subprocess.Popen(
            java_command([SERVE], self.home),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.errors: list[str] = []
        self.errors_ended = threading.Semaphore(0)
        self.commands = 0
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        """Every line of stdout into ``lines``, then None: the JVM is gone."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _read_stderr(self) -> None:
        """Every line of stderr into ``errors``; an end line releases ``errors_ended`` instead."""
        assert self.process.stderr is not None
        for line in self.process.stderr:
            if line.startswith(END):
                self.errors_ended.release()
            else:
                self.errors.append(line)

    def run(self, argv: Sequence[str], timeout: float | None) -> tuple[int, str, str]:
        """The command's exit status (0: done), its stdout and its stderr."""
        if any(SEPARATOR in arg or "\n" in arg for arg in argv):
            raise ValueError(f"a tool argument holds a tab or a newline: {list(argv)}")
        assert self.process.stdin is not None
        began = len(self.errors)
        self.commands += 1
        self.process.stdin.write(SEPARATOR.join(argv) + "\n")
        self.process.stdin.flush()
        deadline = time.monotonic() + (COMMAND_TIMEOUT_S if timeout is None else timeout)
        out: list[str] = []
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.close()
                raise subprocess.TimeoutExpired(argv, COMMAND_TIMEOUT_S if timeout is None else timeout) from None
            if line is None:
                raise ClusterError(
                    f"the tool server exited ({self.process.wait()}):\n{''.join(self.errors)[-OUTPUT_TAIL_CHARS:]}"
                )
            if line.startswith(END):
                # The same line on stderr came first: once it is read, so is the command's stderr.
                self.errors_ended.acquire(timeout=STOP_TIMEOUT_S)
                return int(line[len(END) :]), "".join(out), "".join(self.errors[began:])
            out.append(line)

    def usable(self) -> bool:
        return self.process.poll() is None and self.commands < COMMANDS_PER_SERVER

    def close(self) -> None:
        """Ends the JVM (it stops at the end of its stdin) and removes its home."""
        if self.process.poll() is None:
            assert self.process.stdin is not None
            try:
                self.process.stdin.close()
                self.process.wait(STOP_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.home, ignore_errors=True)


class ToolServers:
    """Idle servers per TLS switch; ``run`` borrows one, or starts one when none is idle."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: dict[bool, list[ToolServer]] = {}
        atexit.register(self.close)

    def run(self, java_command: Command, tls: bool, argv: Sequence[str], timeout: float | None) -> tuple[int, str, str]:
        with self.lock:
            pool = self.idle.setdefault(tls, [])
            server = pool.pop() if pool else None
        if server is None:
            server = ToolServer(java_command)
        try:
            return server.run(argv, timeout)
        finally:
            if server.usable():
                with self.lock:
                    self.idle[tls].append(server)
            else:
                server.close()

    def close(self) -> None:
        with self.lock:
            servers = [server for pool in self.idle.values() for server in pool]
            self.idle.clear()
        for server in servers:
            server.close()


SERVERS = ToolServers()
