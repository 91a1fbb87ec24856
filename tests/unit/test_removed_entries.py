"""Index entries whose commit log is gone, as a 4.9 broker serves them: it skips them and answers
with the first message it can read, above the offset pulled, while the queue's min offset stays
below them (it is not moved on a queue whose every message expired). The read tells that from an
index that disagrees with its messages by pulling again at the first message's own offset."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

from rocketmq_spark.remoting.client import PullResult
from rocketmq_spark.remoting.errors import DataLossError, IndexMismatchError
from tests.fake_queues import FakeQueue, offsets, partition

REMOVED = range(0, 30)
MAX_OFFSET = 50
SHIFT = 68
LOST = (
    "orders/broker-a/2: offsets [0, 30) were deleted or expired (their commit log is gone; the broker still "
    "says the queue starts at 0)"
)


class Skipping(FakeQueue):
    """Entries in ``removed`` have lost their messages: a pull there is answered from the first
    entry after them, as if it had been pulled there."""

    def __init__(self, max_offset: int, removed: range) -> None:
        super().__init__(max_offset)
        self.removed = removed

    def answer(self, offset: int, *rest: Any) -> PullResult:
        return super().answer(self.removed.stop if offset in self.removed else offset, *rest)


def test_entries_the_broker_skips_as_removed_are_data_loss() -> None:
    with pytest.raises(DataLossError, match=re.escape(LOST)):
        offsets([Skipping(MAX_OFFSET, REMOVED)], partition(0, MAX_OFFSET))


def test_entries_the_broker_skips_as_removed_are_skipped_with_a_warning_when_allowed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="rocketmq_spark.source.planning"):
        read = offsets([Skipping(MAX_OFFSET, REMOVED)], partition(0, MAX_OFFSET, fail_on_data_loss=False))
    assert read == list(range(REMOVED.stop, MAX_OFFSET))
    assert f"skipping data that is gone (failOnDataLoss=false): {LOST}" in caplog.messages


def test_an_index_shifted_from_its_messages_still_stops_the_read() -> None:
    """Entry p holds the message stored as p + SHIFT, and so does entry p + SHIFT's: the pull
    again at the first message's own offset finds another message, so nothing is called lost."""
    shifted = FakeQueue(4 * SHIFT, stored_as={o: o + SHIFT for o in range(4 * SHIFT)})
    with pytest.raises(IndexMismatchError, match=re.escape(f"offset 0 holds the message stored as offset {SHIFT}")):
        offsets([shifted], partition(0, 4 * SHIFT, fail_on_data_loss=False))
