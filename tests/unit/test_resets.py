"""An operator's reset of the stream's group, against fake brokers: how the driver finds it (stored
offsets someone else wrote, a 4.9 broker's notice) and what the next batch does (``onOffsetReset``).
The integration tests make the same resets with each release's own mqadmin."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.client_requests import read_offset_reset
from rocketmq_spark.remoting.connection import CONNECTION_MAX_IDLE_S
from rocketmq_spark.remoting.errors import DataLossError, OffsetResetError
from rocketmq_spark.source import resets
from rocketmq_spark.source.group import HEARTBEAT_INTERVAL_S
from rocketmq_spark.source.offsets import RESETS_KEY, from_spark, resets_from_spark
from rocketmq_spark.source.option_model import OnOffsetReset
from rocketmq_spark.source.spark_api import ReadAllAvailable, ReadMaxRows, ReadMinRows
from rocketmq_spark.source.stream_reader import IDLE_RESET_CHECK_MS, RocketMQStreamReader
from tests.fakes import FakeOffsets
from tests.support import A0, A1, TOPIC, notice, ranges, spark, stream

CAUGHT_UP = 50
END = 75
STREAM_LOGGER = "rocketmq_spark.source.stream_reader"


def caught_up(**extra: str) -> tuple[FakeOffsets, RocketMQStreamReader, dict[str, Any]]:
    """A stream that read both queues to 50 and stored it; 25 more messages have come since."""
    fake = FakeOffsets({A0: (0, CAUGHT_UP), A1: (0, CAUGHT_UP)})
    reader = stream(fake, **extra)
    start = spark({A0: CAUGHT_UP, A1: CAUGHT_UP})
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    assert fake.stored == {A0: CAUGHT_UP, A1: CAUGHT_UP}
    fake.ranges = {A0: (0, END), A1: (0, END)}
    return fake, reader, start


def test_a_reset_notice_reads_as_the_queues_and_offsets() -> None:
    read = read_offset_reset(notice({A0: 25, A1: 30}))
    assert (read.group, read.topic, read.timestamp_ms, read.offsets) == ("g", TOPIC, 1700000000000, {A0: 25, A1: 30})


@pytest.mark.parametrize("found_by", ["stored offsets", "notice"])
@pytest.mark.parametrize("reset_to", [25, 60])
def test_follow_starts_the_next_batch_at_the_reset_offsets(
    found_by: str, reset_to: int, caplog: pytest.LogCaptureFixture
) -> None:
    fake, reader, start = caught_up()
    if found_by == "notice":  # a 4.9 broker stores nothing itself
        assert fake.client.handler(notice({A0: reset_to, A1: reset_to})) is None
    else:  # a 5.x broker stores the reset offsets
        fake.stored.update({A0: reset_to, A1: reset_to})
    with caplog.at_level(logging.WARNING, logger=STREAM_LOGGER):
        end = reader.latestOffset(start, ReadAllAvailable())
    assert from_spark(end) == {A0: END, A1: END}
    assert resets_from_spark(end) == {A0: reset_to, A1: reset_to}
    assert ranges(reader.partitions(start, end)) == [(A0, reset_to, END), (A1, reset_to, END)]
    assert fake.stored == {A0: reset_to, A1: reset_to}  # not overwritten with the checkpoint's 50
    (line,) = [r.getMessage() for r in caplog.records]
    assert f"{A0}: 50 -> {reset_to}" in line and f"{A1}: 50 -> {reset_to}" in line and "follow" in line
    # The batch after it starts at its end, as any other, and is not read again.
    fake.ranges = {A0: (0, END + 5), A1: (0, END)}
    after = reader.latestOffset(end, ReadAllAvailable())
    assert RESETS_KEY not in after and ranges(reader.partitions(end, after)) == [(A0, END, END + 5)]
    assert fake.stored == {A0: END, A1: END}


def test_a_batch_that_followed_a_reset_reads_the_same_rows_when_run_again_or_after_a_restart() -> None:
    fake, reader, start = caught_up(maxMessagesPerTrigger="10")
    fake.stored[A0] = 20
    end = reader.latestOffset(start, ReadMaxRows(10))
    planned = ranges(reader.partitions(start, end))
    assert planned[0][:2] == (A0, 20) and sum(e - s for _, s, e in planned) == 10
    restarted = stream(fake, maxMessagesPerTrigger="10")  # a new driver on the same checkpoint
    assert ranges(restarted.partitions(start, end)) == planned
    assert ranges(reader.partitions(start, end)) == planned
    # The restarted driver plans on from the logged end: the reset is not applied again.
    after = restarted.latestOffset(end, ReadMaxRows(10))
    assert RESETS_KEY not in after and ranges(restarted.partitions(end, after))[0][1] >= planned[0][2]


def test_an_idle_trigger_after_a_followed_reset_plans_no_batch() -> None:
    fake, reader, start = caught_up()
    fake.stored.update({A0: 25, A1: 25})
    end = reader.latestOffset(start, ReadAllAvailable())
    assert reader.latestOffset(end, ReadAllAvailable()) == end


def test_ignore_keeps_the_checkpoint_position_and_stores_its_own_offsets_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake, reader, start = caught_up(onOffsetReset="ignore")
    fake.stored.update({A0: 25, A1: 25})
    with caplog.at_level(logging.WARNING, logger=STREAM_LOGGER):
        end = reader.latestOffset(start, ReadAllAvailable())
    assert RESETS_KEY not in end
    assert ranges(reader.partitions(start, end)) == [(A0, CAUGHT_UP, END), (A1, CAUGHT_UP, END)]
    assert fake.stored == {A0: CAUGHT_UP, A1: CAUGHT_UP}
    (line,) = [r.getMessage() for r in caplog.records]
    assert "ignore" in line and f"{A0}: 50 -> 25" in line


def test_fail_stops_the_query_naming_the_queues_offsets_and_option() -> None:
    fake, reader, start = caught_up(onOffsetReset="fail")
    assert fake.client.handler(notice({A0: 25})) is None
    with pytest.raises(OffsetResetError) as caught:
        reader.latestOffset(start, ReadAllAvailable())
    message = str(caught.value)
    assert f"{A0}: 50 -> 25" in message and "onOffsetReset=fail" in message and str(A1) not in message
    assert fake.stored == {A0: CAUGHT_UP, A1: CAUGHT_UP}


def test_a_notice_of_another_group_or_topic_changes_nothing() -> None:
    fake, reader, start = caught_up()
    fake.client.handler(notice({A0: 25}, group="other"))
    fake.client.handler(notice({MessageQueue("refunds", "broker-a", 0): 25}))
    assert RESETS_KEY not in reader.latestOffset(start, ReadAllAvailable())


def test_stored_offsets_the_stream_wrote_itself_are_no_reset() -> None:
    assert resets.moved({A0: 50, A1: 50}, {A0: 50, A1: 25}) == {A1: 25}
    assert resets.moved({A0: 50}, {A1: 25}) == {}
    assert resets.apply(OnOffsetReset.FOLLOW, "g", {A0: 50}, {A0: 50, A1: 3}) == {}
    assert resets.apply(OnOffsetReset.IGNORE, "g", {A0: 50}, {A0: 10}) == {}


def test_a_reset_back_on_a_stream_with_nothing_new_replays_without_data_loss() -> None:
    fake = FakeOffsets({A0: (0, CAUGHT_UP), A1: (0, CAUGHT_UP)})
    reader = stream(fake)
    start = spark({A0: CAUGHT_UP, A1: CAUGHT_UP})
    reader.latestOffset(start, ReadAllAvailable())
    fake.stored.update({A0: 20, A1: 20})
    end = reader.latestOffset(start, ReadAllAvailable())
    assert ranges(reader.partitions(start, end)) == [(A0, 20, CAUGHT_UP), (A1, 20, CAUGHT_UP)]


def test_a_batch_held_for_more_messages_starts_at_the_reset_when_it_runs(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeOffsets({A0: (0, CAUGHT_UP), A1: (0, CAUGHT_UP)})
    reader = stream(fake, minMessagesPerTrigger="150")
    start = spark({A0: 0, A1: 0})
    assert reader.latestOffset(start, ReadMinRows(150)) == start  # 150 offsets are not there yet
    fake.stored.update({A0: 40, A1: 40})  # reset forward: 20 left, still too few
    with caplog.at_level(logging.WARNING, logger=STREAM_LOGGER):
        assert reader.latestOffset(start, ReadMinRows(150)) == start
        assert reader.latestOffset(start, ReadMinRows(150)) == start
    assert len(caplog.records) == 1  # said once, when found
    fake.ranges = {A0: (0, 140), A1: (0, 140)}
    end = reader.latestOffset(start, ReadMinRows(150))
    assert ranges(reader.partitions(start, end)) == [(A0, 40, 140), (A1, 40, 140)]


class CrashedBroker(FakeOffsets):
    """broker-a crashed and is back: the request for the group's offsets is the first over a new
    connection, and it answers with offsets older than the stream's last store (the ones it had
    flushed before it went down)."""

    def __init__(self, flushed: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.flushed = flushed
        self.crashed = False

    def group_offsets(self, queues: Any, group: str) -> dict[MessageQueue, int]:
        if self.crashed:
            self.crashed = False
            self.reconnects.add("broker-a")
            self.stored = {q: self.flushed if q.broker_name == "broker-a" else o for q, o in self.stored.items()}
        return super().group_offsets(queues, group)


def test_a_broker_back_from_a_crash_with_older_stored_offsets_is_no_reset(caplog: pytest.LogCaptureFixture) -> None:
    fake = CrashedBroker(flushed=20, queues={A0: (0, CAUGHT_UP), A1: (0, CAUGHT_UP)})
    reader = stream(fake)
    start = spark({A0: CAUGHT_UP, A1: CAUGHT_UP})
    reader.latestOffset(start, ReadAllAvailable())
    fake.crashed = True
    fake.ranges = {A0: (0, END), A1: (0, END)}
    with caplog.at_level(logging.WARNING, logger=STREAM_LOGGER):
        end = reader.latestOffset(start, ReadAllAvailable())
    assert caplog.records == []
    assert RESETS_KEY not in end
    assert ranges(reader.partitions(start, end)) == [(A0, CAUGHT_UP, END), (A1, CAUGHT_UP, END)]
    assert fake.stored == {A0: CAUGHT_UP, A1: CAUGHT_UP}  # the stream's own offsets, stored again
    # An operator's reset after that is seen again.
    fake.stored[A0] = 30
    assert resets_from_spark(reader.latestOffset(end, ReadAllAvailable())) == {A0: 30}


def test_spark_s_commit_of_the_batch_before_a_followed_reset_does_not_undo_it() -> None:
    """Spark plans the next batch (latestOffset), then commits the one before it: the queues the
    new batch starts at their reset offsets keep those stored, and the reset is followed once."""
    fake, reader, start = caught_up()
    fake.stored.update({A0: 25, A1: 25})
    end = reader.latestOffset(start, ReadAllAvailable())
    reader.commit(start)
    assert fake.stored == {A0: 25, A1: 25}
    reader.partitions(start, end)
    after = reader.latestOffset(end, ReadAllAvailable())
    assert after == end
    assert fake.stored == {A0: END, A1: END}


def test_the_group_s_heartbeats_keep_the_driver_s_broker_connections_from_going_idle() -> None:
    """A connection idle past its limit is replaced, which the driver takes for a broker that came
    back from a crash (no reset looked for there). A committing stream's heartbeats use the same
    connections, so they must come more often than that limit, whatever the trigger interval."""
    assert HEARTBEAT_INTERVAL_S < CONNECTION_MAX_IDLE_S


class Counted(FakeOffsets):
    """Counts the comparisons of the group's stored offsets."""

    compared = 0

    def group_offsets(self, queues: Any, group: str) -> dict[MessageQueue, int]:
        self.compared += 1
        return super().group_offsets(queues, group)


def test_a_reset_made_while_idle_is_followed_by_the_next_batch_however_soon_it_comes(clock: list[int]) -> None:
    """An idle trigger compares the stored offsets once per IDLE_RESET_CHECK_MS; the trigger that
    plans a batch compares anyway, so the batch starts at a reset made since the last comparison."""
    fake = Counted({A0: (0, CAUGHT_UP), A1: (0, CAUGHT_UP)})
    reader = stream(fake)
    start = spark({A0: CAUGHT_UP, A1: CAUGHT_UP})
    assert reader.latestOffset(start, ReadAllAvailable()) == start  # stores where it stands
    assert reader.latestOffset(start, ReadAllAvailable()) == start  # idle: compares, finds nothing
    compared = fake.compared
    clock[0] += IDLE_RESET_CHECK_MS - 1
    assert reader.latestOffset(start, ReadAllAvailable()) == start  # idle, too soon to compare again
    assert fake.compared == compared
    fake.stored[A0] = 25  # the operator's reset, as a 5.x broker stores it
    fake.ranges = {A0: (0, END), A1: (0, END)}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert fake.compared == compared + 1
    assert resets_from_spark(end) == {A0: 25}
    assert ranges(reader.partitions(start, end)) == [(A0, 25, END), (A1, CAUGHT_UP, END)]
    assert fake.stored == {A0: 25, A1: CAUGHT_UP}


class TopicRecreated(FakeOffsets):
    """Consume stats as a broker answers them: 0 for a queue where the group stores nothing (its
    offsets went with the topic when it was deleted and created again)."""

    def group_offsets(self, queues: Any, group: str) -> dict[MessageQueue, int]:
        return {q: self.stored.get(q, 0) for q in queues}


def test_a_stored_offset_gone_with_its_topic_is_no_reset_but_data_loss(caplog: pytest.LogCaptureFixture) -> None:
    fake = TopicRecreated({A0: (0, CAUGHT_UP), A1: (0, CAUGHT_UP)})
    reader = stream(fake, failOnDataLoss="true")
    start = spark({A0: CAUGHT_UP, A1: CAUGHT_UP})
    reader.latestOffset(start, ReadAllAvailable())
    del fake.stored[A0]  # A0's topic was deleted and created again: 5 new messages
    fake.ranges = {A0: (0, 5), A1: (0, CAUGHT_UP)}
    with caplog.at_level(logging.WARNING, logger=STREAM_LOGGER), pytest.raises(DataLossError, match=str(A0)):
        reader.latestOffset(start, ReadAllAvailable())
    assert caplog.records == []  # no "reset by an operator"


def test_a_reset_to_zero_is_still_a_reset() -> None:
    fake = TopicRecreated({A0: (0, CAUGHT_UP), A1: (0, CAUGHT_UP)})
    reader = stream(fake)
    start = spark({A0: CAUGHT_UP, A1: CAUGHT_UP})
    reader.latestOffset(start, ReadAllAvailable())
    fake.stored[A0] = 0
    fake.ranges = {A0: (0, END), A1: (0, CAUGHT_UP)}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert resets_from_spark(end) == {A0: 0}
    assert ranges(reader.partitions(start, end)) == [(A0, 0, END)]
