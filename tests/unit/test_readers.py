"""The stream and batch readers' planning against a fake offset reader: no broker, no Spark job.

``latestOffset``, ``partitions`` and the batch reader's ``partitions`` decide what each batch
reads; the integration tests run them against the real broker, and these drive the cases a
broker gives only on purpose: expired data, queues that appear or vanish, a broker that is away,
rate limits and AvailableNow's fixed end.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest
from pyspark.sql.datasource import InputPartition

from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.model import EXPRESSION_TAG, MessageQueue
from rocketmq_spark.remoting.errors import DataLossError
from rocketmq_spark.source.batch_reader import RocketMQBatchReader
from rocketmq_spark.source.offsets import to_spark
from rocketmq_spark.source.option_model import BATCH_READ_GROUP
from rocketmq_spark.source.partition import RocketMQPartition, TaskOptions
from rocketmq_spark.source.spark_api import ReadAllAvailable, ReadMaxRows, ReadMinRows
from tests.fakes import FakeOffsets
from tests.support import A0, A1, B0, TOPIC, options, ranges, spark, stream

# ----------------------------------------------------------------- initialOffset


def test_a_new_stream_starts_from_stored_offsets_and_falls_back_per_queue() -> None:
    fake = FakeOffsets({A0: (0, 10), A1: (3, 8), B0: (0, 5)}, stored={A0: 0, B0: 4})
    assert stream(fake).initialOffset() == to_spark({A0: 0, A1: 8, B0: 4})  # a stored 0 stays 0
    first = stream(fake, consumeFromWhere="CONSUME_FROM_FIRST_OFFSET").initialOffset()
    assert first == to_spark({A0: 0, A1: 3, B0: 4})


def test_consume_from_timestamp_applies_to_queues_without_a_stored_offset() -> None:
    times = {A0: [100, 200, 300, 400], A1: [150, 250], B0: [50]}
    fake = FakeOffsets({A0: (0, 4), A1: (0, 2), B0: (0, 1)}, stored={A1: 1}, times=times)
    reader = stream(fake, consumeFromWhere="CONSUME_FROM_TIMESTAMP", consumeTimestamp="250")
    assert reader.initialOffset() == to_spark({A0: 2, A1: 1, B0: 1})


def test_json_starting_offsets_must_name_existing_queues() -> None:
    fake = FakeOffsets({A0: (0, 10)})
    reader = stream(fake, startingOffsets=json.dumps({TOPIC: {"broker-a": {"0": 4, "7": 1}}}))
    with pytest.raises(ConfigurationError, match="broker-a/7"):
        reader.initialOffset()


def test_json_starting_offsets_past_a_queues_end_fail_at_the_start_naming_the_end() -> None:
    """A start past the end is a mistake in the option, not a queue that went backwards."""
    fake = FakeOffsets({A0: (0, 10), B0: (0, 5)})
    reader = stream(fake, startingOffsets=json.dumps({TOPIC: {"broker-a": {"0": 10}, "broker-b": {"0": 6}}}))
    with pytest.raises(
        ConfigurationError, match=r"startingOffsets.*broker-b/0: 6 is beyond the queue's end \(max 5\)"
    ) as raised:
        reader.initialOffset()
    assert "broker-a" not in str(raised.value) and "went backwards" not in str(raised.value)


# ------------------------------------------------------------------ latestOffset


def test_latest_offset_reads_everything_and_stores_the_batch_before() -> None:
    fake = FakeOffsets({A0: (0, 10), B0: (0, 6)})
    reader = stream(fake)
    end = reader.latestOffset(spark({A0: 2, B0: 6}), ReadAllAvailable())
    assert end == to_spark({A0: 10, B0: 6})
    assert fake.commits == [{A0: 2, B0: 6}]  # the batch that ended at start is committed by Spark
    reader.commit(end)
    assert fake.stored == {A0: 10, B0: 6}
    assert fake.commits[-1] == {A0: 10}  # only what changed is stored again


def test_a_broker_reached_over_a_new_connection_gets_every_offset_stored_again() -> None:
    # A broker that crashed and restarted may have lost the offsets stored in its last seconds;
    # a queue that sees no new message would keep the older one for as long as the query runs.
    fake = FakeOffsets({A0: (0, 10), A1: (0, 4), B0: (0, 6)})
    reader = stream(fake)
    end = reader.latestOffset(spark({A0: 2, A1: 4, B0: 6}), ReadAllAvailable())
    reader.commit(end)
    assert fake.commits == [{A0: 2, A1: 4, B0: 6}, {A0: 10}]
    fake.stored = {}  # broker-a came back without them, as did broker-b (not reconnected: not asked)
    fake.reconnects.add("broker-a")
    reader.latestOffset(end, ReadAllAvailable())
    assert fake.commits[-1] == {A0: 10, A1: 4}
    reader.latestOffset(end, ReadAllAvailable())
    assert fake.commits[-1] == {A0: 10, A1: 4}  # nothing new since: no third commit
    assert len(fake.commits) == 3


def test_commit_offsets_false_stores_nothing() -> None:
    fake = FakeOffsets({A0: (0, 10)})
    reader = stream(fake, commitOffsets="false")
    reader.commit(reader.latestOffset(spark({A0: 0}), ReadAllAvailable()))
    assert fake.commits == []


def test_max_messages_per_trigger_shares_the_limit_by_backlog() -> None:
    fake = FakeOffsets({A0: (0, 1000), A1: (0, 100), B0: (0, 0)})
    reader = stream(fake, maxMessagesPerTrigger="110")
    end = reader.latestOffset(spark({A0: 0, A1: 0, B0: 0}), ReadMaxRows(110))
    assert end == to_spark({A0: 100, A1: 10, B0: 0})


def test_min_messages_per_trigger_holds_the_batch_until_enough_arrived() -> None:
    fake = FakeOffsets({A0: (0, 3)})
    reader = stream(fake, minMessagesPerTrigger="5")
    start = spark({A0: 0})
    assert reader.latestOffset(start, ReadMinRows(5)) == start
    fake.ranges[A0] = (0, 5)
    assert reader.latestOffset(start, ReadMinRows(5)) == to_spark({A0: 5})


def test_a_new_queue_is_read_from_its_first_message() -> None:
    fake = FakeOffsets({A0: (0, 10), A1: (4, 9)})
    reader = stream(fake)
    start = spark({A0: 10})
    end = reader.latestOffset(start, ReadAllAvailable())
    # Its start travels in the offset log, so the batch reads the same when it is run again.
    assert end == to_spark({A0: 10, A1: 9}, starts={A1: 4})
    assert ranges(reader.partitions(start, end)) == [(A1, 4, 9)]


def test_expired_offsets_fail_the_query_by_default() -> None:
    fake = FakeOffsets({A0: (50, 100)})
    with pytest.raises(DataLossError, match=r"orders/broker-a/0: offsets \[10, 50\) were deleted or expired"):
        stream(fake).latestOffset(spark({A0: 10}), ReadAllAvailable())


def test_expired_offsets_are_skipped_when_allowed() -> None:
    fake = FakeOffsets({A0: (50, 100)})
    reader = stream(fake, failOnDataLoss="false")
    start = spark({A0: 10})
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == to_spark({A0: 100})
    # Spark plans the batch from the checkpointed start; the read begins at what exists.
    assert ranges(reader.partitions(start, end)) == [(A0, 10, 100)]


def test_a_queue_that_went_backwards_restarts_from_its_first_offset() -> None:
    fake = FakeOffsets({A0: (0, 5)})
    reader = stream(fake, failOnDataLoss="false")
    start = spark({A0: 40})
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == to_spark({A0: 5})
    assert ranges(reader.partitions(start, end)) == [(A0, 0, 5)]
    with pytest.raises(DataLossError, match="went backwards"):
        stream(fake).latestOffset(start, ReadAllAvailable())


def test_a_queue_gone_from_the_route_is_data_loss() -> None:
    fake = FakeOffsets({A0: (0, 10)})
    with pytest.raises(DataLossError, match="broker-a/1: offsets from 3 on cannot be read"):
        stream(fake).latestOffset(spark({A0: 0, A1: 3}), ReadAllAvailable())


def test_the_queues_of_a_broker_that_is_away_wait_with_their_offsets() -> None:
    fake = FakeOffsets({A0: (0, 10), B0: (0, 8)})
    reader = stream(fake)
    fake.away.add("broker-b")
    start = spark({A0: 2, B0: 5})
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == to_spark({A0: 10, B0: 5})  # carried, not lost
    assert ranges(reader.partitions(start, end)) == [(A0, 2, 10)]
    assert fake.commits == [{A0: 2}]  # a broker that is away is not written to
    fake.away.clear()
    assert reader.latestOffset(end, ReadAllAvailable()) == to_spark({A0: 10, B0: 8})
    assert fake.commits[-1] == {A0: 10, B0: 5}


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_slave_serving_behind_the_stream_s_offsets_is_waited_for_not_taken_for_data_loss(
    fail_on_data_loss: str, caplog: pytest.LogCaptureFixture
) -> None:
    """broker-b's master died after the stream read B0 to 8; its asynchronous slave had copied 6."""
    fake = FakeOffsets({A0: (0, 10), B0: (0, 6)})
    reader = stream(fake, failOnDataLoss=fail_on_data_loss)
    fake.slave_read.add("broker-b")
    start = spark({A0: 2, B0: 8})
    with caplog.at_level(logging.WARNING):
        end = reader.latestOffset(start, ReadAllAvailable())
    assert end == to_spark({A0: 10, B0: 8})  # held where it stood, neither lost nor read again
    assert ranges(reader.partitions(start, end)) == [(A0, 2, 10)]
    assert any("broker-b" in r.getMessage() and "slaves have not copied" in r.getMessage() for r in caplog.records)
    fake.slave_read.clear()  # the master back
    fake.ranges[B0] = (0, 12)
    after = reader.latestOffset(end, ReadAllAvailable())
    assert after == to_spark({A0: 10, B0: 12})
    assert ranges(reader.partitions(end, after)) == [(B0, 8, 12)]


def test_a_broker_leaving_and_returning_is_logged_once_each(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeOffsets({A0: (0, 10), B0: (0, 8)})
    reader = stream(fake)
    end = spark({A0: 2, B0: 5})
    fake.away.add("broker-b")
    for _ in range(3):
        end = reader.latestOffset(end, ReadAllAvailable())
    fake.away.clear()
    for _ in range(2):
        end = reader.latestOffset(end, ReadAllAvailable())
    assert [r.getMessage() for r in caplog.records if r.name.endswith("absences")] == [
        "brokers ['broker-b'] are not registered with the name server; their queues resume when they return",
        "brokers ['broker-b'] are back",
    ]


def test_retries_are_short_until_the_query_runs() -> None:
    """initialOffset is the start (a wrong address fails fast); latestOffset's first routes are
    the last call under the short policy, also after a restart from a checkpoint."""
    fake = FakeOffsets({A0: (0, 10)})
    reader = stream(fake)
    reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    assert fake.running_calls == 0
    reader.latestOffset(spark({A0: 0}), ReadAllAvailable())
    assert fake.running_calls == 1


def test_available_now_ends_where_the_queues_ended_when_it_began() -> None:
    fake = FakeOffsets({A0: (0, 10)})
    reader = stream(fake)
    reader.prepareForTriggerAvailableNow()
    fake.ranges[A0] = (0, 20)
    fake.ranges[A1] = (0, 5)  # a queue added after the run began is not part of it
    assert reader.latestOffset(spark({A0: 3}), ReadAllAvailable()) == to_spark({A0: 10})


# -------------------------------------------------------------------- partitions


def test_partitions_split_as_the_options_ask() -> None:
    fake = FakeOffsets({A0: (0, 100), B0: (0, 10)})
    reader = stream(fake, maxMessagesPerPartition="40")
    parts = ranges(reader.partitions(spark({A0: 0, B0: 0}), spark({A0: 100, B0: 10})))
    assert parts == [(A0, 0, 34), (A0, 34, 67), (A0, 67, 100), (B0, 0, 10)]
    reader = stream(fake, minPartitions="4")
    parts = ranges(reader.partitions(spark({A0: 0, B0: 0}), spark({A0: 100, B0: 10})))
    assert parts == [(A0, 0, 34), (A0, 34, 67), (A0, 67, 100), (B0, 0, 10)]


def test_partitions_carry_what_a_task_needs() -> None:
    fake = FakeOffsets({A0: (0, 10)})
    reader = stream(fake, subExpression="TagA || TagB", pullBatchSize="7", namespace="ns", maxBodyBytes="5000")
    start = {MessageQueue("ns%" + TOPIC, "broker-a", 0): 0}
    fake.ranges = {MessageQueue("ns%" + TOPIC, "broker-a", 0): (0, 10)}
    [part] = reader.partitions(spark(start), spark({q: 10 for q in start}))
    assert isinstance(part, RocketMQPartition)
    assert (
        part.task.display_topic(part.ranges[0].queue.topic),
        part.task.group,
        part.task.tag_filter,
        part.task.pull_batch_size,
        part.task.max_body_bytes,
    ) == (TOPIC, "ns%g", frozenset({"TagA", "TagB"}), 7, 5000)


def test_a_task_carries_each_option_it_names_and_the_group_pulls_name() -> None:
    source = options(
        streaming=False,
        subExpression="TagA",
        pullBatchSize="9",
        namespace="ns",
        maxBodyBytes="7000",
        failOnDataLoss="false",
    )
    task = TaskOptions.of(replace(source, columns=("queueOffset",)))
    assert (task.group, task.sub_expression, task.expression_type, task.tag_filter) == (
        BATCH_READ_GROUP,
        "TagA",
        EXPRESSION_TAG,
        frozenset({"TagA"}),
    )
    assert (task.pull_batch_size, task.fail_on_data_loss, task.namespace, task.max_body_bytes) == (9, False, "ns", 7000)
    assert (task.client, task.retry, task.columns) == (source.client, source.retry, ("queueOffset",))


# ------------------------------------------------------------------------- batch


def batch(fake: FakeOffsets, **extra: str) -> list[tuple[MessageQueue, int, int]]:
    reader = RocketMQBatchReader(options(streaming=False, **extra), open_offsets=lambda _: fake)  # type: ignore[arg-type,return-value]
    return ranges(reader.partitions())


def test_a_batch_reads_from_earliest_to_latest_by_default() -> None:
    fake = FakeOffsets({A0: (3, 10), A1: (0, 0), B0: (0, 2)})
    assert batch(fake) == [(A0, 3, 10), (B0, 0, 2)]


def test_a_batch_with_nothing_to_read_plans_no_partition_and_reads_no_row() -> None:
    """PySpark runs one task of InputPartition(None) when partitions() planned none."""
    fake = FakeOffsets({A0: (0, 0), B0: (4, 4)})
    reader = RocketMQBatchReader(options(streaming=False), open_offsets=lambda _: fake)  # type: ignore[arg-type,return-value]
    assert reader.partitions() == []
    assert list(reader.read(InputPartition(None))) == []


def test_a_batch_reads_a_time_window() -> None:
    times = {A0: [100, 200, 300, 400], B0: [150, 350]}
    fake = FakeOffsets({A0: (0, 4), B0: (0, 2)}, times=times)
    assert batch(fake, startingTimestamp="200", endingTimestamp="400") == [(A0, 1, 3), (B0, 1, 2)]


def test_a_batch_reads_json_offsets_and_rejects_unknown_queues() -> None:
    fake = FakeOffsets({A0: (0, 10), B0: (0, 10)})
    window = batch(
        fake,
        startingOffsets=json.dumps({TOPIC: {"broker-a": {"0": 2}, "broker-b": {"0": 5}}}),
        endingOffsets=json.dumps({TOPIC: {"broker-a": {"0": 4}}}),
    )
    assert window == [(A0, 2, 4), (B0, 5, 10)]
    with pytest.raises(ConfigurationError, match="endingOffsets"):
        batch(fake, endingOffsets=json.dumps({TOPIC: {"broker-c": {"0": 4}}}))


def test_a_batch_from_the_group_applies_the_start_rules() -> None:
    fake = FakeOffsets({A0: (0, 10), B0: (0, 10)}, stored={A0: 6})
    assert batch(fake, consumerGroup="g", startingOffsets="group", consumeFromWhere="CONSUME_FROM_FIRST_OFFSET") == [
        (A0, 6, 10),
        (B0, 0, 10),
    ]
    assert fake.commits == []  # batch reads never commit
    with pytest.raises(ConfigurationError, match="consumerGroup"):
        batch(fake, startingOffsets="group")


def test_a_batch_fails_on_expired_json_offsets_unless_allowed() -> None:
    fake = FakeOffsets({A0: (5, 10)})
    start = json.dumps({TOPIC: {"broker-a": {"0": 1}}})
    with pytest.raises(DataLossError, match="deleted or expired"):
        batch(fake, startingOffsets=start)
    assert batch(fake, startingOffsets=start, failOnDataLoss="false") == [(A0, 5, 10)]


def test_a_batch_fails_at_planning_on_json_offsets_past_a_queues_end() -> None:
    """Past the end, whatever failOnDataLoss says: the error names the end, at once, not after a
    wait as data the broker no longer has."""
    fake = FakeOffsets({A0: (0, 10), B0: (0, 10)})
    past = json.dumps({TOPIC: {"broker-a": {"0": 11}, "broker-b": {"0": 0}}})
    for name in ("startingOffsets", "endingOffsets"):
        for fail_on_data_loss in ("true", "false"):
            with pytest.raises(
                ConfigurationError, match=name + r".*broker-a/0: 11 is beyond the queue's end \(max 10\)"
            ):
                batch(fake, failOnDataLoss=fail_on_data_loss, **{name: past})
    at_end = json.dumps({TOPIC: {"broker-a": {"0": 10}, "broker-b": {"0": 0}}})
    assert batch(fake, startingOffsets=at_end) == [(B0, 0, 10)]
    assert batch(fake, endingOffsets=at_end) == [(A0, 0, 10)]
