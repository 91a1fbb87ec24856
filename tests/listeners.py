"""Loopback servers that fail to answer in each way a real one can, for the unit and integration
tests of fast, clear failures: a closed port, a host that never accepts, a server that never
replies, one that answers a TLS handshake with plain text, and one that refuses every request;
the last also over TLS, with a certificate of the test's choosing."""

from __future__ import annotations

import socket
import ssl
import threading

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
        # Shut down first: a thread blocked reading one of them wakes now, before its descriptor
        # can be reused by a later socket that it would then read from.
        for sock in self.held:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self.sock.close()


def closed_port() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    return address
