"""A restarted driver, which saw no master change, given a checkpoint whose queues changed since.

Every batch's end carries, per broker name, the store time of the newest message the driver had
seen when it planned the batch (``@stamps``). broker-a's old master stored offset o at OLD_MS + o;
a new master that lacks the last messages stores new ones at their offsets from NEW_MS on. The
restarted driver compares once, for the first batch end Spark gives it: a batch run again (a task
had stopped the query) or the last committed one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.errors import DataLossError, IndexMismatchError
from rocketmq_spark.source.batch_reader import RocketMQBatchReader
from rocketmq_spark.source.failovers import rerun_ends
from rocketmq_spark.source.offsets import STAMPS_KEY, OffsetMap, to_spark
from rocketmq_spark.source.spark_api import ReadAllAvailable
from rocketmq_spark.source.stream_reader import RocketMQStreamReader
from tests.fakes import FakeOffsets
from tests.support import A0, A1, B0, options, ranges, stream

OLD_MS = 1_000  # the old master's message at offset o was stored at OLD_MS + o
NEW_MS = 50_000  # a new master's own messages: stored after any old one
SEEN = 100  # broker-a's queues held 100 messages when the checkpoint's last batch was planned
STAMPS = {"broker-a": OLD_MS + SEEN - 1, "broker-b": OLD_MS + 49}
BUDGET = {"retryBudgetMs": "1000"}  # a short queue is asked again briefly


def stores(kept: int, new: int) -> list[int]:
    """Store times of a queue whose master kept the old messages below ``kept`` and stored ``new``
    messages of its own after them."""
    return [OLD_MS + o for o in range(kept)] + [NEW_MS + o for o in range(new)]


def checkpoint(ends: OffsetMap) -> dict[str, Any]:
    """A batch end as the driver before the restart wrote it to the offset log."""
    return to_spark(ends, stamps=STAMPS)


def restarted(a0: tuple[int, int], **extra: str) -> tuple[FakeOffsets, RocketMQStreamReader, list[int]]:
    """A fresh driver; broker-a/0's master kept ``a0[0]`` old messages and stored ``a0[1]`` new ones,
    broker-a/1 and broker-b/0 are as they were. Returns the fake, the reader and a counter of
    searches by time."""
    fake = FakeOffsets(
        {A0: (0, sum(a0)), A1: (0, SEEN), B0: (0, 50)},
        times={A0: stores(*a0), A1: stores(SEEN, 0), B0: stores(50, 0)},
    )
    searches = [0]
    search: Callable[..., OffsetMap] = fake.offsets_for_time

    def counted(queues: Any, timestamp_ms: int) -> OffsetMap:
        asked = list(queues)
        searches[0] += len(asked)
        return search(asked, timestamp_ms)

    fake.offsets_for_time = counted  # type: ignore[method-assign]
    return fake, stream(fake, **{**BUDGET, **extra}), searches


def test_every_batch_end_carries_its_brokers_newest_store_time() -> None:
    fake, reader, _ = restarted((SEEN, 0))
    end = reader.latestOffset(to_spark({A0: 90, A1: 95, B0: 40}), ReadAllAvailable())
    assert end[STAMPS_KEY] == STAMPS
    # A trigger with nothing new returns its start: no empty batch for newer store times.
    assert reader.latestOffset(end, ReadAllAvailable()) is end


def test_a_batch_run_again_after_a_task_stopped_the_query_reads_the_new_messages_once() -> None:
    """The batch [95, 100) of broker-a/0 was planned on the old master; the new master kept 92 old
    messages and stored 18 of its own at 92 to 110. Run again with failOnDataLoss=false, it reads
    nothing of that queue, and the next batch reads all 18 from 92."""
    _, reader, _ = restarted((92, 18), failOnDataLoss="false")
    start, end = to_spark({A0: 95, A1: 95, B0: 45}), checkpoint({A0: SEEN, A1: SEEN, B0: 50})
    assert ranges(reader.partitions(start, end)) == [(A1, 95, 100), (B0, 45, 50)]
    after = reader.latestOffset(end, ReadAllAvailable())
    assert ranges(reader.partitions(end, after)) == [(A0, 92, 110)]
    assert reader.latestOffset(after, ReadAllAvailable()) is after  # nothing more, no batch


def test_a_batch_run_again_stops_naming_what_changed_when_loss_is_not_allowed() -> None:
    _, reader, _ = restarted((92, 18))
    start, end = to_spark({A0: 95, A1: 95, B0: 45}), checkpoint({A0: SEEN, A1: SEEN, B0: 50})
    with pytest.raises(DataLossError) as raised:
        reader.partitions(start, end)
    said = str(raised.value)
    assert "since this query's checkpoint was written, broker-a came to hold other messages" in said
    assert "orders/broker-a/0: offsets [92, 100) (8: 3 read, 5 not)" in said
    assert "In all 8 messages" in said and "or the topic was recreated" in said
    assert "broker-b" not in said and "broker-a/1" not in said


def test_a_batch_run_again_on_a_queue_short_for_good_reads_what_is_there(caplog: pytest.LogCaptureFixture) -> None:
    _, reader, _ = restarted((97, 0), failOnDataLoss="false")
    start, end = to_spark({A0: 95, A1: 95, B0: 45}), checkpoint({A0: SEEN, A1: SEEN, B0: 50})
    with caplog.at_level(logging.WARNING):
        assert ranges(reader.partitions(start, end)) == [(A0, 95, 97), (A1, 95, 100), (B0, 45, 50)]
    assert "orders/broker-a/0: offsets [97, 100) (3: 0 read, 3 not)" in caplog.text
    after = reader.latestOffset(end, ReadAllAvailable())
    assert ranges(reader.partitions(end, after)) == []
    assert caplog.text.count("skipping data that is gone") == 1  # said once, not again at the next trigger


def test_a_restart_on_a_committed_batch_reads_new_messages_below_its_end() -> None:
    """The last batch committed; the new master stored new messages from 92 on, so offsets the query
    read from the old master now hold others: they are read."""
    _, reader, _ = restarted((92, 18), failOnDataLoss="false")
    end = checkpoint({A0: SEEN, A1: SEEN, B0: 50})
    assert ranges(reader.partitions(end, end)) == []  # Spark saying where the query stands
    after = reader.latestOffset(end, ReadAllAvailable())
    assert ranges(reader.partitions(end, after)) == [(A0, 92, 110)]
    with pytest.raises(DataLossError, match=r"broker-a/0: offsets \[92, 100\) \(8: 8 read, 0 not\)"):
        restarted((92, 18))[1].latestOffset(end, ReadAllAvailable())


def test_a_healthy_restart_searches_once_per_queue_and_plans_as_logged() -> None:
    fake, reader, searches = restarted((SEEN, 10))  # new messages past the end: nothing changed
    start, end = to_spark({A0: 95, A1: 95, B0: 45}), checkpoint({A0: SEEN, A1: SEEN, B0: 50})
    assert ranges(reader.partitions(end, end)) == []
    assert ranges(reader.partitions(start, end)) == [(A0, 95, 100), (A1, 95, 100), (B0, 45, 50)]
    after = reader.latestOffset(end, ReadAllAvailable())
    assert ranges(reader.partitions(end, after)) == [(A0, 100, 110)]
    reader.latestOffset(after, ReadAllAvailable())
    assert searches[0] == 3  # one per queue, once; later triggers search nothing


def test_an_offset_log_without_store_times_is_planned_as_logged() -> None:
    _, reader, searches = restarted((92, 18), failOnDataLoss="false")
    start, end = to_spark({A0: 95, A1: 95, B0: 45}), to_spark({A0: SEEN, A1: SEEN, B0: 50})
    assert ranges(reader.partitions(start, end)) == [(A0, 95, 100), (A1, 95, 100), (B0, 45, 50)]
    assert searches[0] == 0


def test_rerun_ends_cut_only_the_queues_that_changed() -> None:
    c0 = MessageQueue("orders", "broker-c", 0)
    starts, ends = {A0: 95, A1: 95, c0: 10}, {A0: 100, A1: 100, c0: 20}
    assert rerun_ends(starts, ends, {A0: 92, c0: 15}, fail_on_data_loss=False) == {A0: 95, A1: 100, c0: 15}


def test_a_restart_while_a_broker_is_away_checks_the_others_and_holds_its_queues() -> None:
    fake, reader, searches = restarted((92, 18), failOnDataLoss="false")
    fake.away.add("broker-b")
    start, end = to_spark({A0: 95, A1: 95, B0: 45}), checkpoint({A0: SEEN, A1: SEEN, B0: 50})
    # broker-b's range stays as planned: its task waits for the broker, as any batch run again does.
    assert ranges(reader.partitions(start, end)) == [(A1, 95, 100), (B0, 45, 50)]
    assert searches[0] == 2  # broker-a's queues only
    fake.away.clear()
    after = reader.latestOffset(end, ReadAllAvailable())
    assert ranges(reader.partitions(end, after)) == [(A0, 92, 110)]


def test_a_broker_without_store_times_up_to_a_queues_end_gets_none() -> None:
    """Only a stamp every planned message of its broker name was stored by is kept: one queue whose
    last store time is not known up to its end (a broker without topic stats) leaves it out."""
    fake = FakeOffsets({A0: (0, SEEN), A1: (0, SEEN), B0: (0, 50)}, times={A0: stores(SEEN, 0), B0: stores(50, 0)})
    end = stream(fake).latestOffset(to_spark({A0: 90, A1: 95, B0: 0}), ReadAllAvailable())
    assert end[STAMPS_KEY] == {"broker-b": STAMPS["broker-b"]}


def test_each_range_of_a_batch_carries_its_brokers_store_time() -> None:
    """Tasks check what they read against it (tests/unit/test_new_master_reads.py)."""
    _, reader, _ = restarted((SEEN, 0))
    start = to_spark({A0: 90, A1: 95, B0: 40})
    end = reader.latestOffset(start, ReadAllAvailable())
    parts = reader.partitions(start, end)
    stamped = {r.queue: r.stored_by_ms for p in parts for r in p.ranges}  # type: ignore[attr-defined]
    assert stamped == {A0: STAMPS["broker-a"], A1: STAMPS["broker-a"], B0: STAMPS["broker-b"]}


def test_a_restart_on_a_master_whose_index_disagrees_with_its_messages_stops_naming_it() -> None:
    """A replica restarted and elected while the query was stopped may serve a shifted index."""
    fake, reader, _ = restarted((SEEN, 0), failOnDataLoss="false")
    fake.shifted[A0] = 68
    with pytest.raises(
        IndexMismatchError, match=r"orders/broker-a/0: .* offset 99 holds the message stored as offset 167"
    ):
        reader.latestOffset(checkpoint({A0: SEEN, A1: SEEN, B0: 50}), ReadAllAvailable())


def test_each_range_of_a_batch_read_carries_its_brokers_store_time() -> None:
    """A ``spark.read`` planned before a failover and read after it is checked as a stream's
    batch is: its ranges carry the store times topic stats gave when it was planned."""
    fake, _, _ = restarted((SEEN, 0))
    parts = RocketMQBatchReader(options(streaming=False), open_offsets=lambda _: fake).partitions()  # type: ignore[arg-type,return-value]
    stamped = {r.queue: r.stored_by_ms for p in parts for r in p.ranges}  # type: ignore[attr-defined]
    assert stamped == {A0: STAMPS["broker-a"], A1: STAMPS["broker-a"], B0: STAMPS["broker-b"]}
