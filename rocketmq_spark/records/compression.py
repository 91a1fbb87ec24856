"""Decompressing message bodies the producer compressed (zlib, LZ4, ZSTD), as Java's streams do,
never past a bound: a small body can decompress to gigabytes, which would take a Spark worker far
past the batch bound before anything looked at its size.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import lz4.frame
import zstandard

from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.errors import BodyTooLargeError, ProtocolError

MIB = 1024 * 1024
# RocketMQ's largest message by default (maxMessageSize of brokers and of the Java producer, which
# checks the body before compressing it).
ROCKETMQ_DEFAULT_MAX_MESSAGE_BYTES = 4 * MIB
# The bound on one decompressed body: four times that, which is also the remoting frame bound and
# a task's Arrow batch bound, so one message never holds more than a whole batch may. Brokers and
# producers configured for larger messages need the bound raised.
DEFAULT_MAX_BODY_BYTES = 4 * ROCKETMQ_DEFAULT_MAX_MESSAGE_BYTES
# A zstd block of up to 128 KiB can be written in 4 bytes (an RLE block), so the input is fed in
# steps this small: each step adds at most 32 MiB of output before the bound is checked again.
ZSTD_INPUT_STEP_BYTES = 1024
# What to do about a body past the bound, in terms of the bound itself: the layer that sets it from
# an option names the option instead (BodyTooLargeError.with_fix).
RAISE_THE_BOUND = (
    "If producers send bodies this large on purpose, raise the bound above their size; otherwise "
    "the message is damaged or hostile: read past its offset"
)


class _TooLarge(Exception):
    """The output passed the bound; ``decompress_body`` says which message and what to do."""


def _zlib(data: bytes, limit: int) -> bytes:
    decompressor = zlib.decompressobj()
    out = decompressor.decompress(data, limit + 1)
    if len(out) > limit:
        raise _TooLarge
    if not decompressor.eof:
        raise ValueError("incomplete or truncated stream")
    return out


class _Bounded:
    """Decompressed chunks gathered up to the bound: one more byte than it raises _TooLarge."""

    def __init__(self, limit: int) -> None:
        self.room = limit
        self.parts: list[bytes] = []

    def add(self, chunk: bytes) -> None:
        self.room -= len(chunk)
        if self.room < 0:
            raise _TooLarge
        self.parts.append(chunk)

    def joined(self) -> bytes:
        return b"".join(self.parts)


def _frame_ended(eof: bool) -> None:
    if not eof:
        raise ValueError("compressed data is truncated")


def _lz4(data: bytes, limit: int) -> bytes:
    """One or more back-to-back frames, as Java's stream reads them."""
    out = _Bounded(limit)
    while True:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        out.add(decompressor.decompress(data, max_length=out.room + 1))
        _frame_ended(decompressor.eof)
        data = decompressor.unused_data
        if not data:
            return out.joined()


def _zstd(data: bytes, limit: int) -> bytes:
    """One or more back-to-back frames; streaming, as Java's ZstdOutputStream omits the content
    size, and fed a step at a time, as zstandard's decompressor has no output bound of its own."""
    out = _Bounded(limit)
    rest = memoryview(data)
    while True:
        decompressor = zstandard.ZstdDecompressor().decompressobj()
        position = 0
        while not decompressor.eof and position < len(rest):
            out.add(decompressor.decompress(rest[position : position + ZSTD_INPUT_STEP_BYTES]))
            position += ZSTD_INPUT_STEP_BYTES
        _frame_ended(decompressor.eof)
        rest = memoryview(decompressor.unused_data + bytes(rest[position:]))
        if not rest:
            return out.joined()


# By ``(sysFlag & MASK) >> SHIFT``; messages written before the type bits existed carry 0 (zlib).
_DECOMPRESSORS: dict[int, tuple[str, Callable[[bytes, int], bytes]]] = {
    codes.COMPRESSION_LEGACY_ZLIB: ("ZLIB", _zlib),
    codes.COMPRESSION_LZ4: ("LZ4", _lz4),
    codes.COMPRESSION_ZSTD: ("ZSTD", _zstd),
    codes.COMPRESSION_ZLIB: ("ZLIB", _zlib),
}


def decompress_body(
    body: bytes,
    sys_flag: int,
    queue_offset: int,
    position: int,
    *,
    max_bytes: int = DEFAULT_MAX_BODY_BYTES,
    topic: str | None = None,
    queue_id: int | None = None,
) -> bytes:
    """The body as the producer sent it; the rest names the message in errors. A body that
    decompresses past ``max_bytes`` raises BodyTooLargeError, without more of it in memory."""
    kind = (sys_flag & codes.MSG_COMPRESSION_TYPE_MASK) >> codes.MSG_COMPRESSION_TYPE_SHIFT
    entry = _DECOMPRESSORS.get(kind)
    if entry is None:
        raise ProtocolError(
            f"message at queue offset {queue_offset} (byte {position}) has unknown compression type {kind}"
        )
    name, decompress = entry
    try:
        return decompress(body, max_bytes)
    except _TooLarge:
        where = (
            f"queue offset {queue_offset}"
            if topic is None
            else (f"topic {topic}, queue {queue_id}, queue offset {queue_offset}")
        )
        raise BodyTooLargeError(
            f"the {name}-compressed body of the message at {where} decompresses to more than {max_bytes} "
            f"bytes ({len(body)} bytes compressed)",
            RAISE_THE_BOUND,
        ) from None
    except Exception as exc:  # noqa: BLE001 - each library raises its own error types
        raise ProtocolError(
            f"cannot {name}-decompress the body of the message at queue offset {queue_offset} (byte {position}): {exc}"
        ) from None
