"""One connection per address, replaced when it failed, went idle or the server closed it: how
callers reconnect, as the next request to that address opens a new socket."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.codec import RemotingCommand, Request
from rocketmq_spark.remoting.connection import CONNECTION_MAX_IDLE_S, Connection, Pending
from rocketmq_spark.remoting.errors import ProtocolError

ConnectionFactory = Callable[[str], Connection]

# How often a pool looks for idle connections to other addresses than the one asked for: a pull
# asks for its connection, and looking at every other one each time would cost each pull.
SWEEP_INTERVAL_S = 1.0


class Reply:
    """The response to come for a request sent through a :class:`ConnectionPool`."""

    __slots__ = ("_conn", "_pending")

    def __init__(self, conn: Connection, pending: Pending) -> None:
        self._conn = conn
        self._pending = pending

    def result(self) -> RemotingCommand:
        """Wait for the response. A connection that hit a protocol error or is told to go away is
        dropped, so the pool's next request reconnects."""
        try:
            response = self._conn.wait(self._pending)
        except ProtocolError:
            self._conn.close()
            raise
        if response.code == codes.ResponseCode.GO_AWAY:
            self._conn.close()
        return response


class ConnectionPool:
    """One live connection per address, opened on first use and replaced after a failure, after
    ``max_idle_s`` without traffic, or once the server closed it.

    Idle connections to other addresses are closed when one is asked for (every ``sweep_every_s``
    at most), so a process that keeps its pools between tasks (a Python worker) holds no socket
    the server has given up on.
    """

    def __init__(
        self,
        factory: ConnectionFactory,
        max_idle_s: float = CONNECTION_MAX_IDLE_S,
        sweep_every_s: float = SWEEP_INTERVAL_S,
    ) -> None:
        self._factory = factory
        self._max_idle_s = max_idle_s
        self._sweep_every_s = sweep_every_s
        self._next_sweep = time.monotonic() + sweep_every_s
        self._lock = threading.Lock()
        self._connections: dict[str, Connection] = {}
        self._opened: dict[str, int] = {}
        self._holding: list[Connection] | None = None  # connections whose sends are held

    def get(self, address: str) -> Connection:
        idle: list[Connection] = []
        now = time.monotonic()
        with self._lock:
            conn = self._connections.get(address)
            if now >= self._next_sweep:
                self._next_sweep = now + self._sweep_every_s
                for other, stale in list(self._connections.items()):
                    if other != address and stale.idle_for() > self._max_idle_s:
                        del self._connections[other]
                        idle.append(stale)
        for stale in idle:
            stale.close()
        if conn is not None and conn.usable(self._max_idle_s):
            return conn
        fresh = self._factory(address)  # outside the lock: connecting may take a while
        with self._lock:
            current = self._connections.get(address)
            if current is not None and current is not conn and not current.closed:
                winner = current  # another thread replaced it meanwhile
            else:
                self._connections[address] = winner = fresh
                self._opened[address] = self._opened.get(address, 0) + 1
        if winner is not fresh:
            fresh.close()
        if conn is not None and conn is not winner:
            conn.close()  # idle or closed by the server: its requests would be lost
        return winner

    def opened(self, address: str) -> int:
        """How many connections to the address this pool has put in use: one more than the first
        means the one before broke (the server restarted, or the network between failed)."""
        with self._lock:
            return self._opened.get(address, 0)

    def request(self, address: str, command: Request, timeout: float) -> RemotingCommand:
        """Send on the address's connection and wait for the response."""
        return self.submit(address, command, timeout).result()

    def submit(self, address: str, command: Request, timeout: float) -> Reply:
        """Send on the address's connection without waiting for the response."""
        conn = self.get(address)
        if self._holding is not None and conn not in self._holding:
            conn.hold_sends()
            self._holding.append(conn)
        return Reply(conn, conn.submit(command, timeout))

    @contextmanager
    def sending_together(self) -> Iterator[None]:
        """Requests submitted inside go out at its end, one write per connection: for a pool that
        one thread uses (a task's pulls), which sends several before it waits for any."""
        if self._holding is not None:
            yield  # already inside one
            return
        self._holding = []
        try:
            yield
        finally:
            held, self._holding = self._holding, None
            for conn in held:
                conn.release_sends()

    def close(self) -> None:
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
        for conn in connections:
            conn.close()
