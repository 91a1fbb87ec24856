"""Loopback servers that fail to answer in each way a real one can, for the unit and integration
tests of fast, clear failures: a closed port, a host that never accepts, a server that never
replies, one that answers a TLS handshake with plain text, and one that refuses every request;
the last also over TLS, with a certificate of the test's choosing. And one that answers as a
subclass says (``AnsweringServer``), counting what it is asked."""

from __future__ import annotations

import socket
import ssl
import threading
from collections import Counter

from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.codec import FrameReader, RemotingCommand, encode_frame

# How long a filler connect may take before the backlog counts as full.
FILL_TIMEOUT_S = 0.5
FILLERS = 8


class Listener:
    """A loopback port that behaves as asked: ``silent`` accepts and never answers, ``full``
    never accepts (its backlog is full), ``plain`` answers a TLS handshake with plain text, and
    ``answer`` replies to every request with the given command code and remark, over TLS with
    ``tls`` (a server context); a client whose handshake fails is disconnected."""

    def __init__(self, kind: str, code: int = 0, remark: str = "", tls: ssl.SSLContext | None = None) -> None:
        self.kind = kind
        self.code = code
        self.remark = remark
        self.tls = tls
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        if kind == "full":
            self.sock.listen(0)
            self._fill()
        else:
            self.sock.listen()
            threading.Thread(target=self._accept, daemon=True).start()

    def _fill(self) -> None:
        """Connect until the kernel stops completing handshakes: from then on, connects time out."""
        for _ in range(FILLERS):
            filler = socket.socket()
            filler.settimeout(FILL_TIMEOUT_S)
            try:
                filler.connect(self.sock.getsockname())
            except OSError:
                filler.close()
                return
            self.held.append(filler)
        raise AssertionError("the backlog never filled")

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)
            if self.kind == "plain":
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                conn.close()
            elif self.kind == "answer":
                threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except OSError:  # ssl.SSLError included: the client gave up, or spoke plain text
                conn.close()
                return
            self.held.append(conn)
        frames = FrameReader()
        while data := conn.recv(65536):
            for request in frames.feed(data):
                conn.sendall(
                    encode_frame(
                        RemotingCommand(
                            code=self.code, opaque=request.opaque, flag=codes.FLAG_RESPONSE, remark=self.remark
                        )
                    )
                )

    def close(self) -> None:
        close_all(self.held)
        self.sock.close()


def close_all(sockets: list[socket.socket]) -> None:
    """Shut each socket down, then close it: a thread blocked reading one of them wakes now, before
    its descriptor can be reused by a later socket that it would then read from."""
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()


class AnsweringServer:
    """A loopback server that answers each request as a subclass's ``answer`` says, and counts
    the requests by code and the connections it accepted: a name server or a broker that works,
    for the tests of what a client asks and how often."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.asked: Counter[int] = Counter()
        self.connections = 0
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def answer(self, request: RemotingCommand) -> RemotingCommand:
        raise NotImplementedError

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self._held.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        frames = FrameReader()
        try:
            while data := conn.recv(65536):
                for request in frames.feed(data):
                    with self._lock:
                        self.asked[request.code] += 1
                    response = self.answer(request)
                    response.opaque, response.flag = request.opaque, codes.FLAG_RESPONSE
                    conn.sendall(encode_frame(response))
        except OSError:
            return

    def close(self) -> None:
        close_all(self._held)
        self.sock.close()


def closed_port() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    return address
