"""Decompressing message bodies the producer compressed (zlib, LZ4, ZSTD), as Java's streams do."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Protocol

import lz4.frame
import zstandard

from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.errors import ProtocolError


class _FrameDecompressor(Protocol):
    eof: bool
    unused_data: bytes

    def decompress(self, data: bytes) -> bytes: ...


def _frames(make: Callable[[], _FrameDecompressor], data: bytes) -> bytes:
    """Decompress one or more back-to-back frames, as Java's streams do."""
    out = []
    while True:
        decompressor = make()
        out.append(decompressor.decompress(data))
        if not decompressor.eof:
            raise ValueError("compressed data is truncated")
        data = decompressor.unused_data
        if not data:
            return b"".join(out)


def _lz4(data: bytes) -> bytes:
    return _frames(lz4.frame.LZ4FrameDecompressor, data)


def _zstd(data: bytes) -> bytes:
    # A streaming decompressor: Java's ZstdOutputStream omits the content size.
    return _frames(lambda: zstandard.ZstdDecompressor().decompressobj(), data)


# By ``(sysFlag & MASK) >> SHIFT``; messages written before the type bits existed carry 0 (zlib).
_DECOMPRESSORS: dict[int, tuple[str, Callable[[bytes], bytes]]] = {
    codes.COMPRESSION_LEGACY_ZLIB: ("ZLIB", zlib.decompress),
    codes.COMPRESSION_LZ4: ("LZ4", _lz4),
    codes.COMPRESSION_ZSTD: ("ZSTD", _zstd),
    codes.COMPRESSION_ZLIB: ("ZLIB", zlib.decompress),
}


def decompress_body(body: bytes, sys_flag: int, queue_offset: int, position: int) -> bytes:
    """The body as the producer sent it; ``queue_offset`` and ``position`` name it in errors."""
    kind = (sys_flag & codes.MSG_COMPRESSION_TYPE_MASK) >> codes.MSG_COMPRESSION_TYPE_SHIFT
    entry = _DECOMPRESSORS.get(kind)
    if entry is None:
        raise ProtocolError(
            f"message at queue offset {queue_offset} (byte {position}) has unknown compression type {kind}"
        )
    name, decompress = entry
    try:
        return decompress(body)
    except Exception as exc:  # each library raises its own error types
        raise ProtocolError(
            f"cannot {name}-decompress the body of the message at queue offset "
            f"{queue_offset} (byte {position}): {exc}"
        ) from None
