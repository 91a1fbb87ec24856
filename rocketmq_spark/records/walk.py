"""The per-record decoder: a PULL body walked one record at a time, for any record a broker writes.

A PULL body is a concatenation of raw commitlog records (``MessageDecoder``). This decoder takes
every kind: IPv4 and IPv6 hosts, magic V1 and V2, compressed bodies and inner batches, and says
exactly where a malformed body breaks. It is written for CPython speed: one precompiled ``struct``
call for each record's prefix, slices of an immutable ``bytes`` for the rest, and cached strings
for what repeats across records. The Spark reader uses it only for the pulls the bulk decoder
(``columnar``) does not take.
"""

from __future__ import annotations

import struct
from itertools import chain, repeat
from operator import add, itemgetter
from typing import NamedTuple, cast

from rocketmq_spark.records import hosts, layout
from rocketmq_spark.records.compression import DEFAULT_MAX_BODY_BYTES, decompress_body
from rocketmq_spark.records.hosts import rendered_host
from rocketmq_spark.records.properties import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, parse_properties
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.errors import ProtocolError


class Message(NamedTuple):
    """One consumable message, as the Java client's ``MessageExt`` shows it.

    ``born_host``/``store_host`` are ``ip:port`` (``[ipv6]:port``); timestamps
    are epoch milliseconds; ``msg_id`` is the producer's ``UNIQ_KEY`` when
    present, else ``offset_msg_id`` (store address + commitlog offset, hex).
    ``body`` is decompressed, and ``sys_flag`` then lacks the COMPRESSED bit.
    """

    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    properties: dict[str, str]
    msg_id: str
    offset_msg_id: str
    tags: str | None
    keys: str | None


# A decoded record before its properties are parsed: the Message fields from
# ``topic`` to ``body``, which come straight from the record bytes.
Row = tuple[str, int, int, int, int, int, int, str, int, str, int, int, bytes]
ROW_FIELDS = Message._fields[: Message._fields.index("body") + 1]
_QUEUE_OFFSET = Message._fields.index("queue_offset")
_FLAG = Message._fields.index("flag")
_TOPIC = Message._fields.index("topic")
_QUEUE_ID = Message._fields.index("queue_id")
_SYS_FLAG = Message._fields.index("sys_flag")
_BODY = Message._fields.index("body")
_COMMIT_LOG_OFFSETS = itemgetter(Message._fields.index("commit_log_offset"))


class Walked(NamedTuple):
    """Per message, in order: its fields up to ``body``, its raw property block and the hex of
    its store host (the start of its offset message id)."""

    rows: list[Row]
    blocks: list[bytes]
    store_hexes: list[str]

    @staticmethod
    def join(parts: list[Walked]) -> Walked:
        if len(parts) == 1:
            return parts[0]
        return Walked(*(list(chain.from_iterable(column)) for column in zip(*parts)))

    def offset_msg_ids(self) -> list[str]:
        """Java's offsetMsgId: hex of store ip and port, then of the commitlog offset; the
        offsets are packed and hex-encoded in one call."""
        offsets = struct.pack(f">{len(self.rows)}Q", *map(_COMMIT_LOG_OFFSETS, self.rows))
        return list(map(add, self.store_hexes, offsets.hex(" ", _OFFSET_SIZE).upper().split()))


# --------------------------------------------------------------------------
# Record layout, as structs
# --------------------------------------------------------------------------

# The prefix without the body CRC, for each combination of IPv6 hosts, indexed by
# (sysFlag & (BORNHOST_V6 | STOREHOST_V6)) >> _HOST_FLAG_SHIFT.
_UNPACKED = [name for name in layout.PREFIX_NAMES if name != "body_crc"]
_HOST_FLAG_SHIFT = 4
_HOST_FLAGS = codes.MSG_FLAG_BORNHOST_V6 | codes.MSG_FLAG_STOREHOST_V6
_PREFIXES = tuple(
    layout.prefix_struct(_UNPACKED, born_v6=born_v6, store_v6=store_v6)
    for store_v6 in (False, True)
    for born_v6 in (False, True)
)
_PREFIX_V4 = _PREFIXES[0]
_SYS_FLAG_FIELD = _UNPACKED.index("sys_flag")
_UINT16 = struct.Struct(layout.BYTE_ORDER + layout.PROPERTIES_LENGTH)
_TOPIC_LENGTH_V1_SIZE = layout.size_of(layout.TOPIC_LENGTH_V1)
_TOPIC_LENGTH_V2_SIZE = layout.size_of(layout.TOPIC_LENGTH_V2)
_PROPERTIES_LENGTH_SIZE = layout.size_of(layout.PROPERTIES_LENGTH)
# Past the prefix a record holds at least a topic length and a properties length.
_MIN_RECORD_SIZE = _PREFIX_V4.size + _TOPIC_LENGTH_V1_SIZE + _PROPERTIES_LENGTH_SIZE
_INNER_PREFIX = layout.INNER_PREFIX
_MIN_INNER_SIZE = _INNER_PREFIX.size + _PROPERTIES_LENGTH_SIZE
_OFFSET_SIZE = 8
_UNWRAP_FLAGS = codes.MSG_FLAG_INNER_BATCH | codes.MSG_FLAG_NEED_UNWRAP

# Topics repeat across records; the cache is cleared when it grows past this many.
_TOPIC_CACHE_LIMIT = 4096
_topic_cache: dict[bytes, str] = {}


def _topic(raw: bytes) -> str:
    topic = _topic_cache.get(raw)
    if topic is None:
        if len(_topic_cache) >= _TOPIC_CACHE_LIMIT:
            _topic_cache.clear()
        topic = _topic_cache[raw] = raw.decode("utf-8", "replace")
    return topic


def _record_error(position: int, problem: str) -> ProtocolError:
    return ProtocolError(f"message record at byte {position}: {problem}")


def _size_error(position: int, declared: int, left: int) -> ProtocolError:
    return _record_error(position, f"declared size {declared} does not fit the {left} bytes left")


def _unwrap(
    outer: Row,
    store_hex: str,
    position: int,
    rows: list[Row],
    blocks: list[bytes],
    store_hexes: list[str],
) -> None:
    """Append the inner messages of an inner-batch record.

    Mirrors ``MessageDecoder.decodeMessage(MessageExt, List)``: inner messages
    take topic, queue, timestamps, hosts and offsets from the outer record,
    with queue offsets ``outer + i``, and have their own flag, body and
    properties.
    """
    # A Row indexed by a computed position is any of its fields' types to mypy.
    batch = cast(bytes, outer[_BODY])
    row = list(outer)
    first_offset = cast(int, outer[_QUEUE_OFFSET])
    pos = 0
    end = len(batch)
    index = 0
    while pos < end:
        if pos + _MIN_INNER_SIZE > end:
            raise _record_error(position, f"inner message at batch byte {pos} is truncated")
        size, flag, body_length = _INNER_PREFIX.unpack_from(batch, pos)
        inner_end = pos + size
        body_end = pos + _INNER_PREFIX.size + body_length
        if not (
            _MIN_INNER_SIZE <= size
            and inner_end <= end
            and 0 <= body_length
            and body_end + _PROPERTIES_LENGTH_SIZE <= inner_end
        ):
            raise _record_error(
                position,
                f"inner message at batch byte {pos} declares size {size} and body "
                f"length {body_length}, inconsistent with the {end - pos} bytes left",
            )
        (properties_length,) = _UINT16.unpack_from(batch, body_end)
        properties_start = body_end + _PROPERTIES_LENGTH_SIZE
        if properties_start + properties_length != inner_end:
            raise _record_error(
                position,
                f"inner message at batch byte {pos}: properties length "
                f"{properties_length} does not end it at its declared size {size}",
            )
        row[_QUEUE_OFFSET] = first_offset + index
        row[_FLAG] = flag
        row[_BODY] = batch[pos + _INNER_PREFIX.size : body_end]
        rows.append(tuple(row))  # type: ignore[arg-type]
        blocks.append(batch[properties_start:inner_end])
        store_hexes.append(store_hex)
        pos = inner_end
        index += 1


def _rework_last(
    rows: list[Row], blocks: list[bytes], store_hexes: list[str], position: int, max_body_bytes: int
) -> None:
    """Decompress the body of the record just walked, and unwrap it if it is an inner batch.

    Few records need either, so ``walk`` takes every record as it is and hands those over after:
    the common path then tests their flags once and builds each row in one place.
    """
    row = list(rows[-1])
    # A Row indexed by a computed position is any of its fields' types to mypy.
    sys_flag = cast(int, row[_SYS_FLAG])
    body = cast(bytes, row[_BODY])
    # Java leaves an empty body, and its flag, as they are.
    if sys_flag & codes.MSG_FLAG_COMPRESSED and body:
        row[_BODY] = decompress_body(
            body,
            sys_flag,
            cast(int, row[_QUEUE_OFFSET]),
            position,
            max_bytes=max_body_bytes,
            topic=cast(str, row[_TOPIC]),
            queue_id=cast(int, row[_QUEUE_ID]),
        )
        row[_SYS_FLAG] = sys_flag = sys_flag & ~codes.MSG_FLAG_COMPRESSED
    rows[-1] = tuple(row)  # type: ignore[assignment]
    if sys_flag & _UNWRAP_FLAGS == _UNWRAP_FLAGS:
        blocks.pop()
        _unwrap(rows.pop(), store_hexes.pop(), position, rows, blocks, store_hexes)


def walk(body: bytes | bytearray | memoryview, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> Walked:
    """Walk the records of a PULL body.

    Compressed bodies are decompressed (clearing the COMPRESSED bit, as Java
    does), none past ``max_body_bytes``, and inner batches unwrapped, one message each.

    A record is accepted only if its fields end exactly at its declared size.
    Reads past the end of the buffer raise ``struct.error``, reported as a
    ProtocolError like every other inconsistency.
    """
    data = body if type(body) is bytes else bytes(body)
    rows: list[Row] = []
    blocks: list[bytes] = []
    store_hexes: list[str] = []
    append_row = rows.append
    append_block = blocks.append
    append_store_hex = store_hexes.append
    unpack_v4 = _PREFIX_V4.unpack_from
    prefix_v4_size = _PREFIX_V4.size
    unpack_ushort = _UINT16.unpack_from
    host_cache = hosts.cache
    topic_cache = _topic_cache
    host = rendered_host
    topic_of = _topic
    magic_v1 = codes.MESSAGE_MAGIC_V1
    magic_v2 = codes.MESSAGE_MAGIC_V2
    host_flags = _HOST_FLAGS
    sys_flag_index = _SYS_FLAG_FIELD
    special_flags = codes.MSG_FLAG_COMPRESSED | _UNWRAP_FLAGS
    min_record = _MIN_RECORD_SIZE
    v1_length_size = _TOPIC_LENGTH_V1_SIZE
    v2_length_size = _TOPIC_LENGTH_V2_SIZE
    properties_length_size = _PROPERTIES_LENGTH_SIZE
    size = len(data)
    pos = 0
    try:
        while pos < size:
            fields = unpack_v4(data, pos)
            if fields[sys_flag_index] & host_flags:
                if not min_record <= fields[0] <= size - pos:  # said before the longer prefix is read
                    raise _size_error(pos, fields[0], size - pos)
                prefix = _PREFIXES[(fields[sys_flag_index] & host_flags) >> _HOST_FLAG_SHIFT]
                body_start = pos + prefix.size
                fields = prefix.unpack_from(data, pos)
            else:
                body_start = pos + prefix_v4_size
            (
                total_size,
                magic,
                queue_id,
                flag,
                queue_offset,
                commit_log_offset,
                sys_flag,
                born_timestamp,
                born_raw,
                store_timestamp,
                store_raw,
                reconsume_times,
                prepared_offset,
                body_length,
            ) = fields
            record_end = pos + total_size
            if total_size < min_record or record_end > size:
                raise _size_error(pos, total_size, size - pos)
            body_end = body_start + body_length
            if magic == magic_v1:
                topic_start = body_end + v1_length_size
                if body_length < 0 or topic_start > record_end:
                    raise _record_error(pos, f"body length {body_length} runs past the record end")
                topic_end = topic_start + data[body_end]
            elif magic == magic_v2:
                topic_start = body_end + v2_length_size
                if body_length < 0 or topic_start > record_end:
                    raise _record_error(pos, f"body length {body_length} runs past the record end")
                topic_end = topic_start + unpack_ushort(data, body_end)[0]
            else:
                raise _record_error(pos, f"bad magic code 0x{magic:08X}")
            properties_start = topic_end + properties_length_size
            if properties_start + unpack_ushort(data, topic_end)[0] != record_end:
                raise _record_error(
                    pos,
                    f"topic and properties lengths do not end the record at its declared size {total_size}",
                )

            raw_topic = data[topic_start:topic_end]
            born = host_cache.get(born_raw) or host(born_raw)
            store = host_cache.get(store_raw) or host(store_raw)
            append_row(
                (
                    topic_cache.get(raw_topic) or topic_of(raw_topic),
                    queue_id,
                    queue_offset,
                    commit_log_offset,
                    sys_flag,
                    flag,
                    born_timestamp,
                    born[0],
                    store_timestamp,
                    store[0],
                    reconsume_times,
                    prepared_offset,
                    data[body_start:body_end],
                )
            )
            append_block(data[properties_start:record_end])
            append_store_hex(store[1])
            if sys_flag & special_flags:
                _rework_last(rows, blocks, store_hexes, pos, max_body_bytes)
            pos = record_end
    except struct.error:
        raise _record_error(pos, f"truncated: the record runs past the {size}-byte body") from None
    return Walked(rows, blocks, store_hexes)


def decode_messages(
    body: bytes | bytearray | memoryview, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> list[Message]:
    """Decode every record of a PULL response body, in order, as Message tuples.

    Compressed bodies are decompressed (and, as in Java, the COMPRESSED bit is
    cleared from ``sys_flag``); inner-batch records become one Message per
    inner message. Any inconsistency raises ProtocolError naming the byte
    position. Accepts any bytes-like object, e.g. ``bytes.fromhex(fixture)``.
    """
    walked = walk(body, max_body_bytes)
    # One pull's messages at a time: the per-message parser costs less here than Arrow's calls.
    properties = [parse_properties(block.decode("utf-8", "replace")) for block in walked.blocks]
    offset_msg_ids = walked.offset_msg_ids()
    get = dict.get
    tails = zip(
        properties,
        map(get, properties, repeat(PROPERTY_UNIQ_KEY), offset_msg_ids),
        offset_msg_ids,
        map(get, properties, repeat(PROPERTY_TAGS)),
        map(get, properties, repeat(PROPERTY_KEYS)),
    )
    return list(map(tuple.__new__, repeat(Message), map(add, walked.rows, tails)))
