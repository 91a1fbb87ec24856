"""The accumulator of a task's sends: rows of each queue gathered into batch sends, in order. No I/O.

Rows of one queue are gathered into batch sends of up to ``batchMaxBytes`` (never a delayed or
timer message, which goes alone, nor a message larger than a batch). Rows placed and encoded a
whole Arrow batch at a time (``sink.vectorized``) come as records and are gathered alike. A batch
that is full, or that must go before a message that goes alone, is handed to ``ready`` at once,
so the queue's messages leave in the order the task saw them; kafka-python's producer splits its
work the same way (a record accumulator per partition, a sender that owns what is in flight).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import groupby

import numpy as np
import pyarrow as pa

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.records.outgoing import batch_record_size, encode_batch
from rocketmq_spark.remoting.codec import BodyPart
from rocketmq_spark.sink.messages import Row


@dataclass
class Message:
    """One row on its way, with its unique id and its properties as encoded for the broker it
    goes to (``placing.Placer`` encodes them once the broker's line is known)."""

    row: Row
    unique_id: str
    properties: bytes = b""
    count = 1


@dataclass
class Records:
    """Unordered messages of one topic already encoded as batch records (``add_records``): their
    bytes are the same for brokers of either line, so a retry elsewhere sends them as they are."""

    topic: str
    data: pa.Buffer  # a slice of the Arrow batch's records, sent as it is (no copy of its own)
    count: int


Part = Message | Records
# Where a gathered batch goes once it is full or must leave: the queue and its parts, in order.
Ready = Callable[[MessageQueue, list[Part]], None]


@dataclass
class _Open:
    """A queue's batch being gathered."""

    parts: list[Part] = field(default_factory=list)
    size: int = 0


class Accumulator:
    """Each queue's batch being gathered; full ones go to ``ready``."""

    def __init__(self, batch_max_bytes: int, ready: Ready) -> None:
        self._limit = batch_max_bytes
        self._ready = ready
        self._open: dict[MessageQueue, _Open] = {}

    def add(self, queue: MessageQueue, message: Message) -> bool:
        """Gather a message into its queue's batch; False when it goes in a send of its own
        (delayed or timed, batching off, or larger than a batch), after what its queue gathered
        was handed on, so the queue's messages keep their order."""
        size = batch_record_size(len(message.row.body), len(message.properties))
        if message.row.single or self._limit == 0 or size > self._limit:
            self.drain(queue)
            return False
        gathered = self._open.get(queue)
        if gathered is not None and gathered.size + size > self._limit:
            self.drain(queue)
            gathered = None
        if gathered is None:
            gathered = self._open[queue] = _Open()
        gathered.parts.append(message)
        gathered.size += size
        return True

    def add_records(self, queue: MessageQueue, data: pa.Buffer, offsets: np.ndarray) -> None:
        """Unordered messages of ``queue`` encoded as batch records (each at most
        ``batchMaxBytes``), record ``i`` at ``offsets[i]:offsets[i + 1]`` of ``data``: gathered
        into the queue's batches as ``add`` gathers rows, in their order."""
        start, end = 0, len(offsets) - 1
        while start < end:
            gathered = self._open.get(queue)
            used = 0 if gathered is None else gathered.size
            fits = int(np.searchsorted(offsets, offsets[start] + self._limit - used, side="right")) - 1
            if fits <= start:  # not even the next record: the gathered batch goes first
                self.drain(queue)
                continue
            fits = min(fits, end)
            if gathered is None:
                gathered = self._open[queue] = _Open()
            first, last = int(offsets[start]), int(offsets[fits])
            gathered.parts.append(Records(queue.topic, data.slice(first, last - first), fits - start))
            gathered.size += last - first
            if fits < end:
                self.drain(queue)
            start = fits

    def drain(self, queue: MessageQueue) -> None:
        """Hand what the queue gathered to ``ready``, if anything."""
        gathered = self._open.pop(queue, None)
        if gathered is not None and gathered.parts:
            self._ready(queue, gathered.parts)

    def drain_all(self) -> None:
        for queue in list(self._open):
            self.drain(queue)


def batch_pieces(parts: list[Part]) -> tuple[BodyPart, ...]:
    """A batch body's pieces: encoded records as they are (views of the Arrow buffers, sent without
    a copy of their own), each run of rows encoded at once."""
    pieces: list[BodyPart] = []
    for encoded, run in groupby(parts, key=lambda part: isinstance(part, Records)):
        if encoded:
            pieces += (memoryview(part.data) for part in run if isinstance(part, Records))
        else:
            pieces.append(encode_batch((0, m.row.body, m.properties) for m in run if isinstance(m, Message)))
    return tuple(pieces)
