"""PULL bodies to Arrow columns in bulk, without I/O: the executors' decoder.

``message.decode_columns`` walks records one at a time in Python and builds a dict per message,
which costs microseconds a message. Here the only per-record Python step is finding where each
record starts (:func:`scan_records`, run as each pull arrives); the fields of every record of many
pulls are then gathered at once with numpy at fixed offsets, and properties are split for the whole
batch by Arrow kernels. Records this path does not take (IPv6 hosts, V2 magic, inner batches,
anything malformed) go through ``message.decode_columns``, which also raises the exact error.

Both paths give :class:`ArrowColumns` with the same values; tests hold them to that.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import accumulate, chain
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketmq_spark import codes
from rocketmq_spark.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    MessageColumns,
    decode_columns,
    decompress_body,
    parse_property_blocks,
    rendered_host,
)

TIMESTAMP_MS = pa.timestamp("ms", tz="UTC")
_INT32 = pa.int32()
_OFFSETS = np.int32


class ArrowColumns(NamedTuple):
    """Per-message columns of decoded pulls, as Arrow arrays of equal length."""

    queue_offset: pa.Array
    msg_id: pa.Array
    offset_msg_id: pa.Array
    tags: pa.Array
    keys: pa.Array
    body: pa.Array
    properties: pa.Array
    born_timestamp: pa.Array  # timestamp[ms, UTC]
    store_timestamp: pa.Array
    born_host: pa.Array
    store_host: pa.Array
    reconsume_times: pa.Array
    flag: pa.Array

    def __len__(self) -> int:  # type: ignore[override]
        return len(self.queue_offset)

    def filter(self, mask: np.ndarray) -> ArrowColumns:
        """The messages where ``mask`` is true."""
        keep = pa.array(mask, pa.bool_())
        return ArrowColumns(*(column.filter(keep) for column in self))

    @staticmethod
    def concat(parts: Sequence[ArrowColumns]) -> ArrowColumns:
        if len(parts) == 1:
            return parts[0]
        return ArrowColumns(*(pa.concat_arrays(list(column)) for column in zip(*parts)))


# --------------------------------------------------------------------------
# Record layout of the records taken here: magic V1, IPv4 born and store hosts.
# --------------------------------------------------------------------------

_FIELDS = (
    ("total_size", ">i4"), ("magic", ">u4"), ("body_crc", ">i4"), ("queue_id", ">i4"),
    ("flag", ">i4"), ("queue_offset", ">i8"), ("commit_log_offset", ">u8"), ("sys_flag", ">i4"),
    ("born_timestamp", ">i8"), ("born_host", ">u8"), ("store_timestamp", ">i8"),
    ("store_host", ">u8"), ("reconsume_times", ">i4"), ("prepared_offset", ">i8"),
    ("body_length", ">i4"),
)
_AT = dict(zip(
    (name for name, _ in _FIELDS),
    accumulate((np.dtype(kind).itemsize for _, kind in _FIELDS), initial=0),
))
_KIND = dict(_FIELDS)
_BODY_START = _AT["body_length"] + np.dtype(_KIND["body_length"]).itemsize
_TOPIC_LENGTH = ">u1"  # magic V1
_PROPERTIES_LENGTH = ">u2"
_TAIL_MIN = np.dtype(_TOPIC_LENGTH).itemsize + np.dtype(_PROPERTIES_LENGTH).itemsize
_MIN_RECORD = _BODY_START + _TAIL_MIN

# totalSize, magic and sysFlag in one call: all the scan needs to route a record.
_SCAN = struct.Struct(f">iI{_AT['sys_flag'] - _AT['body_crc']}xi")
_NOT_TAKEN_FLAGS = (
    codes.MSG_FLAG_BORNHOST_V6 | codes.MSG_FLAG_STOREHOST_V6
    | codes.MSG_FLAG_NEED_UNWRAP | codes.MSG_FLAG_INNER_BATCH
)


_NAME_VALUE = NAME_VALUE_SEPARATOR.encode()
_ENTRY_END = PROPERTY_SEPARATOR.encode()


# Arrow's binary view: four int32 words, length then either the bytes inline (up to 12) or a
# 4-byte prefix, a buffer index and an offset into that buffer.
_VIEW_WORDS = 4
_VIEW_WORD_BYTES = 4
_VIEW_LENGTH = 0
_VIEW_BUFFER = 2
_VIEW_OFFSET = 3
_VIEW_INLINE = (_VIEW_WORDS - 1) * _VIEW_WORD_BYTES
_VIEW_PREFIX = _VIEW_WORD_BYTES
_MAX_VIEW_OFFSET = np.iinfo(np.int32).max


class _NotTaken(Exception):
    """A record this path does not decode; the caller uses message.decode_columns."""


def scan_records(body: bytes) -> list[int] | None:
    """Where each record of a PULL body starts, or None if the bulk path cannot take the body.

    Checks only what routing needs (sizes chain to the exact end, magic V1, IPv4 hosts, no inner
    batch); the decoder validates the rest.
    """
    starts: list[int] = []
    append = starts.append
    unpack = _SCAN.unpack_from
    magic_v1 = codes.MESSAGE_MAGIC_V1
    not_taken = _NOT_TAKEN_FLAGS
    min_record = _MIN_RECORD
    pos = 0
    size = len(body)
    try:
        while pos < size:
            total_size, magic, sys_flag = unpack(body, pos)
            if magic != magic_v1 or sys_flag & not_taken or total_size < min_record:
                return None
            append(pos)
            pos += total_size
    except struct.error:
        return None
    return starts if pos == size else None


def _gather(buf: np.ndarray, positions: np.ndarray, kind: str) -> np.ndarray:
    """The big-endian ``kind`` value at each byte position, as a native array."""
    dtype = np.dtype(kind)
    raw = buf[positions[:, None] + np.arange(dtype.itemsize)]
    return raw.view(dtype).ravel().astype(dtype.newbyteorder("="))


def _column(header: np.ndarray, name: str) -> np.ndarray:
    """One fixed-offset field of every record, from the gathered record headers."""
    dtype = np.dtype(_KIND[name])
    at = _AT[name]
    raw = np.ascontiguousarray(header[:, at : at + dtype.itemsize])
    return raw.view(dtype).ravel().astype(dtype.newbyteorder("="))


def decode_bulk(bodies: Sequence[bytes], starts: Sequence[Sequence[int]]) -> ArrowColumns:
    """Decode PULL bodies that :func:`scan_records` took, given the starts it found.

    Falls back to ``message.decode_columns`` for the lot when a record is inconsistent, so a bad
    body raises the same ProtocolError, naming the byte, as anywhere else.
    """
    try:
        return _decode_bulk(bodies, starts)
    except _NotTaken:
        return from_message_columns(
            MessageColumns(*(list(chain.from_iterable(column)) for column in zip(*map(decode_columns, bodies))))
            if bodies else decode_columns(b"")
        )


def _decode_bulk(bodies: Sequence[bytes], starts: Sequence[Sequence[int]]) -> ArrowColumns:
    data = b"".join(bodies)
    if len(data) > _MAX_VIEW_OFFSET:
        raise _NotTaken
    buf = np.frombuffer(data, np.uint8)
    counts = np.fromiter(map(len, starts), np.int64, len(starts))
    bases = np.fromiter(accumulate(map(len, bodies), initial=0), np.int64, len(bodies) + 1)[:-1]
    at = np.fromiter(chain.from_iterable(starts), np.int64, int(counts.sum())) + np.repeat(bases, counts)
    if len(at) == 0:
        return from_message_columns(decode_columns(b""))
    # Every record taken here is at least _BODY_START long, so this stays inside the buffer.
    header = np.take(buf, at.astype(_OFFSETS)[:, None] + np.arange(_BODY_START, dtype=_OFFSETS))

    record_end = at + _column(header, "total_size")
    body_start = at + _BODY_START
    body_length = _column(header, "body_length")
    topic_length_at = body_start + body_length
    if (body_length < 0).any() or (topic_length_at + _TAIL_MIN > record_end).any():
        raise _NotTaken
    properties_length_at = topic_length_at + np.dtype(_TOPIC_LENGTH).itemsize + buf[topic_length_at]
    if (properties_length_at + np.dtype(_PROPERTIES_LENGTH).itemsize > record_end).any():
        raise _NotTaken
    properties_start = properties_length_at + np.dtype(_PROPERTIES_LENGTH).itemsize
    if (properties_start + _gather(buf, properties_length_at, _PROPERTIES_LENGTH) != record_end).any():
        raise _NotTaken

    sys_flag = _column(header, "sys_flag")
    queue_offset = _column(header, "queue_offset")
    compressed = (sys_flag & codes.MSG_FLAG_COMPRESSED).astype(bool) & (body_length > 0)
    if compressed.any():
        body = _decompressed_bodies(data, body_start, topic_length_at, sys_flag, queue_offset, at)
    else:
        body = _binary(data, buf, body_start, body_length)
    properties = _properties(_binary(data, buf, properties_start, record_end - properties_start))
    offset_msg_id = _offset_msg_ids(header)
    return ArrowColumns(
        queue_offset=pa.array(queue_offset),
        msg_id=pc.coalesce(properties.looked_up[PROPERTY_UNIQ_KEY], offset_msg_id),
        offset_msg_id=offset_msg_id,
        tags=properties.looked_up[PROPERTY_TAGS],
        keys=properties.looked_up[PROPERTY_KEYS],
        body=body,
        properties=properties.map,
        born_timestamp=pa.array(_column(header, "born_timestamp"), TIMESTAMP_MS),
        store_timestamp=pa.array(_column(header, "store_timestamp"), TIMESTAMP_MS),
        born_host=_hosts(_column(header, "born_host")),
        store_host=_hosts(_column(header, "store_host")),
        reconsume_times=pa.array(_column(header, "reconsume_times"), _INT32),
        flag=pa.array(_column(header, "flag"), _INT32),
    )


def _binary(data: bytes | pa.Buffer, buf: np.ndarray, start: np.ndarray, length: np.ndarray) -> pa.BinaryArray:
    """``data[start:start+length]`` for each pair, as one binary array, copied once.

    Built as Arrow binary views over ``data`` (no copy), then cast to plain binary, which is what
    Spark reads: one C++ pass instead of a Python slice per message. A view of more than
    ``_VIEW_INLINE`` bytes holds its first ``_VIEW_PREFIX`` bytes and an offset; a shorter one
    holds its bytes inline, zero-padded.
    """
    n = len(start)
    views = np.zeros((n, _VIEW_WORDS), np.int32)
    view_bytes = views.view(np.uint8)
    views[:, _VIEW_LENGTH] = length
    views[:, _VIEW_BUFFER] = 0  # the one data buffer, ``data``
    views[:, _VIEW_OFFSET] = start
    prefix = slice(_VIEW_WORD_BYTES, _VIEW_WORD_BYTES + _VIEW_PREFIX)
    view_bytes[:, prefix] = np.take(buf, start[:, None] + np.arange(_VIEW_PREFIX), mode="clip")
    short = np.flatnonzero(length <= _VIEW_INLINE)
    if len(short):
        inline = np.take(buf, start[short, None] + np.arange(_VIEW_INLINE), mode="clip")
        inline *= np.arange(_VIEW_INLINE) < length[short, None]
        view_bytes[short, _VIEW_WORD_BYTES:] = inline
    array = pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views), pa.py_buffer(data)])
    return array.cast(pa.binary())


def _decompressed_bodies(data: bytes, start: np.ndarray, end: np.ndarray, sys_flag: np.ndarray,
                         queue_offset: np.ndarray, at: np.ndarray) -> pa.Array:
    """Bodies with compressed ones decompressed (an empty one stays as it is, as in Java)."""
    slices = list(map(data.__getitem__, map(slice, start.tolist(), end.tolist())))
    for i in np.flatnonzero(sys_flag & codes.MSG_FLAG_COMPRESSED).tolist():
        if slices[i]:
            slices[i] = decompress_body(slices[i], int(sys_flag[i]), int(queue_offset[i]), int(at[i]))
    return pa.array(slices, pa.binary())


def _hosts(raw: np.ndarray) -> pa.Array:
    """``ip:port`` per message; each distinct host rendered once."""
    distinct, index = np.unique(raw, return_inverse=True)
    rendered = pa.array([rendered_host(int(host))[0] for host in distinct.tolist()], pa.string())
    return rendered.take(pa.array(index.ravel(), _INT32))


def _offset_msg_ids(header: np.ndarray) -> pa.Array:
    """Java's offsetMsgId, store host then commitlog offset in uppercase hex: both are raw
    big-endian bytes of the record, so it is one hex pass over gathered bytes."""
    host_at = _AT["store_host"]
    offset_at = _AT["commit_log_offset"]
    raw = np.concatenate(
        (header[:, host_at : host_at + np.dtype(_KIND["store_host"]).itemsize],
         header[:, offset_at : offset_at + np.dtype(_KIND["commit_log_offset"]).itemsize]),
        axis=1,
    )
    text = raw.tobytes().hex().upper().encode()
    width = 2 * raw.shape[1]
    n = len(header)
    offsets = np.arange(0, width * (n + 1), width, dtype=_OFFSETS)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(text))


class _Properties(NamedTuple):
    """A map array of every message's properties, and the values of the names looked up."""

    map: pa.MapArray
    looked_up: dict[str, pa.Array]


_LOOKED_UP = (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY)


def _properties(blocks: pa.BinaryArray) -> _Properties:
    """Property blocks as one map array, cut by numpy and Arrow when every block has Java's exact
    ``name\\x01value\\x02`` shape with no empty name or value; else parsed per message with Java's
    lenient rules. A later duplicate name wins, as in Java's HashMap."""
    _, offsets_buffer, data_buffer = blocks.buffers()
    block_offsets = np.frombuffer(offsets_buffer, _OFFSETS, len(blocks) + 1,
                                  blocks.offset * np.dtype(_OFFSETS).itemsize)
    joined = np.frombuffer(data_buffer, np.uint8)
    entries = _entries(joined, block_offsets)
    if entries is None:
        return _lenient_properties(blocks)
    lengths, offsets = entries
    # Names and values back to back: the block bytes without their separators.
    text_offsets = np.zeros(len(lengths) + 1, _OFFSETS)
    np.cumsum(lengths, out=text_offsets[1:])
    text = joined[(joined != _NAME_VALUE[0]) & (joined != _ENTRY_END[0])]
    raw = pa.BinaryArray.from_buffers(pa.binary(), len(lengths), [None, pa.py_buffer(text_offsets), pa.py_buffer(text)])
    try:
        texts = raw.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: Java replaces bad bytes, and so does the lenient path
        return _lenient_properties(blocks)
    names = texts.take(pa.array(np.arange(0, len(texts), 2)))
    values = texts.take(pa.array(np.arange(1, len(texts), 2)))
    messages = len(blocks)
    owner = np.repeat(np.arange(messages, dtype=np.int64), np.diff(offsets))
    encoded = pc.dictionary_encode(names)
    codes_ = encoded.indices.to_numpy()
    keep = _last_of_each_name(owner, codes_, len(encoded.dictionary))
    if keep is not None:
        mask = pa.array(keep)
        names, values, owner, codes_ = names.filter(mask), values.filter(mask), owner[keep], codes_[keep]
        offsets = np.zeros(messages + 1, np.int64)
        np.cumsum(np.bincount(owner, minlength=messages), out=offsets[1:])
    dictionary = encoded.dictionary.to_pylist()
    looked_up = {}
    for name in _LOOKED_UP:
        at = np.zeros(messages, np.int64)
        found = np.zeros(messages, bool)
        if name in dictionary:
            entries_named = np.flatnonzero(codes_ == dictionary.index(name))
            at[owner[entries_named]] = entries_named
            found[owner[entries_named]] = True
        looked_up[name] = values.take(pa.array(at, mask=~found))
    return _Properties(pa.MapArray.from_arrays(pa.array(offsets.astype(_OFFSETS)), names, values), looked_up)


def _lenient_properties(blocks: pa.BinaryArray) -> _Properties:
    parsed = parse_property_blocks(blocks.to_pylist())
    return _Properties(
        _map_array(parsed),
        {name: pa.array([p.get(name) for p in parsed], pa.string()) for name in _LOOKED_UP},
    )


def _entries(joined: np.ndarray, block_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The length of each name and value (alternating), and each block's first entry index;
    None unless every block is ``name\\x01value\\x02`` repeated, nothing empty."""
    separators = np.flatnonzero((joined == _NAME_VALUE[0]) | (joined == _ENTRY_END[0]))
    kinds = joined[separators]
    if (
        len(separators) % 2
        or (kinds[0::2] != _NAME_VALUE[0]).any()
        or (kinds[1::2] != _ENTRY_END[0]).any()
    ):
        return None
    ends = block_offsets[1:]
    nonempty = ends > block_offsets[:-1]
    if (joined[ends[nonempty] - 1] != _ENTRY_END[0]).any():
        return None  # a block whose last entry runs into the next block
    starts = np.empty(len(separators), np.int64)
    starts[0:1] = 0
    starts[1:] = separators[:-1] + 1
    lengths = separators - starts
    if (lengths == 0).any():
        return None
    # Every block ends with \x02, so the entries before a block's first byte are those whose
    # \x02 comes before it.
    offsets = np.searchsorted(separators[1::2], block_offsets)
    return lengths, offsets


def _last_of_each_name(owner: np.ndarray, name_codes: np.ndarray, distinct: int) -> np.ndarray | None:
    """Which entries to keep so that a name repeated in one message keeps its last value; None
    when no message repeats a name (the usual case, checked with one sort)."""
    key = owner * distinct + name_codes
    ordered = np.sort(key)
    if not (ordered[1:] == ordered[:-1]).any():
        return None
    # The first of each key in reverse order is its last occurrence.
    _, first_reversed = np.unique(key[::-1], return_index=True)
    keep = np.zeros(len(key), bool)
    keep[len(key) - 1 - first_reversed] = True
    return keep


def _map_array(properties: Sequence[dict[str, str]]) -> pa.MapArray:
    return pa.MapArray.from_arrays(
        pa.array(list(accumulate(map(len, properties), initial=0)), _INT32),
        pa.array(list(chain.from_iterable(map(dict.keys, properties))), pa.string()),
        pa.array(list(chain.from_iterable(map(dict.values, properties))), pa.string()),
    )


def from_message_columns(cols: MessageColumns) -> ArrowColumns:
    """The same columns from ``message.decode_columns``' Python lists."""
    return ArrowColumns(
        queue_offset=pa.array(cols.queue_offset, pa.int64()),
        msg_id=pa.array(cols.msg_id, pa.string()),
        offset_msg_id=pa.array(cols.offset_msg_id, pa.string()),
        tags=pa.array(cols.tags, pa.string()),
        keys=pa.array(cols.keys, pa.string()),
        body=pa.array(cols.body, pa.binary()),
        properties=_map_array(cols.properties),
        born_timestamp=pa.array(cols.born_timestamp, TIMESTAMP_MS),
        store_timestamp=pa.array(cols.store_timestamp, TIMESTAMP_MS),
        born_host=pa.array(cols.born_host, pa.string()),
        store_host=pa.array(cols.store_host, pa.string()),
        reconsume_times=pa.array(cols.reconsume_times, _INT32),
        flag=pa.array(cols.flag, _INT32),
    )
