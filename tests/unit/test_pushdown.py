"""Filter pushdown (PySpark 4.1+): which filters the batch reader takes, which it gives back to
Spark, and the queues, ranges and subscription that result; against fake brokers."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.datasource import RocketMQDataSource
from rocketmq_spark.model import MessageQueue
from rocketmq_spark.source import spark_api
from rocketmq_spark.source.batch_reader import PushingBatchReader, RocketMQBatchReader
from rocketmq_spark.source.partition import RocketMQPartition
from rocketmq_spark.source.pushdown import Pushed, micros, push
from rocketmq_spark.source.spark_api import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)
from tests.fakes import FakeOffsets
from tests.support import A0, A1, B0, TOPIC, options, ranges

T = datetime(2026, 1, 1, tzinfo=timezone.utc)


def col(name: str) -> tuple[str]:
    return (name,)


def pushing(fake: FakeOffsets, filters: list[Any], **extra: str) -> tuple[PushingBatchReader, list[Any]]:
    reader = PushingBatchReader(options(streaming=False, **extra), open_offsets=lambda _: fake)  # type: ignore[arg-type,return-value]
    back = list(reader.pushFilters(filters))
    return reader, back


def planned(
    fake: FakeOffsets, filters: list[Any], **extra: str
) -> tuple[list[tuple[MessageQueue, int, int]], list[Any]]:
    reader, back = pushing(fake, filters, **extra)
    return ranges(reader.partitions()), back


def test_the_pushing_reader_is_used_only_when_asked_for_and_this_pyspark_pushes() -> None:
    raw = {"nameServer": "127.0.0.1:9876", "topic": TOPIC}
    schema = RocketMQDataSource(raw).schema()
    plain = RocketMQDataSource(raw).reader(schema)
    assert type(plain) is RocketMQBatchReader  # overrides no pushFilters: Spark's conf off is fine
    asked = RocketMQDataSource({**raw, "filterPushdown": "true"}).reader(schema)
    # PySpark 4.0 has no pushFilters: the option is accepted and the plain reader reads.
    assert type(asked) is (PushingBatchReader if spark_api.FILTER_PUSHDOWN else RocketMQBatchReader)
    with pytest.raises(ConfigurationError, match="filterPushdown"):
        RocketMQDataSource({**raw, "consumerGroup": "g", "filterPushdown": "true"}).streamReader(schema).initialOffset()


def test_on_a_pyspark_without_pushdown_the_plain_reader_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spark_api, "FILTER_PUSHDOWN", False)
    assert spark_api.batch_reader_class(True, RocketMQBatchReader, PushingBatchReader) is RocketMQBatchReader


def test_broker_and_queue_equality_and_in_prune_queues_and_are_pushed() -> None:
    fake = FakeOffsets({A0: (0, 10), A1: (0, 5), B0: (0, 7)})
    filters = [EqualTo(col("brokerName"), "broker-a"), In(col("queueId"), (1, 2, None))]
    assert planned(fake, filters) == ([(A1, 0, 5)], [])
    assert planned(fake, [In(col("brokerName"), ("broker-a", "broker-b")), EqualTo(col("queueId"), 0)]) == (
        [(A0, 0, 10), (B0, 0, 7)],
        [],
    )
    # Not strings / ints: left to Spark.
    odd = EqualTo(col("queueId"), True)
    assert planned(fake, [odd]) == ([(A0, 0, 10), (A1, 0, 5), (B0, 0, 7)], [odd])


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda: GreaterThanOrEqual(col("queueOffset"), 3), [(A0, 3, 10), (B0, 3, 7)]),
        (lambda: GreaterThan(col("queueOffset"), 3), [(A0, 4, 10), (B0, 4, 7)]),
        (lambda: LessThan(col("queueOffset"), 3), [(A0, 0, 3), (B0, 0, 3)]),
        (lambda: LessThanOrEqual(col("queueOffset"), 3), [(A0, 0, 4), (B0, 0, 4)]),
        (lambda: EqualTo(col("queueOffset"), 8), [(A0, 8, 9)]),
        (lambda: GreaterThan(col("queueOffset"), 99), []),
    ],
)
def test_queue_offset_comparisons_cut_every_range_exactly_and_are_pushed(make: Any, expected: list) -> None:
    fake = FakeOffsets({A0: (0, 10), B0: (0, 7)})
    assert planned(fake, [make()]) == (expected, [])


def test_queue_offset_in_narrows_but_goes_back_to_spark() -> None:
    fake = FakeOffsets({A0: (0, 10)})
    f = In(col("queueOffset"), (2, 5))
    assert planned(fake, [f]) == ([(A0, 2, 6)], [f])


def test_pushed_offsets_apply_after_the_options_own_window() -> None:
    fake = FakeOffsets({A0: (0, 10)})
    found, back = planned(
        fake, [GreaterThanOrEqual(col("queueOffset"), 2)], startingOffsets='{"orders": {"broker-a": {"0": 4}}}'
    )
    assert (found, back) == ([(A0, 4, 10)], [])


def at(ms: int, extra_us: int = 0) -> datetime:
    return datetime.fromtimestamp(0, timezone.utc) + timedelta(milliseconds=ms, microseconds=extra_us)


STORE_TIMES = {A0: [100, 200, 200, 300, 400], B0: [150, 350]}


@pytest.mark.parametrize(
    "make, expected",
    [
        # >= t: stored at or after t.
        (lambda: GreaterThanOrEqual(col("storeTimestamp"), at(200)), [(A0, 1, 5), (B0, 1, 2)]),
        # A time between two milliseconds: >= rounds up.
        (lambda: GreaterThanOrEqual(col("storeTimestamp"), at(199, 1)), [(A0, 1, 5), (B0, 1, 2)]),
        # > t: strictly after, so the messages of t itself are not read.
        (lambda: GreaterThan(col("storeTimestamp"), at(200)), [(A0, 3, 5), (B0, 1, 2)]),
        (lambda: GreaterThan(col("storeTimestamp"), at(199, 999)), [(A0, 1, 5), (B0, 1, 2)]),
        # < t: stored before t.
        (lambda: LessThan(col("storeTimestamp"), at(300)), [(A0, 0, 3), (B0, 0, 1)]),
        (lambda: LessThan(col("storeTimestamp"), at(300, 1)), [(A0, 0, 4), (B0, 0, 1)]),
        # <= t: t itself included.
        (lambda: LessThanOrEqual(col("storeTimestamp"), at(300)), [(A0, 0, 4), (B0, 0, 1)]),
        (lambda: LessThanOrEqual(col("storeTimestamp"), at(299, 999)), [(A0, 0, 3), (B0, 0, 1)]),
        (lambda: EqualTo(col("storeTimestamp"), at(200)), [(A0, 1, 3)]),
    ],
)
def test_store_time_comparisons_narrow_as_the_timestamp_options_do_and_spark_checks_again(
    make: Any, expected: list
) -> None:
    fake = FakeOffsets({A0: (0, 5), B0: (0, 2)}, times=STORE_TIMES)
    f = make()
    assert planned(fake, [f]) == (expected, [f])


def test_a_window_of_two_store_time_bounds() -> None:
    fake = FakeOffsets({A0: (0, 5), B0: (0, 2)}, times=STORE_TIMES)
    lo, hi = GreaterThan(col("storeTimestamp"), at(100)), LessThanOrEqual(col("storeTimestamp"), at(300))
    assert planned(fake, [lo, hi]) == ([(A0, 1, 4), (B0, 0, 1)], [lo, hi])


def test_a_time_without_a_zone_is_left_to_spark() -> None:
    f = GreaterThan(col("storeTimestamp"), datetime(2026, 1, 1))
    assert push([f], options(streaming=False)) == (Pushed(), [f])


def test_tags_become_the_subscription_when_none_was_given() -> None:
    fake = FakeOffsets({A0: (0, 10)})
    reader, back = pushing(fake, [In(col("tags"), ("TagA", "TagB")), EqualTo(col("tags"), "TagA")])
    assert back == []
    [part] = reader.partitions()
    assert isinstance(part, RocketMQPartition)
    assert (part.task.sub_expression, part.task.tag_filter) == ("TagA", frozenset({"TagA"}))
    reader, back = pushing(fake, [In(col("tags"), ("TagB", "TagA"))])
    [part] = reader.partitions()
    assert (part.task.sub_expression, back) == ("TagA||TagB", [])  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["*", "a||b", " padded", ""])
def test_a_tag_no_subscription_can_name_goes_back_to_spark(value: str) -> None:
    f = EqualTo(col("tags"), value)
    assert push([f], options(streaming=False)) == (Pushed(), [f])


def test_tags_are_left_to_spark_under_the_users_subscription_or_when_no_tag_is_in_all() -> None:
    f = EqualTo(col("tags"), "TagA")
    assert push([f], options(streaming=False, subExpression="TagA || TagB")) == (Pushed(), [f])
    g = EqualTo(col("tags"), "TagB")
    assert push([f, g], options(streaming=False)) == (Pushed(), [f, g])


def test_other_filters_go_back_untouched_as_the_very_objects_given() -> None:
    others = [EqualTo(col("keys"), "k"), GreaterThan(col("bornTimestamp"), T), EqualTo(("properties", "a"), "x")]
    pushed, back = push(others, options(streaming=False))
    assert pushed == Pushed() and all(a is b for a, b in zip(back, others)) and len(back) == len(others)


def test_microseconds_of_a_pushed_time() -> None:
    assert micros(at(1, 2)) == 1002
    assert micros(T) == 1_767_225_600_000_000
    assert micros(datetime(2026, 1, 1)) is None
