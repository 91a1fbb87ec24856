"""The bulk decoder: PULL bodies to Arrow columns with numpy and Arrow kernels. No I/O.

The per-record decoder (``walk``) costs microseconds a message in Python. Here the only
per-record Python step is finding where each record starts (:func:`scan_records`, run as each
pull arrives); the fixed-offset fields of every record of many pulls are then gathered at once
with numpy, bodies are cut as Arrow views, and properties are split for the whole batch by
``properties.split_blocks``. It takes the common records only: magic V1, IPv4 hosts, no inner
batch. ``decoder.PullDecoder`` sends everything else, and anything inconsistent
(:class:`NotTaken`), to the per-record decoder; tests hold both to the same output.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import accumulate, chain

import numpy as np
import pyarrow as pa

from rocketmq_spark.records import layout
from rocketmq_spark.records.columns import EVERY_COLUMN, INT32, ArrowColumns, needed, walk_columns
from rocketmq_spark.records.compression import DEFAULT_MAX_BODY_BYTES, decompress_body
from rocketmq_spark.records.hosts import rendered_host
from rocketmq_spark.records.properties import split_blocks
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.errors import BodyTooLargeError

_OFFSETS = np.int32

# Where each prefix field sits in a record with IPv4 hosts, and its numpy type.
_FIELD = layout.ipv4_offsets()
_BODY_START = _FIELD["body_length"][0] + layout.size_of(layout.PREFIX[-1][1])
_TOPIC_LENGTH = np.dtype(layout.BYTE_ORDER + layout.TOPIC_LENGTH_V1)
_PROPERTIES_LENGTH = np.dtype(layout.BYTE_ORDER + layout.PROPERTIES_LENGTH)
_TAIL_MIN = _TOPIC_LENGTH.itemsize + _PROPERTIES_LENGTH.itemsize
_MIN_RECORD = _BODY_START + _TAIL_MIN

# totalSize, magic and sysFlag in one call: all the scan needs to route a record.
_SCAN = layout.prefix_struct(("total_size", "magic", "sys_flag"))
_NOT_TAKEN_FLAGS = (
    codes.MSG_FLAG_BORNHOST_V6 | codes.MSG_FLAG_STOREHOST_V6 | codes.MSG_FLAG_NEED_UNWRAP | codes.MSG_FLAG_INNER_BATCH
)

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


class NotTaken(Exception):
    """Bodies this decoder does not decode; the caller uses the per-record decoder."""


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


def _gather(buf: np.ndarray, positions: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The big-endian value at each byte position, as a native array."""
    raw = buf[positions[:, None] + np.arange(dtype.itemsize)]
    return raw.view(dtype).ravel().astype(dtype.newbyteorder("="))


def _column(header: np.ndarray, name: str) -> np.ndarray:
    """One fixed-offset field of every record, from the gathered record headers."""
    at, code = _FIELD[name]
    dtype = np.dtype(code)
    raw = np.ascontiguousarray(header[:, at : at + dtype.itemsize])
    return raw.view(dtype).ravel().astype(dtype.newbyteorder("="))


def decode_bulk(
    bodies: Sequence[bytes],
    starts: Sequence[Sequence[int]],
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    wanted: frozenset[str] = EVERY_COLUMN,
) -> ArrowColumns:
    """Decode PULL bodies that :func:`scan_records` took, given the starts it found; of the
    columns not ``wanted``, those that cost a pass of their own (properties, hosts, ids, bodies)
    are skipped and come out null.

    Raises :class:`NotTaken` when a record is inconsistent, so that the per-record decoder can
    raise the exact ProtocolError, naming the byte; so is a body that decompresses past
    ``max_body_bytes``, for the error to name its topic and queue.
    """
    data = b"".join(bodies)
    if len(data) > _MAX_VIEW_OFFSET:
        raise NotTaken
    buf = np.frombuffer(data, np.uint8)
    at = _record_starts(bodies, starts)
    if len(at) == 0:
        return walk_columns(b"")
    # Every record taken here is at least _BODY_START long, so this stays inside the buffer.
    # Named first: inline, numpy's stubs type the sum as float64, which np.take refuses.
    header_bytes = np.arange(_BODY_START, dtype=_OFFSETS)
    header = np.take(buf, at.astype(_OFFSETS)[:, None] + header_bytes)

    record_end, body_start, body_length, topic_length_at, properties_start = _checked_layout(buf, at, header)

    sys_flag = _column(header, "sys_flag")
    queue_offset = _column(header, "queue_offset")
    steps = needed(wanted)
    body = None
    if steps.body:
        compressed = (sys_flag & codes.MSG_FLAG_COMPRESSED).astype(bool) & (body_length > 0)
        body = (
            _decompressed_bodies(data, body_start, topic_length_at, sys_flag, queue_offset, at, max_body_bytes)
            if compressed.any()
            else _binary(data, buf, body_start, body_length)
        )
    properties = None
    if steps.properties:
        properties = split_blocks(_binary(data, buf, properties_start, record_end - properties_start))
    return ArrowColumns.build(
        queue_offset=pa.array(queue_offset),
        offset_msg_id=_offset_msg_ids(header) if steps.offset_msg_id else None,
        properties=properties,
        body=body,
        born_timestamp=_column(header, "born_timestamp"),
        store_timestamp=_column(header, "store_timestamp"),
        born_host=_hosts(_column(header, "born_host")) if steps.born_host else None,
        store_host=_hosts(_column(header, "store_host")) if steps.store_host else None,
        reconsume_times=_column(header, "reconsume_times"),
        flag=_column(header, "flag"),
    )


def _checked_layout(
    buf: np.ndarray, at: np.ndarray, header: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each record's end, body start and length, topic length position and properties start,
    with the lengths checked against each other; ``NotTaken`` if any record is inconsistent."""
    record_end = at + _column(header, "total_size")
    body_start = at + _BODY_START
    body_length = _column(header, "body_length")
    topic_length_at = body_start + body_length
    if (body_length < 0).any() or (topic_length_at + _TAIL_MIN > record_end).any():
        raise NotTaken
    properties_length_at = topic_length_at + _TOPIC_LENGTH.itemsize + buf[topic_length_at]
    if (properties_length_at + _PROPERTIES_LENGTH.itemsize > record_end).any():
        raise NotTaken
    properties_start = properties_length_at + _PROPERTIES_LENGTH.itemsize
    if (properties_start + _gather(buf, properties_length_at, _PROPERTIES_LENGTH) != record_end).any():
        raise NotTaken
    return record_end, body_start, body_length, topic_length_at, properties_start


def _record_starts(bodies: Sequence[bytes], starts: Sequence[Sequence[int]]) -> np.ndarray:
    """Where each record starts in the bodies joined end to end."""
    counts = np.fromiter(map(len, starts), np.int64, len(starts))
    bases = np.fromiter(accumulate(map(len, bodies), initial=0), np.int64, len(bodies) + 1)[:-1]
    return np.fromiter(chain.from_iterable(starts), np.int64, int(counts.sum())) + np.repeat(bases, counts)


def _binary(data: bytes, buf: np.ndarray, start: np.ndarray, length: np.ndarray) -> pa.BinaryArray:
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


def _decompressed_bodies(
    data: bytes,
    start: np.ndarray,
    end: np.ndarray,
    sys_flag: np.ndarray,
    queue_offset: np.ndarray,
    at: np.ndarray,
    max_body_bytes: int,
) -> pa.Array:
    """Bodies with compressed ones decompressed (an empty one stays as it is, as in Java)."""
    slices = list(map(data.__getitem__, map(slice, start.tolist(), end.tolist())))
    for i in np.flatnonzero(sys_flag & codes.MSG_FLAG_COMPRESSED).tolist():
        if slices[i]:
            try:
                slices[i] = decompress_body(
                    slices[i], int(sys_flag[i]), int(queue_offset[i]), int(at[i]), max_bytes=max_body_bytes
                )
            except BodyTooLargeError:
                raise NotTaken from None
    return pa.array(slices, pa.binary())


def _hosts(raw: np.ndarray) -> pa.Array:
    """``ip:port`` per message; each distinct host rendered once."""
    distinct, index = np.unique(raw, return_inverse=True)
    rendered = pa.array([rendered_host(int(host))[0] for host in distinct.tolist()], pa.string())
    return rendered.take(pa.array(index.ravel(), INT32))


def _offset_msg_ids(header: np.ndarray) -> pa.Array:
    """Java's offsetMsgId, store host then commitlog offset in uppercase hex: both are raw
    big-endian bytes of the record, so it is one hex pass over gathered bytes."""
    host_at, host_code = _FIELD["store_host"]
    offset_at, offset_code = _FIELD["commit_log_offset"]
    raw = np.concatenate(
        (
            header[:, host_at : host_at + np.dtype(host_code).itemsize],
            header[:, offset_at : offset_at + np.dtype(offset_code).itemsize],
        ),
        axis=1,
    )
    text = raw.tobytes().hex().upper().encode()
    width = 2 * raw.shape[1]
    n = len(header)
    offsets = np.arange(0, width * (n + 1), width, dtype=_OFFSETS)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(text))
