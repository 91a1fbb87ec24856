"""The source's fixed row schema, and the Arrow record batches that carry rows out of ``read()``.

Spark checks every batch a Python source yields against ``to_arrow_schema(schema, "UTC")``, so
the Arrow schema is derived from the Spark one by that same function rather than written twice.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType, IntegerType, LongType, MapType, StringType, StructField, StructType, TimestampType,
)

from rocketmq_spark.columnar import ArrowColumns, decode_bulk, from_message_columns, scan_records
from rocketmq_spark.message import decode_columns

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
_TIMESTAMP = ARROW_SCHEMA.field("bornTimestamp").type
_INT32 = pa.int32()


class BatchBuilder:
    """Collects the pulls of one queue range and turns them into Arrow record batches.

    Pull bodies are kept raw and decoded together when the batch is flushed, so the per-message
    work runs in bulk (rocketmq_spark.columnar). Messages outside ``[start, end)`` (a pull returns
    whole broker batches) and messages whose tag is not exactly one subscribed (the broker filters
    by hash code) are dropped then. The caller flushes when ``rows`` or ``body_bytes`` reach its
    bound, so memory does not grow with the range.
    """

    def __init__(self, topic: str, broker_name: str, queue_id: int, start: int, end: int,
                 tags: frozenset[str] | None) -> None:
        self.topic = topic
        self.broker_name = broker_name
        self.queue_id = queue_id
        self.start = start
        self.end = end
        self._tags = None if tags is None else pa.array(sorted(tags), pa.string())
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self.body_bytes = 0
        self._pulls: list[bytes] = []
        self._starts: list[list[int]] = []
        self._lows: list[int] = []
        self._chunks: list[ArrowColumns] = []

    def add_pull(self, body: bytes, low: int) -> None:
        """Take the body of one FOUND pull response, whose messages below ``low`` are not wanted
        (already taken from an earlier pull); records are decoded at the next flush."""
        starts = scan_records(body)
        self.body_bytes += len(body)
        low = max(low, self.start)
        if starts is not None:
            self._pulls.append(body)
            self._starts.append(starts)
            self._lows.append(low)
            self.rows += len(starts)
            return
        # A record the bulk decoder does not take: decode this pull alone, keeping offset order.
        self._decode_pulls()
        columns = from_message_columns(decode_columns(body))
        self.rows += len(columns)
        self._chunks.append(self._trim(columns, np.full(len(columns), low)))

    def _decode_pulls(self) -> None:
        if self._pulls:
            lows = np.repeat(np.array(self._lows, np.int64), [len(s) for s in self._starts])
            self._chunks.append(self._trim(decode_bulk(self._pulls, self._starts), lows))
            self._pulls = []
            self._starts = []
            self._lows = []

    def _trim(self, columns: ArrowColumns, lows: np.ndarray) -> ArrowColumns:
        offsets = columns.queue_offset.to_numpy()
        keep = (offsets >= lows) & (offsets < self.end)
        if self._tags is not None:
            keep &= pc.fill_null(pc.is_in(columns.tags, value_set=self._tags), False).to_numpy(
                zero_copy_only=False)
        return columns if keep.all() else columns.filter(keep)

    def flush(self) -> pa.RecordBatch | None:
        """The rows collected so far as one record batch (None if none are kept); the builder
        starts empty again."""
        self._decode_pulls()
        chunks = [chunk for chunk in self._chunks if len(chunk)]
        self._reset()
        if not chunks:
            return None
        cols = ArrowColumns.concat(chunks)
        n = len(cols)
        arrays = [
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.broker_name, pa.string()), n),
            pa.repeat(pa.scalar(self.queue_id, _INT32), n),
            cols.queue_offset,
            cols.msg_id,
            cols.offset_msg_id,
            cols.tags,
            cols.keys,
            cols.body,
            cols.properties,
            cols.born_timestamp.cast(_TIMESTAMP),
            cols.store_timestamp.cast(_TIMESTAMP),
            cols.born_host,
            cols.store_host,
            cols.reconsume_times,
            cols.flag,
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
