"""The source's fixed row schema, and the Arrow record batches that carry rows out of ``read()``.

Spark checks every batch a Python source yields against ``to_arrow_schema(schema, "UTC")``, so
the Arrow schema is derived from the Spark one by that same function rather than written twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate, chain

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType, IntegerType, LongType, MapType, StringType, StructField, StructType, TimestampType,
)

from rocketmq_spark.message import MessageColumns

_STRING = StringType()
_INT = IntegerType()

SCHEMA = StructType([
    StructField("topic", _STRING),
    StructField("brokerName", _STRING),
    StructField("queueId", _INT),
    StructField("queueOffset", LongType()),
    StructField("msgId", _STRING),
    StructField("offsetMsgId", _STRING),
    StructField("tags", _STRING),
    StructField("keys", _STRING),
    StructField("body", BinaryType()),
    StructField("properties", MapType(_STRING, _STRING)),
    StructField("bornTimestamp", TimestampType()),
    StructField("storeTimestamp", TimestampType()),
    StructField("bornHost", _STRING),
    StructField("storeHost", _STRING),
    StructField("reconsumeTimes", _INT),
    StructField("flag", _INT),
])

ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")
_TIMESTAMP_MS = pa.timestamp("ms", tz="UTC")
_TIMESTAMP = ARROW_SCHEMA.field("bornTimestamp").type
_INT32 = pa.int32()


class BatchBuilder:
    """Collects decoded messages of one queue and turns them into Arrow record batches.

    Columns are kept as Python lists, extended a pull at a time, and become Arrow arrays in one
    C-level conversion each when the batch is flushed; the caller flushes when ``rows`` or
    ``body_bytes`` reach its bound, so memory does not grow with the range.
    """

    def __init__(self, topic: str, broker_name: str, queue_id: int) -> None:
        self.topic = topic
        self.broker_name = broker_name
        self.queue_id = queue_id
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self.body_bytes = 0
        self._offsets: list[int] = []
        self._msg_ids: list[str] = []
        self._offset_msg_ids: list[str] = []
        self._tags: list[str | None] = []
        self._keys: list[str | None] = []
        self._bodies: list[bytes] = []
        self._properties: list[dict[str, str]] = []
        self._born: list[int] = []
        self._stored: list[int] = []
        self._born_hosts: list[str] = []
        self._store_hosts: list[str] = []
        self._reconsume: list[int] = []
        self._flags: list[int] = []

    def add(self, cols: MessageColumns, keep: Sequence[int] | None = None) -> None:
        """Append every message of ``cols``, or only those at the indices in ``keep``."""
        if keep is None:
            self._extend(cols)
        elif keep:
            pick = _Picker(keep)
            self._extend(MessageColumns(*(pick(column) for column in cols)))

    def _extend(self, cols: MessageColumns) -> None:
        count = len(cols.queue_offset)
        self.rows += count
        self.body_bytes += sum(map(len, cols.body))
        self._offsets += cols.queue_offset
        self._msg_ids += cols.msg_id
        self._offset_msg_ids += cols.offset_msg_id
        self._tags += cols.tags
        self._keys += cols.keys
        self._bodies += cols.body
        self._properties += cols.properties
        self._born += cols.born_timestamp
        self._stored += cols.store_timestamp
        self._born_hosts += cols.born_host
        self._store_hosts += cols.store_host
        self._reconsume += cols.reconsume_times
        self._flags += cols.flag

    def flush(self) -> pa.RecordBatch:
        """The rows collected so far as one record batch; the builder starts empty again."""
        n = self.rows
        props = self._properties
        properties = pa.MapArray.from_arrays(
            pa.array(list(accumulate(map(len, props), initial=0)), _INT32),
            pa.array(list(chain.from_iterable(map(dict.keys, props))), pa.string()),
            pa.array(list(chain.from_iterable(map(dict.values, props))), pa.string()),
        )
        arrays = [
            pa.array([self.topic] * n, pa.string()),
            pa.array([self.broker_name] * n, pa.string()),
            pa.array([self.queue_id] * n, _INT32),
            pa.array(self._offsets, pa.int64()),
            pa.array(self._msg_ids, pa.string()),
            pa.array(self._offset_msg_ids, pa.string()),
            pa.array(self._tags, pa.string()),
            pa.array(self._keys, pa.string()),
            pa.array(self._bodies, pa.binary()),
            properties,
            pa.array(self._born, _TIMESTAMP_MS).cast(_TIMESTAMP),
            pa.array(self._stored, _TIMESTAMP_MS).cast(_TIMESTAMP),
            pa.array(self._born_hosts, pa.string()),
            pa.array(self._store_hosts, pa.string()),
            pa.array(self._reconsume, _INT32),
            pa.array(self._flags, _INT32),
        ]
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


class _Picker:
    """Selects the same indices from every column of a pull."""

    def __init__(self, keep: Sequence[int]) -> None:
        self.keep = keep

    def __call__(self, column: Sequence[object]) -> list[object]:
        return [column[i] for i in self.keep]
