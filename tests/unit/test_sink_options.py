"""The sink's options and columns, checked before anything is sent, and the data source telling a
write's options from a read's."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.datasource import RocketMQDataSource
from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.errors import BrokerResponseError
from rocketmq_spark.remoting.retry import NO_BUDGET
from rocketmq_spark.sink.columns import BODY, SHARDING_KEY, ColumnError, check_columns
from rocketmq_spark.sink.exactly_once import refuse_what_cannot_be_exactly_once
from rocketmq_spark.sink.options import (
    DEFAULT_BATCH_MAX_BYTES,
    DEFAULT_PRODUCER_GROUP,
    DEFAULT_TRANSACTION_TOPIC,
    PINNED_RETRY_PAUSE_S,
    ExactlyOnceOptions,
    looks_like_a_write,
    parse_sink_options,
    sink_retry,
)
from rocketmq_spark.source.schema import SCHEMA

SERVER = {"nameServer": "127.0.0.1:9876"}


def schema(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, data_type) for name, data_type in fields])  # type: ignore[arg-type]


def test_defaults_are_the_contract_s() -> None:
    options = parse_sink_options(SERVER)
    assert options.topic is None
    assert options.producer_group == DEFAULT_PRODUCER_GROUP == "rocketmq-spark-writer"
    assert (options.send_timeout_ms, options.retries, options.compress_body_over_bytes) == (3000, 2, 4096)
    assert options.batch_max_bytes == DEFAULT_BATCH_MAX_BYTES == 1048576


def test_retries_become_a_count_of_attempts_after_the_java_producer_s_answers() -> None:
    retry = sink_retry(parse_sink_options({**SERVER, "retries": "3"}))
    assert (retry.attempts, retry.budget_s) == (4, NO_BUDGET)  # the first send and 3 more
    assert retry.first_backoff_s == retry.max_backoff_s == PINNED_RETRY_PAUSE_S  # a steady pause
    assert sink_retry(parse_sink_options(SERVER)).attempts == 3
    retried = [ResponseCode.SYSTEM_ERROR, ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE]
    assert all(retry.retriable(BrokerResponseError(code, None)) for code in retried)
    assert not retry.retriable(BrokerResponseError(ResponseCode.MESSAGE_ILLEGAL, None))


def test_options_are_case_insensitive_and_take_the_namespace() -> None:
    options = parse_sink_options(
        {**SERVER, "TOPIC": "t", "producergroup": "g", "namespace": "ns", "batchMaxBytes": "0", "retries": "0"}
    )
    assert (options.topic, options.producer_group, options.batch_max_bytes, options.retries) == ("ns%t", "ns%g", 0, 0)


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({}, "nameServer"),
        ({**SERVER, "sendTimeoutMs": "0"}, "sendTimeoutMs"),
        ({**SERVER, "retries": "-1"}, "retries"),
        ({**SERVER, "compressBodyOverBytes": "x"}, "compressBodyOverBytes"),
        ({**SERVER, "consumerGroup": "g"}, "consumerGroup"),
        ({**SERVER, "accessKey": "a"}, "secretKey"),
    ],
)
def test_bad_options_name_themselves(raw: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError, match=f"option '{named}'"):
        parse_sink_options(raw)


def test_spark_s_own_options_are_taken() -> None:
    assert parse_sink_options({**SERVER, "path": "x", "checkpointLocation": "/c"}).topic is None


def test_columns_are_matched_by_name_in_any_case() -> None:
    columns = check_columns(
        schema(("Body", StringType()), ("TOPIC", StringType()), ("shardingkey", StringType())), None
    )
    assert columns.names == {"body": "Body", "topic": "TOPIC", "shardingKey": "shardingkey"}
    assert columns.has(SHARDING_KEY) and columns.has(BODY)


def test_every_column_of_the_contract_is_taken() -> None:
    every = schema(
        ("body", BinaryType()),
        ("topic", StringType()),
        ("tags", StringType()),
        ("keys", StringType()),
        ("properties", MapType(StringType(), StringType())),
        ("shardingKey", StringType()),
        ("brokerName", StringType()),
        ("queueId", IntegerType()),
        ("deliverTime", TimestampType()),
        ("delayLevel", IntegerType()),
    )
    assert len(check_columns(every, None).names) == len(every.fields)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ((("body", BinaryType()), ("value", BinaryType())), "column 'value': is not a column.*body, topic, tags"),
        ((("body", LongType()),), "column 'body': is bigint, not BINARY or STRING"),
        ((("body", BinaryType()), ("queueId", LongType()), ("brokerName", StringType())), "queueId.*not INT"),
        ((("body", BinaryType()), ("properties", MapType(StringType(), IntegerType()))), "MAP<STRING,STRING>"),
        ((("topic", StringType()),), "column 'body': is missing"),
        ((("body", BinaryType()), ("brokerName", StringType())), "column 'queueId': is missing.*both"),
        ((("body", BinaryType()), ("queueId", IntegerType())), "column 'brokerName': is missing"),
        ((("body", BinaryType()), ("BODY", BinaryType())), "repeats"),
    ],
)
def test_bad_columns_name_the_column_and_the_fix(fields: tuple[tuple[str, object], ...], message: str) -> None:
    with pytest.raises(ColumnError, match=message):
        check_columns(schema(*fields), "t")


def test_a_topic_is_needed_in_a_column_or_the_option() -> None:
    with pytest.raises(ColumnError, match="column 'topic': is missing, and so is the topic option"):
        check_columns(schema(("body", BinaryType())), None)
    assert check_columns(schema(("body", BinaryType())), "t").names == {"body": "body"}


def test_a_write_is_known_by_an_option_only_a_write_takes() -> None:
    assert looks_like_a_write({"ProducerGroup": "g"})
    assert not looks_like_a_write({**SERVER, "topic": "t"})


def test_schema_lets_a_write_without_a_topic_option_through() -> None:
    assert RocketMQDataSource(dict(SERVER)).schema() == SCHEMA
    assert RocketMQDataSource({**SERVER, "producerGroup": "g"}).schema() == SCHEMA


def test_schema_refuses_what_is_neither_a_read_nor_a_write() -> None:
    with pytest.raises(ConfigurationError, match="option 'sendTimeoutMs'"):
        RocketMQDataSource({**SERVER, "producerGroup": "g", "sendTimeoutMs": "soon"}).schema()
    with pytest.raises(ConfigurationError, match="option 'startingOffsets'"):
        RocketMQDataSource({**SERVER, "topic": "t", "startingOffsets": "nowhere"}).schema()
    with pytest.raises(ConfigurationError, match="option 'nameServer'"):
        RocketMQDataSource({"topic": "t"}).schema()


def test_exactly_once_takes_its_options_and_defaults_and_needs_a_named_group() -> None:
    assert parse_sink_options({**SERVER, "topic": "t"}).exactly_once is None
    options = parse_sink_options(
        {**SERVER, "topic": "t", "DeliveryGuarantee": "Exactly-Once", "producerGroup": "enricher", "namespace": "ns"}
    )
    assert options.exactly_once == ExactlyOnceOptions(f"ns%{DEFAULT_TRANSACTION_TOPIC}", None)
    assert options.producer_group == "ns%enricher"
    given = parse_sink_options(
        {**SERVER, "deliveryGuarantee": "exactly-once", "producerGroup": "g", "writeId": "w", "transactionTopic": "tx"}
    )
    assert given.exactly_once == ExactlyOnceOptions("tx", "w")


@pytest.mark.parametrize(
    ("raw", "named", "says"),
    [
        ({"deliveryGuarantee": "twice"}, "deliveryGuarantee", "at-least-once or exactly-once"),
        ({"deliveryGuarantee": "exactly-once"}, "producerGroup", "is required with deliveryGuarantee=exactly-once"),
        ({"writeId": "w"}, "writeId", "is used only with deliveryGuarantee=exactly-once"),
        ({"transactionTopic": "tx"}, "transactionTopic", "is used only with deliveryGuarantee=exactly-once"),
    ],
)
def test_exactly_once_options_out_of_place_name_themselves(raw: dict[str, str], named: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says) as caught:
        parse_sink_options({**SERVER, "topic": "t", **raw})
    assert caught.value.option == named


@pytest.mark.parametrize("column", ["delayLevel", "deliverTime"])
def test_exactly_once_refuses_delayed_and_timed_rows_before_sending(column: str) -> None:
    options = parse_sink_options({**SERVER, "topic": "t", "deliveryGuarantee": "exactly-once", "producerGroup": "g"})
    with pytest.raises(
        ConfigurationError, match=f"cannot send column {column}: a transactional message takes no delay"
    ):
        refuse_what_cannot_be_exactly_once(options, {BODY: "body", column: column})
