"""Message property blocks (``name\\x01value\\x02`` repeated) to an Arrow map column, for many
messages at once. Both decoders use it, so the rules live here only.

Java writes exactly that shape; when every block of a batch has it with no empty name or value,
the batch is split with numpy and Arrow kernels. Anything else is parsed per message with the
lenient rules of Java's ``string2messageProperties``. A name repeated in one message keeps its
last value, as in Java's HashMap, except ``UNIQ_KEY``, which keeps its first: a batch-sent message
carries its own id and then, appended by 4.9 and 5.3 brokers with the batch's other properties,
the batch's, and its own is the one the producer's SendResult gave.
"""

from __future__ import annotations

from itertools import accumulate, chain
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
# The property the Java producer adds with a namespace set.
PROPERTY_INSTANCE_ID = "INSTANCE_ID"
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
# The properties every row also shows as a column of its own.
LOOKED_UP = (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY)
# Names whose first value wins when a message repeats them (see above).
FIRST_WINS = frozenset({PROPERTY_UNIQ_KEY})

_NAME_VALUE = NAME_VALUE_SEPARATOR.encode()[0]
_ENTRY_END = PROPERTY_SEPARATOR.encode()[0]
_OFFSETS = np.int32


def parse_properties(text: str) -> dict[str, str]:
    """Parse one block like ``string2messageProperties``: entries with an empty name or value are
    skipped, a value keeps any further ``\\x01``, a later duplicate name wins (but for
    ``FIRST_WINS``)."""
    properties: dict[str, str] = {}
    for entry in text.split(PROPERTY_SEPARATOR):
        key, _, value = entry.partition(NAME_VALUE_SEPARATOR)
        if key and value and not (key in FIRST_WINS and key in properties):
            properties[key] = value
    return properties


class Properties(NamedTuple):
    """Every message's properties as one map array, and the values of the names looked up."""

    map: pa.MapArray
    looked_up: dict[str, pa.Array]

    def as_dicts(self) -> list[dict[str, str]]:
        return [dict(pairs) for pairs in self.map.to_pylist()]


def split_blocks(blocks: pa.BinaryArray) -> Properties:
    """The property blocks of many messages, one per entry of ``blocks``."""
    _, offsets_buffer, data_buffer = blocks.buffers()
    block_offsets = np.frombuffer(
        offsets_buffer, _OFFSETS, len(blocks) + 1, blocks.offset * np.dtype(_OFFSETS).itemsize
    )
    joined = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    entries = _entries(joined, block_offsets)
    if entries is None:
        return _lenient(blocks)
    lengths, offsets = entries
    # Names and values back to back: the block bytes without their separators.
    text_offsets = np.zeros(len(lengths) + 1, _OFFSETS)
    np.cumsum(lengths, out=text_offsets[1:])
    text = joined[(joined != _NAME_VALUE) & (joined != _ENTRY_END)]
    raw = pa.BinaryArray.from_buffers(pa.binary(), len(lengths), [None, pa.py_buffer(text_offsets), pa.py_buffer(text)])
    try:
        texts = raw.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: Java replaces bad bytes, and so do the lenient rules
        return _lenient(blocks)
    names = texts.take(pa.array(np.arange(0, len(texts), 2)))
    values = texts.take(pa.array(np.arange(1, len(texts), 2)))
    messages = len(blocks)
    owner = np.repeat(np.arange(messages, dtype=np.int64), np.diff(offsets))
    encoded = pc.dictionary_encode(names)
    name_codes = encoded.indices.to_numpy()
    dictionary = encoded.dictionary.to_pylist()
    first_wins = [code for code, name in enumerate(dictionary) if name in FIRST_WINS]
    keep = _one_of_each_name(owner, name_codes, len(dictionary), first_wins)
    if keep is not None:
        mask = pa.array(keep)
        names, values, owner, name_codes = names.filter(mask), values.filter(mask), owner[keep], name_codes[keep]
        offsets = np.zeros(messages + 1, np.int64)
        np.cumsum(np.bincount(owner, minlength=messages), out=offsets[1:])
    looked_up = {}
    for name in LOOKED_UP:
        at = np.zeros(messages, np.int64)
        found = np.zeros(messages, bool)
        if name in dictionary:
            entries_named = np.flatnonzero(name_codes == dictionary.index(name))
            at[owner[entries_named]] = entries_named
            found[owner[entries_named]] = True
        looked_up[name] = values.take(pa.array(at, mask=~found))
    return Properties(pa.MapArray.from_arrays(pa.array(offsets.astype(_OFFSETS)), names, values), looked_up)


def _lenient(blocks: pa.BinaryArray) -> Properties:
    parsed = [parse_properties(block.decode("utf-8", "replace")) for block in blocks.to_pylist()]
    return Properties(
        _map_array(parsed),
        {name: pa.array([p.get(name) for p in parsed], pa.string()) for name in LOOKED_UP},
    )


def _entries(joined: np.ndarray, block_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The length of each name and value (alternating), and each block's first entry index;
    None unless every block is ``name\\x01value\\x02`` repeated, nothing empty."""
    separators = np.flatnonzero((joined == _NAME_VALUE) | (joined == _ENTRY_END))
    kinds = joined[separators]
    if len(separators) % 2 or (kinds[0::2] != _NAME_VALUE).any() or (kinds[1::2] != _ENTRY_END).any():
        return None
    ends = block_offsets[1:]
    nonempty = ends > block_offsets[:-1]
    if (joined[ends[nonempty] - 1] != _ENTRY_END).any():
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


def _one_of_each_name(
    owner: np.ndarray, name_codes: np.ndarray, distinct: int, first_wins: list[int]
) -> np.ndarray | None:
    """Which entries to keep so that a name repeated in one message keeps one value: its last,
    or its first for the name codes in ``first_wins``; None when no message repeats a name (the
    usual case, checked with one sort)."""
    key = owner * distinct + name_codes
    ordered = np.sort(key)
    if not (ordered[1:] == ordered[:-1]).any():
        return None
    # The first of each key in reverse order is its last occurrence.
    _, first_reversed = np.unique(key[::-1], return_index=True)
    last = np.zeros(len(key), bool)
    last[len(key) - 1 - first_reversed] = True
    _, first_index = np.unique(key, return_index=True)
    first = np.zeros(len(key), bool)
    first[first_index] = True
    return np.where(np.isin(name_codes, first_wins), first, last)


def _map_array(properties: list[dict[str, str]]) -> pa.MapArray:
    return pa.MapArray.from_arrays(
        pa.array(list(accumulate(map(len, properties), initial=0)), pa.int32()),
        pa.array(list(chain.from_iterable(map(dict.keys, properties))), pa.string()),
        pa.array(list(chain.from_iterable(map(dict.values, properties))), pa.string()),
    )
