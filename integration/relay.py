"""A TCP relay in front of one broker, to give the network between Spark and it faults on demand.

This machine's kernel has no ``tc netem`` and no iptables, so the faults are made in user space:
the broker listens on ``127.0.0.1:P`` (its ``bindAddress``) but registers ``127.0.0.2:P`` with
the name server (``brokerIP1``), and the relay listens on ``127.0.0.2:P`` and forwards to
``127.0.0.1:P``. Every 127.x address is loopback on Linux, so this needs no setup and no root.
Every client that asks the name server for routes then reaches that broker through the relay
(the source's driver and tasks, and the Java tool as well); the brokers' own traffic to the name
servers goes around it.

Modes (``Relay.mode``), switched at any time from the test's thread:

- ``PASS``: bytes go through as they come.
- ``DELAY``: every chunk is held ``delay_ms`` before it is passed on, in both directions, while
  reading goes on (latency, not a throughput cap).
- ``STALL``: connections are accepted and kept open but nothing is passed on, as with a hung
  host; what was held is delivered when the mode leaves ``STALL``.
- ``RESET``: every open connection is reset (RST: ``SO_LINGER`` 0), and so is every new one.
- ``CUT``: new connections are refused (nothing listens) and open ones pass nothing and stay
  open, as with a cable pulled; when the cut ends they are reset, as a peer that lost track of
  them would.

The relay runs an asyncio loop in a thread of its own; ``stop`` closes everything it opened.
"""

from __future__ import annotations

import asyncio
import enum
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

from rocketmq_spark.model import MS_PER_SECOND

CHUNK_BYTES = 64 * 1024
# The relay's own event loop answers a call (a start, a mode switch) and stops in well under a
# second: this bounds both, far below the harness's timeouts for a JVM.
LOOP_TIMEOUT_S = 10.0
# The second loopback address a relay listens on, which a broker can register as its own while
# it listens on 127.0.0.1.
RELAY_HOST = "127.0.0.2"
# The hold of DELAY the tests use: a round trip through the relay takes 0.6 s longer, which the
# relay's own test measures and a stream must ride out.
DELAY_MS = 300
# SO_LINGER on, with a zero timeout: close() then sends RST instead of FIN.
RST_LINGER = struct.pack("ii", 1, 0)


class Mode(enum.Enum):
    PASS = "pass"
    DELAY = "delay"
    STALL = "stall"
    RESET = "reset"
    CUT = "cut"


@dataclass(eq=False)
class _Pair:
    """One client connection and its connection to the broker."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    open_directions: int = 2


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Close with RST, so the peer sees 'connection reset', not an orderly end."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RST_LINGER)
        except OSError:
            pass
    writer.transport.abort()


class Relay:
    """Forwards ``listen`` to ``target`` in the mode set last; a context manager."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.listen = listen
        self.target = target
        self.delay_ms = 0
        self._mode = Mode.PASS
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"relay-{listen[1]}", daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._pairs: set[_Pair] = set()
        self._flowing = asyncio.Event()
        self.connections = 0  # accepted in all, for the test's report

    def __enter__(self) -> Relay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def mode(self) -> Mode:
        return self._mode

    def start(self) -> Relay:
        self._thread.start()
        self._run(self._listen())
        self._run(self._set(Mode.PASS))
        return self

    def stop(self) -> None:
        """Close the listener and every connection, then end the loop's thread."""
        if not self._thread.is_alive():
            return
        self._run(self._close_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(LOOP_TIMEOUT_S)
        self._loop.close()

    def set_mode(self, mode: Mode, delay_ms: int = 0) -> None:
        """Switch the mode; ``delay_ms`` is the hold of ``DELAY``."""
        self.delay_ms = delay_ms
        self._run(self._set(mode))

    def _run(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(LOOP_TIMEOUT_S)  # type: ignore[arg-type]

    # ------------------------------------------------------------- in the loop

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, *self.listen, reuse_address=True)

    async def _set(self, mode: Mode) -> None:
        leaving_cut = self._mode is Mode.CUT and mode is not Mode.CUT
        self._mode = mode
        if mode is Mode.RESET or leaving_cut:
            for pair in list(self._pairs):
                self._drop(pair)
        if mode is Mode.CUT:
            if self._server is not None:
                # Closes the listening socket at once. Not wait_closed(): since Python 3.12 it also
                # waits for the open connections, which a cut keeps open on purpose.
                self._server.close()
                self._server = None
        else:
            await self._listen()
        if mode in (Mode.STALL, Mode.CUT):
            self._flowing.clear()
        else:
            self._flowing.set()

    def _drop(self, pair: _Pair) -> None:
        for task in pair.tasks:
            task.cancel()
        _reset(pair.client)
        _reset(pair.upstream)
        self._pairs.discard(pair)

    async def _close_all(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for pair in list(self._pairs):
            self._drop(pair)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        pair = _Pair(writer)
        if self._mode is Mode.RESET:
            _reset(writer)
            return
        self._pairs.add(pair)
        try:
            up_reader, pair.upstream = await asyncio.open_connection(*self.target)
        except OSError:
            self._drop(pair)  # the broker is down: the client sees a reset, as a refused relay
            return
        pair.tasks = [
            asyncio.ensure_future(self._pump(reader, pair.upstream, pair)),
            asyncio.ensure_future(self._pump(up_reader, writer, pair)),
        ]

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pair: _Pair) -> None:
        """Read chunks as they come, pass each on at its time (now, or after the delay)."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.ensure_future(self._send(queue, writer))
        try:
            while True:
                chunk = await reader.read(CHUNK_BYTES)
                if not chunk:
                    break
                hold = self.delay_ms / MS_PER_SECOND if self._mode is Mode.DELAY else 0.0
                queue.put_nowait((time.monotonic() + hold, chunk))
            await queue.join()
            if writer.can_write_eof():
                writer.write_eof()
            pair.open_directions -= 1
            if not pair.open_directions:  # both sides ended in order: nothing left to relay
                pair.client.close()
                if pair.upstream is not None:
                    pair.upstream.close()
                self._pairs.discard(pair)
        except (OSError, asyncio.IncompleteReadError):
            self._drop(pair)
        finally:
            sender.cancel()

    async def _send(self, queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter) -> None:
        while True:
            due, chunk = await queue.get()
            try:
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self._flowing.wait()
                writer.write(chunk)
                await writer.drain()
            except OSError:
                writer.transport.abort()
            finally:
                queue.task_done()
