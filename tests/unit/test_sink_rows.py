"""Rows to messages and messages to queues: what the sink takes from Arrow batches and Spark rows,
which properties it keeps, and the queue each row goes to."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import Row as SparkRow

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.records.properties import parse_properties
from rocketmq_spark.remoting.errors import TopicNotFoundError
from rocketmq_spark.remoting.replicas import PASSED_OVER_S, Replicas
from rocketmq_spark.remoting.route import TopicRoute, parse_route
from rocketmq_spark.sink.messages import (
    Row,
    RowError,
    batch_properties,
    encoded_properties,
    rows_from_columns,
    rows_of,
)
from rocketmq_spark.sink.queues import QueuePicker, hashed_queue
from rocketmq_spark.sink.spark_api import spark_rows_to_columns

NAMES = {"body": "Body", "topic": "topic", "tags": "tags", "properties": "properties", "deliverTime": "deliverTime"}
WHEN = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
WHEN_MS = int(WHEN.timestamp() * 1000)


def batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "Body": pa.array(["héllo", "x"], pa.string()),
            "topic": pa.array(["t", "u"]),
            "tags": pa.array(["a", None]),
            "properties": pa.array([[("k", "v")], None], pa.map_(pa.string(), pa.string())),
            "deliverTime": pa.array([WHEN, None], pa.timestamp("us", tz="UTC")),
        }
    )


def test_rows_come_from_arrow_columns_by_name() -> None:
    rows = rows_of(batch(), NAMES, None, "ns")
    assert rows[0] == Row("ns%t", "héllo".encode(), "a", None, [("k", "v")], deliver_ms=WHEN_MS)
    assert rows[1] == Row("ns%u", b"x")
    assert rows[0].single and not rows[1].single and not rows[1].pinned


def test_the_topic_option_overrides_the_column() -> None:
    assert {r.topic for r in rows_of(batch(), NAMES, "ns%o", "ns")} == {"ns%o"}


def test_spark_rows_give_the_same_rows_as_arrow() -> None:
    spark_rows = [
        SparkRow(Body="héllo", topic="t", tags="a", properties={"k": "v"}, deliverTime=WHEN),
        SparkRow(Body=bytearray(b"x"), topic="u", tags=None, properties=None, deliverTime=None),
    ]
    [(values, count)] = list(spark_rows_to_columns(spark_rows, NAMES))
    assert rows_from_columns(values, count, None, "ns") == rows_of(batch(), NAMES, None, "ns")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"body": [None], "topic": ["t"]}, "a row of topic t has a null body"),
        ({"body": [b""], "topic": ["t"]}, "a row of topic t has an empty body"),
        ({"body": [b"x"], "topic": [None]}, "a row has no topic"),
        ({"body": [b"x"], "topic": ["t"], "delayLevel": [2], "deliverTime": [1]}, "both delayLevel and deliverTime"),
        ({"body": [b"x"], "topic": ["t"], "delayLevel": [0]}, "delayLevel 0"),
        ({"body": [b"x"], "topic": ["t"], "brokerName": ["a"], "queueId": [None]}, "only one of brokerName"),
    ],
)
def test_rows_that_cannot_be_sent_name_their_topic(values: dict[str, list[object]], message: str) -> None:
    with pytest.raises(RowError, match=message):
        rows_from_columns(values, 1, None, None)


def test_properties_rocketmq_puts_on_stored_messages_are_dropped_and_tags_keys_set_by_columns() -> None:
    row = Row("t", b"x", tags="new", keys="k", properties=[("TAGS", "old"), ("UNIQ_KEY", "X"), ("MIN_OFFSET", "0"),
                                                           ("CLUSTER", "c"), ("mine", "1"), ("empty", "")])  # fmt: skip
    properties = parse_properties(encoded_properties(row, "ID", five_x=True, namespace=None).decode())
    assert properties == {"mine": "1", "TAGS": "new", "KEYS": "k", "WAIT": "true", "UNIQ_KEY": "ID"}


def test_reserved_names_are_errors_on_the_broker_s_line() -> None:
    row = Row("t", b"x", properties=[("POP_CK", "1")])
    with pytest.raises(RowError, match="property POP_CK, a name RocketMQ reserves"):
        encoded_properties(row, "ID", five_x=True, namespace=None)
    assert b"POP_CK\x011" in encoded_properties(row, "ID", five_x=False, namespace=None)  # 4.9 does not reserve it
    with pytest.raises(RowError, match="MSG_TYPE"):
        encoded_properties(Row("t", b"x", properties=[("MSG_TYPE", "reply")]), "ID", five_x=False, namespace=None)


def test_delays_and_timers_become_their_properties_and_timers_need_5x() -> None:
    delayed = parse_properties(
        encoded_properties(Row("t", b"x", delay_level=3), "ID", five_x=False, namespace="ns").decode()
    )
    assert (delayed["DELAY"], delayed["INSTANCE_ID"]) == ("3", "ns")
    timed = Row("t", b"x", deliver_ms=WHEN_MS)
    assert parse_properties(encoded_properties(timed, "ID", five_x=True, namespace=None).decode())[
        "TIMER_DELIVER_MS"
    ] == str(WHEN_MS)
    with pytest.raises(RowError, match="deliverTime, but its broker runs RocketMQ 4.9"):
        encoded_properties(timed, "ID", five_x=False, namespace=None)


def test_a_batch_s_own_properties_carry_no_unique_id() -> None:
    assert batch_properties(None) == "WAIT\x01true\x02"
    assert "UNIQ_KEY" not in batch_properties("ns")


def route(order: str | None = None) -> TopicRoute:
    datas = [{"brokerName": n, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6} for n in ("b", "a")]
    brokers = [{"brokerName": n, "brokerAddrs": {"0": f"{n}:1"}} for n in ("a", "b")]
    return parse_route("t", json.dumps({"orderTopicConf": order, "queueDatas": datas, "brokerDatas": brokers}).encode())


class Routes:
    def __init__(self, current: TopicRoute | None) -> None:
        self.current = current

    def route(self, topic: str, suspect: bool = False) -> TopicRoute:
        if self.current is None:
            raise TopicNotFoundError(17, "No topic route info in name server for the topic: t")
        return self.current

    def passed_over(self, address: str) -> bool:
        return False


def test_sharding_keys_pick_as_java_s_select_message_queue_by_hash() -> None:
    queues = route().publish_queues()
    # "abc".hashCode() == 96354; "polygenelubricants".hashCode() == Integer.MIN_VALUE
    assert hashed_queue(queues, "abc") == queues[96354 % 8]
    assert hashed_queue(queues, "polygenelubricants") == queues[0]  # Java: abs(MIN_VALUE % 8) == 0
    assert hashed_queue(queues[:3], "polygenelubricants") == queues[2]  # Java: abs(MIN_VALUE % 3) == 2
    picker = QueuePicker(Routes(route()))
    assert picker.pick(Row("t", b"x", sharding_key="abc")) == queues[96354 % 8]


def test_round_robin_passes_over_a_failed_broker_for_a_while() -> None:
    now = [0.0]
    replicas = Replicas(lambda topic: route(), clock=lambda: now[0])
    picker = QueuePicker(replicas, clock=lambda: now[0])
    replicas.failed("a:1", "t")  # a send, or any request, to broker a's master failed
    picked = {picker.pick(Row("t", b"x")).broker_name for _ in range(8)}
    assert picked == {"b"}
    now[0] += PASSED_OVER_S
    assert {picker.pick(Row("t", b"x")).broker_name for _ in range(8)} == {"a", "b"}
    assert picker.pick(Row("t", b"x"), avoid="a").broker_name == "b"


def test_round_robin_takes_every_queue_in_turn() -> None:
    picker = QueuePicker(Routes(route()))
    assert len({picker.pick(Row("t", b"x")) for _ in range(8)}) == 8


def test_explicit_queues_must_be_writable_ones_of_the_route() -> None:
    picker = QueuePicker(Routes(route()))
    assert picker.pick(Row("t", b"x", broker_name="b", queue_id=3)) == MessageQueue("t", "b", 3)
    with pytest.raises(RowError, match="names queue b/4, which the route does not list"):
        picker.pick(Row("t", b"x", broker_name="b", queue_id=4))


def test_a_topic_the_route_does_not_list_is_an_error_naming_it() -> None:
    with pytest.raises(RowError, match="topic t does not exist.*creates no topics"):
        QueuePicker(Routes(None)).pick(Row("t", b"x"))


def spread_route(brokers: int, queues: int) -> TopicRoute:
    """Topic ``t`` on ``brokers`` broker names (masters ``<name>:1``), ``queues`` write queues each."""
    names = [f"b{i}" for i in range(brokers)]
    datas = [{"brokerName": n, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6} for n in names]
    masters = [{"brokerName": n, "brokerAddrs": {"0": f"{n}:1"}} for n in names]
    return parse_route("t", json.dumps({"queueDatas": datas, "brokerDatas": masters}).encode())


@settings(max_examples=200, deadline=None)
@given(
    brokers=st.integers(1, 4),
    queues=st.integers(1, 5),
    failed=st.sets(st.integers(0, 3)),
    start=st.integers(0, 1 << 16),
    counts=st.lists(st.integers(0, 40), min_size=1, max_size=5),
)
def test_spread_gives_what_next_queue_gives_one_by_one(
    brokers: int, queues: int, failed: set[int], start: int, counts: list[int]
) -> None:
    """The vectorized round robin is the per-row one, whichever brokers failed and wherever the
    turn starts, over several batches in a row."""
    current = spread_route(brokers, queues)
    routes = Replicas(lambda topic: current)
    for index in failed:
        routes.failed(f"b{index}:1", "t")
    one, many = QueuePicker(routes), QueuePicker(routes)
    one._next = many._next = start
    for count in counts:
        expected = [one.next_queue("t") for _ in range(count)]
        listed, chosen = many.spread("t", count)
        assert [listed[i] for i in chosen] == expected
    assert one.next_queue("t") == many.next_queue("t")
