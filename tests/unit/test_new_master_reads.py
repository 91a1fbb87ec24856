"""A task reading a range its batch planned on one master from another: the messages planned are
read, and a new master's own at those offsets are not taken for them.

Every message of a planned range was stored by the time its batch was planned (the store time of
the newest its broker showed then, ``ReadRange.stored_by_ms``). A new master that lacks the planned
messages and stored its own at their offsets gives messages stored later: the range ends there,
under the data-loss policy. A broker whose consume queue disagrees with its messages (RocketMQ's
'[BUG]logic queue order maybe wrong') is never read as if it agreed.
"""

from __future__ import annotations

import logging
import re

import pytest

from rocketmq_spark.remoting.errors import DataLossError, IndexMismatchError
from rocketmq_spark.source import partition_reader as reader
from rocketmq_spark.source.offsets import STORE_TIME_SLACK_MS
from tests.fake_queues import STORED_MS, FakeQueue, offsets, partition

PLANNED_MS = STORED_MS  # the newest store time the planned batch's broker showed
ELECTED_MS = PLANNED_MS + 20_000  # a new master's own messages: an election later


def new_master(own_from: int, max_offset: int = 300) -> FakeQueue:
    """A queue whose new master holds the old one's messages below ``own_from`` and its own after."""
    return FakeQueue(max_offset, store_times={o: ELECTED_MS + o for o in range(own_from, max_offset)})


def test_a_new_masters_own_messages_in_a_planned_range_fail_the_read_naming_them() -> None:
    with pytest.raises(DataLossError) as lost:
        offsets([new_master(150)], partition(100, 200, stored_by_ms=PLANNED_MS))
    said = str(lost.value)
    assert re.search(
        r"orders/broker-a/2: offsets \[150, 200\) hold other messages than when the batch was planned", said
    )
    assert re.search(r"the one at 150 was stored 20\.\d s after the newest its broker showed then", said)
    assert "stored its own at their offsets" in said and "failOnDataLoss=false" in said


def test_with_fail_on_data_loss_false_the_range_ends_before_them(caplog: pytest.LogCaptureFixture) -> None:
    end = 10 * reader.ARROW_BATCH_ROWS
    queue = new_master(150, max_offset=end)
    with caplog.at_level(logging.WARNING):
        read = offsets(
            [queue], partition(100, end, stored_by_ms=PLANNED_MS, fail_on_data_loss=False, pull_batch_size=256)
        )
    assert read == list(range(100, 150))  # not one of the new master's own
    assert f"offsets [150, {end}) hold other messages" in caplog.text
    # The range stopped pulling at the first batch of rows it checked, not at its end.
    assert max(offset for offset, _ in queue.pulls) < 2 * reader.ARROW_BATCH_ROWS


def test_messages_stored_within_the_slack_are_the_planned_ones() -> None:
    """A broker takes store times before ordering a queue's concurrent sends: a message below the
    planned end may be a few milliseconds newer than the newest seen."""
    queue = FakeQueue(300, store_times={o: PLANNED_MS + STORE_TIME_SLACK_MS for o in range(100, 300)})
    assert offsets([queue], partition(100, 300, stored_by_ms=PLANNED_MS)) == list(range(100, 300))


def test_a_range_without_a_store_time_reads_what_is_there() -> None:
    """Batches of an offset log written before store times were kept, and brokers that do not give
    them, are read as planned."""
    assert offsets([new_master(150)], partition(100, 200)) == list(range(100, 200))


def test_a_check_in_a_filtered_read_ends_the_range_too() -> None:
    tags = {o: "TagB" for o in range(0, 300, 3)}
    queue = FakeQueue(300, tags=tags, store_times={o: ELECTED_MS for o in range(150, 300)})
    read = offsets([queue], partition(100, 300, expression="TagB", stored_by_ms=PLANNED_MS, fail_on_data_loss=False))
    assert read == [o for o in range(100, 150) if o % 3 == 0]


@pytest.mark.parametrize("expression", ["*", "TagA"])
def test_an_index_that_disagrees_with_its_messages_stops_the_read_whatever_the_policy(expression: str) -> None:
    """A replica restarted and elected master appended index entries at other offsets than its
    messages were stored as: offset 120 holds the message stored as offset 188."""
    queue = FakeQueue(300, stored_as={o: o + 68 for o in range(120, 300)})
    with pytest.raises(IndexMismatchError) as stopped:
        offsets([queue], partition(100, 300, expression=expression, fail_on_data_loss=False))
    said = str(stopped.value)
    assert "orders/broker-a/2: the broker's consume queue and its messages disagree" in said
    assert re.search(r"offset 1[0-2]\d holds the message stored as offset 1[6-9]\d \(\+68\)", said)
    assert "[BUG]logic queue order maybe wrong" in said
