"""Reading one queue range on an executor: pull, trim, keep exact tag matches, yield Arrow batches.

A Spark task gets a ``RocketMQPartition``: a picklable description of ``[start, end)`` on one
queue with everything needed to pull it. Reading the same range twice yields the same rows,
which is what lets Spark's checkpoint give exactly-once output.

Python workers are reused across tasks, so clients are cached per process and keep their
connections from one micro-batch to the next.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from rocketmq_spark.client import EXPRESSION_TAG, ClientConfig, PendingPull, PullResult, PullStatus, RocketMQClient
from rocketmq_spark.errors import RocketMQError
from rocketmq_spark.options import SourceOptions
from rocketmq_spark.planning import DataLoss, QueueRange, on_data_loss
from rocketmq_spark.retry import with_retries
from rocketmq_spark.route import MessageQueue
from rocketmq_spark.schema import BatchBuilder

log = logging.getLogger(__name__)

# Bounds of one Arrow batch: whichever is reached first.
ARROW_BATCH_ROWS = 8192
ARROW_BATCH_BODY_BYTES = 16 * 1024 * 1024
# Pulls of one task that may be on the wire at once (when no filter makes their ends unknowable).
PULLS_IN_FLIGHT = 4
# A planned offset the broker says is not there yet: consume queue dispatch can trail the
# commit log briefly after a broker restart. Wait this long before calling it lost.
MISSING_DATA_WAIT_S = 5.0
MISSING_DATA_POLL_S = 0.25


@dataclass(frozen=True)
class RocketMQPartition(InputPartition):
    """One Spark partition: offsets ``[start, end)`` of one queue."""

    queue: MessageQueue
    start: int
    end: int
    address: str
    display_topic: str
    client: ClientConfig
    group: str
    sub_expression: str
    expression_type: str
    tag_filter: frozenset[str] | None
    pull_batch_size: int
    fail_on_data_loss: bool

    @property
    def reads_every_message(self) -> bool:
        """No filter: every offset of the range holds a message this read returns."""
        return self.expression_type == EXPRESSION_TAG and self.tag_filter is None


_clients: dict[ClientConfig, RocketMQClient] = {}
_clients_lock = threading.Lock()


def shared_client(config: ClientConfig) -> RocketMQClient:
    """This process's client for the config, so connections outlive a single task."""
    with _clients_lock:
        client = _clients.get(config)
        if client is None:
            client = _clients[config] = RocketMQClient(config)
        return client


def read_partition(part: RocketMQPartition) -> Iterator[pa.RecordBatch]:
    """Yield the rows of ``part`` as Arrow record batches of bounded size, in offset order."""
    builder = BatchBuilder(part.display_topic, part.queue.broker_name, part.queue.queue_id, part.start,
                           part.end, part.tag_filter)
    for body, low in _found_pulls(shared_client(part.client), part):
        builder.add_pull(body, low)
        if builder.rows >= ARROW_BATCH_ROWS or builder.body_bytes >= ARROW_BATCH_BODY_BYTES:
            batch = builder.flush()
            if batch is not None:
                yield batch
    batch = builder.flush()
    if batch is not None:
        yield batch


def _found_pulls(client: RocketMQClient, part: RocketMQPartition) -> Iterator[tuple[bytes, int]]:
    """The bodies of the range's FOUND pulls in offset order, each with the offset below which
    its messages were already handed out.

    Without a filter every offset holds a message, so where each pull ends is known before it is
    answered and ``PULLS_IN_FLIGHT`` pulls of consecutive spans run at once; a short answer gets
    its span's rest pulled before the next span. With a filter the broker skips what does not
    match and only the answer says where to go on, so pulls run one ahead of decoding instead.
    """
    depth = PULLS_IN_FLIGHT if part.reads_every_message else 1
    accepted = part.start  # messages below this were handed out, or reported lost
    requested = part.start  # where the next new span starts
    in_flight: deque[tuple[int, int, _InFlight]] = deque()

    def send(start: int, stop: int) -> tuple[int, int, _InFlight]:
        return start, stop, _InFlight(client, part, start, stop - start)

    while accepted < part.end:
        while len(in_flight) < depth and requested < part.end:
            stop = min(requested + part.pull_batch_size, part.end)
            in_flight.append(send(requested, stop))
            requested = stop
        start, stop, pull = in_flight.popleft()
        result = pull.result()
        status = result.status
        if status is PullStatus.FOUND or status is PullStatus.NO_MATCHED_MSG:
            if status is PullStatus.FOUND:
                yield result.body, accepted
            accepted = max(accepted, result.next_begin_offset, start + 1)
            if depth == 1:
                requested = accepted  # only the answer says where to go on
            else:
                if accepted < stop:  # a short answer: the rest of its span comes next
                    in_flight.appendleft(send(accepted, stop))
                # An answer can reach past every span sent (a batch record returned whole):
                # new spans start after it.
                requested = max(requested, accepted)
            continue
        if status is PullStatus.OFFSET_ILLEGAL:
            resume = _offset_moved(part, start, result)
        else:  # NO_NEW_MSG below the planned end
            resume = _missing(client, part, start)
        # Start over from there; pulls still in flight are left to finish unread.
        in_flight.clear()
        accepted = requested = max(accepted, resume)


class _InFlight:
    """A pull sent without waiting: answers are matched to requests, so the task's thread keeps
    several on the wire and decodes while the broker works; it reads the answers itself. If a
    pull fails in a way a retry can fix, ``result()`` pulls the same span again under the usual
    retry policy."""

    __slots__ = ("client", "part", "offset", "count", "pending", "error")

    def __init__(self, client: RocketMQClient, part: RocketMQPartition, offset: int, count: int) -> None:
        self.client = client
        self.part = part
        self.offset = offset
        self.count = count
        self.pending: PendingPull | None = None
        self.error: RocketMQError | None = None
        try:
            self.pending = client.pull_async(
                part.address, part.queue, offset, group=part.group, max_messages=count,
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
        log.warning("pull of %s at %d failed (%s); pulling it again", self.part.queue, self.offset, error)
        return _pull(self.client, self.part, self.offset, self.count)


def _pull(client: RocketMQClient, part: RocketMQPartition, offset: int, count: int) -> PullResult:
    return with_retries(
        lambda: client.pull(
            part.address, part.queue, offset, group=part.group, max_messages=count,
            subscription=part.sub_expression, expression_type=part.expression_type,
        ),
        f"pull of {part.queue} at {offset}",
    )


def _offset_moved(part: RocketMQPartition, offset: int, result: PullResult) -> int:
    """The broker no longer has ``offset``: below its min (expired) or above its max (gone backwards)."""
    corrected = result.next_begin_offset
    if corrected > offset:
        lost_to = min(corrected, part.end)
        on_data_loss([DataLoss(part.queue, offset, lost_to,
                               f"were deleted or expired (the queue now starts at {result.min_offset})")],
                     part.fail_on_data_loss)
        return lost_to
    on_data_loss([DataLoss(part.queue, offset, part.end,
                           f"are beyond the queue's end {result.max_offset}: it went backwards")],
                 part.fail_on_data_loss)
    return part.end


def _missing(client: RocketMQClient, part: RocketMQPartition, offset: int) -> int:
    """Planned offsets the broker does not (yet) serve: wait briefly, then treat them as lost."""
    deadline = time.monotonic() + MISSING_DATA_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(MISSING_DATA_POLL_S)
        if with_retries(lambda: client.max_offset(part.address, part.queue), f"max offset of {part.queue}") > offset:
            return offset
    on_data_loss([DataLoss(part.queue, offset, part.end, "were planned but the broker no longer has them")],
                 part.fail_on_data_loss)
    return part.end


BATCH_READ_GROUP = "rocketmq-spark-reader"


def make_partitions(options: SourceOptions, ranges: list[QueueRange],
                    addresses: Mapping[MessageQueue, str]) -> list[RocketMQPartition]:
    """Partitions for planned ranges; a read without a group pulls as ``BATCH_READ_GROUP``."""
    return [
        RocketMQPartition(
            queue=r.queue, start=r.start, end=r.end, address=addresses[r.queue],
            display_topic=options.display_topic(r.queue.topic), client=options.client,
            group=options.consumer_group or BATCH_READ_GROUP, sub_expression=options.sub_expression,
            expression_type=options.expression_type, tag_filter=options.tag_filter,
            pull_batch_size=options.pull_batch_size, fail_on_data_loss=options.fail_on_data_loss,
        )
        for r in ranges
    ]
