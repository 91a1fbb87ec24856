"""The executor's range reader against an in-memory queue: every offset of the range exactly once,
in order, whatever the pulls in flight, short answers, filters and inner batches do.

The acceptance tests run the same reader against the real broker (integration/tests); this one
drives the answers a broker can give but rarely does on demand.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
import zlib
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from rocketmq_spark.model import EXPRESSION_SQL92, SUBSCRIBE_ALL, MessageQueue, parse_tag_expression
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.client import PullResult, PullSpec, PullStatus
from rocketmq_spark.remoting.errors import (
    BodyTooLargeError,
    BrokerResponseError,
    DataLossError,
    OffsetNotServedError,
    ProtocolError,
    QueueNotReadableError,
)
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.source import partition_reader as reader
from rocketmq_spark.source.partition import ReadRange, RocketMQPartition
from rocketmq_spark.source.partition_reader import read_partition
from tests.fake_queues import (
    PATIENT_WAIT_S,
    QUEUE,
    STALLED_WAIT_S,
    FakeClient,
    FakeQueue,
    HeldPulls,
    offsets,
    partition,
)
from tests.records import record


@pytest.fixture
def broker() -> list[FakeQueue]:
    """Where a test puts the fake queue its partitions read."""
    return []


@pytest.mark.parametrize("cap", [1, 7, 32, 1000])
@pytest.mark.parametrize("pull_batch_size", [1, 5, 32])
def test_every_offset_once_in_order_with_pulls_in_flight(
    broker: list[FakeQueue], cap: int, pull_batch_size: int
) -> None:
    broker.append(FakeQueue(500, cap=cap))
    assert offsets(broker, partition(17, 403, pull_batch_size=pull_batch_size)) == list(range(17, 403))
    # Short answers were re-asked from where they stopped, and nothing was asked past the end.
    assert all(offset + count <= 403 for offset, count in broker[0].pulls)


def test_unfiltered_reads_keep_several_pulls_in_flight(broker: list[FakeQueue]) -> None:
    queue = FakeQueue(10_000, scan_limit=10_000)
    broker.append(queue)
    assert offsets(broker, partition(0, 3200, pull_batch_size=32)) == list(range(3200))
    assert sorted(offset for offset, _ in queue.pulls) == list(range(0, 3200, 32))  # none twice
    assert queue.most_active == reader.PULLS_IN_FLIGHT


def test_an_inner_batch_across_spans_is_not_repeated(broker: list[FakeQueue]) -> None:
    broker.append(FakeQueue(100, batch=range(30, 45)))
    assert offsets(broker, partition(0, 100, pull_batch_size=8)) == list(range(100))
    assert offsets(broker, partition(33, 70, pull_batch_size=8)) == list(range(33, 70))


@pytest.mark.parametrize("expression", ["TagB", "TagA || TagB"])
def test_a_tag_filter_pulls_one_at_a_time_from_where_the_broker_says(broker: list[FakeQueue], expression: str) -> None:
    tags = {o: "TagB" for o in range(0, 400, 7)}
    queue = FakeQueue(400, tags=tags, scan_limit=25)
    broker.append(queue)
    wanted = parse_tag_expression(expression)
    assert wanted is not None
    expected = [o for o in range(10, 390) if queue.tag(o) in wanted]
    assert offsets(broker, partition(10, 390, expression=expression)) == expected
    assert queue.most_active == 1


def test_sql_filter_is_not_pulled_ahead(broker: list[FakeQueue]) -> None:
    queue = FakeQueue(200)
    broker.append(queue)
    part = partition(0, 200, expression="a > 1", expression_type=EXPRESSION_SQL92)
    assert not part.task.reads_every_message
    assert offsets(broker, part) == list(range(200))


def test_expired_offsets_fail_the_read_by_default(broker: list[FakeQueue]) -> None:
    broker.append(FakeQueue(300, min_offset=100))
    with pytest.raises(
        DataLossError,
        match=re.escape("orders/broker-a/2: offsets [0, 100) were deleted or expired (the queue now starts at 100)"),
    ):
        offsets(broker, partition(0, 300))


def test_expired_offsets_are_skipped_when_allowed(broker: list[FakeQueue]) -> None:
    broker.append(FakeQueue(300, min_offset=100))
    assert offsets(broker, partition(0, 300, fail_on_data_loss=False)) == list(range(100, 300))


@pytest.mark.parametrize("reset_to", [0, 25, 120, 300])
@pytest.mark.parametrize("pull_batch_size", [1, 5, 32])
def test_an_offset_moved_notice_inside_the_range_is_not_data_loss(
    broker: list[FakeQueue], reset_to: int, pull_batch_size: int
) -> None:
    """A 5.x broker answers the group's first pull after an operator's reset with OFFSET_MOVED and
    the reset offset (back, forward or at the end): the planned range is still there, read once."""
    queue = FakeQueue(300)
    queue.reset_to = reset_to
    broker.append(queue)
    assert offsets(broker, partition(50, 100, pull_batch_size=pull_batch_size)) == list(range(50, 100))
    assert queue.reset_to is None  # the notice was answered, and nothing was reported lost


def test_offsets_beyond_the_queues_end_are_lost_as_beyond_it(broker: list[FakeQueue]) -> None:
    broker.append(FakeQueue(40))
    with pytest.raises(DataLossError, match=r"offsets \[50, 100\) are beyond the queue's end \(max 40\)") as lost:
        offsets(broker, partition(50, 100))
    # A task cannot see a master change: it names a failover and a recreated topic alike.
    assert "new master" in str(lost.value) and "topic was recreated" in str(lost.value)


def test_a_broker_that_keeps_moving_a_held_offset_fails_the_read(broker: list[FakeQueue]) -> None:
    class Moving(FakeQueue):
        def answer(self, offset: int, *rest: Any) -> PullResult:
            self.reset_to = 0
            return super().answer(offset, *rest)

    broker.append(Moving(300))
    with pytest.raises(ProtocolError, match="OFFSET_MOVED to offset 50 again"):
        offsets(broker, partition(50, 100))


def test_offsets_the_broker_no_longer_has_are_lost_after_a_wait(broker: list[FakeQueue]) -> None:
    broker.append(FakeQueue(150))
    assert offsets(broker, partition(100, 200, fail_on_data_loss=False)) == list(range(100, 150))


def test_a_pull_that_times_out_is_pulled_again(broker: list[FakeQueue]) -> None:
    queue = FakeQueue(100)
    queue.failures = [1, 1, 1]
    broker.append(queue)
    assert offsets(broker, partition(0, 100, pull_batch_size=10)) == list(range(100))
    assert not queue.failures


# What a 5.3.3 broker answers a pull of a queue above a lowered readQueueNums.
NOT_READABLE = BrokerResponseError(
    codes.ResponseCode.INVALID_PARAMETER,
    "queueId[0] is illegal, topic:[t] topicConfig.readQueueNums:[0] consumer:[/127.0.0.1:1]",
)


def test_a_queue_hidden_after_its_batch_was_planned_is_read_once_readable_again(broker: list[FakeQueue]) -> None:
    queue = FakeQueue(100)
    queue.failures = [1, 1]
    queue.failure = NOT_READABLE
    broker.append(queue)
    assert offsets(broker, partition(0, 100, pull_batch_size=10)) == list(range(100))


def test_a_queue_that_stays_hidden_fails_the_read_saying_why(broker: list[FakeQueue]) -> None:
    queue = FakeQueue(100)
    queue.failures = [1] * 1000
    queue.failure = NOT_READABLE
    broker.append(queue)
    part = partition(0, 100, retry=Retry(budget_s=0.2, first_backoff_s=0.01))
    with pytest.raises(
        QueueNotReadableError,
        match=r"orders/broker-a/2 is not readable on its broker now \(queueId\[0\] "
        r"is illegal.*Make the queue readable again",
    ):
        offsets(broker, part)


def test_an_error_a_retry_cannot_fix_fails_the_read(broker: list[FakeQueue]) -> None:
    queue = FakeQueue(100)
    queue.failures = [1]
    queue.failure = ProtocolError("broken frame")
    broker.append(queue)
    with pytest.raises(ProtocolError, match="broken frame"):
        offsets(broker, partition(0, 100))


def test_spans_after_an_answer_that_covers_them_are_not_pulled(broker: list[FakeQueue]) -> None:
    queue = FakeQueue(200, batch=range(0, 100))
    broker.append(queue)
    assert offsets(broker, partition(0, 200, pull_batch_size=5)) == list(range(200))
    sent = [offset for offset, _ in queue.pulls]
    assert not [o for o in sent if 5 * reader.PULLS_IN_FLIGHT <= o < 100]  # nothing inside the batch


# ------------------------------------------- answers that do not move on at once


def test_no_match_goes_on_from_the_next_begin_offset(broker: list[FakeQueue]) -> None:
    """NO_MATCHED_MSG (code 20, remark NO_MATCHED_MESSAGE): the scanned entries hold nothing the
    filter wants, so the next pull starts after them, without waiting."""
    queue = FakeQueue(100, tags={50: "TagB", 90: "TagB"}, scan_limit=20)
    broker.append(queue)
    assert offsets(broker, partition(0, 100, expression="TagB")) == [50, 90]
    assert [offset for offset, _ in queue.pulls] == [0, 20, 40, 60, 80]


class Removing(FakeQueue):
    """A queue whose entries in ``removing`` have lost their commit log: a pull there answers
    PULL_RETRY_IMMEDIATELY (MESSAGE_WAS_REMOVING) with a next begin offset past them, ``answers``
    times; then ``then`` happens: "served" (the file was only briefly unreadable), "expired"
    (the store's cleanup moved the min offset past them: OFFSET_MOVED), "expired-retry" (the
    same, still told as a retry, as a static topic's mapping does) or "never"."""

    def __init__(
        self, max_offset: int, removing: range, answers: int, then: str, remark: str = "MESSAGE_WAS_REMOVING"
    ) -> None:
        super().__init__(max_offset)
        self.remark = remark
        self.removing = removing
        self.answers = answers
        self.then = then

    def answer(self, offset: int, *rest: Any) -> PullResult:
        if offset in self.removing and (self.answers > 0 or self.then == "never"):
            self.active -= 1
            self.answers -= 1
            result = PullResult(
                PullStatus.RETRY_IMMEDIATELY,
                self.removing.stop,
                self.min_offset,
                self.max_offset,
                b"",
                self.remark,
            )
            if self.answers == 0 and self.then != "served":
                self.min_offset = self.removing.stop  # known from the next answer on
            return result
        if self.then == "expired-retry" and offset < self.min_offset:
            self.active -= 1
            return PullResult(
                PullStatus.RETRY_IMMEDIATELY, self.min_offset, self.min_offset, self.max_offset, b"", "OFFSET_TOO_SMALL"
            )
        return super().answer(offset, *rest)


def test_a_retry_immediately_answer_is_pulled_again_not_skipped(broker: list[FakeQueue]) -> None:
    queue = Removing(100, range(40, 60), answers=2, then="served")
    broker.append(queue)
    assert offsets(broker, partition(0, 100, pull_batch_size=10), PATIENT_WAIT_S) == list(range(100))
    assert queue.pulled_at(40) == 3  # two answers to wait out, then the messages


@pytest.mark.parametrize("then", ["expired", "expired-retry"])
def test_data_a_retry_immediately_answer_stands_for_is_lost_once_the_min_offset_passes_it(
    broker: list[FakeQueue], then: str
) -> None:
    broker.append(Removing(100, range(40, 60), answers=2, then=then))
    with pytest.raises(
        DataLossError,
        match=re.escape("orders/broker-a/2: offsets [40, 60) were deleted or expired (the queue now starts at 60)"),
    ):
        offsets(broker, partition(0, 100, pull_batch_size=10), PATIENT_WAIT_S)


def test_data_a_retry_immediately_answer_stands_for_is_skipped_with_a_warning_when_allowed(
    broker: list[FakeQueue], caplog: pytest.LogCaptureFixture
) -> None:
    broker.append(Removing(100, range(40, 60), answers=2, then="expired"))
    with caplog.at_level(logging.WARNING, logger="rocketmq_spark.source.planning"):
        read = offsets(broker, partition(0, 100, pull_batch_size=10, fail_on_data_loss=False), PATIENT_WAIT_S)
    assert read == list(range(40)) + list(range(60, 100))
    assert [r.getMessage() for r in caplog.records if r.name == "rocketmq_spark.source.planning"] == [
        "skipping data that is gone (failOnDataLoss=false): orders/broker-a/2: offsets [40, 60) were deleted or "
        "expired (the queue now starts at 60)"
    ]


def test_a_retry_immediately_answer_that_never_ends_is_data_loss_up_to_where_the_broker_goes_on(
    broker: list[FakeQueue], caplog: pytest.LogCaptureFixture
) -> None:
    """MESSAGE_WAS_REMOVING past the wait, the min offset unmoved (a 4.9 broker leaves it where it
    was when every message of a queue expired): the commit log is gone, so the offsets up to the
    broker's next begin offset are lost, and failOnDataLoss decides."""
    queue = Removing(100, range(40, 60), answers=0, then="never")
    broker.append(queue)
    said = (
        "orders/broker-a/2: offsets [40, 60) were deleted or expired (their commit log is gone; the broker still "
        "says the queue starts at 0)"
    )
    with pytest.raises(DataLossError, match=re.escape(said)):
        offsets(broker, partition(0, 100, pull_batch_size=10))
    assert 1 < queue.pulled_at(40) < 10  # pulled again a few times, with backoff
    with caplog.at_level(logging.WARNING, logger="rocketmq_spark.source.planning"):
        read = offsets(broker, partition(0, 100, pull_batch_size=10, fail_on_data_loss=False))
    assert read == list(range(40)) + list(range(60, 100))
    assert f"skipping data that is gone (failOnDataLoss=false): {said}" in caplog.messages


def test_another_retry_immediately_answer_that_never_ends_fails_naming_the_offset(broker: list[FakeQueue]) -> None:
    """A retry the broker asks for another reason (a static topic's mapping, a slave), neither
    served nor gone by the queue's bounds: the read fails (failOnDataLoss or not) rather than
    skip, and Spark's retry of the task asks again later."""
    queue = Removing(100, range(40, 60), answers=0, then="never", remark="NOT_MAPPED_HERE")
    broker.append(queue)
    with pytest.raises(
        OffsetNotServedError,
        match=re.escape(
            "orders/broker-a/2: the broker does not serve offset 40 nor says it is gone: it answered "
            "RETRY_IMMEDIATELY (NOT_MAPPED_HERE) with next begin offset 60, the queue holding [0, 100) to it "
            f"for {STALLED_WAIT_S:g} s"
        ),
    ):
        offsets(broker, partition(0, 100, pull_batch_size=10, fail_on_data_loss=False))
    assert 1 < queue.pulled_at(40) < 10


class Trailing(FakeQueue):
    """A queue whose index trails its commit log (after a broker restart): its max offset reaches
    ``caught_up`` after ``answers`` "not found" answers at the old max."""

    def __init__(self, max_offset: int, caught_up: int, answers: int) -> None:
        super().__init__(max_offset)
        self.caught_up = caught_up
        self.answers = answers

    def answer(self, offset: int, *rest: Any) -> PullResult:
        result = super().answer(offset, *rest)
        if result.status is PullStatus.NO_NEW_MSG:
            self.answers -= 1
            if self.answers == 0:
                self.max_offset = self.caught_up
        return result


def test_offsets_the_index_has_not_reached_yet_are_read_once_it_has(broker: list[FakeQueue]) -> None:
    queue = Trailing(150, caught_up=200, answers=2)
    broker.append(queue)
    assert offsets(broker, partition(100, 200), PATIENT_WAIT_S) == list(range(100, 200))
    assert queue.pulled_at(150) == 3


def test_a_hole_in_the_queues_index_is_data_loss_not_an_endless_loop(broker: list[FakeQueue]) -> None:
    queue = FakeQueue(300, hole=range(120, 150))
    broker.append(queue)
    started = time.monotonic()
    with pytest.raises(
        DataLossError,
        match=re.escape(
            "orders/broker-a/2: offsets [120, 150) are missing from the queue's index (a hole below its max 300): "
            "the broker answers that it has no message there"
        ),
    ):
        offsets(broker, partition(100, 200))
    assert time.monotonic() - started < 1 and 1 < queue.pulled_at(120) < 10  # a bounded wait


def test_a_hole_is_skipped_with_a_warning_when_allowed(
    broker: list[FakeQueue], caplog: pytest.LogCaptureFixture
) -> None:
    broker.append(FakeQueue(300, hole=range(120, 150)))
    with caplog.at_level(logging.WARNING, logger="rocketmq_spark.source.planning"):
        read = offsets(broker, partition(100, 200, fail_on_data_loss=False))
    assert read == list(range(100, 120)) + list(range(150, 200))
    assert "offsets [120, 150) are missing from the queue's index" in caplog.text


def test_a_hole_the_broker_does_not_say_the_end_of_fails_the_read(broker: list[FakeQueue]) -> None:
    """A slave without offsetCheckInSlave answers "not found" without correcting the offset."""

    class Uncorrected(FakeQueue):
        def answer(self, offset: int, *rest: Any) -> PullResult:
            result = super().answer(offset, *rest)
            return dataclasses.replace(result, next_begin_offset=offset) if offset == 120 else result

    broker.append(Uncorrected(300, hole=range(120, 150)))
    with pytest.raises(
        OffsetNotServedError,
        match=re.escape(
            "orders/broker-a/2: the broker has no message at offset 120, below its max 300, and does not say where "
            "the queue goes on: it answered NO_NEW_MSG (OFFSET_FOUND_NULL) with next begin offset 120"
        ),
    ):
        offsets(broker, partition(100, 200, fail_on_data_loss=False))


class Stuck(FakeQueue):
    """A broker whose first ``answers`` answers at ``at`` find messages (or none matching) but
    give a next begin offset that does not move past it; ``answers`` < 0: every one."""

    def __init__(self, max_offset: int, at: int, answers: int, **kwargs: Any) -> None:
        super().__init__(max_offset, **kwargs)
        self.at = at
        self.answers = answers

    def answer(self, offset: int, *rest: Any) -> PullResult:
        result = super().answer(offset, *rest)
        if offset == self.at and self.answers != 0:
            self.answers -= 1
            return dataclasses.replace(result, next_begin_offset=offset)
        return result


@pytest.mark.parametrize("expression", [SUBSCRIBE_ALL, "TagA"])
def test_an_answer_that_does_not_move_on_is_pulled_again(broker: list[FakeQueue], expression: str) -> None:
    queue = Stuck(100, at=30, answers=2)
    broker.append(queue)
    assert offsets(broker, partition(0, 100, pull_batch_size=10, expression=expression), PATIENT_WAIT_S) == list(
        range(100)
    )
    assert queue.pulled_at(30) == 3


def test_spans_after_a_stalled_span_keep_their_bounds(broker: list[FakeQueue]) -> None:
    """A stalled span pulled again can come back short: its rest is pulled, and the spans after it
    start where they would have without the stall, so that no two pulls ask for the same offsets."""
    queue = Stuck(100, at=30, answers=1, cap=7)
    broker.append(queue)
    assert offsets(broker, partition(0, 100, pull_batch_size=10), PATIENT_WAIT_S) == list(range(100))
    assert queue.pulled_at(30) == 2 and (37, 3) in queue.pulls
    assert all(offset % 10 == 0 or (offset + count) % 10 == 0 for offset, count in queue.pulls)


@pytest.mark.parametrize(
    ("expression", "status"), [(SUBSCRIBE_ALL, "FOUND (FOUND)"), ("TagB", "NO_MATCHED_MSG (NO_MATCHED_MESSAGE)")]
)
def test_an_answer_that_never_moves_on_fails_the_read_not_skips_an_offset(
    broker: list[FakeQueue], expression: str, status: str
) -> None:
    broker.append(Stuck(100, at=30, answers=-1, tags={o: "TagB" for o in range(0, 30, 3)}, scan_limit=10))
    with pytest.raises(
        OffsetNotServedError,
        match=re.escape(
            f"orders/broker-a/2: the broker does not serve offset 30 nor says it is gone: it answered {status} with "
            "next begin offset 30, the queue holding [0, 100)"
        ),
    ):
        offsets(broker, partition(0, 100, pull_batch_size=10, expression=expression, fail_on_data_loss=False))


def failing_pulls(max_offset: int) -> FakeQueue:
    queue = FakeQueue(max_offset)
    queue.failures = [1, 1, 1]
    return queue


@pytest.mark.parametrize(
    ("make", "pulled_again"),
    [
        (lambda m: FakeQueue(m, cap=7), lambda q: (7, 3) in q.pulls),  # the rest of [0, 10) after 7 messages
        (lambda m: Stuck(m, at=30, answers=2), lambda q: q.pulled_at(30) == 3),  # a stalled span, twice again
        (failing_pulls, lambda q: not q.failures and len(q.pulls) > 10),  # failed pulls, retried
    ],
    ids=["short-answer-rest", "stalled-span", "failed-pull"],
)
def test_pulls_made_after_an_answer_leave_in_a_batched_write(
    broker: list[FakeQueue], make: Callable[[int], FakeQueue], pulled_again: Callable[[FakeQueue], bool]
) -> None:
    """A short answer's rest, a stalled span's pulls again and a failed pull's retry go out inside
    ``pulls_together``, as a round's new spans do: never a write of their own."""
    queue = make(100)
    broker.append(queue)
    client = FakeClient(broker)
    batches = list(
        read_partition(
            partition(0, 100, pull_batch_size=10),
            client,  # type: ignore[arg-type]
            stalled_wait_s=PATIENT_WAIT_S,
        )
    )
    assert [o for b in batches for o in b.column("queueOffset").to_pylist()] == list(range(100))
    assert pulled_again(queue)
    assert client.unbatched == []


def test_a_body_decompressing_past_max_body_bytes_fails_the_read(broker: list[FakeQueue]) -> None:
    """The partition's maxBodyBytes reaches the decoder: a small record that inflates past it fails
    the task naming the message, instead of taking the executor's memory."""
    bound = 1000

    class Bomb(FakeQueue):
        def encode(self, offset: int) -> bytes:
            if offset != 7:
                return super().encode(offset)
            sys_flag = codes.MSG_FLAG_COMPRESSED | codes.COMPRESSION_ZLIB << codes.MSG_COMPRESSION_TYPE_SHIFT
            return record(
                queue_offset=offset,
                queue_id=QUEUE.queue_id,
                topic=QUEUE.topic.encode(),
                body=zlib.compress(bytes(64 * 1024)),
                sys_flag=sys_flag,
            )

    broker.append(Bomb(10))
    assert offsets(broker, partition(0, 7, max_body_bytes=bound)) == list(range(7))
    with pytest.raises(BodyTooLargeError, match="queue offset 7 decompresses to more than 1000 bytes"):
        offsets(broker, partition(0, 10, max_body_bytes=bound))


# ------------------------------------------------------------- several ranges


class QueuesClient(HeldPulls):
    """Answers each pull from the fake queue of the queue it names."""

    def __init__(self, queues: dict[MessageQueue, FakeQueue]) -> None:
        super().__init__()
        self.queues = queues
        self.active = 0
        self.most_active = 0

    def pull_async(self, address: str, spec: PullSpec, offset: int, max_messages: int) -> Any:
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        pending = self.queues[spec.queue].pull_async(address, spec, offset, max_messages)
        client = self

        class Counted:
            def result(self) -> PullResult:
                client.active -= 1
                return pending.result()

        return self.checked(offset, Counted())

    def max_offset(self, address: str, queue: MessageQueue) -> int:
        return self.queues[queue].max_offset


def multi(ranges: list[tuple[MessageQueue, int, int]], **kwargs: Any) -> RocketMQPartition:
    one = partition(0, 1, **kwargs)
    return dataclasses.replace(one, ranges=tuple(ReadRange(q, s, e) for q, s, e in ranges))


def rows_by_queue(batches: list[pa.RecordBatch]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for batch in batches:
        for queue_id, offset in zip(batch.column("queueId").to_pylist(), batch.column("queueOffset").to_pylist()):
            out.setdefault(queue_id, []).append(offset)
    return out


@pytest.mark.parametrize("expression", [SUBSCRIBE_ALL, "TagA"])
def test_a_partition_of_many_ranges_reads_each_once_in_order_with_pulls_across_them(expression: str) -> None:
    queues = {MessageQueue("orders", "broker-a", q): FakeQueue(50, cap=7) for q in range(40)}
    client = QueuesClient(queues)
    part = multi([(q, q.queue_id % 5, 50 - q.queue_id % 3) for q in queues], expression=expression, pull_batch_size=8)
    batches = list(read_partition(part, client, stalled_wait_s=STALLED_WAIT_S))  # type: ignore[arg-type]
    assert rows_by_queue(batches) == {q.queue_id: list(range(q.queue_id % 5, 50 - q.queue_id % 3)) for q in queues}
    assert client.most_active == reader.TASK_PULLS_IN_FLIGHT  # several ranges on the wire, never more
    assert client.unbatched == []  # short answers' rests included
    assert len(batches) == 1  # the rows of all the ranges go out together


def test_memory_stays_bounded_however_many_ranges_a_task_reads() -> None:
    queues = {MessageQueue("orders", "broker-a", q): FakeQueue(2000, scan_limit=2000) for q in range(64)}
    part = multi([(q, 0, 2000) for q in queues], pull_batch_size=32)
    handed_out = 0
    most_held = 0
    for batch in read_partition(part, QueuesClient(queues), stalled_wait_s=STALLED_WAIT_S):  # type: ignore[arg-type]
        most_held = max(most_held, sum(q.served for q in queues.values()) - handed_out)
        handed_out += batch.num_rows
    assert handed_out == 64 * 2000
    # Rows are handed out once the ranges being read hold a batch's worth, not when the task ends.
    assert most_held <= reader.ARROW_BATCH_ROWS + reader.TASK_PULLS_IN_FLIGHT * 32


def test_data_loss_in_one_range_leaves_the_others_whole() -> None:
    queues = {
        MessageQueue("orders", "broker-a", 0): FakeQueue(100, min_offset=60),
        MessageQueue("orders", "broker-a", 1): FakeQueue(100),
    }
    part = multi([(q, 0, 100) for q in queues], fail_on_data_loss=False)
    batches = list(read_partition(part, QueuesClient(queues), stalled_wait_s=STALLED_WAIT_S))  # type: ignore[arg-type]
    assert rows_by_queue(batches) == {0: list(range(60, 100)), 1: list(range(100))}
