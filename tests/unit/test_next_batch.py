"""The pure planning of a micro-batch (``next_batch``): every rule on plain offset maps."""

from __future__ import annotations

import pytest

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.errors import DataLossError
from rocketmq_spark.source.next_batch import BrokerFacts, next_batch

A0, A1, B0 = MessageQueue("t", "broker-a", 0), MessageQueue("t", "broker-a", 1), MessageQueue("t", "broker-b", 0)


def test_every_queue_reads_from_its_start_to_its_max() -> None:
    batch = next_batch({A0: 3, A1: 5}, {}, BrokerFacts({A0: 10, A1: 5}, {A0: 0}), max_rows=None, fail_on_data_loss=True)
    assert (batch.starts, batch.ends, batch.first, batch.available) == ({A0: 3, A1: 5}, {A0: 10, A1: 5}, {}, 7)


def test_a_queue_seen_for_the_first_time_starts_where_the_facts_say_and_is_reported() -> None:
    batch = next_batch(
        {A0: 3}, {}, BrokerFacts({A0: 3, B0: 20}, {B0: 0}, first={B0: 12}), max_rows=None, fail_on_data_loss=True
    )
    assert batch.starts == {A0: 3, B0: 12} and batch.ends == {A0: 3, B0: 20} and batch.first == {B0: 12}


def test_held_queues_keep_their_offsets_and_are_no_loss() -> None:
    batch = next_batch(
        {A0: 3, B0: 7}, {}, BrokerFacts({A0: 4}, {A0: 0}, held=frozenset({B0})), max_rows=None, fail_on_data_loss=True
    )
    assert batch.ends == {A0: 4, B0: 7} and B0 not in batch.starts and batch.available == 1


def test_a_queue_gone_from_the_routes_and_not_held_is_data_loss() -> None:
    with pytest.raises(DataLossError, match=r"t/broker-b/0: offsets from 7 on cannot be read"):
        next_batch({A0: 3, B0: 7}, {}, BrokerFacts({A0: 4}, {A0: 0}), max_rows=None, fail_on_data_loss=True)
    batch = next_batch({A0: 3, B0: 7}, {}, BrokerFacts({A0: 4}, {A0: 0}), max_rows=None, fail_on_data_loss=False)
    assert batch.ends == {A0: 4}


def test_starts_below_the_min_move_up_to_it_under_the_data_loss_policy() -> None:
    with pytest.raises(DataLossError, match=r"\[2, 5\) were deleted or expired"):
        next_batch({A0: 2}, {}, BrokerFacts({A0: 9}, {A0: 5}), max_rows=None, fail_on_data_loss=True)
    batch = next_batch({A0: 2}, {}, BrokerFacts({A0: 9}, {A0: 5}), max_rows=None, fail_on_data_loss=False)
    assert batch.starts == {A0: 5} and batch.available == 4


def test_a_followed_reset_replaces_the_start() -> None:
    batch = next_batch({A0: 9}, {A0: 4}, BrokerFacts({A0: 9}, {A0: 0}), max_rows=None, fail_on_data_loss=True)
    assert batch.starts == {A0: 4} and batch.ends == {A0: 9} and batch.first == {}


def test_max_rows_share_the_limit_by_backlog_but_availability_counts_everything() -> None:
    batch = next_batch(
        {A0: 0, A1: 0}, {}, BrokerFacts({A0: 30, A1: 10}, {A0: 0, A1: 0}), max_rows=8, fail_on_data_loss=True
    )
    assert batch.ends == {A0: 6, A1: 2} and batch.available == 40


def test_an_available_now_target_caps_each_queue_and_leaves_out_queues_it_lacks() -> None:
    facts = BrokerFacts({A0: 30, B0: 10}, {A0: 0}, first={B0: 0}, target={A0: 20})
    batch = next_batch({A0: 5}, {}, facts, max_rows=None, fail_on_data_loss=True)
    assert batch.ends == {A0: 20} and batch.first == {}
