"""Pure planning: rate limits, splitting, and the data-loss decision."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketmq_spark.remoting.errors import DataLossError
from rocketmq_spark.source.planning import (
    DataLoss, QueueRange, backlog, on_data_loss, plan_ranges, rate_limit, reconcile, split_ranges,
)
from rocketmq_spark.model import MessageQueue

A0, A1, B0 = (MessageQueue("t", "broker-a", 0), MessageQueue("t", "broker-a", 1), MessageQueue("t", "broker-b", 0))


def test_rate_limit_shares_by_backlog() -> None:
    start = {A0: 0, A1: 100, B0: 0}
    latest = {A0: 600, A1: 400, B0: 100}
    end = rate_limit(start, latest, 100)
    assert sum(backlog(start, end).values()) == 100
    assert end == {A0: 60, A1: 130, B0: 10}


def test_rate_limit_reads_everything_when_under_the_limit() -> None:
    assert rate_limit({A0: 5}, {A0: 9}, 100) == {A0: 9}


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=12),
       st.integers(1, 5000))
def test_rate_limit_never_exceeds_and_never_overshoots(pairs: list[tuple[int, int]], limit: int) -> None:
    queues = [MessageQueue("t", "b", i) for i in range(len(pairs))]
    start = {q: s for q, (s, _) in zip(queues, pairs)}
    latest = {q: s + n for q, (s, n) in zip(queues, pairs)}
    end = rate_limit(start, latest, limit)
    read = backlog(start, end)
    assert sum(read.values()) == min(limit, sum(backlog(start, latest).values()))
    assert all(start[q] <= end[q] <= latest[q] for q in queues)


def test_plan_ranges_skips_empty_queues() -> None:
    assert plan_ranges({A0: 3, A1: 5}, {A0: 10, A1: 5}) == [QueueRange(A0, 3, 10)]


def test_split_by_max_per_partition_keeps_order_and_covers_exactly() -> None:
    pieces = split_ranges([QueueRange(A0, 10, 35)], max_per_partition=10)
    assert pieces == [QueueRange(A0, 10, 19), QueueRange(A0, 19, 27), QueueRange(A0, 27, 35)]


def test_split_to_min_partitions_in_proportion_to_size() -> None:
    pieces = split_ranges([QueueRange(A0, 0, 90), QueueRange(B0, 0, 10)], min_partitions=10)
    assert len([p for p in pieces if p.queue == A0]) == 9
    assert len([p for p in pieces if p.queue == B0]) == 1


@given(st.lists(st.integers(1, 500), min_size=1, max_size=6), st.integers(1, 40), st.integers(1, 100))
def test_splitting_loses_and_duplicates_nothing(sizes: list[int], min_parts: int, max_per: int) -> None:
    ranges = [QueueRange(MessageQueue("t", "b", i), 7, 7 + n) for i, n in enumerate(sizes)]
    pieces = split_ranges(ranges, min_partitions=min_parts, max_per_partition=max_per)
    assert all(p.size <= max_per for p in pieces)
    assert len(pieces) >= min(min_parts, sum(sizes))
    for r in ranges:
        mine = [p for p in pieces if p.queue == r.queue]
        covered = [o for p in mine for o in range(p.start, p.end)]
        assert covered == list(range(r.start, r.end))


def test_reconcile_finds_expired_backwards_and_vanished_queues() -> None:
    fixed, losses = reconcile({A0: 5, A1: 50, B0: 3}, {A0: 10, A1: 0}, {A0: 20, A1: 8})
    assert fixed == {A0: 10, A1: 0}
    assert [(loss.queue, loss.lost_from, loss.lost_to) for loss in losses] == [(A0, 5, 10), (A1, 8, 50), (B0, 3, 3)]


def test_data_loss_policy_fails_naming_queue_and_offsets_or_warns(caplog: pytest.LogCaptureFixture) -> None:
    loss = [DataLoss(A0, 5, 10, "were deleted or expired")]
    with pytest.raises(DataLossError, match=r"t/broker-a/0: offsets \[5, 10\).*failOnDataLoss=false"):
        on_data_loss(loss, fail_on_data_loss=True)
    with caplog.at_level(logging.WARNING):
        on_data_loss(loss, fail_on_data_loss=False)
    assert "t/broker-a/0: offsets [5, 10)" in caplog.text
    gone = DataLoss(B0, 7, 7, "cannot be read: the queue is gone from the topic's route")
    assert gone.describe() == "t/broker-b/0: offsets from 7 on cannot be read: the queue is gone from the topic's route"
