"""Reading a partition on an executor: pull, trim, keep exact tag matches, yield Arrow batches.

A Spark task gets a ``RocketMQPartition`` (planned on the driver, ``partition.py``): one or more
queue ranges ``[start, end)`` with everything needed to pull them. Its thread keeps pulls of
several ranges on the wire at once and reads each range in offset order. Reading the same ranges
twice yields the same rows, which is what lets Spark's checkpoint give exactly-once output.

Python workers are reused across tasks, so the client, its connections and the routes that say
which replica of each broker name serves reads are this process's view of the cluster
(``remoting.cluster``), kept from one micro-batch to the next and shared with the sink's tasks.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator

import pyarrow as pa

from rocketmq_spark.records.layout import first_stored_as
from rocketmq_spark.remoting.client import PullResult, PullStatus, RocketMQClient
from rocketmq_spark.remoting.cluster import Cluster, shared_cluster
from rocketmq_spark.remoting.errors import IndexMismatchError, OffsetNotServedError, ProtocolError
from rocketmq_spark.source.partition import RocketMQPartition
from rocketmq_spark.source.planning import DataLoss, on_data_loss
from rocketmq_spark.source.pulls import MOVES_ON, Pull, PullSender, describe, stalled
from rocketmq_spark.source.rows import BatchBuilder, RowRange

log = logging.getLogger(__name__)

# Bounds of the rows a task holds before handing them to Spark: whichever is reached first.
ARROW_BATCH_ROWS = 8192
ARROW_BATCH_BODY_BYTES = 16 * 1024 * 1024
# Pulls of one range that may be on the wire at once (when no filter makes their ends unknowable),
# and of one task across its ranges.
PULLS_IN_FLIGHT = 4
TASK_PULLS_IN_FLIGHT = 16
# How long a range pulls an offset again (with the query's retry backoff, within its
# retryBudgetMs) while the broker does not serve it: NO_NEW_MSG below the planned end (consume
# queue dispatch can trail the commit log briefly after a restart), PULL_RETRY_IMMEDIATELY (its
# commit log is being deleted; the store's cleanup, every 10 s by default, then moves the queue's
# min offset past it: two passes fit), or an answer that does not move past it. Then the last
# answer decides: data loss if it says the data is gone, else a clear error, never a silent skip.
STALLED_OFFSET_WAIT_S = 20.0
# The remark of a PULL_RETRY_IMMEDIATELY whose entries point at commit log files that no longer
# exist (GetMessageStatus): still so after the wait, the messages are gone, whatever the queue's
# min offset says (4.9 never moves it on a queue whose every message expired).
MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
# OFFSET_MOVED answers to offsets the queue holds that one range takes as reset notices (a 5.x
# broker sends one per reset of the group's offset on the queue) before it calls the broker broken.
RESET_NOTICES_PER_RANGE = 8


def read_partition(
    part: RocketMQPartition, client: RocketMQClient | None = None, *, stalled_wait_s: float = STALLED_OFFSET_WAIT_S
) -> Iterator[pa.RecordBatch]:
    """Yield the rows of ``part`` as Arrow record batches, each range's rows in offset order.

    Up to ``TASK_PULLS_IN_FLIGHT`` ranges are read at a time, each with its own pulls on the
    wire; their rows go out together whenever they reach the batch bounds, so memory does not
    grow with the number of ranges, nor the batches with it. ``client`` defaults to this
    process's view of the cluster, which the sink's tasks share (a given client gets routes of its own).
    """
    cluster = shared_cluster(part.task.client) if client is None else Cluster.of(client)
    client, replicas = cluster.client, cluster.replicas
    builder = BatchBuilder(
        [
            RowRange(
                part.task.display_topic(r.queue.topic),
                r.queue.broker_name,
                r.queue.queue_id,
                r.start,
                r.end,
                r.stored_by_ms,
            )
            for r in part.ranges
        ],
        part.task.tag_filter,
        part.task.max_body_bytes,
        part.task.columns,
    )
    reads = [
        _RangeRead(PullSender(client, replicas, part, r), index, stalled_wait_s) for index, r in enumerate(part.ranges)
    ]
    waiting = deque(reads)
    active: list[_RangeRead] = []
    while waiting or active:
        while waiting and len(active) < TASK_PULLS_IN_FLIGHT:
            active.append(waiting.popleft())
        _plan(active)
        with client.pulls_together():  # every pull leaves in here: one write per broker
            for read in active:
                read.sender.submit(read.pulls)
        for read in active:
            found = read.receive()
            if found is not None:
                builder.add_pull(read.index, *found)
        active = [read for read in active if not read.done]
        if builder.rows >= ARROW_BATCH_ROWS or builder.body_bytes >= ARROW_BATCH_BODY_BYTES:
            batch = builder.flush()
            _end_where_stored_later(builder, reads)
            if batch is not None:
                yield batch
    batch = builder.flush()
    _end_where_stored_later(builder, reads)
    if batch is not None:
        yield batch


def _end_where_stored_later(builder: BatchBuilder, reads: list[_RangeRead]) -> None:
    """The data-loss policy for ranges found holding messages stored after their batch was
    planned (``BatchBuilder.take_cuts``), before any of those rows leave; such a range ends there."""
    for index, (offset, stored_ms) in sorted(builder.take_cuts().items()):
        read = reads[index]
        read.end_at(offset)
        rng = read.rng
        late_ms = stored_ms - (rng.stored_by_ms or stored_ms)
        on_data_loss(
            [DataLoss.stored_after_planning(rng.queue, offset, rng.end, late_ms)], read.part.task.fail_on_data_loss
        )


def _plan(active: list[_RangeRead]) -> None:
    """Fill the task's window of pulls with new spans, a range at a time, so that every range gets
    its turn. Nothing is sent here: the caller submits them with the pulls the ranges already hold."""
    in_flight = sum(len(read.pulls) for read in active)
    progress = True
    while progress and in_flight < TASK_PULLS_IN_FLIGHT:
        progress = False
        for read in active:
            if in_flight < TASK_PULLS_IN_FLIGHT and read.plan_next():
                in_flight += 1
                progress = True


class _RangeRead:
    """The pulls of one range: which span to ask next and what each answer means.

    Without a filter every offset holds a message, so where each pull ends is known before it is
    answered and ``PULLS_IN_FLIGHT`` pulls of consecutive spans run at once; a short answer gets
    its span's rest pulled before the next span. With a filter the broker skips what does not
    match and only the answer says where to go on, so one pull at a time is on the wire.

    An offset is passed only by an answer that moves past it, or by a data-loss decision
    (``on_data_loss``) that names it. The range's pulls are records it plans; its sender puts
    them on the wire, inside the task's batched write.
    """

    def __init__(self, sender: PullSender, index: int, stalled_wait_s: float) -> None:
        self.sender = sender
        self.index = index  # of the range in its partition
        self.part = part = sender.part
        self.rng = rng = sender.rng
        self.stalled_wait_s = stalled_wait_s
        self.depth = PULLS_IN_FLIGHT if part.task.reads_every_message else 1
        self.end = rng.end  # lowered where a message stored after the batch was planned is found
        self.accepted = rng.start  # messages below this were handed out, or reported lost
        self.requested = rng.start  # where the next new span starts
        # In span order; those not sent yet (new spans, a short answer's rest) go with the next submit.
        self.pulls: deque[Pull] = deque()
        self.reset_notices = 0

    @property
    def done(self) -> bool:
        return self.accepted >= self.end

    def end_at(self, offset: int) -> None:
        """Read nothing from ``offset`` on (its messages are not those planned there)."""
        self.end = min(self.end, offset)

    def plan_next(self) -> bool:
        """Add the next span to the pulls to send, if the range has one and room for it."""
        if self.done or len(self.pulls) >= self.depth or self.requested >= self.end:
            return False
        stop = min(self.requested + self.part.task.pull_batch_size, self.end)
        self.pulls.append(Pull(self.requested, stop))
        self.requested = stop
        return True

    def receive(self) -> tuple[bytes, int] | None:
        """Take the answer to the oldest span on the wire: the body it found, if any, with the
        offset below which its messages were already handed out."""
        if not self.pulls:
            return None
        pull = self.pulls.popleft()
        if pull.stop <= self.accepted:  # an earlier answer reached past it (a batch record returned whole)
            return None
        result = self.sender.result(pull)
        if stalled(pull.start, result):
            # Start over from this span, pulled again until it is served; the range goes on after it.
            self._start_over(pull.start)
            result = self.sender.until_served(pull.start, pull.stop, self.stalled_wait_s)
        return self._take(pull, result)

    def _start_over(self, offset: int) -> None:
        """Go on from ``offset`` (never back below what was handed out or reported lost), dropping
        the pulls on the wire: they finish unread."""
        self.pulls.clear()
        self.accepted = self.requested = max(self.accepted, offset)

    def _take(self, pull: Pull, result: PullResult) -> tuple[bytes, int] | None:
        """Act on a settled answer: go on from its next begin offset if it moves past the pull's
        start, else from where the queue's bounds put the range (data loss or a reset notice),
        else fail; never one offset on by default."""
        start, status = pull.start, result.status
        if status in MOVES_ON and result.next_begin_offset > start:
            if status is PullStatus.FOUND:
                self._check_position(start, result)
            found = (result.body, self.accepted) if status is PullStatus.FOUND else None
            if self.depth == 1:  # only the answer says where to go on; no other pull is on the wire
                self._start_over(result.next_begin_offset)
                return found
            self.accepted = max(self.accepted, result.next_begin_offset)
            if self.accepted < pull.stop:  # a short answer: the rest of its span goes with the next submit
                self.pulls.appendleft(Pull(self.accepted, pull.stop))
            # New spans start after this span (after a stall, the start-over put them inside it) and
            # after the answer, which can reach past every span sent (a batch record returned whole).
            self.requested = max(self.requested, self.accepted, pull.stop)
            return found
        if status is PullStatus.OFFSET_ILLEGAL:
            resume = self._offset_moved(start, result)
        elif status is PullStatus.RETRY_IMMEDIATELY and start < result.min_offset:
            resume = self._expired(start, result)
        elif status is PullStatus.RETRY_IMMEDIATELY and result.remark == MESSAGE_WAS_REMOVING:
            resume = self._removed(start, result)
        elif status is PullStatus.NO_NEW_MSG:
            resume = self._not_served(start, result)
        else:  # still stalled after the wait
            raise OffsetNotServedError(
                f"{self.rng.queue}: the broker does not serve offset {start} nor says it is gone: it answered "
                f"{describe(result)} to it for {self.stalled_wait_s:g} s. Not skipping it; if its commit log was "
                "being deleted, the queue's min offset passes it soon and a retry reports the loss"
            )
        self._start_over(resume)
        return None

    def _check_position(self, start: int, result: PullResult) -> None:
        """The first message of an answer must be one stored at an offset the pull asked for. A
        broker whose consume queue disagrees with its messages cannot be read right: rows would get
        the wrong offsets, and messages be skipped or repeated, so the read stops.

        A 4.9 broker also skips entries whose commit log is gone and answers with the first
        message it can read, above ``start``: where a pull at that message's own offset finds it
        there, the queue agrees with its messages, and the offsets skipped are lost."""
        stored_as = first_stored_as(result.body, start)
        if self.part.task.reads_every_message:
            fits = stored_as == start
        else:  # the broker skips what the filter does not match
            fits = start <= stored_as < result.next_begin_offset
        if fits:
            return
        if start < stored_as < result.next_begin_offset and self._stored_at(stored_as):
            lost_to = min(stored_as, self.rng.end)
            on_data_loss(
                [DataLoss.removed(self.rng.queue, start, lost_to, result.min_offset)], self.part.task.fail_on_data_loss
            )
            return
        raise IndexMismatchError.at(self.rng.queue, start, stored_as)

    def _stored_at(self, offset: int) -> bool:
        """Whether a pull at ``offset`` answers with the message stored as ``offset`` first."""
        check = self.sender.result(self.sender.sent_alone(offset, offset + 1))
        return check.status is PullStatus.FOUND and first_stored_as(check.body, offset) == offset

    def _offset_moved(self, start: int, result: PullResult) -> int:
        """Where to go on after an OFFSET_MOVED answer to a pull at ``start``.

        The queue's bounds in the answer decide, not its next begin offset: a 5.x broker also
        answers OFFSET_MOVED, once, to the group's first pull on a queue after an operator reset
        its offsets, with the reset offset as the next begin offset. The planned range still exists
        then, so it is pulled again from ``start``; the driver follows the reset in the batches it
        plans next. Only an offset below the queue's first (expired) or above its end (gone
        backwards) is lost.
        """
        rng = self.rng
        if start < result.min_offset:
            return self._expired(start, result)
        if start > result.max_offset:
            on_data_loss(
                [DataLoss.short_when_read(rng.queue, start, rng.end, result.max_offset)],
                self.part.task.fail_on_data_loss,
            )
            return rng.end
        self.reset_notices += 1
        if self.reset_notices > RESET_NOTICES_PER_RANGE:
            raise ProtocolError(
                f"{rng.queue}: the broker answers OFFSET_MOVED to offset {start} again and "
                f"again although it holds [{result.min_offset}, {result.max_offset})"
            )
        log.info(
            "%s: the broker moved the group's offset to %d (an operator's reset); offset %d of this batch is "
            "read as planned",
            rng.queue,
            result.next_begin_offset,
            start,
        )
        return start

    def _expired(self, start: int, result: PullResult) -> int:
        """Offsets from ``start`` below the queue's first: deleted or expired."""
        lost_to = min(result.min_offset, self.rng.end)
        on_data_loss(
            [DataLoss.expired(self.rng.queue, start, lost_to, result.min_offset)], self.part.task.fail_on_data_loss
        )
        return lost_to

    def _removed(self, start: int, result: PullResult) -> int:
        """Offsets from ``start`` whose commit log the broker still cannot read after the wait:
        deleted, up to where the broker goes on (or the range's end)."""
        if result.next_begin_offset <= start:
            raise OffsetNotServedError(
                f"{self.rng.queue}: the broker cannot read offset {start} (its commit log is gone) and does not say "
                f"where the queue goes on: it answered {describe(result)} for {self.stalled_wait_s:g} s"
            )
        lost_to = min(result.next_begin_offset, self.rng.end)
        on_data_loss(
            [DataLoss.removed(self.rng.queue, start, lost_to, result.min_offset)], self.part.task.fail_on_data_loss
        )
        return lost_to

    def _not_served(self, start: int, result: PullResult) -> int:
        """A planned offset the broker still says it has no message at, after the wait."""
        rng = self.rng
        if result.max_offset <= start:  # the queue ends before its planned end
            loss = DataLoss.not_served(rng.queue, start, rng.end)
        elif result.next_begin_offset > start:  # a hole in its index, up to where the broker goes on
            loss = DataLoss.missing_from_index(
                rng.queue, start, min(result.next_begin_offset, rng.end), result.max_offset
            )
        else:
            raise OffsetNotServedError(
                f"{rng.queue}: the broker has no message at offset {start}, below its max {result.max_offset}, and "
                f"does not say where the queue goes on: it answered {describe(result)} for {self.stalled_wait_s:g} s"
            )
        on_data_loss([loss], self.part.task.fail_on_data_loss)
        return loss.lost_to
