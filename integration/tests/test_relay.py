"""The fault relay (integration/relay.py) does what each mode says, in front of a plain echo server.

The fault tests trust the relay to delay, stall, reset and cut; these checks make that trust earned
before a broker stands behind it.
"""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from integration.cluster_config import shifted
from integration.relay import DELAY_MS, RELAY_HOST, Mode, Relay

pytestmark = pytest.mark.faults

ECHO_HOST = "127.0.0.1"
PORT = shifted(28999)
TIMEOUT_S = 5.0
# A delayed round trip passes the chunk twice (there and back); loopback itself adds next to nothing.
MIN_DELAYED_ROUND_TRIP_S = 2 * DELAY_MS / 1000 * 0.9
STALL_PROBE_S = 1.0


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def relay() -> Iterator[Relay]:
    server = socketserver.ThreadingTCPServer((ECHO_HOST, PORT), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with Relay((RELAY_HOST, PORT), (ECHO_HOST, PORT)) as running:
            yield running
    finally:
        server.shutdown()
        server.server_close()


def _connect() -> socket.socket:
    return socket.create_connection((RELAY_HOST, PORT), timeout=TIMEOUT_S)


def _round_trip(sock: socket.socket, payload: bytes = b"ping") -> tuple[bytes, float]:
    began = time.monotonic()
    sock.sendall(payload)
    received = b""
    while len(received) < len(payload):
        chunk = sock.recv(4096)
        if not chunk:
            break
        received += chunk
    return received, time.monotonic() - began


def _unanswered(sock: socket.socket, payload: bytes) -> None:
    """Send, and see nothing come back for a while; the socket then waits as long as usual again."""
    sock.settimeout(STALL_PROBE_S)
    sock.sendall(payload)
    with pytest.raises(socket.timeout):
        sock.recv(4096)
    sock.settimeout(TIMEOUT_S)


def test_pass_and_delay(relay: Relay) -> None:
    with _connect() as sock:
        assert _round_trip(sock)[0] == b"ping"
        relay.set_mode(Mode.DELAY, DELAY_MS)
        echoed, took = _round_trip(sock, b"late")
        assert echoed == b"late"
        assert took >= MIN_DELAYED_ROUND_TRIP_S, f"a delayed round trip took only {took:.2f}s"
        relay.set_mode(Mode.PASS)
        assert _round_trip(sock, b"again")[0] == b"again"


def test_stall_holds_bytes_until_it_ends(relay: Relay) -> None:
    with _connect() as sock:
        relay.set_mode(Mode.STALL)
        _unanswered(sock, b"held")
        relay.set_mode(Mode.PASS)
        assert sock.recv(4096) == b"held"


def test_reset_resets_open_and_new_connections(relay: Relay) -> None:
    with _connect() as sock:
        assert _round_trip(sock)[0] == b"ping"
        relay.set_mode(Mode.RESET)
        with pytest.raises(ConnectionResetError):
            _round_trip(sock)
            _round_trip(sock)  # the first send may still be taken by the kernel
    with pytest.raises((ConnectionResetError, BrokenPipeError)), _connect() as sock:  # the reset may come first
        _round_trip(sock)
        _round_trip(sock)
    relay.set_mode(Mode.PASS)
    with _connect() as sock:
        assert _round_trip(sock)[0] == b"ping"


def test_cut_refuses_new_connections_and_silences_open_ones(relay: Relay) -> None:
    with _connect() as sock:
        assert _round_trip(sock)[0] == b"ping"
        relay.set_mode(Mode.CUT)
        with pytest.raises(ConnectionRefusedError):
            _connect()
        _unanswered(sock, b"lost")
        relay.set_mode(Mode.PASS)
        with pytest.raises(ConnectionResetError):
            sock.recv(4096)
    with _connect() as sock:
        assert _round_trip(sock)[0] == b"ping"
