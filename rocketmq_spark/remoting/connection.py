"""Moving remoting commands over TCP: sockets, correlation ids, timeouts. Nothing else.

One ``Connection`` is one socket to one address, with any number of requests in flight: each
response is matched to its request by ``opaque`` id. By default a reader thread receives, and any
number of threads may share the connection. Without one (``reader_thread=False``) the thread
waiting for a response receives it itself, and any others that arrive first; such a connection
serves one thread, which saves that thread a hand-over per response. Requests the server starts
on its own (a broker asking a registered group member for its running info, consumer-id change
notices) go to the connection's ``on_request`` handler, whose answer, if any, is sent back on the
same connection; without a handler, or for a one-way request, nothing is answered.

``pool.ConnectionPool`` keeps one live connection per address and replaces one that failed, went
idle or was closed by the server.
"""

from __future__ import annotations

import itertools
import logging
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable

from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.codec import (
    DEFAULT_MAX_FRAME_LENGTH,
    Frame,
    FrameReader,
    RemotingCommand,
    Request,
    encode_frame,
)
from rocketmq_spark.remoting.errors import ConnectionFailedError, RequestTimeoutError, RocketMQError
from rocketmq_spark.remoting.gather import send_frame
from rocketmq_spark.remoting.tls_channel import TlsChannel, handshake

log = logging.getLogger(__name__)

RECEIVE_CHUNK_BYTES = 1024 * 1024
SOCKET_BUFFER_BYTES = 4 * 1024 * 1024
# RocketMQ's servers close a connection with no traffic either way for
# ``serverChannelMaxIdleTimeSeconds`` (120 s by default, NettyServerConfig). A pool does not use
# one idle for longer than half that: a request sent as the server closes it would be lost with
# every other request on it. A stream's heartbeats (every 30 s) keep the driver's in use.
CONNECTION_MAX_IDLE_S = 60.0
# A connection with traffic this recently is in use: the checks for an idle or closed one, which
# cost a lock and system calls, wait until it has been quiet this long (a pull asks each time).
QUIET_BEFORE_CHECK_S = 1.0
# How long close() waits for the reader thread to end: closing the socket ends its receive at
# once, so this is only reached if the thread is stuck elsewhere; it is a daemon and ends with
# the process then.
READER_JOIN_TIMEOUT_S = 5.0

# Opaque ids are Java ints on the wire; wrap well before the signed 32-bit limit.
_OPAQUE_LIMIT = 2**31 - 1
# What a server that speaks only TLS does to a plain connection: it closes it unanswered.
_PLAIN_REFUSED_HINT = (
    "; nothing was answered on it, as a server that accepts only TLS "
    "(tls.server.mode=enforcing) does to a plain connection: if so, set tls=true"
)


# What answers a request the server sends on its own: the response to send back, or None.
ServerRequestHandler = Callable[[RemotingCommand], "RemotingCommand | None"]


_LOOPBACK = "127.0.0.1"
_ANY_PORT = 9


def local_ip(toward: str) -> str:
    """The address this host reaches ``toward`` (a host:port) from, as Java client ids start with
    and a producer's message ids carry."""
    host = toward.rpartition(":")[0].strip("[]") or _LOOPBACK
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, _ANY_PORT))  # a datagram socket sends nothing on connect
            return str(probe.getsockname()[0])
    except OSError:
        return _LOOPBACK


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[ipv6]:port`` into its parts."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"not a host:port address: {address!r}")
    return host.strip("[]"), int(port)


class Pending:
    """A request on the wire, waiting for its response (or for the connection's failure).

    ``done`` is a bare lock held from creation until the answer is in: cheaper to make and to
    hand over than a ``threading.Event``, and there is one per request.
    """

    __slots__ = ("done", "response", "error", "opaque", "code", "timeout", "deadline")

    def __init__(self, opaque: int, code: int, timeout: float) -> None:
        self.done = threading.Lock()
        self.done.acquire()
        self.response: RemotingCommand | None = None
        self.error: RocketMQError | None = None
        self.opaque = opaque
        self.code = code
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout

    def settle(self, response: RemotingCommand | None, error: RocketMQError | None) -> None:
        """Called once, by whoever removed it from the connection's table."""
        self.response = response
        self.error = error
        self.done.release()

    def settled(self, timeout: float) -> bool:
        if self.response is not None or self.error is not None:
            return True
        return self.done.acquire(timeout=timeout)


class Connection:
    """One TCP (optionally TLS) connection to a name server, broker or proxy."""

    def __init__(
        self,
        address: str,
        *,
        connect_timeout: float,
        tls_context: ssl.SSLContext | None = None,
        max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
        reader_thread: bool = True,
        on_request: ServerRequestHandler | None = None,
    ) -> None:
        """``reader_thread=False``: no thread of its own; whoever waits for a response reads the
        socket. One thread at a time may use such a connection, and it saves that thread a
        hand-over per response."""
        self.address = address
        self._on_request = on_request
        host, port = split_address(address)
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as err:
            raise ConnectionFailedError(f"cannot connect to {address}: {err}", address) from err
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
        self._raw_sock = sock  # the TCP socket under TLS too: where the server's close shows
        self._sock: socket.socket | TlsChannel = sock
        if tls_context is not None:
            self._sock = handshake(sock, tls_context, address, host)
        # The TLS version agreed on (e.g. TLSv1.3); None for a plain connection.
        self.tls_version = self._sock.version() if isinstance(self._sock, TlsChannel) else None
        self._heard = False  # whether the server has sent anything yet
        self._last_heard = time.monotonic()  # when it last did (or the connection opened)
        self._last_sent = self._last_heard  # when a request or an answer last went out
        self._sock.settimeout(None)
        self._frames = FrameReader(max_frame_length)
        self._send_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._pending: dict[int, Pending] = {}
        self._opaque = itertools.count(1)
        self._failure: RocketMQError | None = None
        self._held: list[Frame] | None = None  # frames submitted while sends are held
        self._buffer = bytearray(RECEIVE_CHUNK_BYTES)
        self._reader: threading.Thread | None = None
        if reader_thread:
            self._reader = threading.Thread(target=self._read_loop, name=f"rocketmq-reader-{address}", daemon=True)
            self._reader.start()

    @property
    def closed(self) -> bool:
        return self._failure is not None

    def idle_for(self) -> float:
        """Seconds without traffic either way, or 0 while a request waits for its answer (a
        request past its deadline is given up on and does not count)."""
        now = time.monotonic()
        with self._state_lock:
            if any(pending.deadline > now for pending in self._pending.values()):
                return 0.0
        return now - max(self._last_heard, self._last_sent)

    def usable(self, max_idle_s: float = CONNECTION_MAX_IDLE_S) -> bool:
        """Whether a request may go on this connection: not failed, not idle past ``max_idle_s``
        (the server may be closing it), and not closed by the server. A reader thread notices a
        close at once; without one, nobody reads until the next request, so a closed connection
        would sit half-open (CLOSE_WAIT) and the next requests on it would be lost: look first."""
        if self.closed:
            return False
        if time.monotonic() - max(self._last_heard, self._last_sent) < QUIET_BEFORE_CHECK_S:
            return True
        if self.idle_for() > max_idle_s:
            return False
        if self._reader is None and self._server_closed():
            self._fail(ConnectionFailedError(f"{self.address} closed the connection", self.address))
            return False
        return True

    def _server_closed(self) -> bool:
        """Whether the server's end of the socket is closed: readable, with nothing to read.
        Bytes waiting (answers nobody read yet, a TLS record) mean it is not known closed."""
        try:
            return _readable_now(self._raw_sock) and self._raw_sock.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):  # ValueError: the socket was closed meanwhile
            return True

    def request(self, command: Request, timeout: float) -> RemotingCommand:
        """Send a request and wait up to ``timeout`` seconds for its response."""
        return self.wait(self.submit(command, timeout))

    def submit(self, command: Request, timeout: float) -> Pending:
        """Send a request without waiting; :meth:`wait` gets its response. Many may be in flight."""
        opaque = next(self._opaque) % _OPAQUE_LIMIT
        frame = command.frame(opaque)
        pending = Pending(opaque, command.code, timeout)
        with self._state_lock:
            if self._failure is not None:
                raise self._failure
            self._pending[opaque] = pending
        if self._held is not None:
            self._held.append(frame)
        else:
            self._send(frame)
        return pending

    def hold_sends(self) -> None:
        """Keep the frames of the next submits until :meth:`release_sends`, which writes them at
        once: one system call, and one wake-up of the server, for requests sent back to back. For
        a connection one thread uses, which releases before it waits for any of them."""
        if self._held is None:
            self._held = []

    def release_sends(self) -> None:
        """Write the frames held since :meth:`hold_sends` and send the next ones at once again."""
        frames, self._held = self._held, None
        if frames:
            self._send([part for frame in frames for part in ((frame,) if isinstance(frame, bytes) else frame)])

    def _send(self, data: Frame) -> None:
        try:
            with self._send_lock:
                send_frame(self._sock, data)
                self._last_sent = time.monotonic()
        except OSError as err:
            self._fail(ConnectionFailedError(f"connection to {self.address} lost while sending: {err}", self.address))

    def wait(self, pending: Pending) -> RemotingCommand:
        """The response to a submitted request, waiting until its deadline at most."""
        if self._reader is None:
            self._read_until(pending)
        if not pending.settled(max(0.0, pending.deadline - time.monotonic())):
            with self._state_lock:
                self._pending.pop(pending.opaque, None)
            if self._last_heard < pending.deadline - pending.timeout:
                # Nothing at all came back since the request went out: the connection may be dead
                # without either side knowing (a host gone, a firewall or NAT that dropped it), and
                # every request on it would wait out its timeout. Closing it makes the next
                # request, or the retry, open a new one, as RocketMQ's Java client does.
                self._fail(
                    ConnectionFailedError(
                        f"{self.address} sent nothing for {pending.timeout:.1f}s; the connection was closed",
                        self.address,
                    )
                )
            name = codes.request_code_name(pending.code) or "request code"
            raise RequestTimeoutError(
                f"no answer from {self.address} within {pending.timeout:.1f}s to {name} ({pending.code})", self.address
            )
        if pending.error is not None:
            raise pending.error
        assert pending.response is not None
        return pending.response

    def close(self) -> None:
        """Close the socket; requests still waiting fail with ConnectionFailedError."""
        self._fail(ConnectionFailedError(f"connection to {self.address} closed", self.address))
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(READER_JOIN_TIMEOUT_S)
            if self._reader.is_alive():
                log.warning(
                    "the reader thread of the connection to %s did not end within %.0fs of its close; "
                    "left to end with the process",
                    self.address,
                    READER_JOIN_TIMEOUT_S,
                )

    def _read_loop(self) -> None:
        while self._receive(None):
            pass

    def _read_until(self, pending: Pending) -> None:
        """Without a reader thread: receive until ``pending`` is answered, the connection fails,
        or the deadline passes (``wait`` then reports the timeout)."""
        while pending.response is None and pending.error is None:
            remaining = pending.deadline - time.monotonic()
            if remaining <= 0 or not self._receive(remaining):
                return

    def _receive(self, timeout: float | None) -> bool:
        """Receive once and dispatch every frame completed; False once the connection failed or,
        with a timeout, nothing came in time."""
        # One receive buffer for the connection's life: a fresh bytes object per recv of this
        # size would be a fresh large allocation, and its mapping, every time.
        buffer = self._buffer
        try:
            if self._reader is None:
                self._sock.settimeout(timeout)
            received = self._sock.recv_into(buffer)
            if not received:
                raise ConnectionFailedError(f"{self.address} closed the connection{self._unheard_hint()}", self.address)
            self._heard = True
            self._last_heard = time.monotonic()
            with memoryview(buffer) as view:
                for command in self._frames.feed(view[:received]):
                    self._dispatch(command)
            return True
        except TimeoutError:
            return False
        except RocketMQError as err:
            self._fail(err)
        except OSError as err:
            self._fail(
                ConnectionFailedError(f"connection to {self.address} lost: {err}{self._unheard_hint()}", self.address)
            )
        return False

    def _unheard_hint(self) -> str:
        """Why a plain connection may have been closed before the server said anything."""
        return _PLAIN_REFUSED_HINT if self.tls_version is None and not self._heard else ""

    def _dispatch(self, command: RemotingCommand) -> None:
        if not command.is_response:
            self._serve(command)
            return
        with self._state_lock:
            pending = self._pending.pop(command.opaque, None)
        if pending is not None:  # None: the caller already gave up on it
            pending.settle(command, None)

    def _serve(self, request: RemotingCommand) -> None:
        """Answer a request the server sent on its own, on this connection, as its handler says."""
        if self._on_request is None:
            return
        try:
            response = self._on_request(request)
        except Exception:  # the handler's failure must not end the connection
            log.warning("could not answer %s's request %s", self.address, request.code, exc_info=True)
            return
        if response is None or request.is_oneway:
            return
        response.opaque = request.opaque
        response.flag |= codes.FLAG_RESPONSE
        frame = encode_frame(response)
        try:
            with self._send_lock:
                self._sock.sendall(frame)
                self._last_sent = time.monotonic()
        except OSError as err:
            self._fail(ConnectionFailedError(f"connection to {self.address} lost while answering: {err}", self.address))

    def _fail(self, error: RocketMQError) -> None:
        with self._state_lock:
            if self._failure is not None:
                return
            self._failure = error
            waiting = list(self._pending.values())
            self._pending.clear()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        for pending in waiting:
            pending.settle(None, error)


def _readable_now(sock: socket.socket) -> bool:
    """Whether a receive would not wait. poll() where there is one: select() cannot watch a
    descriptor numbered past 1023, which a busy Spark worker may well hand out."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)
