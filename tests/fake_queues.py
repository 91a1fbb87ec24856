"""A queue as a broker serves it, in memory, and clients that pull from it: the fakes the range
reader's unit tests run against, checked so that every pull leaves in a batched write."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from rocketmq_spark.model import EXPRESSION_TAG, SUBSCRIBE_ALL, ClientConfig, MessageQueue, parse_tag_expression
from rocketmq_spark.records.compression import DEFAULT_MAX_BODY_BYTES
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.client import PullResult, PullSpec, PullStatus
from rocketmq_spark.remoting.errors import RequestTimeoutError
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.remoting.route import MASTER_BROKER_ID, BrokerData, TopicRoute
from rocketmq_spark.source.partition import ReadRange, RocketMQPartition, TaskOptions
from rocketmq_spark.source.partition_reader import read_partition
from tests.records import inner_message, properties_block, record

QUEUE = MessageQueue("orders", "broker-a", 2)
BROKER_ADDRESS = "127.0.0.1:1"
# Short waits, so that retries and the wait for offsets the broker does not serve do not slow the tests.
FAST_RETRY = Retry(first_backoff_s=0.01)
STALLED_WAIT_S = 0.05
# The wait of tests where the broker comes round: long, so that a slow machine does not end it first.
PATIENT_WAIT_S = 10.0
# The store time of every fake message but those a test sets (the records' default).
STORED_MS = 1_700_000_000_123


class FakeQueue:
    """One queue as a broker serves it: offsets [min_offset, max_offset), a tag per offset, at
    most ``cap`` messages an answer (the broker's byte and count limits), and optionally one
    inner-batch record covering ``batch`` returned whole."""

    def __init__(
        self,
        max_offset: int,
        *,
        min_offset: int = 0,
        cap: int = 1000,
        tags: dict[int, str] | None = None,
        batch: range | None = None,
        scan_limit: int = 20,
        hole: range | None = None,
        store_times: dict[int, int] | None = None,
        stored_as: dict[int, int] | None = None,
    ) -> None:
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.cap = cap
        self.tags = tags or {}
        self.batch = batch
        self.scan_limit = scan_limit
        self.pulls: list[tuple[int, int]] = []
        self.active = 0  # pulls sent and not yet answered
        self.failures: list[int] = []  # one entry per answer still to fail with ``failure``
        self.failure: Exception = RequestTimeoutError("no answer in time")
        self.most_active = 0
        self.served = 0  # messages answered so far
        self.reset_to: int | None = None  # an operator's reset the next pull is told of (5.x), once
        self.hole = hole  # offsets missing from the index: a pull there is "not found", going on after it
        self.store_times = store_times or {}  # the store time of these offsets' messages (else the default)
        self.stored_as = stored_as or {}  # index entries whose message was stored as another offset

    def tag(self, offset: int) -> str:
        return self.tags.get(offset, "TagA")

    def encode(self, offset: int) -> bytes:
        if self.batch is not None and offset == self.batch.start:
            inner = b"".join(
                inner_message(0, f"m{o}".encode(), properties_block({"TAGS": self.tag(o)})) for o in self.batch
            )
            return record(
                queue_offset=offset, body=inner, sys_flag=codes.MSG_FLAG_INNER_BATCH | codes.MSG_FLAG_NEED_UNWRAP
            )
        return record(
            queue_offset=self.stored_as.get(offset, offset),
            body=f"m{offset}".encode(),
            properties=properties_block({"TAGS": self.tag(offset)}),
            store_timestamp=self.store_times.get(offset, STORED_MS),
        )

    def pull_async(self, address: str, spec: PullSpec, offset: int, max_messages: int) -> FakePending:
        """Sent now, answered when the reader asks for the result."""
        self.pulls.append((offset, max_messages))
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        return FakePending(self, offset, max_messages, spec.subscription, spec.expression_type)

    def answer(self, offset: int, max_messages: int, subscription: str, expression_type: str) -> PullResult:
        self.active -= 1
        if self.failures:
            self.failures.pop(0)  # the first pending failure hits this answer
            raise self.failure
        if self.reset_to is not None:
            reset_to, self.reset_to = self.reset_to, None
            return PullResult(PullStatus.OFFSET_ILLEGAL, reset_to, self.min_offset, self.max_offset, b"")
        if offset < self.min_offset or offset > self.max_offset:
            corrected = self.min_offset if offset < self.min_offset else self.max_offset
            return PullResult(PullStatus.OFFSET_ILLEGAL, corrected, self.min_offset, self.max_offset, b"")
        if offset == self.max_offset:
            return PullResult(PullStatus.NO_NEW_MSG, offset, self.min_offset, self.max_offset, b"")
        if self.hole is not None and offset in self.hole:  # OFFSET_FOUND_NULL: the next index file's start
            return PullResult(
                PullStatus.NO_NEW_MSG, self.hole.stop, self.min_offset, self.max_offset, b"", "OFFSET_FOUND_NULL"
            )
        end = self.hole.start if self.hole is not None and offset < self.hole.start else self.max_offset
        wanted = parse_tag_expression(subscription) if expression_type == EXPRESSION_TAG else None
        records: list[bytes] = []
        found = 0
        at = offset
        if self.batch is not None and self.batch.start < offset < self.batch.stop:
            at = self.batch.start  # a batch record is only served whole
        scanned = 0
        while at < end and found < min(max_messages, self.cap) and scanned < self.scan_limit:
            span = self.batch if self.batch is not None and at == self.batch.start else range(at, at + 1)
            if wanted is None or any(self.tag(o) in wanted for o in span):
                records.append(self.encode(at))
                found += len(span)
            scanned += len(span)
            at = span.stop
        status = PullStatus.FOUND if records else PullStatus.NO_MATCHED_MSG
        self.served += found
        return PullResult(
            status,
            at,
            self.min_offset,
            self.max_offset,
            b"".join(records),
            "FOUND" if records else "NO_MATCHED_MESSAGE",
        )

    def pulled_at(self, offset: int) -> int:
        """How many pulls started at ``offset``."""
        return sum(1 for at, _ in self.pulls if at == offset)


class FakePending:
    def __init__(self, queue: FakeQueue, *request: Any) -> None:
        self.queue = queue
        self.request = request

    def result(self) -> PullResult:
        return self.queue.answer(*self.request)


class HeldPulls:
    """``pulls_together`` as the real client has it, checked: pulls sent inside go out only at its
    end, so waiting for one inside would wait for ever. Pulls sent outside one (each its own
    write) are noted in ``unbatched`` by their offset."""

    def __init__(self) -> None:
        self.holding = False
        self.unbatched: list[int] = []

    def topic_route(self, topic: str) -> TopicRoute:
        """One master per broker name the tests read."""
        return TopicRoute(
            topic, (), {name: BrokerData(name, {MASTER_BROKER_ID: BROKER_ADDRESS}) for name in ("broker-a", "broker-b")}
        )

    @contextmanager
    def pulls_together(self) -> Iterator[None]:
        self.holding = True
        try:
            yield
        finally:
            self.holding = False

    def checked(self, offset: int, pending: Any) -> Any:
        if not self.holding:
            self.unbatched.append(offset)
        held = self

        class Checked:
            def result(self) -> PullResult:
                assert not held.holding, "a pull was waited for before the pulls held with it were sent"
                return pending.result()

        return Checked()


class FakeClient(HeldPulls):
    """The client calls the reader makes, answered by the test's fake queue."""

    def __init__(self, holder: list[FakeQueue]) -> None:
        super().__init__()
        self.holder = holder

    def pull_async(self, address: str, spec: PullSpec, offset: int, max_messages: int) -> FakePending:
        return self.checked(offset, self.holder[0].pull_async(address, spec, offset, max_messages))


def partition(
    start: int,
    end: int,
    *,
    expression: str = SUBSCRIBE_ALL,
    expression_type: str = EXPRESSION_TAG,
    pull_batch_size: int = 32,
    fail_on_data_loss: bool = True,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    retry: Retry = FAST_RETRY,
    stored_by_ms: int | None = None,
) -> RocketMQPartition:
    task = TaskOptions(
        client=ClientConfig(("127.0.0.1:1",)),
        group="g",
        sub_expression=expression,
        expression_type=expression_type,
        tag_filter=parse_tag_expression(expression) if expression_type == EXPRESSION_TAG else None,
        pull_batch_size=pull_batch_size,
        fail_on_data_loss=fail_on_data_loss,
        retry=retry,
        max_body_bytes=max_body_bytes,
    )
    return RocketMQPartition(ranges=(ReadRange(QUEUE, start, end, stored_by_ms),), task=task)


def offsets(broker: list[FakeQueue], part: RocketMQPartition, wait_s: float = STALLED_WAIT_S) -> list[int]:
    client = FakeClient(broker)
    batches = list(read_partition(part, client, stalled_wait_s=wait_s))  # type: ignore[arg-type]
    assert all(isinstance(b, pa.RecordBatch) for b in batches)
    assert client.unbatched == []  # every pull left in a batched write
    return [o for b in batches for o in b.column("queueOffset").to_pylist()]
