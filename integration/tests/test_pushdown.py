"""A user-given narrow schema and filter pushdown, against the real broker and Spark.

A narrow schema must give the values of the full one, row by row. Each predicate the source can
push must give exactly the rows of the same query without pushdown (Spark filtering everything
itself, on a cached read of the whole topic), and the plan must show the exact ones gone from
Spark's Filter. Pushdown needs PySpark 4.1+ and Spark's conf; the module turns it on and back off.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from functools import reduce
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from integration.constants import TAGS
from integration.failfast import fail_batch
from integration.support import ClusterHandle, batch_read, collect_available_now, create_topic, produce
from rocketmq_spark.source.spark_api import FILTER_PUSHDOWN, FILTER_PUSHDOWN_CONF

pytestmark = pytest.mark.integration

MESSAGES = 72
BATCH = 6
# Messages per second: the batches are stored over a few seconds, many messages of each batch
# sharing a store time.
RATE = 30
KEY = ("brokerName", "queueId", "queueOffset")


@pytest.fixture(scope="module")
def topic(rocketmq: ClusterHandle) -> str:
    """Two queues on each broker, tags in turn, batch sends paced over a few seconds: many
    messages share a store time, and there are many store times."""
    name = f"pushdown-{uuid.uuid4().hex[:8]}"
    create_topic(rocketmq, name, queues=2)
    produce(
        rocketmq,
        name,
        MESSAGES,
        "--tags",
        ",".join(TAGS),
        "--keys",
        "m-{i}",
        "--batch",
        str(BATCH),
        "--rate",
        str(RATE),
        "--quiet",
    )
    return name


@pytest.fixture(scope="module")
def everything(spark: Any, rocketmq: ClusterHandle, topic: str) -> Iterator[Any]:
    """The whole topic read once without pushdown, cached: the reference every query is held to."""
    df = batch_read(spark, rocketmq, topic).cache()
    assert df.count() == MESSAGES
    yield df
    df.unpersist()


def keyed(rows: list[Any]) -> dict[tuple[Any, ...], Any]:
    return {tuple(row[k] for k in KEY): row for row in rows}


@pytest.mark.parametrize(
    "columns",
    [
        "storeTimestamp TIMESTAMP, keys STRING, queueOffset BIGINT, brokerName STRING, queueId INT, msgId STRING, "
        "properties MAP<STRING,STRING>, body BINARY",
        "queueId INT, queueOffset BIGINT, flag INT, brokerName STRING, bornHost STRING, offsetMsgId STRING, "
        "tags STRING, reconsumeTimes INT, bornTimestamp TIMESTAMP, storeHost STRING, topic STRING",
    ],
)
def test_a_narrow_schema_gives_the_full_rows_values(
    spark: Any, rocketmq: ClusterHandle, topic: str, everything: Any, columns: str
) -> None:
    reader = spark.read.format("rocketmq").schema(columns).option("nameServer", rocketmq.namesrv_addr)
    df = reader.option("topic", topic).load()
    names = [c.split()[0] for c in columns.split(", ")]
    assert df.columns == names
    full = keyed(everything.collect())
    narrow = keyed(df.collect())
    assert narrow.keys() == full.keys()
    for key, row in narrow.items():
        assert row.asDict() == {name: full[key][name] for name in names}, key


def test_a_stream_with_a_narrow_schema_gives_the_full_rows_values(
    spark: Any, rocketmq: ClusterHandle, topic: str, everything: Any, tmp_path: Path
) -> None:
    columns = "keys STRING, queueId INT, brokerName STRING, queueOffset BIGINT"
    df = (
        spark.readStream.format("rocketmq")
        .schema(columns)
        .option("nameServer", rocketmq.namesrv_addr)
        .option("topic", topic)
        .option("consumerGroup", f"{topic}-narrow")
        .option("startingOffsets", "earliest")
        .option("commitOffsets", "false")
        .load()
    )
    rows = collect_available_now(df, tmp_path / "checkpoint")
    assert all(row.asDict().keys() == {"keys", "queueId", "brokerName", "queueOffset"} for row in rows)
    full = keyed(everything.collect())
    assert {key: row["keys"] for key, row in keyed(rows).items()} == {key: row["keys"] for key, row in full.items()}


def test_a_schema_with_another_type_fails_naming_the_columns(spark: Any, rocketmq: ClusterHandle, topic: str) -> None:
    _, error = fail_batch(spark, {"nameServer": rocketmq.namesrv_addr, "topic": topic}, schema="queueId BIGINT")
    assert "'queueId' is int, not bigint" in error and "storeTimestamp:timestamp" in error


@pytest.fixture
def pushdown_on(spark: Any) -> Iterator[None]:
    assert FILTER_PUSHDOWN, "the integration suite runs on a PySpark that pushes filters (4.1+)"
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    yield
    spark.conf.unset(FILTER_PUSHDOWN_CONF)


def store_time_ms(everything: Any, index: int) -> int:
    """The store time of the message sent as ``index`` (epoch ms)."""
    return int(everything.where(f"keys = 'm-{index}'").selectExpr("unix_millis(storeTimestamp)").first()[0])


PREDICATES = [
    # {t1}, {t2}: the store times of the messages sent 24th and 48th, a second or so apart.
    "storeTimestamp >= timestamp_millis({t1})",
    "storeTimestamp > timestamp_millis({t1})",
    "storeTimestamp < timestamp_millis({t1})",
    "storeTimestamp <= timestamp_millis({t1})",
    "storeTimestamp >= timestamp_micros({t1} * 1000 - 1) AND storeTimestamp < timestamp_millis({t2})",
    "storeTimestamp > timestamp_millis({t1}) AND storeTimestamp <= timestamp_millis({t2})",
    "tags = 'TagB'",
    "tags IN ('TagA', 'TagC')",
    "brokerName = 'broker-a'",
    "brokerName IN ('broker-a', 'broker-b') AND queueId = 1",
    "queueId IN (0, 7)",
    "queueOffset >= 5 AND queueOffset < 12",
    "queueOffset > 3 AND queueOffset <= 9",
    "brokerName = 'broker-b' AND tags = 'TagA' AND queueOffset > 1 AND keys LIKE 'm-%'",
]


def test_each_pushed_predicate_gives_the_rows_spark_would_keep(
    spark: Any, rocketmq: ClusterHandle, topic: str, everything: Any, pushdown_on: None
) -> None:
    """Every predicate in one job each way (a union of one scan per predicate, each with its own
    pushdown), which keeps the test short on two cores."""
    times = {"t1": store_time_ms(everything, MESSAGES // 3), "t2": store_time_ms(everything, 2 * MESSAGES // 3)}
    wheres = [predicate.format(**times) for predicate in PREDICATES]
    # A DataFrame per query: Spark keeps the planned read of a loaded DataFrame (docs/options.md).
    pushed = [batch_read(spark, rocketmq, topic, filterPushdown="true").where(where) for where in wheres]
    expected = [everything.where(where) for where in wheres]
    found, wanted = by_predicate(pushed), by_predicate(expected)
    assert found == wanted
    empty = [wheres[index] for index in range(len(wheres)) if not wanted.get(index)]
    assert not empty  # an empty read would prove little


def by_predicate(frames: list[Any]) -> dict[int, list[tuple[Any, ...]]]:
    """The keys of the rows of each frame, by its index, from one job over all of them."""
    tagged = [df.select(F.lit(index).alias("predicate"), *KEY) for index, df in enumerate(frames)]
    union = reduce(lambda a, b: a.unionAll(b), tagged)
    out: dict[int, list[tuple[Any, ...]]] = {}
    for row in union.collect():
        out.setdefault(row["predicate"], []).append(tuple(row[k] for k in KEY))
    return {index: sorted(keys) for index, keys in out.items()}


def plan_of(spark: Any, df: Any, where: str) -> str:
    view = f"pushdown_{uuid.uuid4().hex[:8]}"
    df.createOrReplaceTempView(view)
    try:
        return str(spark.sql(f"EXPLAIN SELECT * FROM {view} WHERE {where}").collect()[0][0])
    finally:
        spark.catalog.dropTempView(view)


def test_the_plan_shows_exact_filters_pushed_and_store_times_checked_again(
    spark: Any, rocketmq: ClusterHandle, topic: str, pushdown_on: None
) -> None:
    where = "brokerName = 'broker-b' AND tags = 'TagA' AND queueOffset > 1 AND storeTimestamp >= timestamp_millis(1000)"
    pushed = spark_filter(plan_of(spark, batch_read(spark, rocketmq, topic, filterPushdown="true"), where))
    assert "broker-b" not in pushed and "TagA" not in pushed and not re.search(r"queueOffset#\w+ >", pushed)
    assert re.search(r"storeTimestamp#\w+ >=", pushed)
    plain = spark_filter(plan_of(spark, batch_read(spark, rocketmq, topic), where))
    assert "broker-b" in plain and "TagA" in plain and re.search(r"queueOffset#\w+ >", plain)


def spark_filter(plan: str) -> str:
    """The condition Spark evaluates over the scan's rows."""
    return next(line for line in plan.splitlines() if "Filter (" in line)
