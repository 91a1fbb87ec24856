"""The sink on every RocketMQ release it supports (4.9.7, 5.3.3, 5.5.x): ``make compat`` runs it.

What the sink wrote is read back with RocketMQ's official Java consumer (the test tool), so the
messages are checked independently of the package that sent them. Where the releases differ:

* 4.9 has no timer messages: a row with ``deliverTime`` is refused before anything is sent, while
  ``delayLevel`` works on every release; on 5.x a timer message is stored no earlier than its time;
* 4.9 reserves fewer property names than 5.x (``DUP_INFO`` is a user's property there);
* 4.9 has no proxy: on 5.x the writes go through the proxy's remoting port as well; the proxy
  checks a message's type against its topic's, so delayed and timer messages go to a topic of
  ``message.type`` DELAY there (4.9 has no topic attributes).

test_sink.py has the rest of the sink's cases, on the release of ``make test``.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from integration.support import ClusterHandle, batch_read, create_topic, max_offsets
from integration.versions import release

pytestmark = pytest.mark.integration

QUEUES_PER_BROKER = 2
ROWS = 2000
SHARDING_KEYS = 37
# Bodies over the sink's compressBodyOverBytes (4096), sent alone because each is over the
# write's batchMaxBytes; the small rows of the same write go in batches.
BIG_ROWS = 10
BIG_BODY_REPEATS = 2000
SMALL_ROWS = 300
BATCH_MAX_BYTES = "8192"
# A zlib-compressed message's compression type in its sysFlag (MessageSysFlag's bits 8 to 10):
# the Java consumer clears the compressed bit once it inflated the body, and keeps these.
COMPRESSION_TYPE_BITS = 0x7 << 8
ZLIB_TYPE = 0x3 << 8
# A message id as the Java producer of an IPv4 host makes it: 16 bytes in hex.
UNIQUE_ID_HEX = 32
# delayLevel 1 is a second on every release's default messageDelayLevel.
DELAY_LEVEL = 1
DELAY_LEVEL_MS = 1000
# A timer message's delay from Spark's planning, and the timer wheel's precision (timerPrecisionMs,
# a second by default): the broker may deliver it up to that much before its time.
TIMER_DELAY_S = 5
TIMER_PRECISION_MS = 1000
# Property names 5.x reserves and 4.9 leaves to users, and one both reserve.
FIVE_X_ONLY_RESERVED = "DUP_INFO"
RESERVED_ON_BOTH = "TTL"
# Properties RocketMQ puts on stored messages, left out when comparing the user's.
SYSTEM = frozenset(
    {"TAGS", "KEYS", "UNIQ_KEY", "WAIT", "CLUSTER", "MIN_OFFSET", "MAX_OFFSET", "MSG_REGION", "TRACE_ON"}
)
# The attribute of a topic of delayed and timer messages on 5.x (mqadmin updateTopic -a).
DELAY_TOPIC_ATTRIBUTE = "+message.type=DELAY"


def write(df: Any, endpoint: str, topic: str, **options: str) -> None:
    """A batch write of ``df`` to ``topic`` through ``endpoint``."""
    writer = df.write.format("rocketmq").mode("append").option("nameServer", endpoint).option("topic", topic)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def create_delay_topic(rocketmq: ClusterHandle, topic: str) -> None:
    """A topic of one queue for delayed and timer messages, of type DELAY where the release has types."""
    attributes = ("--attr", DELAY_TOPIC_ATTRIBUTE) if release(rocketmq.version).has_proxy else ()
    create_topic(rocketmq, topic, 1, None, *attributes)


def java_read(rocketmq: ClusterHandle, topic: str, count: int) -> dict[str, dict[str, Any]]:
    """The topic's messages as RocketMQ's Java consumer reads them, by body; each body once."""
    messages = rocketmq.tool("consume", "--topic", topic, "--count", str(count), "--print")
    by_body = {base64.b64decode(m["body"]).decode(): m for m in messages}
    assert len(messages) == len(by_body) == count
    return by_body


def user_properties(properties: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in properties.items() if k not in SYSTEM}


def test_a_batch_write_reads_back_equal_with_its_message_ids(
    spark: Any, rocketmq: ClusterHandle, endpoint: str, unique: Any
) -> None:
    topic = unique("vs-batch")
    create_topic(rocketmq, topic, queues=QUEUES_PER_BROKER)
    df = spark.range(ROWS).selectExpr(
        "cast(concat('body-', id) as binary) as body",
        "concat('tag-', id % 3) as tags",
        "concat('key-', id, ' k', id % 5) as keys",
        "map('row', cast(id as string)) as properties",
        f"concat('order-', id % {SHARDING_KEYS}) as shardingKey",
    )
    write(df.repartition(2), endpoint, topic)

    java = java_read(rocketmq, topic, ROWS)
    assert java.keys() == {f"body-{i}" for i in range(ROWS)}
    queue_of_key: dict[str, tuple[str, int]] = {}
    for i in range(ROWS):
        message = java[f"body-{i}"]
        assert (message["tags"], message["keys"]) == (f"tag-{i % 3}", f"key-{i} k{i % 5}")
        assert user_properties(message["properties"]) == {"row": str(i)}
        assert message["msgId"] == message["properties"]["UNIQ_KEY"] and len(message["msgId"]) == UNIQUE_ID_HEX
        queue = queue_of_key.setdefault(f"order-{i % SHARDING_KEYS}", (message["broker"], message["queueId"]))
        assert (message["broker"], message["queueId"]) == queue  # a sharding key keeps to one queue
    assert len({m["msgId"] for m in java.values()}) == ROWS
    source = batch_read(spark, rocketmq, topic).select("msgId", "body").collect()
    assert {bytes(row.body).decode(): row.msgId for row in source} == {b: m["msgId"] for b, m in java.items()}


def test_big_bodies_go_compressed_and_small_ones_batched(
    spark: Any, rocketmq: ClusterHandle, endpoint: str, unique: Any
) -> None:
    topic = unique("vs-shapes")
    create_topic(rocketmq, topic, queues=QUEUES_PER_BROKER)
    big = spark.range(BIG_ROWS).selectExpr(f"repeat(concat('big-', id, '-'), {BIG_BODY_REPEATS}) as body")
    small = spark.range(SMALL_ROWS).selectExpr("concat('small-', id) as body")
    write(big.union(small).coalesce(1), endpoint, topic, batchMaxBytes=BATCH_MAX_BYTES)

    java = java_read(rocketmq, topic, BIG_ROWS + SMALL_ROWS)
    bigs = {f"big-{i}-" * BIG_BODY_REPEATS for i in range(BIG_ROWS)}
    assert java.keys() == bigs | {f"small-{i}" for i in range(SMALL_ROWS)}
    for body, message in java.items():
        expected_type = ZLIB_TYPE if body in bigs else 0
        assert message["sysFlag"] & COMPRESSION_TYPE_BITS == expected_type, body[:20]
        assert message["msgId"] == message["properties"]["UNIQ_KEY"]


def test_a_delay_level_message_arrives_after_its_delay(
    spark: Any, rocketmq: ClusterHandle, endpoint: str, unique: Any
) -> None:
    topic = unique("vs-delay")
    create_delay_topic(rocketmq, topic)
    df = spark.createDataFrame([("delayed", DELAY_LEVEL)], "body string, delayLevel int")
    write(df, endpoint, topic)
    message = java_read(rocketmq, topic, 1)["delayed"]
    held = message["storeTimestamp"] - message["bornTimestamp"]
    assert held >= DELAY_LEVEL_MS, f"stored {held} ms after it was sent"


def test_a_timer_message_arrives_at_its_time_on_5x_and_is_refused_before_sending_on_4_9(
    spark: Any, rocketmq: ClusterHandle, endpoint: str, unique: Any
) -> None:
    topic = unique("vs-timer")
    create_delay_topic(rocketmq, topic)
    # The time is Spark's at planning, just before the task sends; the row carries it as a
    # property too, to compare with the store time.
    df = spark.createDataFrame([("later",)], "body string").selectExpr(
        "body", f"current_timestamp() + make_interval(0, 0, 0, 0, 0, 0, {TIMER_DELAY_S}) as deliverTime"
    )
    df = df.selectExpr("body", "deliverTime", "map('due', cast(unix_millis(deliverTime) as string)) as properties")
    if not release(rocketmq.version).has_proxy:
        with pytest.raises(Exception, match="sets deliverTime, but its broker runs RocketMQ 4.9"):
            write(df, endpoint, topic)
        assert set(max_offsets(rocketmq, topic).values()) == {0}  # nothing was sent
        return
    write(df, endpoint, topic)
    message = java_read(rocketmq, topic, 1)["later"]
    due = int(message["properties"]["due"])
    assert message["bornTimestamp"] < due - TIMER_PRECISION_MS, "sent after its time: raise TIMER_DELAY_S"
    assert message["storeTimestamp"] >= due - TIMER_PRECISION_MS, f"{due - message['storeTimestamp']} ms early"


def test_reserved_property_names_are_the_releases_own(spark: Any, rocketmq: ClusterHandle, unique: Any) -> None:
    topic = unique("vs-reserved")
    create_topic(rocketmq, topic, queues=1)

    def with_property(name: str) -> Any:
        return spark.createDataFrame([(name, {name: "x"})], "body string, properties map<string, string>")

    with pytest.raises(Exception, match=f"sets property {RESERVED_ON_BOTH}, a name RocketMQ reserves"):
        write(with_property(RESERVED_ON_BOTH), rocketmq.namesrv_addr, topic)
    if release(rocketmq.version).has_proxy:
        with pytest.raises(Exception, match=f"sets property {FIVE_X_ONLY_RESERVED}, a name RocketMQ reserves"):
            write(with_property(FIVE_X_ONLY_RESERVED), rocketmq.namesrv_addr, topic)
        assert set(max_offsets(rocketmq, topic).values()) == {0}  # nothing was sent
        return
    write(with_property(FIVE_X_ONLY_RESERVED), rocketmq.namesrv_addr, topic)
    message = java_read(rocketmq, topic, 1)[FIVE_X_ONLY_RESERVED]
    assert message["properties"][FIVE_X_ONLY_RESERVED] == "x"
