"""Builders of message records and pull bodies for the unit tests, laid out as the broker writes
them, and Java's tag hash, which says which tags share a hash code on the broker."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import lz4.frame
import pyarrow as pa
import zstandard
from hypothesis import strategies as st

from rocketmq_spark.records.columns import ArrowColumns
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.membership import java_string_hash

DATA = Path(__file__).resolve().parent / "data"

IPV4_BORN = (bytes([10, 0, 0, 7]), 53412)
IPV4_STORE = (bytes([127, 0, 0, 1]), 10911)


def load_hex(name: str) -> bytes:
    """Bytes of a hex fixture in tests/data; whitespace and '#' comments are ignored."""
    text = (DATA / name).read_text(encoding="utf-8")
    return bytes.fromhex("".join(line.split("#", 1)[0] for line in text.splitlines()))


def properties_block(pairs: dict[str, str]) -> bytes:
    return "".join(f"{key}\x01{value}\x02" for key, value in pairs.items()).encode()


def record(
    *,
    body: bytes = b"payload",
    properties: bytes = b"",
    topic: bytes = b"TopicA",
    magic: int = codes.MESSAGE_MAGIC_V1,
    queue_id: int = 1,
    flag: int = 0,
    queue_offset: int = 42,
    commit_log_offset: int = 0x1234,
    sys_flag: int = 0,
    born_timestamp: int = 1_700_000_000_000,
    born_host: tuple[bytes, int] = IPV4_BORN,
    store_timestamp: int = 1_700_000_000_123,
    store_host: tuple[bytes, int] = IPV4_STORE,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
) -> bytes:
    """A commitlog record laid out field by field as the broker writes it.

    The host flags follow the address lengths; everything else is as given.
    """
    if len(born_host[0]) == 16:
        sys_flag |= codes.MSG_FLAG_BORNHOST_V6
    if len(store_host[0]) == 16:
        sys_flag |= codes.MSG_FLAG_STOREHOST_V6
    topic_length = struct.pack(">B", len(topic)) if magic == codes.MESSAGE_MAGIC_V1 else struct.pack(">H", len(topic))
    after_size = b"".join(
        (
            struct.pack(">I", magic),
            struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF),
            struct.pack(">iiqq", queue_id, flag, queue_offset, commit_log_offset),
            struct.pack(">iq", sys_flag, born_timestamp),
            born_host[0],
            struct.pack(">iq", born_host[1], store_timestamp),
            store_host[0],
            struct.pack(">iiqi", store_host[1], reconsume_times, prepared_transaction_offset, len(body)),
            body,
            topic_length,
            topic,
            struct.pack(">h", len(properties)),
            properties,
        )
    )
    return struct.pack(">i", 4 + len(after_size)) + after_size


def inner_message(flag: int, body: bytes, properties: bytes) -> bytes:
    """One message inside an inner-batch body (MessageDecoder.encodeMessage)."""
    size = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(properties)
    header = struct.pack(">iiiii", size, 0, 0, flag, len(body))
    return header + body + struct.pack(">h", len(properties)) + properties


def zstd_stream(data: bytes) -> bytes:
    """A zstd frame without content size, as Java's ZstdOutputStream writes."""
    compressor = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    return compressor.compress(data) + compressor.flush()


PROPERTY_BYTES = st.binary(max_size=30) | st.lists(
    st.sampled_from([b"\x01", b"\x02", b"\x03", b"a", b"TAGS", b"\xc3\xa9", b"\xff", b"\xc3"]), max_size=12
).map(b"".join)


COMPRESSORS = {
    "zlib": (codes.COMPRESSION_ZLIB, zlib.compress),
    "lz4": (codes.COMPRESSION_LZ4, lz4.frame.compress),
    "zstd": (codes.COMPRESSION_ZSTD, zstd_stream),
}


def tag_codes(tags: Iterable[str]) -> set[int]:
    """The subscription ``codeSet``: each tag's Java hash."""
    return {java_string_hash(tag) for tag in tags}


def as_python(columns: ArrowColumns) -> dict[str, list[Any]]:
    """Arrow columns as lists of the values a Message holds: timestamps in epoch milliseconds
    (a mutated one can lie outside Python's datetime range), properties as dicts (which of two
    equal names Java keeps is what matters, not their order)."""
    values = {
        name: (column.cast(pa.int64()) if pa.types.is_timestamp(column.type) else column).to_pylist()
        for name, column in zip(ArrowColumns._fields, columns)
    }
    values["properties"] = [dict(pairs) for pairs in values["properties"]]
    return values
