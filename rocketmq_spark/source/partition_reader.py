"""Reading one queue range on an executor: pull, trim, keep exact tag matches, yield Arrow batches.

A Spark task gets a ``RocketMQPartition`` (planned on the driver, ``partition.py``): ``[start,
end)`` on one queue with everything needed to pull it. Reading the same range twice yields the
same rows, which is what lets Spark's checkpoint give exactly-once output.

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
from rocketmq_spark.remoting.errors import RocketMQError
from rocketmq_spark.source.partition import RocketMQPartition
from rocketmq_spark.source.planning import DataLoss, on_data_loss
from rocketmq_spark.source.rows import BatchBuilder

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
    """Yield the rows of ``part`` as Arrow record batches of bounded size, in offset order.

    ``client`` defaults to this process's shared client for the partition's cluster.
    """
    builder = BatchBuilder(part.display_topic, part.queue.broker_name, part.queue.queue_id, part.start,
                           part.end, part.tag_filter)
    pulls = _found_pulls(client or shared_client(part.client), part, missing_data_wait_s)
    for body, low in pulls:
        builder.add_pull(body, low)
        if builder.rows >= ARROW_BATCH_ROWS or builder.body_bytes >= ARROW_BATCH_BODY_BYTES:
            batch = builder.flush()
            if batch is not None:
                yield batch
    batch = builder.flush()
    if batch is not None:
        yield batch


def _found_pulls(client: RocketMQClient, part: RocketMQPartition,
                 missing_data_wait_s: float) -> Iterator[tuple[bytes, int]]:
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
            resume = _missing(client, part, start, missing_data_wait_s)
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
    return part.retry.call(
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
        on_data_loss([DataLoss.expired(part.queue, offset, lost_to, result.min_offset)], part.fail_on_data_loss)
        return lost_to
    on_data_loss([DataLoss.went_backwards(part.queue, offset, part.end, result.max_offset)], part.fail_on_data_loss)
    return part.end


def _missing(client: RocketMQClient, part: RocketMQPartition, offset: int, wait_s: float) -> int:
    """Planned offsets the broker does not (yet) serve: wait briefly, then treat them as lost."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(MISSING_DATA_POLL_S)
        if part.retry.call(lambda: client.max_offset(part.address, part.queue), f"max offset of {part.queue}") > offset:
            return offset
    on_data_loss([DataLoss.not_served(part.queue, offset, part.end)], part.fail_on_data_loss)
    return part.end
