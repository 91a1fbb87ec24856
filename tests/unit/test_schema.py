"""A user-given schema: any of the source's columns, in any order, with their types; only those
are produced, the same values as in a full row, and the decoding of the others is skipped."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.datasource import RocketMQDataSource
from rocketmq_spark.model import MessageQueue
from rocketmq_spark.records import columnar
from rocketmq_spark.remoting import codes
from rocketmq_spark.source.batch_reader import RocketMQBatchReader
from rocketmq_spark.source.datasource import RefusedStreamReader
from rocketmq_spark.source.option_model import ReadKind
from rocketmq_spark.source.options import parse_options
from rocketmq_spark.source.partition import make_partitions
from rocketmq_spark.source.planning import QueueRange
from rocketmq_spark.source.rows import BatchBuilder, RowRange
from rocketmq_spark.source.schema import COLUMNS, SCHEMA, checked_columns
from tests.records import properties_block, record

OPTIONS = {"nameServer": "127.0.0.1:9876", "topic": "t", "consumerGroup": "g"}


def narrow(*names: str) -> StructType:
    return StructType([SCHEMA[name] for name in names])


def test_any_subset_in_any_order_is_accepted() -> None:
    assert checked_columns(SCHEMA) == COLUMNS
    assert checked_columns(narrow("storeTimestamp", "body", "topic")) == ("storeTimestamp", "body", "topic")
    written = StructType([StructField("queueOffset", LongType()), StructField("tags", StringType())])
    assert checked_columns(written) == ("queueOffset", "tags")


@pytest.mark.parametrize(
    "schema, problem",
    [
        (StructType([StructField("queueId", LongType())]), "'queueId' is int, not bigint"),
        (StructType([StructField("partition", IntegerType())]), "'partition' is not a column of the source"),
        (StructType([StructField("tags", StringType()), StructField("tags", StringType())]), "'tags' is named twice"),
        (StructType([StructField("tags", StringType(), nullable=False)]), "'tags' must be nullable"),
        (StructType([]), "it names no column"),
    ],
)
def test_other_schemas_fail_naming_the_allowed_columns(schema: StructType, problem: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        checked_columns(schema)
    assert err.value.option == "schema" and problem in str(err.value)
    assert SCHEMA.simpleString() in str(err.value)


def test_readers_take_the_columns_of_the_schema_spark_gives() -> None:
    batch = RocketMQDataSource(OPTIONS).reader(narrow("keys", "queueId"))
    assert isinstance(batch, RocketMQBatchReader) and batch.options.columns == ("keys", "queueId")
    stream = RocketMQDataSource(OPTIONS).streamReader(narrow("body"))
    assert getattr(stream, "source", stream).options.columns == ("body",)
    with pytest.raises(ConfigurationError, match="is int, not bigint"):
        RocketMQDataSource(OPTIONS).reader(StructType([StructField("queueId", LongType())]))
    refused = RocketMQDataSource(OPTIONS).streamReader(StructType([StructField("x", StringType())]))
    refused = getattr(refused, "source", refused)  # wrapped on PySpark 4.0 and 4.1 (spark_api)
    assert isinstance(refused, RefusedStreamReader) and refused.error.option == "schema"


def test_partitions_carry_the_columns_to_the_tasks() -> None:
    options = parse_options(OPTIONS, kind=ReadKind.BATCH)
    queue = MessageQueue("t", "b", 0)
    parts = make_partitions(replace(options, columns=("body",)), [[QueueRange(queue, 0, 1)]])
    assert parts[0].task.columns == ("body",)


def pulls(tag: str = "TagA") -> list[bytes]:
    """Two pulls: one the bulk decoder takes, one only the per-record decoder takes."""

    def one(offset: int, **fields: Any) -> bytes:
        block = properties_block({"TAGS": tag, "KEYS": f"k{offset}", "UNIQ_KEY": f"U{offset}"})
        return record(queue_offset=offset, body=f"m{offset}".encode(), properties=block, **fields)

    return [one(0) + one(1), one(2, magic=codes.MESSAGE_MAGIC_V2)]


def built(columns: tuple[str, ...], tags: frozenset[str] | None = None) -> pa.RecordBatch:
    builder = BatchBuilder([RowRange("t", "b", 3, start=0, end=10)], tags=tags, columns=columns)
    for body in pulls():
        builder.add_pull(0, body, 0)
    batch = builder.flush()
    assert batch is not None
    return batch


@pytest.mark.parametrize(
    "columns",
    [
        ("body", "queueOffset"),
        ("storeHost", "msgId", "topic"),
        ("properties",),
        ("flag", "bornTimestamp", "keys"),
        ("offsetMsgId", "brokerName", "queueId", "tags", "bornHost", "reconsumeTimes", "storeTimestamp"),
    ],
)
def test_a_narrow_batch_holds_the_columns_asked_for_with_the_full_rows_values(columns: tuple[str, ...]) -> None:
    full = built(COLUMNS)
    batch = built(columns)
    assert batch.schema.names == list(columns)
    for name in columns:
        assert batch.column(name).to_pylist() == full.column(name).to_pylist(), name
        assert batch.schema.field(name).type == full.schema.field(name).type


def test_the_exact_tag_check_works_without_the_tags_column() -> None:
    builder = BatchBuilder([RowRange("t", "b", 3, start=0, end=10)], tags=frozenset({"Other"}), columns=("body",))
    for body in pulls():
        builder.add_pull(0, body, 0)
    assert builder.flush() is None


def test_columns_not_asked_for_are_not_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    for name in ("split_blocks", "_hosts", "_offset_msg_ids", "_binary"):
        real = getattr(columnar, name)
        monkeypatch.setattr(columnar, name, lambda *a, _real=real, _name=name: (calls.append(_name), _real(*a))[1])
    batch = built(("queueOffset", "storeTimestamp"))
    assert batch.num_rows == 3
    assert calls == []
    built(("msgId",))
    assert set(calls) == {"split_blocks", "_offset_msg_ids", "_binary"}
