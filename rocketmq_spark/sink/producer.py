"""One task's sends: rows batched per queue, several sends on the wire, retries as the Java
producer's.

- Rows of one queue are gathered into batch sends of up to ``batchMaxBytes`` (never a delayed or
  timer message, which go alone, nor a message larger than a batch), and compressed when sent
  alone at ``compressBodyOverBytes`` or more. Rows placed and encoded a whole Arrow batch at a
  time (``sink.vectorized``) come as records (``place``, ``add_records``) and are gathered alike.
- Each queue has at most one send on the wire, so its rows are stored in the order the task saw
  them; different queues' sends travel together on a broker's connection (answered by opaque),
  up to ``MAX_IN_FLIGHT`` at once.
- A send that failed in a way a retry can fix is sent again while the task's ``Retry`` allows
  (``options.sink_retry``: ``retries`` more attempts, after the Java producer's answers): an
  unordered one to a queue of another broker at once (which is then passed over for a while), an
  ordered or explicit-queue one to its own queue after the policy's pause. Answers that say the
  message is stored but not yet flushed or replicated are accepted with a warning: resending
  would store it twice.
- ``close()`` returns once every row is stored, or raises an error naming the topic, the queue,
  the broker and its answer.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from itertools import groupby

import numpy as np
import pyarrow as pa

from rocketmq_spark.model import MS_PER_SECOND, MessageQueue, now_ms
from rocketmq_spark.records.outgoing import COMPRESSED_ZLIB_SYS_FLAG, batch_record_size, compress_body, encode_batch
from rocketmq_spark.records.outgoing_batch import record_parts
from rocketmq_spark.remoting.calls import Call
from rocketmq_spark.remoting.client import Answer
from rocketmq_spark.remoting.codec import DEFAULT_MAX_FRAME_LENGTH, BodyPart, RemotingCommand
from rocketmq_spark.remoting.errors import NoReplicaError, RocketMQError
from rocketmq_spark.remoting.retry import Attempts, Retry
from rocketmq_spark.remoting.sending import SendResult, SendStatus, send_batch, send_message
from rocketmq_spark.sink.messages import Row, RowError, batch_properties, encoded_properties
from rocketmq_spark.sink.options import SinkOptions
from rocketmq_spark.sink.queues import QueuePicker
from rocketmq_spark.sink.shared import Producer

log = logging.getLogger(__name__)

# Sends one task keeps on the wire at once (one per queue at most).
MAX_IN_FLIGHT = 64
# The largest body a send can carry: a broker drops a connection whose frame passes its frame bound
# (16 MiB by default), so a larger body is refused here with an error that says so; bodies below
# it but over the broker's maxMessageSize (4 MiB by default) get the broker's own answer.
# Room left in the frame for the header (properties take up to 32 KiB of it).
FRAME_HEADER_ROOM_BYTES = 64 * 1024
MAX_SEND_BODY_BYTES = DEFAULT_MAX_FRAME_LENGTH - FRAME_HEADER_ROOM_BYTES


class SendFailedError(RocketMQError):
    """Rows could not be stored after the retries: names the topic, queue, broker and answer."""

    def __init__(self, queue: MessageQueue, address: str | None, attempts: int, cause: RocketMQError) -> None:
        self.queue = queue
        self.cause = cause
        where = f"broker {queue.broker_name} at {address}" if address else f"broker {queue.broker_name} (no master)"
        super().__init__(
            f"sending to topic {queue.topic}, queue {queue.broker_name}/{queue.queue_id}, failed after "
            f"{attempts} attempt(s); {where} answered: {cause}"
        )


class _Refused:
    """The answer of a send that could not even be written (no connection): its error."""

    def __init__(self, error: RocketMQError) -> None:
        self._error = error

    def result(self) -> RemotingCommand:
        raise self._error


@dataclass
class _Message:
    row: Row
    unique_id: str
    properties: bytes = b""  # as encoded for the broker it goes to
    count = 1


@dataclass
class _Records:
    """Unordered messages of one topic already encoded as batch records (``add_records``): their
    bytes are the same for brokers of either line, so a retry elsewhere sends them as they are."""

    topic: str
    data: pa.Buffer  # a slice of the Arrow batch's records, sent as it is (no copy of its own)
    count: int


_Part = _Message | _Records


@dataclass
class _Open:
    """A queue's batch being gathered."""

    parts: list[_Part] = field(default_factory=list)
    size: int = 0


@dataclass
class _Send:
    queue: MessageQueue
    address: str | None
    parts: list[_Part]
    attempts: Attempts
    call: Call[SendResult] | None = None
    answer: Answer | None = None

    @property
    def count(self) -> int:
        return sum(part.count for part in self.parts)

    @property
    def pinned(self) -> bool:
        first = self.parts[0]
        return isinstance(first, _Message) and first.row.pinned


class TaskProducer:
    """Sends one task's rows; ``add`` each row in order, then ``close``."""

    def __init__(
        self, options: SinkOptions, producer: Producer, retry: Retry, picker: QueuePicker | None = None
    ) -> None:
        self._options = options
        self._producer = producer
        self._retry = retry  # how often, after which answers and pauses a failed send goes again
        self._picker = picker or QueuePicker(producer.routes)
        self._timeout_s = options.send_timeout_ms / MS_PER_SECOND
        self._open: dict[MessageQueue, _Open] = {}
        self._flying: dict[MessageQueue, _Send] = {}
        self._order: deque[MessageQueue] = deque()
        self.stored = 0
        self.unflushed = 0

    def add(self, row: Row) -> None:
        if len(row.body) > MAX_SEND_BODY_BYTES:
            raise RowError(
                f"a row of topic {row.topic} has a body of {len(row.body)} bytes, more than a send can carry "
                f"({MAX_SEND_BODY_BYTES}). Split it, or store it elsewhere and send a reference"
            )
        message = _Message(row, self._producer.ids.next())
        queue, address = self._target(message)
        size = batch_record_size(len(row.body), len(message.properties))
        limit = self._options.batch_max_bytes
        if row.single or limit == 0 or size > limit:
            self._dispatch(queue)  # what the queue gathered goes first, in order
            self._submit(queue, address, [message])
            return
        gathered = self._open.get(queue)
        if gathered is not None and gathered.size + size > limit:
            self._dispatch(queue)
            gathered = None
        if gathered is None:
            gathered = self._open[queue] = _Open()
        gathered.parts.append(message)
        gathered.size += size

    def add_records(self, queue: MessageQueue, data: pa.Buffer, offsets: np.ndarray) -> None:
        """Unordered messages of ``queue`` encoded as batch records (each at most
        ``batchMaxBytes``), record ``i`` at ``offsets[i]:offsets[i + 1]`` of ``data``: gathered
        into the queue's batches as ``add`` gathers rows, in their order."""
        limit = self._options.batch_max_bytes
        start, end = 0, len(offsets) - 1
        while start < end:
            gathered = self._open.get(queue)
            used = 0 if gathered is None else gathered.size
            fits = int(np.searchsorted(offsets, offsets[start] + limit - used, side="right")) - 1
            if fits <= start:  # not even the next record: the gathered batch goes first
                self._dispatch(queue)
                continue
            fits = min(fits, end)
            if gathered is None:
                gathered = self._open[queue] = _Open()
            first, last = int(offsets[start]), int(offsets[fits])
            gathered.parts.append(_Records(queue.topic, data.slice(first, last - first), fits - start))
            gathered.size += last - first
            if fits < end:
                self._dispatch(queue)
            start = fits

    def reserve_ids(self, count: int) -> tuple[str, int]:
        """Unique ids for ``count`` messages at once (``UniqueIds.reserve``)."""
        return self._producer.ids.reserve(count)

    def place(self, topic: str, count: int) -> tuple[list[MessageQueue], np.ndarray]:
        """The queues of ``count`` unordered messages of ``topic`` in a row (``QueuePicker.spread``),
        the producer registered with each one's master; a broker that cannot be registered with
        is passed over and the messages placed again, as the task's ``Retry`` allows, as ``add`` does."""
        attempts = self._retry.start()
        while True:
            queues, chosen = self._picker.spread(topic, count)
            for queue in (queues[index] for index in np.unique(chosen).tolist()):
                address = self._picker.master(queue)
                try:
                    if address is not None:
                        self._producer.five_x(address)
                except RocketMQError as err:
                    if not attempts.again(err):
                        raise SendFailedError(queue, address, attempts.failed, err) from err
                    self._failed(queue, address)
                    break
            else:
                return queues, chosen

    def close(self) -> None:
        """Send what is gathered and wait until every send is stored (or raise)."""
        for queue in list(self._open):
            self._dispatch(queue)
        while self._order:
            self._settle(self._order[0])

    # ----------------------------------------------------------------- placing

    def _target(
        self, first: _Part, avoid: str | None = None, rest: list[_Part] | None = None
    ) -> tuple[MessageQueue, str | None]:
        """The queue of a send that starts with ``first`` and its master's address, with the
        properties of the send's messages (``rest`` too) encoded for that broker; a broker that
        cannot be registered with is passed over like a failed send."""
        attempts = self._retry.start()
        pinned = isinstance(first, _Message) and first.row.pinned
        while True:
            if isinstance(first, _Message):
                queue = self._picker.pick(first.row, avoid)
            else:
                queue = self._picker.next_queue(first.topic, avoid)
            address = self._picker.master(queue)
            try:
                five_x = True if address is None else self._producer.five_x(address)
            except RocketMQError as err:
                if not attempts.again(err):
                    raise SendFailedError(queue, address, attempts.failed, err) from err
                self._failed(queue, address)
                if pinned:  # its queue or none: wait for the broker, or a new master
                    attempts.pause()
                    self._picker.route(queue.topic, fresh=True)
                else:
                    avoid = queue.broker_name
                continue
            for part in (first, *(rest or ())):
                if isinstance(part, _Message):
                    self._encode(part, five_x)
            return queue, address

    def _encode(self, message: _Message, five_x: bool) -> None:
        message.properties = encoded_properties(
            message.row, message.unique_id, five_x=five_x, namespace=self._options.namespace
        )

    def _dispatch(self, queue: MessageQueue) -> None:
        gathered = self._open.pop(queue, None)
        if gathered is not None and gathered.parts:
            address = self._picker.master(queue)
            self._submit(queue, address, gathered.parts)

    # ----------------------------------------------------------------- sending

    def _submit(self, queue: MessageQueue, address: str | None, parts: list[_Part]) -> None:
        """Put a send on the wire once its queue's previous one is stored and the window has room."""
        send = _Send(queue, address, parts, self._retry.start())
        if send.queue in self._flying:
            self._settle(send.queue)
        while len(self._flying) >= MAX_IN_FLIGHT:
            self._settle(self._order[0])
        self._write(send)
        self._flying[send.queue] = send
        self._order.append(send.queue)

    def _write(self, send: _Send) -> None:
        send.call = self._call(send)
        if send.address is None:
            send.answer = _Refused(NoReplicaError(send.queue.broker_name, []))
            return
        try:
            send.answer = self._producer.client.submit(
                send.address, send.call.code, send.call.fields, send.call.body, self._timeout_s
            )
        except RocketMQError as err:
            send.answer = _Refused(err)

    def _call(self, send: _Send) -> Call[SendResult]:
        group, born = self._producer.group, now_ms()
        if send.count == 1:  # a batch of one goes alone
            only = send.parts[0]
            body, encoded = (
                (only.row.body, only.properties) if isinstance(only, _Message) else record_parts(only.data.to_pybytes())
            )
            sys_flag = 0
            if len(body) >= self._options.compress_body_over_bytes:
                body, sys_flag = compress_body(body), COMPRESSED_ZLIB_SYS_FLAG
            properties = encoded.decode("utf-8")
            return send_message(send.queue, body, group=group, properties=properties, sys_flag=sys_flag, born_ms=born)
        properties = batch_properties(self._options.namespace)
        return send_batch(send.queue, _batch_pieces(send.parts), group=group, properties=properties, born_ms=born)

    def _settle(self, queue: MessageQueue) -> None:
        """Wait for the queue's send, sending it again while that can help."""
        send = self._flying.pop(queue)
        self._order.remove(queue)
        while True:
            assert send.call is not None
            try:
                assert send.answer is not None
                result = send.call.read(send.answer.result(), send.address or "")
            except RocketMQError as err:
                if not send.attempts.again(err):  # a RowError never is retried
                    raise SendFailedError(send.queue, send.address, send.attempts.failed, err) from err
                log.warning("send to %s at %s failed (%s); sending again", send.queue, send.address, err)
                self._again(send)
                continue
            self._stored(send, result)
            return

    def _again(self, send: _Send) -> None:
        """Send a failed send again: unordered rows to another broker, pinned ones to their queue."""
        self._failed(send.queue, send.address)
        if send.pinned:
            send.attempts.pause()
            self._picker.route(send.queue.topic, fresh=True)
            send.address = self._picker.master(send.queue)
        else:  # encoded for the new broker's line, with the same ids
            send.queue, send.address = self._target(send.parts[0], send.queue.broker_name, send.parts[1:])
            if send.queue in self._flying:  # its new queue's send first: one on the wire per queue
                self._settle(send.queue)
        self._write(send)

    def _failed(self, queue: MessageQueue, address: str | None) -> None:
        """Remembered once, in the cluster view: unordered rows pass the master over for a while,
        and the topic's route is asked again soon (a new master may be elected elsewhere)."""
        if address is not None:
            self._producer.routes.failed(address, queue.topic)

    def _stored(self, send: _Send, result: SendResult) -> None:
        count = send.count
        self.stored += count
        if result.status is not SendStatus.SEND_OK:
            self.unflushed += count
            log.warning(
                "%d message(s) sent to %s at %s are stored but %s: accepted, as the Java producer accepts them",
                count,
                send.queue,
                send.address,
                result.status.value,
            )


def _batch_pieces(parts: list[_Part]) -> tuple[BodyPart, ...]:
    """A batch body's pieces: encoded records as they are (views of the Arrow buffers, sent without
    a copy of their own), each run of rows encoded at once."""
    pieces: list[BodyPart] = []
    for encoded, run in groupby(parts, key=lambda part: isinstance(part, _Records)):
        if encoded:
            pieces += (memoryview(part.data) for part in run if isinstance(part, _Records))
        else:
            pieces.append(encode_batch((0, m.row.body, m.properties) for m in run if isinstance(m, _Message)))
    return tuple(pieces)
