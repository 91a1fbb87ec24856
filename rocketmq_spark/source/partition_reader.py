"""Reading a partition on an executor: pull, trim, keep exact tag matches, yield Arrow batches.

A Spark task gets a ``RocketMQPartition`` (planned on the driver, ``partition.py``): one or more
queue ranges ``[start, end)`` with everything needed to pull them. Its thread keeps pulls of
several ranges on the wire at once and reads each range in offset order. Reading the same ranges
twice yields the same rows, which is what lets Spark's checkpoint give exactly-once output.

Python workers are reused across tasks, so clients are cached per process and keep their
connections from one micro-batch to the next.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator

import pyarrow as pa

from rocketmq_spark.model import ClientConfig
from rocketmq_spark.remoting.client import PendingPull, PullResult, PullStatus, RocketMQClient
from rocketmq_spark.remoting.errors import ProtocolError, RocketMQError
from rocketmq_spark.source.partition import ReadRange, RocketMQPartition
from rocketmq_spark.source.planning import DataLoss, on_data_loss
from rocketmq_spark.source.rows import BatchBuilder, RowRange

log = logging.getLogger(__name__)

# Bounds of the rows a task holds before handing them to Spark: whichever is reached first.
ARROW_BATCH_ROWS = 8192
ARROW_BATCH_BODY_BYTES = 16 * 1024 * 1024
# Pulls of one range that may be on the wire at once (when no filter makes their ends unknowable),
# and of one task across its ranges.
PULLS_IN_FLIGHT = 4
TASK_PULLS_IN_FLIGHT = 16
# A planned offset the broker says is not there yet: consume queue dispatch can trail the
# commit log briefly after a broker restart. Wait this long before calling it lost.
MISSING_DATA_WAIT_S = 5.0
MISSING_DATA_POLL_S = 0.25
# OFFSET_MOVED answers to offsets the queue holds that one range takes as reset notices (a 5.x
# broker sends one per reset of the group's offset on the queue) before it calls the broker broken.
RESET_NOTICES_PER_RANGE = 8


_clients: dict[ClientConfig, RocketMQClient] = {}
_clients_lock = threading.Lock()


def shared_client(config: ClientConfig) -> RocketMQClient:
    """This process's client for the config, so connections outlive a single task."""
    with _clients_lock:
        client = _clients.get(config)
        if client is None:
            client = _clients[config] = RocketMQClient(config)
        return client


def read_partition(part: RocketMQPartition, client: RocketMQClient | None = None, *,
                   missing_data_wait_s: float = MISSING_DATA_WAIT_S) -> Iterator[pa.RecordBatch]:
    """Yield the rows of ``part`` as Arrow record batches, each range's rows in offset order.

    Up to ``TASK_PULLS_IN_FLIGHT`` ranges are read at a time, each with its own pulls on the
    wire; their rows go out together whenever they reach the batch bounds, so memory does not
    grow with the number of ranges, nor the batches with it. ``client`` defaults to this
    process's shared client.
    """
    client = client or shared_client(part.client)
    builder = BatchBuilder([RowRange(part.display_topic(r.queue.topic), r.queue.broker_name, r.queue.queue_id,
                                     r.start, r.end) for r in part.ranges], part.tag_filter, part.max_body_bytes,
                           part.columns)
    waiting = deque(_RangeRead(client, part, index, r, missing_data_wait_s) for index, r in enumerate(part.ranges))
    active: list[_RangeRead] = []
    while waiting or active:
        while waiting and len(active) < TASK_PULLS_IN_FLIGHT:
            active.append(waiting.popleft())
        _send(active)
        for read in active:
            found = read.receive()
            if found is not None:
                builder.add_pull(read.index, *found)
        active = [read for read in active if not read.done]
        if builder.rows >= ARROW_BATCH_ROWS or builder.body_bytes >= ARROW_BATCH_BODY_BYTES:
            batch = builder.flush()
            if batch is not None:
                yield batch
    batch = builder.flush()
    if batch is not None:
        yield batch


def _send(active: list[_RangeRead]) -> None:
    """Fill the task's window of pulls, a range at a time, so that every range gets its turn."""
    in_flight = sum(len(read.sent) for read in active)
    progress = True
    while progress and in_flight < TASK_PULLS_IN_FLIGHT:
        progress = False
        for read in active:
            if in_flight < TASK_PULLS_IN_FLIGHT and read.send_next():
                in_flight += 1
                progress = True


class _RangeRead:
    """The pulls of one range: which span to ask next and what each answer means.

    Without a filter every offset holds a message, so where each pull ends is known before it is
    answered and ``PULLS_IN_FLIGHT`` pulls of consecutive spans run at once; a short answer gets
    its span's rest pulled before the next span. With a filter the broker skips what does not
    match and only the answer says where to go on, so one pull at a time is on the wire.
    """

    def __init__(self, client: RocketMQClient, part: RocketMQPartition, index: int, rng: ReadRange,
                 missing_wait_s: float) -> None:
        self.client = client
        self.index = index  # of the range in its partition
        self.part = part
        self.rng = rng
        self.missing_wait_s = missing_wait_s
        self.depth = PULLS_IN_FLIGHT if part.reads_every_message else 1
        self.accepted = rng.start  # messages below this were handed out, or reported lost
        self.requested = rng.start  # where the next new span starts
        self.sent: deque[tuple[int, int, _InFlight]] = deque()
        self.moved = 0  # OFFSET_MOVED answers so far

    @property
    def done(self) -> bool:
        return self.accepted >= self.rng.end

    def _span(self, start: int, stop: int) -> tuple[int, int, _InFlight]:
        return start, stop, _InFlight(self.client, self.part, self.rng, start, stop - start)

    def send_next(self) -> bool:
        """Put the next span on the wire, if the range has one and room for it."""
        if self.done or len(self.sent) >= self.depth or self.requested >= self.rng.end:
            return False
        stop = min(self.requested + self.part.pull_batch_size, self.rng.end)
        self.sent.append(self._span(self.requested, stop))
        self.requested = stop
        return True

    def receive(self) -> tuple[bytes, int] | None:
        """Take the answer to the oldest span on the wire: the body it found, if any, with the
        offset below which its messages were already handed out."""
        if not self.sent:
            return None
        start, stop, pull = self.sent.popleft()
        result = pull.result()
        status = result.status
        if status is PullStatus.FOUND or status is PullStatus.NO_MATCHED_MSG:
            found = (result.body, self.accepted) if status is PullStatus.FOUND else None
            self.accepted = max(self.accepted, result.next_begin_offset, start + 1)
            if self.depth == 1:
                self.requested = self.accepted  # only the answer says where to go on
            else:
                if self.accepted < stop:  # a short answer: the rest of its span comes next
                    self.sent.appendleft(self._span(self.accepted, stop))
                # An answer can reach past every span sent (a batch record returned whole):
                # new spans start after it.
                self.requested = max(self.requested, self.accepted)
            return found
        if status is PullStatus.OFFSET_ILLEGAL:
            resume = _offset_moved(self.part, self.rng, start, result)
            self.moved += 1
            if resume == start and self.moved > RESET_NOTICES_PER_RANGE:
                raise ProtocolError(f"{self.rng.queue}: the broker answers OFFSET_MOVED to offset {start} again and "
                                    f"again although it holds [{result.min_offset}, {result.max_offset})")
        else:  # NO_NEW_MSG below the planned end
            resume = _missing(self.client, self.part, self.rng, start, self.missing_wait_s)
        # Start over from there; pulls still on the wire are left to finish unread.
        self.sent.clear()
        self.accepted = self.requested = max(self.accepted, resume)
        return None


class _InFlight:
    """A pull sent without waiting: answers are matched to requests, so the task's thread keeps
    several on the wire and decodes while the broker works; it reads the answers itself. If a
    pull fails in a way a retry can fix, ``result()`` pulls the same span again under the usual
    retry policy."""

    __slots__ = ("client", "part", "rng", "offset", "count", "pending", "error")

    def __init__(self, client: RocketMQClient, part: RocketMQPartition, rng: ReadRange, offset: int,
                 count: int) -> None:
        self.client = client
        self.part = part
        self.rng = rng
        self.offset = offset
        self.count = count
        self.pending: PendingPull | None = None
        self.error: RocketMQError | None = None
        try:
            self.pending = client.pull_async(
                rng.address, rng.queue, offset, group=part.group, max_messages=count,
                subscription=part.sub_expression, expression_type=part.expression_type,
            )
        except RocketMQError as err:
            self.error = err

    def result(self) -> PullResult:
        error = self.error
        if self.pending is not None:
            try:
                return self.pending.result()
            except RocketMQError as err:
                error = err
        assert error is not None
        if not error.retriable:
            raise error
        # Debug only: many pulls meet the same outage, which the retry logs once.
        log.debug("pull of %s at %d failed (%s); pulling it again", self.rng.queue, self.offset, error)
        part, rng = self.part, self.rng
        return part.retry.call(
            lambda: self.client.pull(rng.address, rng.queue, self.offset, group=part.group, max_messages=self.count,
                                     subscription=part.sub_expression, expression_type=part.expression_type),
            f"pull of {rng.queue} at {self.offset}",
        )


def _offset_moved(part: RocketMQPartition, rng: ReadRange, offset: int, result: PullResult) -> int:
    """Where to go on after an OFFSET_MOVED answer to a pull at ``offset``.

    The queue's bounds in the answer decide, not its next begin offset: a 5.x broker also answers
    OFFSET_MOVED, once, to the group's first pull on a queue after an operator reset its offsets,
    with the reset offset as the next begin offset. The planned range still exists then, so it is
    pulled again from ``offset``; the driver follows the reset in the batches it plans next. Only
    an offset below the queue's first (expired) or above its end (gone backwards) is lost.
    """
    if offset < result.min_offset:
        lost_to = min(result.min_offset, rng.end)
        on_data_loss([DataLoss.expired(rng.queue, offset, lost_to, result.min_offset)], part.fail_on_data_loss)
        return lost_to
    if offset > result.max_offset:
        on_data_loss([DataLoss.went_backwards(rng.queue, offset, rng.end, result.max_offset)],
                     part.fail_on_data_loss)
        return rng.end
    log.info("%s: the broker moved the group's offset to %d (an operator's reset); offset %d of this batch is "
             "read as planned", rng.queue, result.next_begin_offset, offset)
    return offset


def _missing(client: RocketMQClient, part: RocketMQPartition, rng: ReadRange, offset: int, wait_s: float) -> int:
    """Planned offsets the broker does not (yet) serve: wait briefly, then treat them as lost."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(MISSING_DATA_POLL_S)
        if part.retry.call(lambda: client.max_offset(rng.address, rng.queue), f"max offset of {rng.queue}") > offset:
            return offset
    on_data_loss([DataLoss.not_served(rng.queue, offset, rng.end)], part.fail_on_data_loss)
    return rng.end
