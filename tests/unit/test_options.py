"""Option parsing: defaults from the options reference, a clear error for each bad input, and
when Spark lets the source check them (``schema()`` at load())."""

from __future__ import annotations

from datetime import datetime

import pytest

from rocketmq_spark.config.cluster import CLUSTER_OPTIONS, RETRY_BUDGET_MS
from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.datasource import RocketMQDataSource
from rocketmq_spark.model import ClientConfig, MessageQueue, SettingNames
from rocketmq_spark.source.datasource import RefusedStreamReader
from rocketmq_spark.source.option_model import ALL_OPTIONS, ConsumeFromWhere, OnOffsetReset, ReadKind, StartingMode
from rocketmq_spark.source.options import parse_options
from rocketmq_spark.source.schema import SCHEMA
from rocketmq_spark.source.spark_api import PlainStreamReader, ReadAllAvailable

NOW_MS = 1_700_000_000_000
BASE = {"nameServer": "127.0.0.1:9876", "topic": "orders", "consumerGroup": "g"}
STREAM, BATCH = ReadKind.STREAM, ReadKind.BATCH


def stream(**extra: str) -> object:
    return parse_options({**BASE, **extra}, kind=ReadKind.STREAM, now_ms=NOW_MS)


def batch(**extra: str) -> object:
    options = {**BASE, **extra}
    return parse_options(options, kind=ReadKind.BATCH, now_ms=NOW_MS)


def test_stream_defaults() -> None:
    opts = stream()
    assert opts.client.name_servers == ("127.0.0.1:9876",)
    assert opts.client.request_timeout == 10.0
    assert opts.topics == ("orders",)
    assert opts.consumer_group == "g"
    assert (opts.sub_expression, opts.expression_type) == ("*", "TAG")
    assert opts.tag_filter is None
    assert opts.consume_from_where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    assert opts.consume_timestamp_ms == NOW_MS - 30 * 60 * 1000
    assert opts.starting_mode is StartingMode.GROUP
    assert opts.max_trigger_delay_ms == 15 * 60 * 1000
    assert (opts.fail_on_data_loss, opts.commit_offsets, opts.pull_batch_size) == (True, True, 32)
    assert opts.on_offset_reset is OnOffsetReset.FOLLOW
    assert opts.max_body_bytes == 16 * 1024 * 1024
    assert stream(maxBodyBytes="1000").max_body_bytes == 1000


def test_batch_defaults_start_at_earliest_and_need_no_group() -> None:
    opts = parse_options({"nameServer": "h:1", "topic": "t", "namespace": "ns"}, kind=ReadKind.BATCH, now_ms=NOW_MS)
    assert opts.starting_mode is StartingMode.EARLIEST
    assert opts.consumer_group is None
    # Pulls name a group every broker has from its start, never namespaced.
    assert opts.pull_group == "TOOLS_CONSUMER"
    assert opts.ending_offsets is None


def test_names_are_case_insensitive_and_values_parsed() -> None:
    opts = stream(
        NAMESERVER="a:1;b:2",
        TOPIC=" x , y ,x",
        maxmessagespertrigger="100",
        MAXTRIGGERDELAY="30s",
        subexpression="TagA || TagB",
        pullbatchsize="64",
        consumefromwhere="consume_from_first_offset",
        failondataloss="FALSE",
        ONOFFSETRESET="Ignore",
    )
    assert opts.client.name_servers == ("a:1", "b:2")
    assert opts.topics == ("x", "y")
    assert opts.max_messages_per_trigger == 100
    assert opts.max_trigger_delay_ms == 30_000
    assert opts.tag_filter == frozenset({"TagA", "TagB"})
    assert opts.pull_batch_size == 64
    assert opts.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    assert opts.fail_on_data_loss is False
    assert opts.on_offset_reset is OnOffsetReset.IGNORE


def test_consume_timestamp_in_rocketmq_format_or_epoch_ms() -> None:
    expected = int(datetime(2024, 1, 31, 23, 59, 59).timestamp() * 1000)
    assert stream(consumeTimestamp="20240131235959").consume_timestamp_ms == expected
    assert stream(consumeTimestamp="1700000000123").consume_timestamp_ms == 1_700_000_000_123


def test_json_starting_offsets_and_namespace() -> None:
    opts = stream(startingOffsets='{"orders": {"broker-a": {"0": 5, "3": 0}}}', namespace="ns")
    assert opts.topics == ("ns%orders",)
    assert opts.consumer_group == "ns%g"
    assert opts.starting_mode is StartingMode.SPECIFIC
    assert opts.starting_offsets == {
        MessageQueue("ns%orders", "broker-a", 0): 5,
        MessageQueue("ns%orders", "broker-a", 3): 0,
    }
    assert opts.display_topic("ns%orders") == "orders"


@pytest.mark.parametrize(
    ("kind", "options", "option", "hint"),
    [
        (STREAM, {"topic": "t", "consumerGroup": "g"}, "nameServer", "name server address"),
        (STREAM, {"nameServer": "h:1", "consumerGroup": "g"}, "topic", "topic to read"),
        (STREAM, {"nameServer": "h:1", "topic": "t"}, "consumerGroup", "required for streams"),
        (STREAM, {**BASE, "expressionType": "REGEX"}, "expressionType", "TAG, SQL92"),
        (STREAM, {**BASE, "consumeFromWhere": "FIRST"}, "consumeFromWhere", "CONSUME_FROM_FIRST_OFFSET"),
        (STREAM, {**BASE, "startingOffsets": "begin"}, "startingOffsets", "group, earliest, latest"),
        (STREAM, {**BASE, "startingOffsets": "{not json"}, "startingOffsets", "malformed"),
        (STREAM, {**BASE, "startingOffsets": '{"orders": {"broker-a": {"0": -1}}}'}, "startingOffsets", "malformed"),
        (STREAM, {**BASE, "startingOffsets": '{"other": {"broker-a": {"0": 1}}}'}, "startingOffsets", "other"),
        (
            STREAM,
            {**BASE, "startingOffsets": '{"orders": {"b": {"0": 1}}}', "startingTimestamp": "1"},
            "startingTimestamp",
            "cannot be combined",
        ),
        (STREAM, {**BASE, "endingOffsets": "latest"}, "endingOffsets", "batch reads only"),
        (STREAM, {**BASE, "endingTimestamp": "1"}, "endingTimestamp", "batch reads only"),
        (BATCH, {**BASE, "endingOffsets": "earliest"}, "endingOffsets", "latest, JSON"),
        (STREAM, {**BASE, "maxMessagesPerTrigger": "0"}, "maxMessagesPerTrigger", "positive whole number"),
        (
            STREAM,
            {**BASE, "maxMessagesPerTrigger": "5", "minMessagesPerTrigger": "9"},
            "minMessagesPerTrigger",
            "exceeds",
        ),
        (STREAM, {**BASE, "maxTriggerDelay": "soon"}, "maxTriggerDelay", "30s"),
        (STREAM, {**BASE, "failOnDataLoss": "yes"}, "failOnDataLoss", "true, false"),
        (STREAM, {**BASE, "onOffsetReset": "replay"}, "onOffsetReset", "follow, ignore, fail"),
        (STREAM, {**BASE, "consumeTimestamp": "yesterday"}, "consumeTimestamp", "yyyyMMddHHmmss"),
        (STREAM, {**BASE, "accessKey": "ak"}, "secretKey", "both"),
        (STREAM, {**BASE, "nameServer": "localhost"}, "nameServer", "host:port"),
        (STREAM, {**BASE, "nameServer": "h:98760"}, "nameServer", "host:port"),
        (STREAM, {**BASE, "retryBudgetMs": "-1"}, "retryBudgetMs", "0 or more"),
        (STREAM, {**BASE, "pullTimeoutMs": "0"}, "pullTimeoutMs", "above 0"),
        (STREAM, {**BASE, "maxMessagePerTrigger": "5"}, "maxMessagePerTrigger", "spelling"),
        (STREAM, {**BASE, "expressionType": "SQL92"}, "subExpression", "SQL92 selector"),
    ],
)
def test_bad_input_names_the_option_and_the_fix(
    kind: ReadKind, options: dict[str, str], option: str, hint: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_options(options, kind=kind, now_ms=NOW_MS)
    assert f"option '{option}'" in str(caught.value)
    assert hint in str(caught.value)
    assert caught.value.retriable is False


def test_the_source_takes_every_option_shared_with_writing() -> None:
    assert set(CLUSTER_OPTIONS) | {RETRY_BUDGET_MS} <= set(ALL_OPTIONS)
    assert stream(pullTimeoutMs="2500").client == ClientConfig(
        ("127.0.0.1:9876",), request_timeout=2.5, setting_names=SettingNames("tlsTrustCertPath", "tlsVerify")
    )


def test_retry_budgets_for_a_running_query_and_for_its_start() -> None:
    opts = stream()
    assert (opts.retry.budget_s, opts.start_retry.budget_s) == (60.0, 10.0)
    opts = stream(retryBudgetMs="120000", pullTimeoutMs="3000")
    assert (opts.retry.budget_s, opts.start_retry.budget_s) == (120.0, 3.0)
    opts = stream(retryBudgetMs="0")  # no retries at all, at the start either
    assert (opts.retry.budget_s, opts.start_retry.budget_s) == (0.0, 0.0)


LOAD_ERRORS = [
    ({**BASE, "consumeFromWhere": "FROM_START"}, "option 'consumeFromWhere': unknown value 'FROM_START'"),
    ({**BASE, "pullTimeoutMs": "3s"}, "option 'pullTimeoutMs': '3s' is not a positive whole number"),
    ({**BASE, "endingOffsets": "{"}, "option 'endingOffsets': malformed offsets"),
    # The words of the error's own list of kinds are no value.
    ({**BASE, "startingOffsets": "JSON offsets"}, "option 'startingOffsets': unknown value 'JSON offsets'"),
    ({**BASE, "startingOffsets": "first"}, "option 'startingOffsets': unknown value 'first'"),
    ({"topic": "t"}, "option 'nameServer': is required"),
    ({**BASE, "secretkey": "s"}, "option 'accessKey': is required with the other ACL credential"),
]


@pytest.mark.parametrize(("options", "message"), LOAD_ERRORS)
def test_load_checks_every_rule_of_both_kinds_of_read(options: dict[str, str], message: str) -> None:
    """At load() Spark calls schema(), before anyone knows if a stream or a batch read follows."""
    with pytest.raises(ConfigurationError) as caught:
        RocketMQDataSource(options).schema()
    assert str(caught.value).startswith(message)


def test_load_leaves_the_rules_of_one_kind_of_read_to_its_start() -> None:
    no_group = {"nameServer": "h:1", "topic": "t"}
    ending = {**BASE, "endingOffsets": '{"orders": {"broker-a": {"0": 3}}}', "endingTimestamp": "1"}
    for options in (no_group, {**BASE, "endingTimestamp": "1"}):
        assert RocketMQDataSource(options).schema() == SCHEMA
    with pytest.raises(ConfigurationError, match="cannot be combined"):
        RocketMQDataSource(ending).schema()


def test_a_stream_with_bad_options_fails_at_spark_s_first_call_with_our_error_alone() -> None:
    """streamReader() itself must not raise: PySpark's runner would add an UnboundLocalError."""
    reader = RocketMQDataSource({"nameServer": "h:1", "topic": "t"}).streamReader(SCHEMA)
    refused = reader.source if isinstance(reader, PlainStreamReader) else reader
    assert isinstance(refused, RefusedStreamReader)
    calls = [
        refused.initialOffset,
        refused.getDefaultReadLimit,
        refused.prepareForTriggerAvailableNow,
        lambda: refused.latestOffset({}, ReadAllAvailable()),
        lambda: refused.commit({}),
    ]
    # And the first call of each API shape: initialOffset() on 4.2+, latestOffset() on 4.0/4.1.
    calls += [PlainStreamReader(refused).latestOffset, PlainStreamReader(refused).initialOffset]
    for call in calls:
        with pytest.raises(ConfigurationError, match="option 'consumerGroup': is required for streams"):
            call()
    reader.stop()
