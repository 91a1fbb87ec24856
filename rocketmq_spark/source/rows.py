"""The rows of one queue range: decoded pulls trimmed to the range, exact tag matches, Arrow batches."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketmq_spark.records.columns import ArrowColumns
from rocketmq_spark.records.decoder import PullDecoder
from rocketmq_spark.source.schema import ARROW_SCHEMA

_TIMESTAMP = ARROW_SCHEMA.field("bornTimestamp").type
_INT32 = pa.int32()


class BatchBuilder:
    """Collects the pulls of one queue range and turns them into Arrow record batches.

    Pull bodies are kept raw and decoded together when the batch is flushed, so the per-message
    work runs in bulk. Messages outside ``[start, end)`` (a pull returns whole broker batches)
    and messages whose tag is not exactly one subscribed (the broker filters by hash code) are
    dropped then. The caller flushes when ``rows`` or ``body_bytes`` reach its bound, so memory
    does not grow with the range.
    """

    def __init__(self, topic: str, broker_name: str, queue_id: int, start: int, end: int,
                 tags: frozenset[str] | None) -> None:
        self.topic = topic
        self.broker_name = broker_name
        self.queue_id = queue_id
        self.start = start
        self.end = end
        self._tags = None if tags is None else pa.array(sorted(tags), pa.string())
        self._decoder = PullDecoder()
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self.body_bytes = 0
        self._lows: list[int] = []

    def add_pull(self, body: bytes, low: int) -> None:
        """Take the body of one FOUND pull response, whose messages below ``low`` are not wanted
        (already taken from an earlier pull); records are decoded at the next flush."""
        self.rows += self._decoder.add(body)
        self.body_bytes += len(body)
        self._lows.append(max(low, self.start))

    def _kept(self, columns: ArrowColumns, lows: np.ndarray) -> ArrowColumns:
        offsets = columns.queue_offset.to_numpy()
        keep = (offsets >= lows) & (offsets < self.end)
        if self._tags is not None:
            keep &= pc.fill_null(pc.is_in(columns.tags, value_set=self._tags), False).to_numpy(
                zero_copy_only=False)
        return columns if keep.all() else columns.filter(keep)

    def flush(self) -> pa.RecordBatch | None:
        """The rows collected so far as one record batch (None if none are kept); the builder
        starts empty again."""
        decoded = self._decoder.decode()
        lows = np.array(self._lows, np.int64)[decoded.body_index]
        self._reset()
        cols = self._kept(decoded.columns, lows)
        n = len(cols)
        if n == 0:
            return None
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
