"""One task's sends, in three parts as kafka-python's producer has them: placing each row
(``placing``: its queue, as RocketMQ's Java producer chooses, and the producer registered with
that queue's master), gathering rows per queue into batch sends (``batches``), and the sends on
the wire with their retries (``sender``). ``close()`` returns once every row is stored, or raises
an error naming the topic, the queue, the broker and its answer (``placing.SendFailedError``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.codec import DEFAULT_MAX_FRAME_LENGTH
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.sink.batches import Accumulator, Message, Part
from rocketmq_spark.sink.halves import HalfLog
from rocketmq_spark.sink.messages import Row, RowError
from rocketmq_spark.sink.options import SinkOptions
from rocketmq_spark.sink.placing import Placer
from rocketmq_spark.sink.queues import QueuePicker
from rocketmq_spark.sink.sender import Sender
from rocketmq_spark.sink.shared import WorkerProducer

# The largest body a send can carry: a broker drops a connection whose frame passes its frame bound
# (16 MiB by default), so a larger body is refused here with an error that says so; bodies below
# it but over the broker's maxMessageSize (4 MiB by default) get the broker's own answer.
# Room left in the frame for the header (properties take up to 32 KiB of it).
FRAME_HEADER_ROOM_BYTES = 64 * 1024
MAX_SEND_BODY_BYTES = DEFAULT_MAX_FRAME_LENGTH - FRAME_HEADER_ROOM_BYTES


class TaskProducer:
    """Sends one task's rows; ``add`` each row in order (or ``place`` and ``add_records`` a whole
    Arrow batch's), then ``close``."""

    def __init__(
        self,
        options: SinkOptions,
        producer: WorkerProducer,
        retry: Retry,
        picker: QueuePicker | None = None,
        halves: HalfLog | None = None,
    ) -> None:
        self._producer = producer
        self._placer = Placer(producer, picker or QueuePicker(producer.replicas), retry, options.namespace)
        self._sender = Sender(options, producer, self._placer, retry, halves)
        # Halves go alone: RocketMQ has no batch of half messages.
        self._batches = Accumulator(0 if halves is not None else options.batch_max_bytes, self._gathered)

    @property
    def stored(self) -> int:
        """Messages the brokers stored so far."""
        return self._sender.stored

    @property
    def unflushed(self) -> int:
        """Of those, the ones stored but not yet flushed or replicated (accepted with a warning)."""
        return self._sender.unflushed

    def add(self, row: Row) -> None:
        if len(row.body) > MAX_SEND_BODY_BYTES:
            raise RowError(
                f"a row of topic {row.topic} has a body of {len(row.body)} bytes, more than a send can carry "
                f"({MAX_SEND_BODY_BYTES}). Split it, or store it elsewhere and send a reference"
            )
        message = Message(row, self._producer.ids.next())
        queue, address = self._placer.target(message)
        if not self._batches.add(queue, message):
            self._sender.submit(queue, address, [message])

    def add_records(self, queue: MessageQueue, data: pa.Buffer, offsets: np.ndarray) -> None:
        """Unordered messages of ``queue`` already encoded as batch records (``Accumulator.add_records``)."""
        self._batches.add_records(queue, data, offsets)

    def reserve_ids(self, count: int) -> tuple[str, int]:
        """Unique ids for ``count`` messages at once (``UniqueIds.reserve``)."""
        return self._producer.ids.reserve(count)

    def place(self, topic: str, count: int) -> tuple[list[MessageQueue], np.ndarray]:
        """The queues of ``count`` unordered messages of ``topic`` in a row (``Placer.place``)."""
        return self._placer.place(topic, count)

    def close(self) -> None:
        """Send what is gathered and wait until every send is stored (or raise)."""
        self._batches.drain_all()
        self._sender.close()

    def _gathered(self, queue: MessageQueue, parts: list[Part]) -> None:
        """A gathered batch goes to its queue's master as the route lists it now."""
        self._sender.submit(queue, self._placer.master(queue), parts)
