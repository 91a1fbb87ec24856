"""Messages as RocketMQ's Java producer puts them on the wire: the property string, the client's
unique message id (``UNIQ_KEY``), the compressed body of a single send, and the body of a batch
send. No I/O.

A send carries the message's properties in its header as one string, ``name\\x01value\\x02``
repeated (``MessageDecoder.messageProperties2String``); a batch send carries every message as a
small record of its own in the body (``MessageDecoder.encodeMessages``) and the batch's own
properties in the header. What the broker stores, and what consumers and the source read back,
is exactly these bytes.
"""

from __future__ import annotations

import itertools
import os
import secrets
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from rocketmq_spark.records.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from rocketmq_spark.remoting import codes

PROPERTY_WAIT = "WAIT"
PROPERTY_DELAY = "DELAY"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
# What every Java ``Message`` carries from its constructor on: the producer waits for the store.
WAIT_FOR_STORE = "true"

# The Java producer's zlib level (``DefaultMQProducer.compressLevel``, system property default 5).
ZLIB_LEVEL = 5
# The sysFlag of a zlib-compressed single send: the compressed bit and the compression type,
# as the Java producer sets them from 4.9.4 on, on both the 4.9 and 5.x lines (older readers
# ignore the type bits and inflate with zlib, which is what type 0 means to them).
COMPRESSED_ZLIB_SYS_FLAG = codes.MSG_FLAG_COMPRESSED | (codes.COMPRESSION_ZLIB << codes.MSG_COMPRESSION_TYPE_SHIFT)

# A property string longer than a Java short cannot be stored: brokers refuse it, and the batch
# record gives its length two bytes.
MAX_PROPERTIES_BYTES = 0x7FFF

# One inner record of a batch body: total size, magic (0), body CRC (0), flag, body length; then
# the body, the properties' length (int16) and the properties.
_BATCH_RECORD_HEAD = struct.Struct(">iiiii")
_PROPERTIES_LENGTH = struct.Struct(">h")
_BATCH_RECORD_FIXED = _BATCH_RECORD_HEAD.size + _PROPERTIES_LENGTH.size


def encode_properties(properties: Mapping[str, str | None]) -> str:
    """The property string of a message, entries in the mapping's order; a None value is left
    out, as Java leaves out a null one."""
    return "".join(
        f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
        for name, value in properties.items()
        if value is not None
    )


def properties_bytes(text: str) -> bytes:
    """The property string as sent, or ValueError when it is longer than RocketMQ stores."""
    data = text.encode("utf-8")
    if len(data) > MAX_PROPERTIES_BYTES:
        raise ValueError(f"the message properties take {len(data)} bytes, more than RocketMQ's {MAX_PROPERTIES_BYTES}")
    return data


def message_properties(
    *,
    tags: str | None,
    keys: str | None,
    unique_id: str,
    user: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The properties a Java ``Message`` of these tags, keys and user properties has when sent:
    the user's, ``TAGS`` and ``KEYS`` (when not empty), ``WAIT=true``, any delivery property
    (``extra``), and the unique id."""
    properties: dict[str, str] = dict(user or {})
    if tags:
        properties[PROPERTY_TAGS] = tags
    if keys:
        properties[PROPERTY_KEYS] = keys
    properties[PROPERTY_WAIT] = WAIT_FOR_STORE
    properties.update(extra or {})
    properties[PROPERTY_UNIQ_KEY] = unique_id
    return properties


_TAGS_ENTRY = f"{PROPERTY_TAGS}{NAME_VALUE_SEPARATOR}"
_KEYS_ENTRY = f"{PROPERTY_KEYS}{NAME_VALUE_SEPARATOR}"
_WAIT_AND_ID = f"{PROPERTY_WAIT}{NAME_VALUE_SEPARATOR}{WAIT_FOR_STORE}{PROPERTY_SEPARATOR}{PROPERTY_UNIQ_KEY}{NAME_VALUE_SEPARATOR}"


def plain_properties(tags: str | None, keys: str | None, unique_id: str) -> str:
    """``encode_properties(message_properties(...))`` of a message without user or delivery
    properties, in one step: most rows are such, and this is a row's largest cost."""
    text = f"{_TAGS_ENTRY}{tags}{PROPERTY_SEPARATOR}" if tags else ""
    if keys:
        text += f"{_KEYS_ENTRY}{keys}{PROPERTY_SEPARATOR}"
    return f"{text}{_WAIT_AND_ID}{unique_id}{PROPERTY_SEPARATOR}"


def compress_body(body: bytes) -> bytes:
    """A single send's body as the Java producer compresses it: zlib (with its header) at level 5."""
    return zlib.compress(body, ZLIB_LEVEL)


def batch_record_size(body_length: int, properties_length: int) -> int:
    """The bytes one message takes in a batch body."""
    return _BATCH_RECORD_FIXED + body_length + properties_length


def encode_batch(messages: Iterable[tuple[int, bytes, bytes]]) -> bytes:
    """The body of a batch send from ``(flag, body, encoded properties)`` of each message, as
    ``MessageDecoder.encodeMessages`` writes it (bodies are never compressed in a batch)."""
    parts: list[bytes] = []
    for flag, body, properties in messages:
        size = batch_record_size(len(body), len(properties))
        parts += (
            _BATCH_RECORD_HEAD.pack(size, 0, 0, flag, len(body)),
            body,
            _PROPERTIES_LENGTH.pack(len(properties)),
            properties,
        )
    return b"".join(parts)


# ----------------------------------------------------------------------- unique ids

_PID_MASK = 0xFFFF
_INT32_MASK = 0xFFFFFFFF
_SHORT_MASK = 0xFFFF
_LOADER_HASH_BYTES = 4
_MS_PER_SECOND = 1000


def month_start_ms(now_ms: int) -> tuple[int, int]:
    """The start of the local month of ``now_ms`` and of the next one, in epoch ms: what Java's
    ``Calendar`` in the default zone gives ``MessageClientIDSetter``."""
    local = datetime.fromtimestamp(now_ms / _MS_PER_SECOND)
    start = datetime(local.year, local.month, 1)
    following = datetime(local.year + local.month // 12, local.month % 12 + 1, 1)
    return int(start.timestamp() * _MS_PER_SECOND), int(following.timestamp() * _MS_PER_SECOND)


class UniqueIds:
    """Makes ``UNIQ_KEY`` values as ``MessageClientIDSetter.createUniqID`` does, in upper-case hex:
    the host's address (4 or 16 bytes), the process id (2 bytes), a number fixed for the producer
    (Java's class loader hash; random here), the milliseconds since the local month began (4
    bytes) and a counter (2 bytes). ``msgId`` as users and the dashboard know it is this value."""

    def __init__(self, address: bytes, *, clock: Callable[[], int] | None = None, fixed: int | None = None) -> None:
        loader = secrets.randbits(32) if fixed is None else fixed
        prefix = address + struct.pack(">HI", os.getpid() & _PID_MASK, loader & _INT32_MASK)
        self._prefix = prefix.hex().upper()
        self._clock = clock or (lambda: int(time.time() * _MS_PER_SECOND))
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._month_start, self._next_month = month_start_ms(self._clock())

    def next(self) -> str:
        elapsed = self._elapsed()
        with self._lock:  # not within a run ``reserve`` takes
            count = next(self._counter) & _SHORT_MASK
        return f"{self._prefix}{elapsed:08X}{count:04X}"

    def reserve(self, count: int) -> tuple[str, int]:
        """Ids for ``count`` messages at once: what they all start with (the prefix and the time)
        and the first counter value; message ``i``'s id ends in the counter ``first + i`` (its low
        16 bits in hex, as ``next`` writes it). Ids ``next`` gives meanwhile come after them."""
        elapsed = self._elapsed()
        with self._lock:  # the run is taken whole, however threads interleave
            first = next(self._counter)
            self._counter = itertools.count(first + count)
        return f"{self._prefix}{elapsed:08X}", first

    def _elapsed(self) -> int:
        """The milliseconds since the local month began, as the id's time."""
        now = self._clock()
        if now >= self._next_month:
            with self._lock:
                self._month_start, self._next_month = month_start_ms(now)
        return (now - self._month_start) & _INT32_MASK
