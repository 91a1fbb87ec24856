"""A new master that holds fewer messages than the one before it showed: the driver's decision.

broker-a's master changes between two triggers (``FakeOffsets.elections``). Its new master may
trail for a moment (asked again, no loss), hold fewer messages for good (a failover's loss,
named per queue with counts), or hold new messages already at offsets the query read (told by
the store times topic stats gave before the failover). A topic recreated with no master change
keeps its own wording (tests/unit/test_readers.py).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from rocketmq_spark.remoting.errors import DataLossError, IndexMismatchError
from rocketmq_spark.source.offsets import STAMPS_KEY, to_spark
from rocketmq_spark.source.planning import Failover, reconcile
from rocketmq_spark.source.spark_api import ReadAllAvailable, ReadMaxRows
from rocketmq_spark.source.stream_reader import RocketMQStreamReader
from tests.fakes import FakeOffsets
from tests.support import A0, A1, B0, ranges, spark, stream

# Store times of the old masters' messages: offset o at OLD_MS + o (epoch ms, the broker's clock).
OLD_MS = 1_000
# Store times of what a new master stores after its election: later than any old message.
NEW_MS = 50_000
HELD = 200  # offsets with a store time in the fake
# A budget that lets a short queue be asked again a few times (backoff 0.2 s, then 0.4 s).
BUDGET = {"retryBudgetMs": "1000"}


def without_stamps(end: dict[str, Any]) -> dict[str, Any]:
    """A batch's end without its brokers' store times (``test_restarts.py`` checks those)."""
    return {key: value for key, value in end.items() if key != STAMPS_KEY}


def old_times() -> list[int]:
    return [OLD_MS + o for o in range(HELD)]


def running(**extra: str) -> tuple[FakeOffsets, RocketMQStreamReader, dict[str, Any]]:
    """A stream that read broker-a's queues to 100 and broker-b's to 50 from the old masters."""
    fake = FakeOffsets(
        {A0: (0, 100), A1: (0, 100), B0: (0, 50)}, times={A0: old_times(), A1: old_times(), B0: old_times()}
    )
    reader = stream(fake, **{**BUDGET, **extra})
    end = reader.latestOffset(spark({A0: 90, A1: 95, B0: 40}), ReadAllAvailable())
    assert without_stamps(end) == to_spark({A0: 100, A1: 100, B0: 50})
    reader.commit(end)
    return fake, reader, end


def test_a_new_master_that_trails_for_a_moment_is_asked_again_and_nothing_is_lost() -> None:
    fake, reader, end = running()
    fake.elections.add("broker-a")
    fake.answers = [{A0: (0, 95), A1: (0, 97)}, {A0: (0, 104), A1: (0, 103)}]  # caught up at the second ask
    after = reader.latestOffset(end, ReadAllAvailable())
    assert without_stamps(after) == to_spark({A0: 104, A1: 103, B0: 50})
    assert not fake.answers
    assert ranges(reader.partitions(end, after)) == [(A0, 100, 104), (A1, 100, 103)]


def test_a_new_master_short_for_good_fails_naming_the_broker_queues_offsets_and_count() -> None:
    fake, reader, end = running()
    fake.elections.add("broker-a")
    fake.ranges.update({A0: (0, 90), A1: (0, 95)})
    with pytest.raises(DataLossError) as raised:
        reader.latestOffset(end, ReadAllAvailable())
    said = str(raised.value)
    assert "a new master of broker-a (elected, or restarted) holds fewer messages than the one before it" in said
    assert "orders/broker-a/0: offsets [90, 100) (10: 10 read, 0 not)" in said
    assert "orders/broker-a/1: offsets [95, 100) (5: 5 read, 0 not)" in said
    assert "In all 15 messages" in said and "15 of them this query had read" in said
    assert "went backwards" not in said and "broker-b" not in said
    assert "failOnDataLoss=false" in said


def test_offsets_seen_but_not_read_yet_count_as_lost_and_unread() -> None:
    fake, reader, end = running(maxMessagesPerTrigger="10")
    fake.ranges[A0] = (0, 120)
    planned = reader.latestOffset(end, ReadMaxRows(10))  # A0 read to 110 of the 120 it saw
    assert without_stamps(planned) == to_spark({A0: 110, A1: 100, B0: 50})
    fake.elections.add("broker-a")
    fake.ranges[A0] = (0, 105)
    with pytest.raises(DataLossError, match=r"orders/broker-a/0: offsets \[105, 120\) \(15: 5 read, 10 not\)"):
        reader.latestOffset(planned, ReadMaxRows(10))


def test_with_fail_on_data_loss_false_the_stream_goes_on_from_the_new_end_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake, reader, end = running(failOnDataLoss="false")
    fake.elections.add("broker-a")
    fake.ranges.update({A0: (0, 90), A1: (0, 95)})
    with caplog.at_level(logging.WARNING, logger="rocketmq_spark.source.planning"):
        after = reader.latestOffset(end, ReadAllAvailable())
        # The new ends travel in the offset log: a rerun of the batch starts there too.
        assert without_stamps(after) == to_spark({A0: 90, A1: 95, B0: 50}, starts={A0: 90, A1: 95})
        assert ranges(reader.partitions(end, after)) == []
        fake.ranges.update({A0: (0, 130), A1: (0, 99)})  # the new master stores new messages there
        later = reader.latestOffset(after, ReadAllAvailable())
    assert without_stamps(later) == to_spark({A0: 130, A1: 99, B0: 50})
    assert ranges(reader.partitions(after, later)) == [(A0, 90, 130), (A1, 95, 99)]  # read, not skipped
    warnings = [r.getMessage() for r in caplog.records if r.name == "rocketmq_spark.source.planning"]
    assert len(warnings) == 1
    assert "In all 15 messages" in warnings[0] and "the query goes on from each queue's new end" in warnings[0]


def new_master_refilled(fake: FakeOffsets, queue: Any, kept: int, end: int) -> None:
    """broker-a's new master kept ``queue``'s messages below ``kept`` and stored its own from there."""
    fake.ranges[queue] = (0, end)
    fake.times[queue] = old_times()[:kept] + [NEW_MS + o for o in range(kept, HELD)]


def test_new_messages_already_at_offsets_the_query_read_are_told_by_their_store_times() -> None:
    fake, reader, end = running()
    fake.elections.add("broker-a")
    new_master_refilled(fake, A0, 92, 130)  # past the old end before the driver looked
    new_master_refilled(fake, A1, 100, 104)  # nothing lost there: new messages after the old end
    with pytest.raises(DataLossError) as raised:
        reader.latestOffset(end, ReadAllAvailable())
    said = str(raised.value)
    assert "orders/broker-a/0: offsets [92, 100) (8: 8 read, 0 not)" in said and "In all 8 messages" in said
    assert "broker-a/1" not in said


def test_new_messages_at_offsets_read_are_read_when_loss_is_allowed() -> None:
    fake, reader, end = running(failOnDataLoss="false")
    fake.elections.add("broker-a")
    new_master_refilled(fake, A0, 92, 130)
    after = reader.latestOffset(end, ReadAllAvailable())
    assert without_stamps(after) == to_spark({A0: 130, A1: 100, B0: 50}, starts={A0: 92})
    assert ranges(reader.partitions(end, after)) == [(A0, 92, 130)]


def test_a_healthy_trigger_asks_no_store_times_and_a_master_change_asks_once(monkeypatch: pytest.MonkeyPatch) -> None:
    fake, reader, end = running()
    searched: list[list[Any]] = []
    search = fake.offsets_for_time
    monkeypatch.setattr(fake, "offsets_for_time", lambda qs, ts: searched.append(sorted(qs)) or search(qs, ts))
    fake.ranges[A0] = (0, 110)
    end = reader.latestOffset(end, ReadAllAvailable())
    assert searched == []
    fake.elections.add("broker-a")
    fake.ranges[A0] = (0, 115)
    end = reader.latestOffset(end, ReadAllAvailable())
    assert without_stamps(end) == to_spark({A0: 115, A1: 100, B0: 50})
    assert searched == [[A0, A1]]  # broker-a's queues, once
    fake.ranges[A0] = (0, 120)
    reader.latestOffset(end, ReadAllAvailable())
    assert searched == [[A0, A1]]


def test_a_new_masters_index_is_checked_once_where_the_query_stands_and_at_its_end() -> None:
    fake, reader, end = running()
    fake.ranges[A0] = (0, 110)
    end = reader.latestOffset(end, ReadAllAvailable())
    assert fake.index_checks == []  # a healthy trigger pulls nothing
    fake.elections.add("broker-a")
    fake.ranges[A0] = (0, 120)
    end = reader.latestOffset(end, ReadAllAvailable())
    assert fake.index_checks == [{A0: 119, A1: 99}, {A0: 109}]  # A1's stand is its end, checked already
    reader.latestOffset(end, ReadAllAvailable())
    assert len(fake.index_checks) == 2


def test_a_new_master_whose_index_disagrees_with_its_messages_stops_the_query_naming_it() -> None:
    """Its max offsets would look like lost messages: they are there, indexed at other offsets."""
    fake, reader, end = running(failOnDataLoss="false")
    fake.elections.add("broker-a")
    fake.ranges.update({A0: (0, 32), A1: (0, 32)})  # the index is 68 short of the messages
    fake.shifted.update({A0: 68, A1: 68})
    with pytest.raises(IndexMismatchError) as stopped:
        reader.latestOffset(end, ReadAllAvailable())
    said = str(stopped.value)
    assert "orders/broker-a/0: the broker's consume queue and its messages disagree" in said
    assert "offset 31 holds the message stored as offset 99 (+68)" in said
    assert "fewer messages" not in said


def test_reconcile_tells_a_failover_from_a_recreated_topic() -> None:
    start, earliest, latest = {A0: 100, A1: 100}, {A0: 0, A1: 0}, {A0: 90, A1: 90}
    fixed, losses = reconcile(start, earliest, latest, {A0: Failover(seen=100, kept=90)})
    assert fixed == {A0: 90, A1: 0}  # the new end; a recreated queue from its first offset
    assert [(loss.queue, loss.lost_from, loss.lost_to, loss.read) for loss in losses] == [
        (A0, 90, 100, 10),
        (A1, 90, 100, 0),
    ]
    assert "went backwards" in losses[1].describe() and "went backwards" not in losses[0].describe()


def test_a_slave_answering_while_no_master_is_listed_leaves_the_facts_from_before() -> None:
    """Between the old master's death and the election, the slave answers for its broker name with
    fewer messages (its queues wait); elected, it stores its own at offsets the query read. Where
    they begin is told against the old master's store times, not the slave's: a run of the
    controller layout with an unclean election said [51, 90) where [41, 90) was lost."""
    fake, reader, end = running()
    fake.slave_read.add("broker-a")
    fake.ranges[A0] = (0, 92)  # the slave lacks the old master's last 8
    held = reader.latestOffset(end, ReadAllAvailable())
    assert without_stamps(held) == to_spark({A0: 100, A1: 100, B0: 50})  # its queues wait
    fake.slave_read.clear()
    fake.elections.add("broker-a")
    new_master_refilled(fake, A0, 92, 95)  # elected, it stored 3 of its own from 92
    with pytest.raises(DataLossError) as raised:
        reader.latestOffset(held, ReadAllAvailable())
    assert "orders/broker-a/0: offsets [92, 100) (8: 8 read, 0 not)" in str(raised.value)
