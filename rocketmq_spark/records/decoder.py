"""The one place that chooses how a pull body is decoded.

Bodies whose records all fit the common layout (``columnar.scan_records`` finds them) wait and are
decoded together in bulk; any other body is walked record by record as it arrives, and a batch the
bulk decoder refuses is walked too. Either way the Arrow columns are built once per decode, for
all the bodies waiting, and the order of the bodies is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from rocketmq_spark.records.columnar import NotTaken, decode_bulk, scan_records
from rocketmq_spark.records.columns import EVERY_COLUMN, ArrowColumns, from_walked, walk_columns
from rocketmq_spark.records.compression import DEFAULT_MAX_BODY_BYTES
from rocketmq_spark.records.walk import Walked, walk


class Decoded(NamedTuple):
    """The messages of the bodies added, in order, and the index of the body each came from."""

    columns: ArrowColumns
    body_index: np.ndarray


class _Run(NamedTuple):
    """Consecutive bodies decoded the same way: ``starts`` per body for the bulk decoder, or
    ``walked`` per body for the per-record one."""

    first: int
    bodies: list[bytes]
    starts: list[list[int]] | None
    walked: list[Walked] | None


class PullDecoder:
    """Takes pull bodies one by one and decodes them when asked, in bulk where it can; no body
    decompresses past ``max_body_bytes``. The bulk decoder skips the columns not ``wanted``
    (the per-record one, for the rare records it takes, decodes them all)."""

    def __init__(self, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, wanted: frozenset[str] = EVERY_COLUMN) -> None:
        self._max_body_bytes = max_body_bytes
        self._wanted = wanted
        self._added = 0
        self._runs: list[_Run] = []

    def add(self, body: bytes) -> int:
        """Take one body; returns how many messages it holds."""
        starts = scan_records(body)
        bulk = starts is not None
        last = self._runs[-1] if self._runs else None
        if last is None or (last.starts is not None) != bulk:
            last = _Run(self._added, [], [] if bulk else None, None if bulk else [])
            self._runs.append(last)
        self._added += 1
        last.bodies.append(body)
        if starts is not None:
            assert last.starts is not None
            last.starts.append(starts)
            return len(starts)
        walked = walk(body, self._max_body_bytes)
        assert last.walked is not None
        last.walked.append(walked)
        return len(walked.rows)

    def decode(self) -> Decoded:
        """Every message added since the last call; the decoder starts empty again."""
        runs, self._runs, self._added = self._runs, [], 0
        if not runs:
            return Decoded(walk_columns(b""), np.zeros(0, np.int64))
        parts = [_decode(run, self._max_body_bytes, self._wanted) for run in runs]
        return Decoded(ArrowColumns.concat([c for c, _ in parts]), np.concatenate([i for _, i in parts]))


def _decode(run: _Run, max_body_bytes: int, wanted: frozenset[str]) -> tuple[ArrowColumns, np.ndarray]:
    indices = np.arange(run.first, run.first + len(run.bodies), dtype=np.int64)
    walked = run.walked
    if run.starts is not None:
        try:
            columns = decode_bulk(run.bodies, run.starts, max_body_bytes, wanted)
            return columns, np.repeat(indices, [len(s) for s in run.starts])
        except NotTaken:  # an inconsistent record: the per-record decoder names the exact error
            walked = [walk(body, max_body_bytes) for body in run.bodies]
    assert walked is not None
    return from_walked(Walked.join(walked)), np.repeat(indices, [len(w.rows) for w in walked])


def decode_pulls(bodies: Sequence[bytes], max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> ArrowColumns:
    """The messages of these pull bodies, in order, decoded as the Spark reader decodes them."""
    decoder = PullDecoder(max_body_bytes)
    for body in bodies:
        decoder.add(body)
    return decoder.decode().columns
