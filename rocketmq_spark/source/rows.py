"""The rows of a task's queue ranges: decoded pulls trimmed to their range, exact tag matches, as
Arrow record batches of the columns the query reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StructType

from rocketmq_spark.records.columns import ArrowColumns
from rocketmq_spark.records.compression import DEFAULT_MAX_BODY_BYTES
from rocketmq_spark.records.decoder import Decoded, PullDecoder
from rocketmq_spark.remoting.errors import BodyTooLargeError
from rocketmq_spark.source.offsets import STORE_TIME_SLACK_MS
from rocketmq_spark.source.option_model import MAX_BODY_BYTES_FIX
from rocketmq_spark.source.schema import ARROW_SCHEMA, COLUMNS, SCHEMA, arrow_schema

_TIMESTAMP = ARROW_SCHEMA.field("bornTimestamp").type
_INT32 = pa.int32()
# The decoded column (an ``ArrowColumns`` field) each row column is, where it is one; the others
# come from the range a message was pulled from.
_DECODED = {
    "queueOffset": "queue_offset",
    "msgId": "msg_id",
    "offsetMsgId": "offset_msg_id",
    "tags": "tags",
    "keys": "keys",
    "body": "body",
    "properties": "properties",
    "bornTimestamp": "born_timestamp",
    "storeTimestamp": "store_timestamp",
    "bornHost": "born_host",
    "storeHost": "store_host",
    "reconsumeTimes": "reconsume_times",
    "flag": "flag",
}
# Trimming pulls to their ranges needs the offsets, and the exact tag check the tags.
_ALWAYS_DECODED = frozenset({"queue_offset"})
_TAG_CHECK = frozenset({"tags"})
# Decoded in epoch milliseconds, read by Spark in microseconds.
_TIMESTAMPS = frozenset({"bornTimestamp", "storeTimestamp"})
# Checking that messages were stored by the time their batch was planned needs the store times.
_STORE_CHECK = frozenset({"store_timestamp"})
_NEVER_LATE = np.iinfo(np.int64).max


@dataclass(frozen=True)
class RowRange:
    """A queue range as its rows show it: the topic as the user named it, ``[start, end)``."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int
    stored_by_ms: int | None = None  # every planned message was stored by then (``ReadRange``)


class BatchBuilder:
    """Collects the pulls of a task's ranges and turns them into Arrow record batches.

    Pull bodies are kept raw and decoded together when the batch is flushed, so the per-message
    work runs in bulk however many ranges the pulls came from. Messages outside their range (a
    pull returns whole broker batches) and messages whose tag is not exactly one subscribed (the
    broker filters by hash code) are dropped then. The caller flushes when ``rows`` or
    ``body_bytes`` reach its bound, so memory does not grow with the ranges. Batches hold
    ``columns`` (names of the source's schema) in that order; the decoding of the others is
    skipped where the decoder can.

    A range that knows when its messages were stored by (``stored_by_ms``) ends at its first
    message stored later, which is not the one planned at its offset: the caller takes those
    ends (``take_cuts``) and applies the data-loss policy.
    """

    def __init__(
        self,
        ranges: Sequence[RowRange],
        tags: frozenset[str] | None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        columns: Sequence[str] = COLUMNS,
    ) -> None:
        self._topic = pa.array([r.topic for r in ranges], pa.string())
        self._broker = pa.array([r.broker_name for r in ranges], pa.string())
        self._queue_id = pa.array([r.queue_id for r in ranges], _INT32)
        self._start = np.array([r.start for r in ranges], np.int64)
        self._end = np.array([r.end for r in ranges], np.int64)
        self._late_after = np.array(
            [_NEVER_LATE if r.stored_by_ms is None else r.stored_by_ms + STORE_TIME_SLACK_MS for r in ranges], np.int64
        )
        self._checks_stores = any(r.stored_by_ms is not None for r in ranges)
        self._cuts: dict[int, tuple[int, int]] = {}
        self._tags = None if tags is None else pa.array(sorted(tags), pa.string())
        self._columns = tuple(columns)
        self._schema = arrow_schema(StructType([SCHEMA[name] for name in self._columns]))
        wanted = frozenset(_DECODED[name] for name in self._columns if name in _DECODED) | _ALWAYS_DECODED
        if tags is not None:
            wanted |= _TAG_CHECK
        if self._checks_stores:
            wanted |= _STORE_CHECK
        self._decoder = PullDecoder(max_body_bytes, wanted)
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self.body_bytes = 0
        self._body_range: list[int] = []
        self._body_low: list[int] = []

    def add_pull(self, range_index: int, body: bytes, low: int) -> None:
        """Take the body of one FOUND pull of a range, whose messages below ``low`` are not wanted
        (already taken from an earlier pull); records are decoded at the next flush."""
        try:
            self.rows += self._decoder.add(body)
        except BodyTooLargeError as err:
            raise _naming_the_option(err) from None
        self.body_bytes += len(body)
        self._body_range.append(range_index)
        self._body_low.append(max(low, int(self._start[range_index])))

    def flush(self) -> pa.RecordBatch | None:
        """The rows collected so far as one record batch (None if none are kept); the builder
        starts empty again."""
        decoded = self._decode()
        range_of = np.array(self._body_range, np.int64)[decoded.body_index]
        low = np.array(self._body_low, np.int64)[decoded.body_index]
        self._reset()
        cols = decoded.columns
        offsets = cols.queue_offset.to_numpy()
        keep = (offsets >= low) & (offsets < self._end[range_of])
        if self._checks_stores:
            keep = self._cut_at_late(cols, offsets, range_of, keep)
        if self._tags is not None:
            keep &= pc.fill_null(pc.is_in(cols.tags, value_set=self._tags), False).to_numpy(zero_copy_only=False)
        if not keep.all():
            cols = cols.filter(keep)
            range_of = range_of[keep]
        if len(cols) == 0:
            return None
        ranges = pa.array(range_of, pa.int64())
        made: dict[str, Callable[[], pa.Array]] = {
            "topic": lambda: self._topic.take(ranges),
            "brokerName": lambda: self._broker.take(ranges),
            "queueId": lambda: self._queue_id.take(ranges),
        }
        arrays = [made[name]() if name in made else _row_column(cols, name) for name in self._columns]
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)

    def take_cuts(self) -> dict[int, tuple[int, int]]:
        """Ranges found holding a message stored after their batch was planned since the last
        call: range index -> (its offset, its store time); each range now ends there."""
        cuts, self._cuts = self._cuts, {}
        return cuts

    def _cut_at_late(
        self, cols: ArrowColumns, offsets: np.ndarray, range_of: np.ndarray, keep: np.ndarray
    ) -> np.ndarray:
        """``keep`` without each range's messages from its first one stored after the batch was
        planned on: a new master stored it at an offset whose planned message it lacks."""
        stored = cols.store_timestamp.cast(pa.int64()).to_numpy(zero_copy_only=False)
        late = keep & (stored > self._late_after[range_of])
        if not late.any():
            return keep
        for index in np.unique(range_of[late]):
            mine = np.flatnonzero(late & (range_of == index))
            first = mine[offsets[mine].argmin()]
            self._end[index] = min(self._end[index], offsets[first])
            self._cuts[int(index)] = (int(offsets[first]), int(stored[first]))
        kept: np.ndarray = keep & (offsets < self._end[range_of])
        return kept

    def _decode(self) -> Decoded:
        """The added pulls, decoded."""
        try:
            return self._decoder.decode()
        except BodyTooLargeError as err:
            raise _naming_the_option(err) from None


def _naming_the_option(err: BodyTooLargeError) -> BodyTooLargeError:
    """The decoders' error with the fix users make: the option that sets the bound."""
    return err.with_fix(MAX_BODY_BYTES_FIX).with_traceback(err.__traceback__)


def _row_column(cols: ArrowColumns, name: str) -> pa.Array:
    """A decoded column as Spark reads it: timestamps in microseconds."""
    array: pa.Array = getattr(cols, _DECODED[name])
    return array.cast(_TIMESTAMP) if name in _TIMESTAMPS else array
