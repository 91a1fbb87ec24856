"""Message records of a PULL response body, and tag helpers, without I/O.

A PULL body is a concatenation of raw commitlog records (``MessageDecoder``).
Decoding is on the hot path of every Spark task, so it is written for CPython
speed: one precompiled ``struct`` call for each record's fixed prefix, slices of
an immutable ``bytes`` for the variable parts, caches for the strings that
repeat across records (topic, hosts), and property blocks parsed for a whole
batch at once with C-level passes instead of per-message Python loops.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from collections.abc import Callable, Iterable, Sequence
from itertools import islice, repeat
from operator import add, itemgetter
from typing import NamedTuple, Protocol

import lz4.frame
import zstandard

from rocketmq_spark import codes
from rocketmq_spark.errors import ProtocolError

PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
SUBSCRIBE_ALL = "*"
TAG_EXPRESSION_SEPARATOR = "||"


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


class MessageColumns(NamedTuple):
    """The same fields as :class:`Message`, one sequence per field.

    All sequences have one entry per message, in order, ready to become Arrow
    arrays without a per-row pass.
    """

    topic: Sequence[str]
    queue_id: Sequence[int]
    queue_offset: Sequence[int]
    commit_log_offset: Sequence[int]
    sys_flag: Sequence[int]
    flag: Sequence[int]
    born_timestamp: Sequence[int]
    born_host: Sequence[str]
    store_timestamp: Sequence[int]
    store_host: Sequence[str]
    reconsume_times: Sequence[int]
    prepared_transaction_offset: Sequence[int]
    body: Sequence[bytes]
    properties: Sequence[dict[str, str]]
    msg_id: Sequence[str]
    offset_msg_id: Sequence[str]
    tags: Sequence[str | None]
    keys: Sequence[str | None]


# A decoded record before its properties are parsed: the Message fields from
# ``topic`` to ``body``, which come straight from the record bytes.
_Row = tuple[str, int, int, int, int, int, int, str, int, str, int, int, bytes]
_ROW_SIZE = Message._fields.index("body") + 1
_QUEUE_OFFSET = Message._fields.index("queue_offset")
_FLAG = Message._fields.index("flag")
_BODY = Message._fields.index("body")

# --------------------------------------------------------------------------
# Record layout
# --------------------------------------------------------------------------

# The fixed prefix up to and including bodyLen. Fields: totalSize, magic,
# [bodyCRC], queueId, flag, queueOffset, commitLogOffset, sysFlag,
# bornTimestamp, bornHost, storeTimestamp, storeHost, reconsumeTimes,
# preparedTransactionOffset, bodyLen. A host (ip + int32 port) is read whole,
# as the key of the cache of its rendered forms: an IPv4 host as one unsigned
# 64-bit int (cheaper to make and hash than bytes), an IPv6 host as bytes.
_PORT_SIZE = 4
_IPV4_HOST_SIZE = 4 + _PORT_SIZE
_IPV6_HOST_SIZE = 16 + _PORT_SIZE
_IPV4_HOST_FORMAT = "Q"
_IPV6_HOST_FORMAT = f"{_IPV6_HOST_SIZE}s"


def _prefix(born_host: str, store_host: str) -> struct.Struct:
    # commitLogOffset is read unsigned: it is never negative, and the message
    # id prints it as 16 hex digits.
    return struct.Struct(f">iI4xiiqQiq{born_host}q{store_host}iqi")


# Indexed by (sysFlag & (BORNHOST_V6 | STOREHOST_V6)) >> _HOST_FLAG_SHIFT.
_HOST_FLAG_SHIFT = 4
_HOST_FLAGS = codes.MSG_FLAG_BORNHOST_V6 | codes.MSG_FLAG_STOREHOST_V6
_PREFIXES = (
    _prefix(_IPV4_HOST_FORMAT, _IPV4_HOST_FORMAT),
    _prefix(_IPV6_HOST_FORMAT, _IPV4_HOST_FORMAT),
    _prefix(_IPV4_HOST_FORMAT, _IPV6_HOST_FORMAT),
    _prefix(_IPV6_HOST_FORMAT, _IPV6_HOST_FORMAT),
)
_PREFIX_V4 = _PREFIXES[0]
_INT32 = struct.Struct(">i")
_UINT16 = struct.Struct(">H")
_TOPIC_LENGTH_V1_SIZE = 1
_TOPIC_LENGTH_V2_SIZE = _UINT16.size
# Java reads the properties length as a signed short but never writes one
# above Short.MAX_VALUE; reading it unsigned means a block can only end at or
# after its start, which the end-of-record check then verifies.
_PROPERTIES_LENGTH_SIZE = _UINT16.size
# Past the prefix a record holds at least a topic length and a properties length.
_MIN_TAIL_SIZE = _TOPIC_LENGTH_V1_SIZE + _PROPERTIES_LENGTH_SIZE
_MIN_RECORD_SIZE = _PREFIX_V4.size + _MIN_TAIL_SIZE

# Inner message of an inner-batch record (MessageDecoder.encodeMessage):
# size, magic placeholder 0, bodyCRC placeholder 0, flag, bodyLen.
_INNER_PREFIX = struct.Struct(">i8xii")
_MIN_INNER_SIZE = _INNER_PREFIX.size + _PROPERTIES_LENGTH_SIZE

_COMMIT_LOG_OFFSET = Message._fields.index("commit_log_offset")
_COMMIT_LOG_OFFSETS = itemgetter(_COMMIT_LOG_OFFSET)
_OFFSET_SIZE = 8
_UINT32_MASK = (1 << 32) - 1
_UNWRAP_FLAGS = codes.MSG_FLAG_INNER_BATCH | codes.MSG_FLAG_NEED_UNWRAP

# Rendered hosts and topics repeat across records; the caches are cleared
# when they grow past this many entries (born ports vary per producer).
_CACHE_LIMIT = 4096
_host_cache: dict[int | bytes, tuple[str, str]] = {}
_topic_cache: dict[bytes, str] = {}

_new_message = tuple.__new__


def _render_host(host: int | bytes) -> tuple[str, str]:
    """``ip:port``, and the uppercase hex of ip and port that starts the
    offsetMsgId of every message this host stores."""
    raw = host.to_bytes(_IPV4_HOST_SIZE, "big") if isinstance(host, int) else host
    ip_bytes = raw[:-_PORT_SIZE]
    (port,) = _INT32.unpack_from(raw, len(ip_bytes))
    if len(raw) == _IPV4_HOST_SIZE:
        text = f"{ipaddress.IPv4Address(ip_bytes)}:{port}"
    else:
        text = f"[{ipaddress.IPv6Address(ip_bytes).compressed}]:{port}"
    return text, raw.hex().upper()


def rendered_host(host: int | bytes) -> tuple[str, str]:
    """``_render_host`` of a raw host (an IPv4 host as the unsigned 64-bit int of its 8 bytes),
    cached: the same few hosts store every message."""
    cached = _host_cache.get(host)
    if cached is None:
        if len(_host_cache) >= _CACHE_LIMIT:
            _host_cache.clear()
        cached = _host_cache[host] = _render_host(host)
    return cached


def _topic(raw: bytes) -> str:
    topic = _topic_cache.get(raw)
    if topic is None:
        if len(_topic_cache) >= _CACHE_LIMIT:
            _topic_cache.clear()
        topic = _topic_cache[raw] = raw.decode("utf-8", "replace")
    return topic


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------


def parse_properties(text: str) -> dict[str, str]:
    """Parse ``key\\x01value\\x02...`` like ``string2messageProperties``.

    Entries with an empty key or value are skipped; a value keeps any further
    ``\\x01``; a later duplicate key wins.
    """
    properties = {}
    for entry in text.split(PROPERTY_SEPARATOR):
        key, _, value = entry.partition(NAME_VALUE_SEPARATOR)
        if key and value:
            properties[key] = value
    return properties


_NAME_VALUE_BYTE = NAME_VALUE_SEPARATOR.encode()
_PROPERTY_BYTE = PROPERTY_SEPARATOR.encode()
_ENTRY_SEPARATORS = _NAME_VALUE_BYTE + _PROPERTY_BYTE
# Joins the property blocks of one batch; Java never writes it in a block.
_BLOCK_JOINER = b"\x03"
_BLOCK_JOINER_TEXT = _BLOCK_JOINER.decode()
_LAST_BYTE = itemgetter(slice(-1, None))
_SEPARATOR_BYTES = (_NAME_VALUE_BYTE, _PROPERTY_BYTE, _BLOCK_JOINER)
_NON_SEPARATOR_BYTES = bytes(byte for byte in range(256) if bytes([byte]) not in _SEPARATOR_BYTES)


def parse_property_blocks(blocks: list[bytes]) -> list[dict[str, str]]:
    """Parse the property blocks of many messages in a few C-level passes.

    Java writes ``name\\x01value\\x02`` repeated. When every block has exactly
    that shape, the batch is valid UTF-8 and no name or value is empty, the
    whole batch is split at once and each dict is cut from the flat name/value
    list; a per-message Python loop would cost several times more. Anything
    else goes through :func:`parse_properties`, which applies Java's lenient
    rules.
    """
    if not blocks:
        return []
    joined = _BLOCK_JOINER.join(blocks)
    # Shape: the separator bytes alone must be \x01\x02 pairs between the
    # joiners, and each non-empty block must end with \x02 (else its tail
    # would merge with the next block's first name).
    separators = joined.translate(None, _NON_SEPARATOR_BYTES)
    last_bytes = b"".join(map(_LAST_BYTE, blocks))
    if (
        separators.replace(_ENTRY_SEPARATORS, b"") == _BLOCK_JOINER * (len(blocks) - 1)
        and last_bytes.count(_PROPERTY_BYTE) == len(last_bytes)
    ):
        try:
            text = joined.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None:
            flat = (
                text.replace(_BLOCK_JOINER_TEXT, "")
                .replace(PROPERTY_SEPARATOR, NAME_VALUE_SEPARATOR)
                .split(NAME_VALUE_SEPARATOR)
            )
            flat.pop()  # the empty string after the last separator
            if "" not in flat:
                items = iter(flat)
                # Block i owns the next len(its separators) strings: name, value,
                # ... Each islice is zipped with itself to pair them; dicts are
                # built in order, so each consumes exactly its own strings.
                own = list(map(islice, repeat(items), map(len, separators.split(_BLOCK_JOINER))))
                return list(map(dict, map(zip, own, own)))
    return [parse_properties(block.decode("utf-8", "replace")) for block in blocks]


# --------------------------------------------------------------------------
# Bodies
# --------------------------------------------------------------------------


class _FrameDecompressor(Protocol):
    eof: bool
    unused_data: bytes

    def decompress(self, data: bytes) -> bytes: ...


def _decompress_frames(make: Callable[[], _FrameDecompressor], data: bytes) -> bytes:
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


def _zlib(data: bytes) -> bytes:
    return zlib.decompress(data)


def _lz4(data: bytes) -> bytes:
    return _decompress_frames(lz4.frame.LZ4FrameDecompressor, data)


def _zstd(data: bytes) -> bytes:
    # A streaming decompressor: Java's ZstdOutputStream omits the content size.
    return _decompress_frames(lambda: zstandard.ZstdDecompressor().decompressobj(), data)


_DECOMPRESSORS: dict[int, tuple[str, Callable[[bytes], bytes]]] = {
    codes.COMPRESSION_LEGACY_ZLIB: ("ZLIB", _zlib),
    codes.COMPRESSION_LZ4: ("LZ4", _lz4),
    codes.COMPRESSION_ZSTD: ("ZSTD", _zstd),
    codes.COMPRESSION_ZLIB: ("ZLIB", _zlib),
}


def decompress_body(body: bytes, sys_flag: int, queue_offset: int, position: int) -> bytes:
    kind = (sys_flag & codes.MSG_COMPRESSION_TYPE_MASK) >> codes.MSG_COMPRESSION_TYPE_SHIFT
    entry = _DECOMPRESSORS.get(kind)
    if entry is None:
        raise ProtocolError(
            f"message at queue offset {queue_offset} (byte {position}) has unknown "
            f"compression type {kind}"
        )
    name, decompress = entry
    try:
        return decompress(body)
    except Exception as exc:  # each library raises its own error types
        raise ProtocolError(
            f"cannot {name}-decompress the body of the message at queue offset "
            f"{queue_offset} (byte {position}): {exc}"
        ) from None


# --------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------


def _record_error(position: int, problem: str) -> ProtocolError:
    return ProtocolError(f"message record at byte {position}: {problem}")


def _unwrap(
    outer: _Row,
    store_hex: str,
    position: int,
    rows: list[_Row],
    blocks: list[bytes],
    store_hexes: list[str],
) -> None:
    """Append the inner messages of an inner-batch record.

    Mirrors ``MessageDecoder.decodeMessage(MessageExt, List)``: inner messages
    take topic, queue, timestamps, hosts and offsets from the outer record,
    with queue offsets ``outer + i``, and have their own flag, body and
    properties.
    """
    batch = outer[_BODY]
    row = list(outer)
    first_offset = outer[_QUEUE_OFFSET]
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


def _as_bytes(body: bytes | bytearray | memoryview) -> bytes:
    return body if type(body) is bytes else bytes(body)


def _decode_records(data: bytes) -> tuple[list[_Row], list[bytes], list[str]]:
    """Walk the records of a PULL body.

    Returns, per message: its fields up to ``body``, its raw property block
    and the hex of its store host. Compressed bodies are decompressed
    (clearing the COMPRESSED bit, as Java does) and inner batches unwrapped.

    A record is accepted only if its fields end exactly at its declared size.
    Reads past the end of the buffer raise ``struct.error``, reported as a
    ProtocolError like every other inconsistency.
    """
    rows: list[_Row] = []
    blocks: list[bytes] = []
    store_hexes: list[str] = []
    append_row = rows.append
    append_block = blocks.append
    append_store_hex = store_hexes.append
    unpack_v4 = _PREFIX_V4.unpack_from
    prefix_v4_size = _PREFIX_V4.size
    unpack_ushort = _UINT16.unpack_from
    host_cache = _host_cache
    topic_cache = _topic_cache
    host = rendered_host
    topic_of = _topic
    magic_v1 = codes.MESSAGE_MAGIC_V1
    magic_v2 = codes.MESSAGE_MAGIC_V2
    host_flags = _HOST_FLAGS
    compressed = codes.MSG_FLAG_COMPRESSED
    unwrap = _UNWRAP_FLAGS
    special_flags = compressed | unwrap
    min_record = _MIN_RECORD_SIZE
    v1_length_size = _TOPIC_LENGTH_V1_SIZE
    v2_length_size = _TOPIC_LENGTH_V2_SIZE
    properties_length_size = _PROPERTIES_LENGTH_SIZE
    size = len(data)
    pos = 0
    try:
        while pos < size:
            (
                total_size, magic, queue_id, flag, queue_offset, commit_log_offset, sys_flag,
                born_timestamp, born_raw, store_timestamp, store_raw, reconsume_times,
                prepared_offset, body_length,
            ) = unpack_v4(data, pos)
            record_end = pos + total_size
            if total_size < min_record or record_end > size:
                raise _record_error(
                    pos, f"declared size {total_size} does not fit the {size - pos} bytes left"
                )
            if sys_flag & host_flags:
                prefix = _PREFIXES[(sys_flag & host_flags) >> _HOST_FLAG_SHIFT]
                body_start = pos + prefix.size
                (
                    total_size, magic, queue_id, flag, queue_offset, commit_log_offset, sys_flag,
                    born_timestamp, born_raw, store_timestamp, store_raw, reconsume_times,
                    prepared_offset, body_length,
                ) = prefix.unpack_from(data, pos)
            else:
                body_start = pos + prefix_v4_size
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
                    f"topic and properties lengths do not end the record at its "
                    f"declared size {total_size}",
                )

            raw_topic = data[topic_start:topic_end]
            born = host_cache.get(born_raw) or host(born_raw)
            store = host_cache.get(store_raw) or host(store_raw)
            message_body = data[body_start:body_end]
            if sys_flag & special_flags:
                # Java leaves an empty body, and its flag, as they are.
                if sys_flag & compressed and message_body:
                    message_body = decompress_body(message_body, sys_flag, queue_offset, pos)
                    sys_flag &= ~compressed
                if sys_flag & unwrap == unwrap:
                    outer = (
                        topic_cache.get(raw_topic) or topic_of(raw_topic), queue_id,
                        queue_offset, commit_log_offset, sys_flag, flag, born_timestamp,
                        born[0], store_timestamp, store[0], reconsume_times, prepared_offset,
                        message_body,
                    )
                    _unwrap(outer, store[1], pos, rows, blocks, store_hexes)
                    pos = record_end
                    continue
            append_row((
                topic_cache.get(raw_topic) or topic_of(raw_topic), queue_id, queue_offset,
                commit_log_offset, sys_flag, flag, born_timestamp, born[0], store_timestamp,
                store[0], reconsume_times, prepared_offset, message_body,
            ))
            append_block(data[properties_start:record_end])
            append_store_hex(store[1])
            pos = record_end
    except struct.error:
        raise _record_error(pos, f"truncated: the record runs past the {size}-byte body") from None
    return rows, blocks, store_hexes


def _offset_msg_ids(rows: list[_Row], store_hexes: list[str]) -> list[str]:
    """Java's offsetMsgId: hex of store ip and port, then of the commitlog
    offset. The offsets of a batch are packed and hex-encoded in one call."""
    offsets = struct.pack(f">{len(rows)}Q", *map(_COMMIT_LOG_OFFSETS, rows))
    return list(map(add, store_hexes, offsets.hex(" ", _OFFSET_SIZE).upper().split()))


def decode_messages(body: bytes | bytearray | memoryview) -> list[Message]:
    """Decode every record of a PULL response body, in order.

    Compressed bodies are decompressed (and, as in Java, the COMPRESSED bit is
    cleared from ``sys_flag``); inner-batch records become one Message per
    inner message. Any inconsistency raises ProtocolError naming the byte
    position. Accepts any bytes-like object, e.g. ``bytes.fromhex(fixture)``.
    """
    rows, blocks, store_hexes = _decode_records(_as_bytes(body))
    properties = parse_property_blocks(blocks)
    offset_msg_ids = _offset_msg_ids(rows, store_hexes)
    get = dict.get
    tails = zip(
        properties,
        map(get, properties, repeat(PROPERTY_UNIQ_KEY), offset_msg_ids),
        offset_msg_ids,
        map(get, properties, repeat(PROPERTY_TAGS)),
        map(get, properties, repeat(PROPERTY_KEYS)),
    )
    return list(map(_new_message, repeat(Message), map(add, rows, tails)))


def decode_columns(body: bytes | bytearray | memoryview) -> MessageColumns:
    """Decode like :func:`decode_messages`, but one sequence per field.

    Cheaper than building Message tuples and transposing them, and directly
    what Arrow array builders take.
    """
    rows, blocks, store_hexes = _decode_records(_as_bytes(body))
    properties = parse_property_blocks(blocks)
    offset_msg_ids = _offset_msg_ids(rows, store_hexes)
    get = dict.get
    columns = list(zip(*rows)) if rows else [()] * _ROW_SIZE
    return MessageColumns(
        *columns,
        properties,
        list(map(get, properties, repeat(PROPERTY_UNIQ_KEY), offset_msg_ids)),
        offset_msg_ids,
        list(map(get, properties, repeat(PROPERTY_TAGS))),
        list(map(get, properties, repeat(PROPERTY_KEYS))),
    )


# --------------------------------------------------------------------------
# Tags
# --------------------------------------------------------------------------

# Java's String.trim() strips every char <= U+0020, not Unicode whitespace.
_JAVA_TRIM_CHARS = "".join(map(chr, range(0x21)))
_INT32_SIGN = 1 << 31
_UTF16_UNIT = struct.Struct(">H")


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()``: ``h = 31*h + unit`` over UTF-16 code units,
    as a signed 32-bit int. The broker stores this as a message's tags code."""
    units = text.encode("utf-16-be", "surrogatepass")
    value = 0
    for (unit,) in _UTF16_UNIT.iter_unpack(units):
        value = (31 * value + unit) & _UINT32_MASK
    return value - (1 << 32) if value & _INT32_SIGN else value


def parse_tag_expression(expression: str | None) -> frozenset[str] | None:
    """The tag set of a subscription, like ``FilterAPI.buildSubscriptionData``.

    None means every message (empty or ``*``). Otherwise the expression is
    split on ``||``, each tag trimmed and empty ones dropped; an expression of
    separators only gives an empty set, which matches nothing on the broker.
    """
    if not expression or expression == SUBSCRIBE_ALL:
        return None
    tags = (tag.strip(_JAVA_TRIM_CHARS) for tag in expression.split(TAG_EXPRESSION_SEPARATOR))
    return frozenset(tag for tag in tags if tag)


def tag_codes(tags: Iterable[str]) -> set[int]:
    """The subscription ``codeSet``: each tag's Java hash."""
    return {java_string_hash(tag) for tag in tags}
