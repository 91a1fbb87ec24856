"""Brokers that come and go and queues that leave the routes, as the stream reader plans them:
against the fake offset reader of tests/fakes.py (no broker, no Spark job)."""

from __future__ import annotations

import pytest

from rocketmq_spark.remoting.errors import DataLossError
from rocketmq_spark.source.offsets import from_spark, starts_from_spark, to_spark
from rocketmq_spark.source.spark_api import ReadAllAvailable, ReadMaxRows
from tests.fakes import FakeOffsets
from tests.support import A0, A1, B0, ranges, spark, stream

ALL = ReadAllAvailable()


def test_a_broker_away_when_the_query_started_resumes_at_the_groups_stored_offset() -> None:
    fake = FakeOffsets({A0: (0, 10), B0: (0, 200)}, stored={A0: 10, B0: 200})
    fake.away.add("broker-b")
    reader = stream(fake)
    start = reader.initialOffset()
    assert from_spark(start) == {A0: 10}
    fake.away.clear()
    fake.ranges[B0] = (0, 280)  # 80 new messages while it was away from the query
    end = reader.latestOffset(start, ALL)
    assert starts_from_spark(end) == {B0: 200}
    fake.stored[B0] = 250  # what the broker says later does not change the logged batch
    assert ranges(reader.partitions(start, end)) == [(B0, 200, 280)]


def test_a_queue_first_seen_without_a_stored_offset_starts_at_the_first_message_since_the_query_started() -> None:
    fake = FakeOffsets({A0: (0, 4)})
    reader = stream(fake)  # consumeFromWhere LAST: a new group starts at the max offsets
    start = reader.initialOffset()
    since = reader._since_ms
    assert since is not None and from_spark(start) == {A0: 4}
    fake.ranges[A1] = (0, 6)  # a queue that was not routed at the start, with three messages from before it
    fake.times[A1] = [since - 3, since - 2, since - 1, since, since + 1, since + 2]
    end = reader.latestOffset(start, ALL)
    assert starts_from_spark(end) == {A1: 3}
    assert ranges(reader.partitions(start, end)) == [(A1, 3, 6)]


def test_a_query_restarted_on_its_checkpoint_reads_a_new_queue_without_a_stored_offset_from_its_min() -> None:
    fake = FakeOffsets({A0: (0, 10), A1: (2, 9)})
    end = stream(fake).latestOffset(spark({A0: 10}), ALL)
    assert starts_from_spark(end) == {A1: 2}


def test_a_frozen_broker_is_held_while_the_other_is_read_and_resumes_where_it_was() -> None:
    fake = FakeOffsets({A0: (0, 10), B0: (0, 8)})
    reader = stream(fake)
    fake.frozen.add("broker-b")
    fake.ranges[A0] = (0, 15)
    end = reader.latestOffset(spark({A0: 10, B0: 8}), ALL)
    assert from_spark(end) == {A0: 15, B0: 8}
    assert ranges(reader.partitions(spark({A0: 10, B0: 8}), end)) == [(A0, 10, 15)]
    fake.frozen.clear()
    fake.ranges[B0] = (0, 12)
    later = reader.latestOffset(end, ALL)
    assert from_spark(later) == {A0: 15, B0: 12} and starts_from_spark(later) == {}


def test_a_drained_queue_that_leaves_the_routes_is_held_not_lost_and_resumes_where_it_was(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeOffsets({A0: (0, 10), A1: (0, 6)})
    reader = stream(fake)
    end = reader.latestOffset(spark({A0: 10, A1: 6}), ALL)
    hidden = fake.ranges.pop(A1)  # readQueueNums lowered: the broker is live but no longer routes it
    end = reader.latestOffset(end, ALL)
    assert from_spark(end) == {A0: 10, A1: 6}
    fake.ranges[A1] = (hidden[0], 9)  # raised again, with 3 messages written meanwhile
    later = reader.latestOffset(end, ALL)
    assert ranges(reader.partitions(end, later)) == [(A1, 6, 9)]
    assert not [r for r in caplog.records if "not registered" in r.getMessage()], "its broker never left"


def test_a_queue_that_leaves_the_routes_with_unread_messages_is_data_loss() -> None:
    fake = FakeOffsets({A0: (0, 10), A1: (0, 6)})
    reader = stream(fake, maxMessagesPerTrigger="2")
    end = reader.latestOffset(spark({A0: 10, A1: 0}), ReadMaxRows(2))
    fake.ranges.pop(A1)
    with pytest.raises(DataLossError, match="orders/broker-a/1: offsets from 2 on cannot be read"):
        reader.latestOffset(end, ReadMaxRows(2))


def test_no_empty_batch_follows_one_that_started_a_new_queue() -> None:
    fake = FakeOffsets({A0: (0, 10), A1: (0, 6)})
    reader = stream(fake)
    end = reader.latestOffset(spark({A0: 10}), ALL)
    assert reader.latestOffset(end, ALL) == end
    assert to_spark({A0: 10, A1: 6}, starts={A1: 0}) == end


def test_a_queue_routed_again_between_two_looks_is_no_broker_leaving(caplog: pytest.LogCaptureFixture) -> None:
    """The routes of a trigger can lack a queue that fresher routes list again (readQueueNums
    raised in between): it waits one trigger more, and its broker, serving others, is not away."""
    fake = FakeOffsets({A0: (0, 10), A1: (0, 6)})
    reader = stream(fake)
    end = reader.latestOffset(spark({A0: 10, A1: 6}), ALL)
    routes = fake.queues
    fake.queues = lambda missing_ok=False: {q: a for q, a in routes().items() if q != A1}  # type: ignore[method-assign]
    fake.unavailable = lambda absent: set(absent)  # type: ignore[method-assign]
    assert from_spark(reader.latestOffset(end, ALL)) == {A0: 10, A1: 6}
    assert not [r for r in caplog.records if "not registered" in r.getMessage()]
