"""Decoded messages as Arrow columns: what both decoders give and the Spark reader takes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketmq_spark.records.properties import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, Properties, split_blocks
from rocketmq_spark.records.walk import ROW_FIELDS, Walked, walk

TIMESTAMP_MS = pa.timestamp("ms", tz="UTC")
INT32 = pa.int32()
_STRING = pa.string()
_PROPERTY_MAP = pa.map_(_STRING, _STRING)
Numbers = np.ndarray | Sequence[int]


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

    def __len__(self) -> int:
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

    @staticmethod
    def build(
        *,
        queue_offset: pa.Array,
        offset_msg_id: pa.Array | None,
        properties: Properties | None,
        body: pa.Array | None,
        born_timestamp: Numbers,
        store_timestamp: Numbers,
        born_host: pa.Array | None,
        store_host: pa.Array | None,
        reconsume_times: Numbers,
        flag: Numbers,
    ) -> ArrowColumns:
        """The columns, with msgId, tags and keys taken from the properties as Java's client does;
        the numbers come as numpy arrays or sequences of ints (timestamps in epoch ms). A column
        the caller did not decode (None; see :func:`needed`) is all nulls."""
        n = len(queue_offset)
        looked_up = (
            properties.looked_up
            if properties is not None
            else {name: pa.nulls(n, _STRING) for name in (PROPERTY_UNIQ_KEY, PROPERTY_TAGS, PROPERTY_KEYS)}
        )
        offset_ids = _or_nulls(offset_msg_id, n, _STRING)
        return ArrowColumns(
            queue_offset=queue_offset,
            msg_id=pc.coalesce(looked_up[PROPERTY_UNIQ_KEY], offset_ids),
            offset_msg_id=offset_ids,
            tags=looked_up[PROPERTY_TAGS],
            keys=looked_up[PROPERTY_KEYS],
            body=_or_nulls(body, n, pa.binary()),
            properties=properties.map if properties is not None else pa.nulls(n, _PROPERTY_MAP),
            born_timestamp=pa.array(born_timestamp, TIMESTAMP_MS),
            store_timestamp=pa.array(store_timestamp, TIMESTAMP_MS),
            born_host=_or_nulls(born_host, n, _STRING),
            store_host=_or_nulls(store_host, n, _STRING),
            reconsume_times=pa.array(reconsume_times, INT32),
            flag=pa.array(flag, INT32),
        )


# Every column; a decoder given fewer decodes only what those need (the rest come out null).
EVERY_COLUMN = frozenset(ArrowColumns._fields)
# The columns read out of each message's properties, and those that need its offsetMsgId.
_FROM_PROPERTIES = frozenset({"msg_id", "tags", "keys", "properties"})
_FROM_OFFSET_MSG_ID = frozenset({"msg_id", "offset_msg_id"})


class Needed(NamedTuple):
    """The decoding steps some wanted columns take; each costs a pass over every message."""

    properties: bool
    offset_msg_id: bool
    body: bool
    born_host: bool
    store_host: bool


def needed(wanted: frozenset[str]) -> Needed:
    """The steps that decode ``wanted`` (names of :class:`ArrowColumns` fields)."""
    return Needed(
        properties=bool(wanted & _FROM_PROPERTIES),
        offset_msg_id=bool(wanted & _FROM_OFFSET_MSG_ID),
        body="body" in wanted,
        born_host="born_host" in wanted,
        store_host="store_host" in wanted,
    )


def _or_nulls(array: pa.Array | None, n: int, kind: pa.DataType) -> pa.Array:
    return array if array is not None else pa.nulls(n, kind)


def walk_columns(body: bytes | bytearray | memoryview) -> ArrowColumns:
    """The per-record decoder (``walk``) into Arrow columns: any record, one at a time."""
    return from_walked(walk(body))


def from_walked(walked: Walked) -> ArrowColumns:
    """Walked messages as Arrow columns; their properties are split together, so the fixed cost
    of the Arrow calls is paid once for all of them."""
    fields = dict(zip(ROW_FIELDS, zip(*walked.rows))) if walked.rows else dict.fromkeys(ROW_FIELDS, ())
    return ArrowColumns.build(
        queue_offset=pa.array(fields["queue_offset"], pa.int64()),
        offset_msg_id=pa.array(walked.offset_msg_ids(), pa.string()),
        properties=split_blocks(pa.array(walked.blocks, pa.binary())),
        body=pa.array(fields["body"], pa.binary()),
        born_timestamp=fields["born_timestamp"],
        store_timestamp=fields["store_timestamp"],
        born_host=pa.array(fields["born_host"], pa.string()),
        store_host=pa.array(fields["store_host"], pa.string()),
        reconsume_times=fields["reconsume_times"],
        flag=fields["flag"],
    )
