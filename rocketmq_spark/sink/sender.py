"""The sender of a task's sends: the window on the wire, the retries, what was stored.

- Each queue has at most one send on the wire, so its rows are stored in the order the task saw
  them; different queues' sends travel together on a broker's connection (answered by opaque),
  up to ``MAX_IN_FLIGHT`` at once.
- A send that failed in a way the task's ``Retry`` retries (the Java producer's answers, as
  often as ``retries`` says) is sent again: an unordered one to a queue of another broker (which
  is then passed over for a while), an ordered or explicit-queue one to its own queue after the
  retry's pause. Answers that say the message is stored but not yet flushed or replicated are
  accepted with a warning: resending would store it twice.
- A send alone is compressed at ``compressBodyOverBytes`` or more; a batch send is not.
- With a ``HalfLog`` (exactly once) every send is a half: alone, flagged prepared, with the
  attempt's properties, and what the broker stored is kept for the driver's COMMITs.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass

from rocketmq_spark.model import MS_PER_SECOND, MessageQueue, now_ms
from rocketmq_spark.records.outgoing import COMPRESSED_ZLIB_SYS_FLAG, compress_body
from rocketmq_spark.records.outgoing_batch import record_parts
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.calls import Call
from rocketmq_spark.remoting.client import Answer
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.errors import NoReplicaError, RocketMQError
from rocketmq_spark.remoting.retry import Attempts, Retry
from rocketmq_spark.remoting.sending import SendResult, SendStatus, send_batch, send_message
from rocketmq_spark.sink.batches import Message, Part, batch_pieces
from rocketmq_spark.sink.halves import HalfLog
from rocketmq_spark.sink.messages import batch_properties
from rocketmq_spark.sink.options import SinkOptions
from rocketmq_spark.sink.placing import Placer, SendFailedError
from rocketmq_spark.sink.shared import WorkerProducer

log = logging.getLogger(__name__)

# Sends one task keeps on the wire at once (one per queue at most).
MAX_IN_FLIGHT = 64


class _Refused:
    """The answer of a send that could not even be written (no connection): its error."""

    def __init__(self, error: RocketMQError) -> None:
        self._error = error

    def result(self) -> RemotingCommand:
        raise self._error


@dataclass
class _Send:
    queue: MessageQueue
    address: str | None
    parts: list[Part]
    attempts: Attempts
    call: Call[SendResult] | None = None
    answer: Answer | None = None

    @property
    def count(self) -> int:
        return sum(part.count for part in self.parts)

    @property
    def pinned(self) -> bool:
        first = self.parts[0]
        return isinstance(first, Message) and first.row.pinned


class Sender:
    """One task's sends on the wire; ``close`` waits until every one is stored (or raises)."""

    def __init__(
        self,
        options: SinkOptions,
        producer: WorkerProducer,
        placer: Placer,
        retry: Retry,
        halves: HalfLog | None = None,
    ) -> None:
        self._options = options
        self._halves = halves
        self._producer = producer
        self._placer = placer
        self._retry = retry  # how often, after which answers and pauses a failed send goes again
        self._timeout_s = options.send_timeout_ms / MS_PER_SECOND
        # What is on the wire, by slot: a queue, whose sends keep their order one at a time; or, for
        # a half whose queue keeps no order, a slot of its own (a half's place in its queue is
        # given only when the driver commits it, so many travel at once).
        self._flying: dict[Hashable, _Send] = {}
        self._order: deque[Hashable] = deque()
        self._tokens = itertools.count()
        self.stored = 0
        self.unflushed = 0

    def submit(self, queue: MessageQueue, address: str | None, parts: list[Part]) -> None:
        """Put a send on the wire once its queue's previous one is stored and the window has room."""
        send = _Send(queue, address, parts, self._retry.start())
        slot: Hashable = queue if self._halves is None or send.pinned else next(self._tokens)
        if slot in self._flying:
            self._settle(slot)
        while len(self._flying) >= MAX_IN_FLIGHT:
            self._settle(self._order[0])
        self._write(send)
        self._flying[slot] = send
        self._order.append(slot)

    def close(self) -> None:
        """Wait until every send is stored, or raise ``SendFailedError`` for the first that is not."""
        while self._order:
            self._settle(self._order[0])

    def _write(self, send: _Send) -> None:
        send.call = self._call(send)
        if send.address is None:
            send.answer = _Refused(NoReplicaError(send.queue.broker_name, []))
            return
        try:
            send.answer = self._producer.client.submit(send.address, send.call, self._timeout_s)
        except RocketMQError as err:
            send.answer = _Refused(err)

    def _call(self, send: _Send) -> Call[SendResult]:
        group, born = self._producer.group, now_ms()
        if send.count == 1:  # a batch of one goes alone
            only = send.parts[0]
            body, encoded = (
                (only.row.body, only.properties) if isinstance(only, Message) else record_parts(only.data.to_pybytes())
            )
            sys_flag = 0
            if len(body) >= self._options.compress_body_over_bytes:
                body, sys_flag = compress_body(body), COMPRESSED_ZLIB_SYS_FLAG
            if self._halves is not None:
                encoded, sys_flag = encoded + self._halves.extra, sys_flag | codes.MSG_FLAG_TRANSACTION_PREPARED
            properties = encoded.decode("utf-8")
            return send_message(send.queue, body, group=group, properties=properties, sys_flag=sys_flag, born_ms=born)
        assert self._halves is None, "halves are sent alone (exactly-once sends with batchMaxBytes 0)"
        properties = batch_properties(self._options.namespace)
        return send_batch(send.queue, batch_pieces(send.parts), group=group, properties=properties, born_ms=born)

    def _settle(self, slot: Hashable) -> None:
        """Wait for the slot's send, sending it again while that can help."""
        send = self._flying.pop(slot)
        self._order.remove(slot)
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
        self._placer.failed(send.queue, send.address)
        if send.pinned:
            send.attempts.pause()
            send.address = self._placer.refresh(send.queue)
        else:  # encoded for the new broker's line, with the same ids
            send.queue, send.address = self._placer.target(send.parts[0], send.queue.broker_name, tuple(send.parts[1:]))
            if self._halves is None and send.queue in self._flying:  # one on the wire per queue
                self._settle(send.queue)
        self._write(send)

    def _stored(self, send: _Send, result: SendResult) -> None:
        count = send.count
        self.stored += count
        if self._halves is not None:
            only = send.parts[0]
            assert isinstance(only, Message)
            self._halves.stored(send.queue, result, only.unique_id, send.pinned)
        if result.status is not SendStatus.SEND_OK:
            self.unflushed += count
            log.warning(
                "%d message(s) sent to %s at %s are stored but %s: accepted, as the Java producer accepts them",
                count,
                send.queue,
                send.address,
                result.status.value,
            )
