"""Pure planning: rate limits, splitting, and the data-loss decision."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.errors import DataLossError
from rocketmq_spark.source.planning import (
    PARTITION_COST,
    RANGE_COST,
    DataLoss,
    QueueRange,
    backlog,
    on_data_loss,
    pack,
    plan,
    plan_ranges,
    rate_limit,
    reconcile,
    split_ranges,
)

A0, A1, B0 = (MessageQueue("t", "broker-a", 0), MessageQueue("t", "broker-a", 1), MessageQueue("t", "broker-b", 0))


def test_rate_limit_shares_by_backlog() -> None:
    start = {A0: 0, A1: 100, B0: 0}
    latest = {A0: 600, A1: 400, B0: 100}
    end = rate_limit(start, latest, 100)
    assert sum(backlog(start, end).values()) == 100
    assert end == {A0: 60, A1: 130, B0: 10}


def test_rate_limit_reads_everything_when_under_the_limit() -> None:
    assert rate_limit({A0: 5}, {A0: 9}, 100) == {A0: 9}


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=12), st.integers(1, 5000))
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


# ----------------------------------------------------------------------- packing


def queues(count: int, brokers: int = 2) -> list[MessageQueue]:
    return [MessageQueue("t", f"broker-{b}", q) for b in range(brokers) for q in range(count // brokers)]


def test_a_trickle_on_a_thousand_queues_is_a_handful_of_partitions() -> None:
    many = queues(1024)
    groups = plan({q: 0 for q in many}, {q: 10 for q in many}, min_partitions=None, max_per_partition=None)
    assert 2 <= len(groups) <= 8
    assert sorted(r for group in groups for r in group) == [QueueRange(q, 0, 10) for q in sorted(many)]
    assert max(map(len, groups)) - min(map(len, groups)) <= 1  # even shares


def test_a_large_range_is_a_partition_of_its_own_and_the_small_ones_share() -> None:
    big = QueueRange(A0, 0, PARTITION_COST)
    small = [QueueRange(MessageQueue("t", "broker-b", q), 5, 15) for q in range(100)]
    groups = pack([big, *small])
    assert groups == [[big], small]


def test_a_backfill_of_a_large_topic_gets_a_partition_per_queue_or_more() -> None:
    many = queues(1024)
    per_queue = 100_000  # 100 M messages in all
    groups = plan({q: 0 for q in many}, {q: per_queue for q in many}, min_partitions=None, max_per_partition=None)
    assert len(groups) == 1024
    groups = plan({q: 0 for q in many}, {q: per_queue for q in many}, min_partitions=None, max_per_partition=25_000)
    assert len(groups) == 4096


def test_packing_keeps_min_partitions_and_max_messages_per_partition() -> None:
    many = queues(64)
    start, end = {q: 0 for q in many}, {q: 10 for q in many}
    assert len(plan(start, end, min_partitions=20, max_per_partition=None)) == 20
    bounded = plan(start, end, min_partitions=None, max_per_partition=25)
    assert all(sum(r.size for r in group) <= 25 for group in bounded)


@given(
    st.lists(st.integers(1, 3 * PARTITION_COST), min_size=1, max_size=60),
    st.integers(1, 80),
    st.none() | st.integers(1, 2 * PARTITION_COST),
)
def test_packing_covers_each_piece_once_in_order(sizes: list[int], min_parts: int, max_messages: int | None) -> None:
    pieces = [QueueRange(MessageQueue("t", "b", i), 0, size) for i, size in enumerate(sizes)]
    groups = pack(pieces, min_partitions=min_parts, max_messages=max_messages)
    flat = [r for group in groups for r in group]
    assert sorted(flat) == sorted(pieces) and len(flat) == len(pieces)
    assert all(group for group in groups)
    assert len(groups) >= min(min_parts, len(pieces))
    for group in groups:
        if len(group) > 1:  # only small pieces share, and a shared partition stays under the bound
            assert sum(r.size + RANGE_COST for r in group) <= PARTITION_COST
            assert max_messages is None or sum(r.size for r in group) <= max_messages
            assert [r.queue for r in group] == sorted(r.queue for r in group)


def test_pieces_of_a_split_queue_never_share_past_max_messages_per_partition() -> None:
    big = {A0: 3005}
    small = {MessageQueue("t", "broker-a", q): 5 for q in range(1, 64)}
    ends = {**big, **small}
    groups = plan(dict.fromkeys(ends, 0), ends, min_partitions=None, max_per_partition=1000)
    assert all(sum(r.size for r in group) <= 1000 for group in groups)
    assert sorted(r for group in groups for r in group if r.queue == A0) == [
        QueueRange(A0, 0, 752),
        QueueRange(A0, 752, 1503),
        QueueRange(A0, 1503, 2254),
        QueueRange(A0, 2254, 3005),
    ]
