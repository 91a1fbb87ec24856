"""Where a task's sends go: each row's queue (``queues.QueuePicker``), its broker's master, and
the producer registered there before the first send, with the messages' properties encoded for
that broker's line (5.x reserves more property names and alone takes timer messages).

A master that cannot be registered with is passed over as a failed send is, as the task's
``Retry`` allows: an unordered row goes to another broker at once; an ordered or explicit-queue
row has its queue or none, so it waits (the retry's pause) for the broker or a new master.
"""

from __future__ import annotations

import numpy as np

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.errors import RocketMQError
from rocketmq_spark.remoting.retry import Attempts, Retry
from rocketmq_spark.sink.batches import Message, Part
from rocketmq_spark.sink.messages import encoded_properties
from rocketmq_spark.sink.queues import QueuePicker
from rocketmq_spark.sink.shared import WorkerProducer


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


class Placer:
    """Places one task's sends; the round-robin position is the task's own (its picker's)."""

    def __init__(self, producer: WorkerProducer, picker: QueuePicker, retry: Retry, namespace: str | None) -> None:
        self._producer = producer
        self._picker = picker
        self._retry = retry
        self._namespace = namespace

    def master(self, queue: MessageQueue) -> str | None:
        """The address of the queue's broker's master, where its sends go (None while it has none)."""
        return self._picker.master(queue)

    def failed(self, queue: MessageQueue, address: str | None) -> None:
        """Remembered once, in the cluster view: unordered rows pass the master over for a while,
        and the topic's route is asked again soon (a new master may be elected elsewhere)."""
        if address is not None:
            self._producer.replicas.failed(address, queue.topic)

    def refresh(self, queue: MessageQueue) -> str | None:
        """The queue's master once the route is asked again (within ``MIN_ROUTE_REFRESH_S`` of the
        last ask, the same route): a pinned send waits for its own, pausing between attempts."""
        self._picker.route(queue.topic, suspect=True)
        return self._picker.master(queue)

    def target(
        self, first: Part, avoid: str | None = None, rest: tuple[Part, ...] = ()
    ) -> tuple[MessageQueue, str | None]:
        """The queue of a send that starts with ``first`` and its master's address, with the
        properties of the send's messages (``rest`` too) encoded for that broker. ``avoid``: a
        broker name an unordered send's retry should not go back to."""
        attempts = self._retry.start()
        pinned = isinstance(first, Message) and first.row.pinned
        while True:
            if isinstance(first, Message):
                queue = self._picker.pick(first.row, avoid)
            else:
                queue = self._picker.next_queue(first.topic, avoid)
            address = self._picker.master(queue)
            five_x = self._registered(queue, address, attempts)
            if five_x is None:
                if pinned:  # its queue or none: wait for the broker, or a new master
                    attempts.pause()
                    self._picker.route(queue.topic, suspect=True)
                else:
                    avoid = queue.broker_name
                continue
            for part in (first, *rest):
                if isinstance(part, Message):
                    part.properties = encoded_properties(
                        part.row, part.unique_id, five_x=five_x, namespace=self._namespace
                    )
            return queue, address

    def place(self, topic: str, count: int) -> tuple[list[MessageQueue], np.ndarray]:
        """The queues of ``count`` unordered messages of ``topic`` in a row (``QueuePicker.spread``),
        the producer registered with each one's master; where that fails, the messages are placed
        again without that broker, as ``target`` does."""
        attempts = self._retry.start()
        while True:
            queues, chosen = self._picker.spread(topic, count)
            for queue in (queues[index] for index in np.unique(chosen).tolist()):
                if self._registered(queue, self._picker.master(queue), attempts) is None:
                    break
            else:
                return queues, chosen

    def _registered(self, queue: MessageQueue, address: str | None, attempts: Attempts) -> bool | None:
        """Whether the queue's master runs 5.x, after registering the producer there when due
        (a queue without a master counts as 5.x: its send fails on its own). None when that
        failed and ``attempts`` allow another placement; the failure is remembered."""
        if address is None:
            return True
        try:
            return self._producer.register(address)
        except RocketMQError as err:
            if not attempts.again(err):
                raise SendFailedError(queue, address, attempts.failed, err) from err
            self.failed(queue, address)
            return None
