"""A frame in pieces: the head and body's pieces a batch send writes without joining them, and the
gathering write that sends them whole, in order, however little the kernel takes per call."""

from __future__ import annotations

import socket
import threading

import pyarrow as pa

from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.codec import RemotingCommand, body_length, decode_frame, encode_frame
from rocketmq_spark.remoting.gather import MAX_BUFFERS_PER_CALL, send_parts

# Small enough that a send of the pieces below takes many sendmsg calls, each cutting a piece.
SMALL_SEND_BUFFER = 4096


def _received(parts: list[bytes | memoryview], send_buffer: int | None = None) -> bytes:
    """What the other end of a socket pair reads after ``send_parts``."""
    left, right = socket.socketpair()
    if send_buffer is not None:
        left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    chunks: list[bytes] = []

    def read() -> None:
        while chunk := right.recv(65536):
            chunks.append(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        send_parts(left, parts)
    finally:
        left.close()
        reader.join()
        right.close()
    return b"".join(chunks)


def test_pieces_arrive_whole_and_in_order_when_each_call_takes_a_little() -> None:
    parts: list[bytes | memoryview] = [bytes([i % 251]) * (i * 37 % 5000) for i in range(300)]
    assert _received(parts, SMALL_SEND_BUFFER) == b"".join(parts)


def test_more_pieces_than_one_call_takes() -> None:
    parts: list[bytes | memoryview] = [i.to_bytes(2, "big") for i in range(3 * MAX_BUFFERS_PER_CALL + 5)]
    assert _received(parts) == b"".join(parts)


def test_arrow_buffer_slices_and_empty_pieces() -> None:
    data = pa.py_buffer(bytes(range(256)) * 64)
    parts: list[bytes | memoryview] = [memoryview(data.slice(10, 1000)), b"", memoryview(data.slice(5000, 7))]
    assert _received(parts) == data.to_pybytes()[10:1010] + data.to_pybytes()[5000:5007]


class _Plain:
    """A channel with only ``sendall``, as a TLS channel is."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.written.append(data)


def test_a_channel_without_sendmsg_gets_the_pieces_joined_in_one_write() -> None:
    channel = _Plain()
    send_parts(channel, [b"ab", memoryview(b"cd"), b"e"])
    assert channel.written == [b"abcde"]


def test_a_request_in_pieces_frames_as_the_whole_body_does() -> None:
    pieces = (b"head", memoryview(pa.py_buffer(b"x" * 3000)), b"tail")
    fields = {"b": "topic", "e": 3}
    whole = RemotingCommand.request(codes.RequestCode.SEND_BATCH_MESSAGE, fields, b"".join(pieces)).frame(7)
    parted = RemotingCommand.request(codes.RequestCode.SEND_BATCH_MESSAGE, fields, pieces).frame(7)
    assert isinstance(whole, bytes) and isinstance(parted, list)
    assert b"".join(parted) == whole
    assert body_length(pieces) == len(b"".join(pieces))
    decoded = decode_frame(whole[4:])
    assert decoded.body == b"".join(pieces) and decoded.opaque == 7


def test_encode_frame_of_a_request_in_pieces_is_the_joined_frame() -> None:
    pieces = (b"a" * 10, memoryview(b"b" * 20))
    command = RemotingCommand.request(codes.RequestCode.SEND_BATCH_MESSAGE, {"b": "t"}, pieces)
    assert encode_frame(command) == b"".join(command.frame(command.opaque))
