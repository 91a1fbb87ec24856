"""The Java test tool and mqadmin kept running: one JVM runs their commands one after another.

Each run of the tool or of mqadmin as a command of its own starts a JVM and loads RocketMQ's
client, two to three seconds of CPU before it sends a request; a test run sends hundreds of such
commands. A ``ToolServer`` is one JVM (``Tool serve``, or ``AdminServe`` on a release's own
classpath for its mqadmin), fed a command a line on stdin; its answer is the command's output, up
to the line that says the command ended. They stay the same independent parties: the same
commands on the same official client and the release's own mqadmin, only the JVM lives on.

Servers are pooled by a key that names what a JVM was started with (the tool's TLS switch, whose
settings are system properties read once per JVM; a cluster's mqadmin with its release, home and
settings); a thread that finds none idle starts another, so threads that run commands at once
each get their own. Each server is retired after ``COMMANDS_PER_SERVER`` commands, so that
whatever the client's threads and caches leave behind never piles up, and every server ends with
its process. Only processes that call ``serve_commands`` (the tests) use them.
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

# What the tool reads between a command's arguments, and what ends a command's output on stderr,
# then on stdout: a newline and "#END 0" (done) or "#END 1" (failed, its error on stderr before it).
SEPARATOR = "\t"
END = "#END "
# A fresh JVM after this many commands.
COMMANDS_PER_SERVER = 200
# How long a command may run when its caller names no timeout (the tool's own waits are shorter).
COMMAND_TIMEOUT_S = 600.0

# What a server was started with; the java command line of a server, given a home of its own.
Key = tuple[str, ...]
Command = Callable[[Path], list[str]]


class _Mode:
    """Whether this process keeps JVMs running for the next command (``serve_commands``)."""

    serving = False


def serve_commands() -> None:
    """From now on this process runs tool and mqadmin commands in JVMs that stay for the next
    command, as the tests do. The benchmark, which times the tool's own consumer, and the command
    line keep a JVM per command."""
    _Mode.serving = True


def serving() -> bool:
    return _Mode.serving


def _ended(output: str) -> str:
    """A command's output without the newline the server put before its end line."""
    return output.removesuffix("\n")


class ToolServer:
    """One JVM that serves commands, its stdout and stderr read by threads of its own."""

    def __init__(self, command: Command) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="rocketmq-tool-"))
        # Its working directory is its home too: what a command writes there (mqadmin
        # consumerStatus writes each member's running info) goes when the server does.
        self.process = subprocess.Popen(
            command(self.home),
            cwd=self.home,
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
        # A command was sent and its end not read (the caller gave up, or was interrupted): the
        # rest of its output would be taken for the next command's, so the server is not reused.
        self.busy = False
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
        self.busy = True
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
                self.busy = False
                return int(line[len(END) :]), _ended("".join(out)), _ended("".join(self.errors[began:]))
            out.append(line)

    def usable(self) -> bool:
        """Whether the next command may go to this server."""
        return not self.busy and self.process.poll() is None and self.commands < COMMANDS_PER_SERVER

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
    """Idle servers by key; ``run`` borrows one, or starts one when none is idle."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: dict[Key, list[ToolServer]] = {}
        atexit.register(self.close)

    def run(self, key: Key, command: Command, argv: Sequence[str], timeout: float | None) -> tuple[int, str, str]:
        """The command's exit status (0: done), its stdout and its stderr, from a server of ``key``."""
        with self.lock:
            pool = self.idle.setdefault(key, [])
            server = pool.pop() if pool else None
        if server is None:
            server = ToolServer(command)
        try:
            return server.run(argv, timeout)
        finally:
            if server.usable():
                with self.lock:
                    self.idle.setdefault(key, []).append(server)
            else:
                server.close()

    def close(self, prefix: Key = ()) -> None:
        """Ends the idle servers whose key starts with ``prefix`` (all by default)."""
        with self.lock:
            keys = [key for key in self.idle if key[: len(prefix)] == prefix]
            servers = [server for key in keys for server in self.idle.pop(key)]
        for server in servers:
            server.close()


SERVERS = ToolServers()
