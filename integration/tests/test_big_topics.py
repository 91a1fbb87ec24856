"""Topics with many queues against the real broker and Spark: a thousand queues read exactly once,
committed everywhere, with few tasks; a large queue among small ones is split and the rest packed."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from integration.support import (
    ClusterHandle,
    batch_read,
    create_topic,
    max_offsets,
    produce,
    run_available_now,
    stored_offsets,
    stream,
)
from rocketmq_spark.source.batch_reader import RocketMQBatchReader
from rocketmq_spark.source.option_model import ReadKind
from rocketmq_spark.source.options import parse_options

pytestmark = pytest.mark.integration

Unique = Callable[[str], str]
QUEUES_PER_BROKER = 512
BROKERS = 2
PER_QUEUE = 10
Position = tuple[str, int]


def in_queue_order(rows: list[Any]) -> dict[Position, list[int]]:
    """Each queue's offsets in the order the rows came."""
    offsets: dict[Position, list[int]] = defaultdict(list)
    for row in rows:
        offsets[(row.brokerName, row.queueId)].append(row.queueOffset)
    return offsets


def assert_exactly_once_in_order(rows: list[Any], ends: dict[Position, int]) -> None:
    seen = in_queue_order(rows)
    assert {queue: sorted(offsets) for queue, offsets in seen.items()} == {
        queue: list(range(end)) for queue, end in ends.items() if end
    }
    assert all(offsets == sorted(offsets) for offsets in seen.values())


def test_a_thousand_queues_stream_and_read_exactly_once(
    spark: Any, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path
) -> None:
    topic, group = unique("big"), unique("big-group")
    create_topic(rocketmq, topic, queues=QUEUES_PER_BROKER)
    # One batch of PER_QUEUE per send; sends go round the topic's queues, one each.
    produce(
        rocketmq, topic, BROKERS * QUEUES_PER_BROKER * PER_QUEUE, "--batch", str(PER_QUEUE), "--each-queue", "--quiet"
    )
    ends = max_offsets(rocketmq, topic)
    assert len(ends) == BROKERS * QUEUES_PER_BROKER and set(ends.values()) == {PER_QUEUE}

    batches: list[list[Any]] = []
    df = stream(spark, rocketmq, topic, group, consumeFromWhere="CONSUME_FROM_FIRST_OFFSET")
    query = run_available_now(
        df.select("brokerName", "queueId", "queueOffset"),
        tmp_path / "checkpoint",
        lambda batch, _: batches.append(batch.collect()),
    )
    rows = [row for batch in batches for row in batch]
    assert_exactly_once_in_order(rows, ends)
    assert stored_offsets(rocketmq, topic, group) == ends
    assert sum(p["numInputRows"] for p in query.recentProgress) == len(rows)

    read = batch_read(spark, rocketmq, topic)
    assert 1 < read.rdd.getNumPartitions() <= 8  # a handful of tasks, not one per queue
    assert_exactly_once_in_order(read.select("brokerName", "queueId", "queueOffset").collect(), ends)


def test_a_large_queue_is_split_and_the_small_ones_packed(spark: Any, rocketmq: ClusterHandle, unique: Unique) -> None:
    topic = unique("mixed")
    small_queues, per_small, big_messages, per_partition = 64, 5, 3000, 1000
    create_topic(rocketmq, topic, queues=small_queues, brokers="broker-a")
    produce(rocketmq, topic, small_queues * per_small, "--batch", str(per_small), "--quiet")
    produce(rocketmq, topic, big_messages, "--batch", "100", "--quiet", broker="broker-a", queue=0)
    ends = max_offsets(rocketmq, topic)
    assert ends[("broker-a", 0)] == per_small + big_messages

    options = {"nameServer": rocketmq.namesrv_addr, "topic": topic, "maxMessagesPerPartition": str(per_partition)}
    partitions = RocketMQBatchReader(parse_options(options, kind=ReadKind.BATCH)).partitions()
    with_big = [p for p in partitions if any(r.queue.queue_id == 0 for r in p.ranges)]
    pieces = sorted((r.start, r.end) for p in with_big for r in p.ranges if r.queue.queue_id == 0)
    # The large queue is split into pieces that no partition holds two of ...
    assert len(pieces) == len(with_big) == -(-ends[("broker-a", 0)] // per_partition)
    assert [end for _, end in pieces[:-1]] == [start for start, _ in pieces[1:]]
    # ... the small queues share partitions, and no partition reads more than the bound.
    assert len(partitions) < small_queues // 2
    assert sum(len(p.ranges) for p in partitions) == len(pieces) + small_queues - 1
    assert all(sum(r.end - r.start for r in p.ranges) <= per_partition for p in partitions)

    df = batch_read(spark, rocketmq, topic, maxMessagesPerPartition=str(per_partition))
    assert df.rdd.getNumPartitions() == len(partitions)
    assert_exactly_once_in_order(df.select("brokerName", "queueId", "queueOffset").collect(), ends)
