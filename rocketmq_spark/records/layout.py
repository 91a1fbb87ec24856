"""The layout of a stored message record (``MessageDecoder``), written once for both decoders.

A record is a fixed prefix, then the body, the topic and the property block, each after its
length. Fields are big-endian and named here with their ``struct`` codes; the per-record decoder
builds its ``struct.Struct`` formats from this table and the bulk decoder its byte offsets and
numpy types (numpy reads the same codes).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from itertools import accumulate
from typing import Final

from rocketmq_spark.remoting import codes

BYTE_ORDER: Final = ">"
# A host is an address and an int32 port. An IPv4 host is read whole as one unsigned 64-bit
# int (cheap to hash, so it keys the cache of rendered hosts); an IPv6 one as 20 raw bytes.
PORT_SIZE: Final = 4
IPV4_HOST: Final = "Q"
IPV6_HOST: Final = f"{16 + PORT_SIZE}s"
_HOST: Final = "host"

# The fixed prefix, in order. commitLogOffset is read unsigned: it is never negative, and the
# offset message id prints it as 16 hex digits.
PREFIX: Final[tuple[tuple[str, str], ...]] = (
    ("total_size", "i"),
    ("magic", "I"),
    ("body_crc", "i"),
    ("queue_id", "i"),
    ("flag", "i"),
    ("queue_offset", "q"),
    ("commit_log_offset", "Q"),
    ("sys_flag", "i"),
    ("born_timestamp", "q"),
    ("born_host", _HOST),
    ("store_timestamp", "q"),
    ("store_host", _HOST),
    ("reconsume_times", "i"),
    ("prepared_offset", "q"),
    ("body_length", "i"),
)
PREFIX_NAMES: Final = tuple(name for name, _ in PREFIX)

# After the body: the topic's length (one byte with magic V1, two with V2), then after the
# topic the property block's length. Java reads that as a signed short but never writes one
# above Short.MAX_VALUE; read unsigned, a block can only end at or after its start.
TOPIC_LENGTH_V1: Final = "B"
TOPIC_LENGTH_V2: Final = "H"
PROPERTIES_LENGTH: Final = "H"

# An inner message of an inner-batch record: size, magic and CRC placeholders, flag, body length.
INNER_PREFIX: Final = struct.Struct(f"{BYTE_ORDER}i8xii")


def _codes(born_v6: bool, store_v6: bool) -> list[tuple[str, str]]:
    hosts = {"born_host": IPV6_HOST if born_v6 else IPV4_HOST, "store_host": IPV6_HOST if store_v6 else IPV4_HOST}
    return [(name, hosts.get(name, code)) for name, code in PREFIX]


def prefix_struct(keep: Iterable[str], *, born_v6: bool = False, store_v6: bool = False) -> struct.Struct:
    """A Struct that reads the kept prefix fields, in layout order, from a record's start.

    Fields left out are skipped as padding, and the Struct ends with the last kept field.
    """
    wanted = set(keep)
    fields = _codes(born_v6, store_v6)
    last = max(index for index, (name, _) in enumerate(fields) if name in wanted)
    parts = [code if name in wanted else f"{struct.calcsize(BYTE_ORDER + code)}x" for name, code in fields[: last + 1]]
    return struct.Struct(BYTE_ORDER + "".join(parts))


def ipv4_offsets() -> dict[str, tuple[int, str]]:
    """Each prefix field's byte offset and big-endian type code in a record with IPv4 hosts."""
    codes = [BYTE_ORDER + code for _, code in _codes(False, False)]
    starts = accumulate((struct.calcsize(code) for code in codes), initial=0)
    return {name: (start, code) for (name, _), start, code in zip(PREFIX, starts, codes)}


def size_of(code: str) -> int:
    """Bytes taken by a field of this type code."""
    return struct.calcsize(BYTE_ORDER + code)


_POSITION = prefix_struct(("queue_offset", "sys_flag"))


def first_stored_as(body: bytes, pulled: int) -> int:
    """The queue offset a PULL body's first record was stored as; ``pulled`` where that record is
    an inner batch starting at or below the offset pulled (it holds the messages from its own on)."""
    queue_offset, sys_flag = _POSITION.unpack_from(body, 0)
    return pulled if sys_flag & codes.MSG_FLAG_INNER_BATCH and queue_offset <= pulled else int(queue_offset)
