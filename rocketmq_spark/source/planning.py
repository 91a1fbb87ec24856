"""Pure planning of micro-batches and partitions from offsets: no I/O, tested alone.

Everything here works on plain ``{MessageQueue: offset}`` maps, so the rules that decide what a
batch reads (rate limits, splitting, data loss) can be checked exhaustively without a broker.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass

from rocketmq_spark.model import MS_PER_SECOND, MessageQueue
from rocketmq_spark.remoting.errors import DataLossError
from rocketmq_spark.source.offsets import OffsetMap

log = logging.getLogger(__name__)


@dataclass(frozen=True, order=True)
class QueueRange:
    """Offsets ``[start, end)`` of one queue: what one Spark partition reads."""

    queue: MessageQueue
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Failover:
    """A queue of a broker name with a new master: the highest offset the query had read or seen
    on the master before, and the offset up to which the new master holds those messages (its
    max offset, or where messages stored after the failover begin if it has more)."""

    seen: int
    kept: int
    # Found at a restart (from the store times in the offset log), not watched as it happened: a
    # new master that lacks them, or a topic recreated while the query was stopped.
    stopped: bool = False


@dataclass(frozen=True)
class DataLoss:
    """Offsets ``[lost_from, lost_to)`` of a queue that a batch needed but the broker no longer has.

    ``read_to`` is set for a loss in a failover only: the offsets below it the query had read
    (they are in its sink although the topic lost them), those from it on it had not.
    """

    queue: MessageQueue
    lost_from: int
    lost_to: int
    reason: str
    read_to: int | None = None
    stopped: bool = False  # a failover's loss found at a restart (``Failover.stopped``)

    @property
    def count(self) -> int:
        return max(0, self.lost_to - self.lost_from)

    @property
    def read(self) -> int:
        """How many of the lost offsets the query had read (a failover's loss only)."""
        return 0 if self.read_to is None else max(0, min(self.read_to, self.lost_to) - self.lost_from)

    def describe(self) -> str:
        if self.read_to is not None:
            unread = self.count - self.read
            return f"{self.queue}: offsets [{self.lost_from}, {self.lost_to}) ({self.count}: {self.read} read, {unread} not)"
        if self.lost_to <= self.lost_from:  # a queue that is gone: its end is unknown
            return f"{self.queue}: offsets from {self.lost_from} on {self.reason}"
        return f"{self.queue}: offsets [{self.lost_from}, {self.lost_to}) {self.reason}"

    # Every kind of loss, each with its one wording, for the driver and the executors alike.

    @classmethod
    def expired(cls, queue: MessageQueue, lost_from: int, lost_to: int, min_offset: int) -> DataLoss:
        return cls(queue, lost_from, lost_to, f"were deleted or expired (the queue now starts at {min_offset})")

    @classmethod
    def removed(cls, queue: MessageQueue, lost_from: int, lost_to: int, min_offset: int) -> DataLoss:
        """Offsets the queue still counts whose commit log is gone: a 4.9 broker leaves a queue's
        min offset where it was when every message of the queue expired."""
        return cls(
            queue,
            lost_from,
            lost_to,
            f"were deleted or expired (their commit log is gone; the broker still says the queue starts at {min_offset})",
        )

    @classmethod
    def went_backwards(cls, queue: MessageQueue, lost_from: int, lost_to: int, max_offset: int) -> DataLoss:
        return cls(
            queue,
            lost_from,
            lost_to,
            f"are beyond the queue's end (max {max_offset}) although they were "
            "within it before: the queue went backwards (topic recreated, or broker store lost?)",
        )

    @classmethod
    def short_when_read(cls, queue: MessageQueue, lost_from: int, lost_to: int, max_offset: int) -> DataLoss:
        """A task found its planned range beyond the queue's end: it cannot tell a failover from a
        recreated topic (only the driver sees masters change), so it names both."""
        return cls(
            queue,
            lost_from,
            lost_to,
            f"are beyond the queue's end (max {max_offset}) although the batch was planned within it: "
            "the queue went backwards since, either because its broker name has a new master that lacks "
            "them (RocketMQ lost them in a failover, or in a restart after a crash that recovered a shorter store) "
            "or because the topic was recreated",
        )

    @classmethod
    def stored_after_planning(cls, queue: MessageQueue, lost_from: int, lost_to: int, late_ms: int) -> DataLoss:
        """A task found a message stored ``late_ms`` after its batch was planned at a planned offset:
        not the message planned there, which the broker no longer has at it."""
        return cls(
            queue,
            lost_from,
            lost_to,
            f"hold other messages than when the batch was planned: the one at {lost_from} was stored "
            f"{late_ms / MS_PER_SECOND:.1f} s after the newest its broker showed then, so its broker name has a new "
            "master that lacks the planned ones and stored its own at their offsets (RocketMQ lost them in a "
            "failover), or the topic was recreated. With failOnDataLoss=false the task stops reading the queue "
            "there, and the batches after it read what the broker holds now",
        )

    @classmethod
    def failover(cls, queue: MessageQueue, kept: int, read_to: int, seen: int, stopped: bool = False) -> DataLoss:
        """A new master holds the queue's messages up to ``kept`` only, below what the query had
        read (``read_to``) or seen (``seen``) on the master before it."""
        return cls(queue, kept, max(read_to, seen), "held by the master before", read_to, stopped)

    @classmethod
    def vanished(cls, queue: MessageQueue, offset: int) -> DataLoss:
        return cls(queue, offset, offset, "cannot be read: the queue is gone from the topic's route")

    @classmethod
    def not_served(cls, queue: MessageQueue, lost_from: int, lost_to: int) -> DataLoss:
        return cls(queue, lost_from, lost_to, "were planned but the broker no longer has them")

    @classmethod
    def missing_from_index(cls, queue: MessageQueue, lost_from: int, lost_to: int, max_offset: int) -> DataLoss:
        return cls(
            queue,
            lost_from,
            lost_to,
            f"are missing from the queue's index (a hole below its max {max_offset}): "
            "the broker answers that it has no message there",
        )


def backlog(start: Mapping[MessageQueue, int], latest: Mapping[MessageQueue, int]) -> dict[MessageQueue, int]:
    """New offsets per queue between start and latest (never negative)."""
    return {queue: max(0, end - start.get(queue, end)) for queue, end in latest.items()}


def rate_limit(start: Mapping[MessageQueue, int], latest: Mapping[MessageQueue, int], limit: int) -> OffsetMap:
    """End offsets that read at most ``limit`` offsets in all, shared by backlog.

    Each queue gets ``floor(limit * its backlog / total backlog)``; what rounding leaves over
    goes one by one to the queues with the largest remainders, so the whole limit is used when
    the backlog is larger and no queue is starved by rounding alone.
    """
    lag = backlog(start, latest)
    total_lag = sum(lag.values())
    if total_lag <= limit:
        return dict(latest)
    shares = {queue: limit * n / total_lag for queue, n in lag.items()}
    granted = {queue: math.floor(share) for queue, share in shares.items()}
    leftover = limit - sum(granted.values())
    by_remainder = sorted(lag, key=lambda q: (granted[q] - shares[q], q))
    for queue in by_remainder[:leftover]:
        granted[queue] += 1
    return {queue: start.get(queue, latest[queue]) + granted[queue] for queue in latest}


def plan_ranges(start: Mapping[MessageQueue, int], end: Mapping[MessageQueue, int]) -> list[QueueRange]:
    """One range per queue of ``end`` that has something to read; ``start`` must cover every queue."""
    return [QueueRange(q, start[q], end[q]) for q in sorted(end) if end[q] > start[q]]


def split_ranges(
    ranges: list[QueueRange], *, min_partitions: int | None = None, max_per_partition: int | None = None
) -> list[QueueRange]:
    """Split ranges so none is longer than ``max_per_partition`` and there are at least
    ``min_partitions`` (when there are that many offsets); order within a queue is kept because the
    pieces of a range are contiguous and listed in offset order.
    """
    pieces = ranges
    if max_per_partition is not None:
        pieces = [piece for r in pieces for piece in _split(r, math.ceil(r.size / max_per_partition))]
    total = sum(r.size for r in pieces)
    if min_partitions is not None and len(pieces) < min_partitions and total > 0:
        # Give each further partition to the piece with the most offsets per partition, so large
        # queues take the extra partitions and the count is exact (rounding shares is not).
        parts = dict.fromkeys(pieces, 1)
        for _ in range(min(min_partitions, total) - len(pieces)):
            widest = max((r for r in pieces if parts[r] < r.size), key=lambda r: (r.size / parts[r], r))
            parts[widest] += 1
        pieces = [piece for r in pieces for piece in _split(r, parts[r])]
    return pieces


def _split(r: QueueRange, parts: int) -> list[QueueRange]:
    parts = max(1, min(parts, r.size))
    step, remainder = divmod(r.size, parts)
    out = []
    cursor = r.start
    for index in range(parts):
        length = step + (1 if index < remainder else 0)
        out.append(QueueRange(r.queue, cursor, cursor + length))
        cursor += length
    return out


def reconcile(
    start: Mapping[MessageQueue, int],
    earliest: Mapping[MessageQueue, int],
    latest: Mapping[MessageQueue, int],
    before_failover: Mapping[MessageQueue, Failover] | None = None,
) -> tuple[OffsetMap, list[DataLoss]]:
    """The one place that decides what counts as data loss when planning a batch.

    A queue's start below its min offset lost the messages in between (expired or deleted). Where
    its broker name has a new master since the query last saw it (``before_failover``) and the new
    master holds the old messages up to less than the query read or saw, RocketMQ lost them in the
    failover, whether the queue is shorter now or already holds new messages at those offsets: the
    query goes on from where the new master's own messages begin, so those are read. Else a start
    above its max offset means the queue went backwards (topic recreated, broker store lost), and
    everything from its min offset on is new. Queues that vanished from the route lose whatever
    was unread. Returns the corrected starts and the losses found; whether a loss fails the query
    is the caller's policy (``failOnDataLoss``).
    """
    fixed: OffsetMap = {}
    losses: list[DataLoss] = []
    failed_over = before_failover or {}
    for queue, offset in start.items():
        if queue not in latest:
            losses.append(DataLoss.vanished(queue, offset))
            continue
        low, high = earliest[queue], latest[queue]
        failover = failed_over.get(queue)
        if offset < low:
            losses.append(DataLoss.expired(queue, offset, low, low))
            fixed[queue] = low
        elif failover is not None and failover.kept < max(offset, failover.seen):
            losses.append(DataLoss.failover(queue, failover.kept, offset, failover.seen, failover.stopped))
            fixed[queue] = min(offset, failover.kept)
        elif offset > high:
            losses.append(DataLoss.went_backwards(queue, high, offset, high))
            fixed[queue] = low
        else:
            fixed[queue] = offset
    return fixed, losses


def on_data_loss(losses: list[DataLoss], fail_on_data_loss: bool) -> None:
    """The data-loss policy, in one place: fail naming every loss, or warn and go on."""
    if not losses:
        return
    failover = [loss for loss in losses if loss.read_to is not None]
    other = "; ".join(loss.describe() for loss in losses if loss.read_to is None)
    said = [_failover_detail(failover, fail_on_data_loss)] if failover else []
    if fail_on_data_loss:
        if other:
            said.append(f"data the query needs is gone: {other}")
        raise DataLossError(
            f"{'. '.join(said)}. If skipping it is acceptable, set failOnDataLoss=false and the query goes on "
            "from what exists."
        )
    log.warning("skipping data that is gone (failOnDataLoss=false): %s", ". ".join([*said, other] if other else said))


def _failover_detail(losses: list[DataLoss], fail_on_data_loss: bool) -> str:
    """What a failover lost, per broker name: the queues, offsets and counts, what the query had
    read of them, and what ``failOnDataLoss=false`` does (or does now). Found at a restart, the
    cause is one of two, and both are named."""
    parts = []
    for broker in sorted({loss.queue.broker_name for loss in losses}):
        mine = [loss for loss in losses if loss.queue.broker_name == broker]
        said = "; ".join(loss.describe() for loss in mine)
        if any(loss.stopped for loss in mine):
            parts.append(
                f"since this query's checkpoint was written, {broker} came to hold other messages, or none, "
                f"at offsets the query had read or planned: {said}"
            )
        else:
            parts.append(
                f"a new master of {broker} (elected, or restarted) holds fewer messages than the one before it "
                f"showed: {said}"
            )
    total = sum(loss.count for loss in losses)
    read = sum(loss.read for loss in losses)
    going_on = "goes" if not fail_on_data_loss else "would go"
    if any(loss.stopped for loss in losses):
        cause = (
            f"In all {total} messages the checkpoint counted on are gone: a new master that lacked them took "
            "over while the query was stopped (RocketMQ lost them in a failover, or in a restart after a crash that "
            "recovered a shorter store), or the topic was recreated"
        )
    else:
        cause = (
            f"In all {total} messages the master before held were lost by RocketMQ (not copied to a new master "
            "before the old one stopped, or cut by a restart after a crash that recovered a shorter store; the "
            "topic was not recreated)"
        )
    return (
        f"{'. '.join(parts)}. {cause}: {read} of them this query had read (they are in its sink), "
        f"{total - read} it had not. With failOnDataLoss=false the query {going_on} on from each queue's new "
        "end: the lost offsets are skipped, and the messages stored at those offsets since are read"
    )


def checked_starts(
    start: Mapping[MessageQueue, int],
    earliest: Mapping[MessageQueue, int],
    latest: Mapping[MessageQueue, int],
    fail_on_data_loss: bool,
    before_failover: Mapping[MessageQueue, Failover] | None = None,
) -> OffsetMap:
    """The starts of a batch after :func:`reconcile`, with the data-loss policy applied."""
    fixed, losses = reconcile(start, earliest, latest, before_failover)
    on_data_loss(losses, fail_on_data_loss)
    return fixed


# Packing small ranges into one partition. A range costs its messages plus about what reading
# RANGE_COST messages costs (a pull round trip, a batch of its own), and a partition holds up to
# PARTITION_COST of that: a trigger of a few messages on each of a thousand queues is a handful
# of tasks, while a queue range of PARTITION_COST messages or more is a partition of its own, so
# a backfill of a large topic gets a task per queue, or more where the ranges are split.
RANGE_COST = 256
PARTITION_COST = 100_000


def pack(
    pieces: list[QueueRange],
    *,
    min_partitions: int | None = None,
    max_messages: int | None = None,
    range_cost: int = RANGE_COST,
    partition_cost: int = PARTITION_COST,
) -> list[list[QueueRange]]:
    """The pieces grouped into partitions: a large piece alone, small ones together.

    Small pieces keep their order (queue by queue, each queue's pieces in offset order) and are
    cut into runs of about equal cost, none over ``partition_cost`` or ``max_messages``, as few as
    that allows and at least ``min_partitions`` partitions in all when there are that many pieces.
    """
    alone = [[piece] for piece in pieces if piece.size + range_cost > partition_cost]
    small = [piece for piece in pieces if piece.size + range_cost <= partition_cost]
    if not small:
        return alone
    costs = [piece.size + range_cost for piece in small]
    total = sum(costs)
    wanted = max(
        math.ceil(total / partition_cost),
        (min_partitions or 1) - len(alone),
        1,
        math.ceil(sum(piece.size for piece in small) / max_messages) if max_messages else 1,
    )
    wanted = min(wanted, len(small))
    share = total / wanted
    groups: list[list[QueueRange]] = []
    before = group_cost = group_messages = 0
    for index, (piece, cost) in enumerate(zip(small, costs)):
        to_open = wanted - len(groups)
        full = group_cost + cost > partition_cost or (
            max_messages is not None and group_messages + piece.size > max_messages
        )
        # A new run starts where the piece would take its run past a bound, where its middle
        # passes the runs' shares so far, or where each piece left must open a run of its own for
        # the count to be reached.
        if (
            not groups
            or full
            or (to_open > 0 and (before + cost / 2 > share * len(groups) or len(small) - index <= to_open))
        ):
            groups.append([])
            group_cost = group_messages = 0
        groups[-1].append(piece)
        group_cost += cost
        group_messages += piece.size
        before += cost
    return alone + groups


def plan(
    start: Mapping[MessageQueue, int],
    end: Mapping[MessageQueue, int],
    *,
    min_partitions: int | None,
    max_per_partition: int | None,
) -> list[list[QueueRange]]:
    """The ranges one batch reads, split as the options ask and packed into partitions: the
    planning every reader shares."""
    pieces = split_ranges(plan_ranges(start, end), min_partitions=min_partitions, max_per_partition=max_per_partition)
    # maxMessagesPerPartition bounds what one partition reads, packed or not.
    return pack(pieces, min_partitions=min_partitions, max_messages=max_per_partition)
