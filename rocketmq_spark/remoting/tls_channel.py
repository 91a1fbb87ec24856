"""A TLS session over a connected socket that one thread may read while others write.

Python's ``ssl.SSLSocket`` cannot be used so: OpenSSL forbids using one SSL object from two threads
at once, and a reader thread blocked in ``SSL_read`` while another thread writes loses records
(with TLS 1.3 about one fresh connection in twenty-five lost its first answer). Here the socket
stays a plain one and the TLS state is an ``ssl.SSLObject`` over memory buffers, touched only
under a lock; the socket itself is read and written outside it, so a blocked reader holds up no
writer. Records go out in the order they were made: whoever takes bytes from the outgoing
buffer sends them before anyone else may take more.
"""

from __future__ import annotations

import socket
import ssl
import threading
from typing import cast

from rocketmq_spark.remoting.errors import ConnectionFailedError

# What one raw read takes from the socket: several full TLS records (16 KiB of plaintext each).
RAW_CHUNK_BYTES = 256 * 1024

# What a server without TLS does to a handshake: it closes the connection or answers in plain text.
TLS_REFUSED_HINT = (
    "the server may not accept TLS on this port (RocketMQ's tls.server.mode=disabled): if so, leave tls unset"
)


class TlsChannel:
    """The few socket calls a connection makes (``sendall``, ``recv_into``, ``settimeout``,
    ``shutdown``, ``close``), over TLS."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str) -> None:
        """Shake hands within the socket's current timeout; raises what ``ssl`` raises
        (``ssl.SSLCertVerificationError`` for a certificate that fails verification) or OSError."""
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_hostname=server_hostname)
        self._lock = threading.Lock()  # the SSLObject and both buffers
        self._send_lock = threading.Lock()  # from taking outgoing bytes until they are sent
        self._raw = bytearray(RAW_CHUNK_BYTES)
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush(wait=True)
                if not self._fill():
                    raise ConnectionResetError("the server closed the connection during the TLS handshake") from None
        self._flush(wait=True)

    def version(self) -> str | None:
        """The TLS version agreed on, e.g. ``TLSv1.3``."""
        return self._tls.version()

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        with self._send_lock:
            with self._lock:
                self._tls.write(data)
                records = self._outgoing.read()
            self._sock.sendall(records)

    def recv_into(self, buffer: bytearray) -> int:
        """Decrypted bytes into ``buffer`` (as many as are ready, at least one); 0 once the server
        closed. Waits for the socket as its timeout says (TimeoutError when it runs out)."""
        view = memoryview(buffer)
        while True:
            with self._lock:
                filled = self._decrypt(view)
                reply = self._outgoing.pending > 0
            if reply:  # post-handshake messages may need an answer; never block on a sender for it
                self._flush(wait=False)
            if filled is not None:
                return filled
            if not self._fill():
                return 0

    def _decrypt(self, view: memoryview) -> int | None:
        """Plaintext already buffered into ``view``; None when a whole record is still missing.
        Called under the lock."""
        filled = 0
        try:
            while filled < len(view):
                # Given a buffer, read() returns how many bytes it put there (typeshed says bytes).
                read = cast(int, self._tls.read(len(view) - filled, view[filled:]))
                if read == 0:
                    break
                filled += read
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:  # the server's close_notify
            return filled
        return filled or None

    def _fill(self) -> bool:
        """Move what the socket has into the TLS buffer; False once the server closed."""
        received = self._sock.recv_into(self._raw)
        if not received:
            return False
        with self._lock, memoryview(self._raw) as raw:
            self._incoming.write(raw[:received])
        return True

    def _flush(self, *, wait: bool) -> None:
        """Send the records TLS made on its own (handshake, answers to the server's messages)."""
        if not self._send_lock.acquire(blocking=wait):
            return  # a sender is busy and takes them with its own records
        try:
            with self._lock:
                records = self._outgoing.read()
            if records:
                self._sock.sendall(records)
        finally:
            self._send_lock.release()

    def settimeout(self, timeout: float | None) -> None:
        self._sock.settimeout(timeout)

    def shutdown(self, how: int) -> None:
        self._sock.shutdown(how)

    def close(self) -> None:
        self._sock.close()


def handshake(sock: socket.socket, context: ssl.SSLContext, address: str, host: str) -> TlsChannel:
    """The TLS handshake on a connected socket; the name checked is the host connected to.

    A certificate that fails verification is raised as ``ssl.SSLCertVerificationError`` inside a
    ConnectionFailedError (its ``__cause__``), for the client to explain with its trust settings.
    """
    try:
        return TlsChannel(sock, context, host)
    except ssl.SSLCertVerificationError as err:
        sock.close()
        raise ConnectionFailedError(f"cannot connect to {address}: {err}", address) from err
    except OSError as err:  # ssl.SSLError included
        sock.close()
        raise ConnectionFailedError(
            f"TLS handshake with {address} failed ({err}): {TLS_REFUSED_HINT}", address
        ) from err
