"""Batch-send records of many messages at once, from Arrow columns: the bytes
``outgoing.encode_batch`` writes for each message, made with numpy and Arrow kernels instead of a
Python step per message. No I/O.

It covers the messages most writes send: a body, optional tags and keys, the producer's unique id
and, with a namespace, its ``INSTANCE_ID``; no user or delivery properties. Such a message's
property string is ``[TAGS][KEYS]WAIT[INSTANCE_ID]UNIQ_KEY`` (``outgoing.plain_properties`` and
``message_properties``' order), and its id differs from its neighbours' only in the counter, so
each record is a fixed-width head, the body, and a property string of at most two variable parts.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketmq_spark.records.outgoing import (
    PROPERTY_WAIT,
    WAIT_FOR_STORE,
    batch_record_size,
)
from rocketmq_spark.records.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_INSTANCE_ID,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)

# A record's head: total size, magic, body CRC, flag, body length (int32 each, big-endian), as
# ``outgoing._BATCH_RECORD_HEAD``; then the body, then the property string's length (int16).
_HEAD_FIELDS = 5
_SIZE_FIELD = 0
_BODY_LENGTH_FIELD = 4
_HEAD_TYPE = np.dtype(">i4")
_HEAD_BYTES = _HEAD_FIELDS * _HEAD_TYPE.itemsize
_PROPERTIES_LENGTH_TYPE = np.dtype(">i2")
# The unique id's counter: four upper-case hex digits (its low 16 bits), then the entry's end.
_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
_NIBBLE_BITS = 4
_NIBBLE_MASK = 0xF
_COUNTER_DIGITS = 4
_COUNTER_SHIFTS = np.arange(_COUNTER_DIGITS - 1, -1, -1, dtype=np.uint32) * _NIBBLE_BITS
_COUNTER_MASK = 0xFFFF
_ENTRY_END = PROPERTY_SEPARATOR.encode()[0]
_COUNTER_ENTRY_BYTES = _COUNTER_DIGITS + 1
_NO_SEPARATOR = b""
_OFFSETS = np.int32


def _fixed_width(values: np.ndarray) -> pa.BinaryArray:
    """Rows of a 2-D uint8 array as a binary array of equal-width values, without a copy per row."""
    count, width = values.shape
    offsets = np.arange(0, (count + 1) * width, width, dtype=_OFFSETS)
    data = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def value_lengths(array: pa.Array) -> np.ndarray:
    """The byte length of each value of a binary or string array (0 for a null)."""
    lengths: np.ndarray = pc.fill_null(pc.binary_length(array), 0).to_numpy()
    return lengths.astype(np.int64)


def property_entries(name: str, values: pa.Array | None, count: int) -> pa.Array:
    """``name\\x01value\\x02`` per row, or nothing where the value is null or empty (as Java
    leaves out an unset tag or key)."""
    if values is None:
        return pa.nulls(count, pa.binary()).fill_null(_NO_SEPARATOR)
    values = values.cast(pa.binary())
    entries = pc.binary_join_element_wise(
        f"{name}{NAME_VALUE_SEPARATOR}".encode(), values, PROPERTY_SEPARATOR.encode(), _NO_SEPARATOR
    )
    present = pc.fill_null(pc.greater(pc.binary_length(values), 0), False)
    return pc.if_else(present, entries, _NO_SEPARATOR)


def id_entries(first: int, count: int) -> pa.BinaryArray:
    """The end of each message's ``UNIQ_KEY`` entry: the counter from ``first`` on (its low 16
    bits in upper-case hex, as ``UniqueIds.next`` writes it), then the entry's end."""
    counters = (np.arange(first, first + count, dtype=np.int64) & _COUNTER_MASK).astype(np.uint32)
    entries = np.empty((count, _COUNTER_ENTRY_BYTES), dtype=np.uint8)
    entries[:, :_COUNTER_DIGITS] = _HEX_DIGITS[(counters[:, None] >> _COUNTER_SHIFTS) & _NIBBLE_MASK]
    entries[:, _COUNTER_DIGITS] = _ENTRY_END
    return _fixed_width(entries)


def fixed_properties(id_head: str, namespace: str | None) -> bytes:
    """What every message's property string has between its keys and its id's counter."""
    text = f"{PROPERTY_WAIT}{NAME_VALUE_SEPARATOR}{WAIT_FOR_STORE}{PROPERTY_SEPARATOR}"
    if namespace:
        text += f"{PROPERTY_INSTANCE_ID}{NAME_VALUE_SEPARATOR}{namespace}{PROPERTY_SEPARATOR}"
    return f"{text}{PROPERTY_UNIQ_KEY}{NAME_VALUE_SEPARATOR}{id_head}".encode()


class Records:
    """Encoded batch records of many messages, in their order: ``data`` holds them back to back,
    record ``i`` at ``offsets[i]:offsets[i + 1]``."""

    def __init__(self, array: pa.BinaryArray, properties_lengths: np.ndarray) -> None:
        self.array = array
        self.properties_lengths = properties_lengths

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def offsets(self) -> np.ndarray:
        count = len(self.array)
        return np.frombuffer(
            self.array.buffers()[1],
            dtype=_OFFSETS,
            count=count + 1,
            offset=self.array.offset * np.dtype(_OFFSETS).itemsize,
        )

    @property
    def data(self) -> pa.Buffer:
        return self.array.buffers()[2]

    def take(self, order: np.ndarray) -> Records:
        """The records in another order (each queue's together), copied once."""
        return Records(self.array.take(pa.array(order)), self.properties_lengths[order])


def encode_records(
    bodies: pa.Array,
    tags: pa.Array | None,
    keys: pa.Array | None,
    *,
    id_head: str,
    first_counter: int,
    namespace: str | None,
) -> Records:
    """The batch records of messages of these bodies (binary, none null), tags and keys (strings
    or None), with unique ids ``id_head`` + the counter from ``first_counter`` on: each exactly
    what ``encode_batch`` writes for ``(0, body, encoded properties)``."""
    count = len(bodies)
    tag_entries = property_entries(PROPERTY_TAGS, tags, count)
    key_entries = property_entries(PROPERTY_KEYS, keys, count)
    fixed = fixed_properties(id_head, namespace)
    properties_lengths = value_lengths(tag_entries) + value_lengths(key_entries) + len(fixed) + _COUNTER_ENTRY_BYTES
    body_lengths = value_lengths(bodies)
    heads = np.zeros((count, _HEAD_FIELDS), dtype=_HEAD_TYPE)
    heads[:, _SIZE_FIELD] = batch_record_size(0, 0) + body_lengths + properties_lengths
    heads[:, _BODY_LENGTH_FIELD] = body_lengths
    lengths = properties_lengths.astype(_PROPERTIES_LENGTH_TYPE).view(np.uint8).reshape(count, -1)
    array = pc.binary_join_element_wise(
        _fixed_width(heads.view(np.uint8).reshape(count, _HEAD_BYTES)),
        bodies,
        _fixed_width(lengths),
        tag_entries,
        key_entries,
        fixed,
        id_entries(first_counter, count),
        _NO_SEPARATOR,
    )
    return Records(array, properties_lengths)


def record_parts(record: bytes) -> tuple[bytes, bytes]:
    """The body and the encoded properties of one batch record (to send it alone)."""
    head = np.frombuffer(record, dtype=_HEAD_TYPE, count=_HEAD_FIELDS)
    body_end = _HEAD_BYTES + int(head[_BODY_LENGTH_FIELD])
    properties_start = body_end + _PROPERTIES_LENGTH_TYPE.itemsize
    return record[_HEAD_BYTES:body_end], record[properties_start:]
