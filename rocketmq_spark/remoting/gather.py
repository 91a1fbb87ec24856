"""Writing a frame that comes in pieces (a batch send's head, then its records cut from Arrow
buffers) without first joining them into one bytes object: a gathering ``sendmsg`` on a plain
socket, which copies each byte once, into the kernel. A TLS channel encrypts into records of its
own, and Windows has no sendmsg, so there the pieces are joined first."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Protocol

from rocketmq_spark.remoting.codec import BodyPart, Frame

# The most buffers one sendmsg takes (the kernel's UIO_MAXIOV); more go in further calls.
MAX_BUFFERS_PER_CALL = 1024
# Windows' sockets have no sendmsg: there the pieces are joined, as for TLS.
_GATHERING = hasattr(socket.socket, "sendmsg")


class Sendable(Protocol):
    """What a connection writes to: a socket, or a TLS channel over one."""

    def sendall(self, data: bytes) -> None: ...


def send_frame(sock: Sendable, frame: Frame) -> None:
    """Write a frame, whole or in pieces."""
    if isinstance(frame, bytes):
        sock.sendall(frame)
    else:
        send_parts(sock, frame)


def send_parts(sock: Sendable, parts: Sequence[BodyPart]) -> None:
    """Write ``parts`` one after another, whole, as ``sendall`` writes one buffer."""
    if not isinstance(sock, socket.socket) or not _GATHERING:
        sock.sendall(b"".join(parts))
        return
    views = [view for view in (memoryview(part).cast("B") for part in parts) if view.nbytes]
    first = 0
    while first < len(views):
        sent = sock.sendmsg(views[first : first + MAX_BUFFERS_PER_CALL])
        while first < len(views) and sent >= views[first].nbytes:
            sent -= views[first].nbytes
            first += 1
        if sent:
            views[first] = views[first][sent:]
