"""The sink against the real broker and real Spark (issue: a RocketMQ sink).

What the sink wrote is read back with RocketMQ's official Java consumer (the test tool) and with
the source, so the messages are checked independently of the package that sent them.
test_sink_versions.py has what differs between releases (delayed and timer messages, reserved
property names, the proxy's remoting port), run on 5.3.3 here and on the other releases by
``make compat``.
"""

from __future__ import annotations

import base64
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from integration.cluster import ACL_PASSWORD, ACL_USER, Cluster
from integration.support import ClusterHandle, batch_read, create_topic, max_offsets, produce, stream
from rocketmq_spark.remoting.membership import java_string_hash

pytestmark = pytest.mark.integration

BROKERS = ("broker-a", "broker-b")
QUEUES_PER_BROKER = 4
ROWS = 10_000
KEYS = 37
# A message id as the Java producer of an IPv4 host makes it: 16 bytes in hex.
UNIQUE_ID_HEX = 32
# The failover test: rows written one message a send, and when broker-a is killed under the write.
FAILOVER_ROWS = 40_000
KILL_AFTER_S = 2.0
# Properties RocketMQ puts on stored messages, left out when comparing the user's.
SYSTEM = frozenset(
    {"TAGS", "KEYS", "UNIQ_KEY", "WAIT", "CLUSTER", "MIN_OFFSET", "MAX_OFFSET", "MSG_REGION", "TRACE_ON"}
)


def sink(df: Any, rocketmq: ClusterHandle, **options: str) -> Any:
    """A batch write to the cluster."""
    writer = df.write.format("rocketmq").mode("append").option("nameServer", rocketmq.namesrv_addr)
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer


def java_read(rocketmq: ClusterHandle, topic: str, count: int) -> list[dict[str, Any]]:
    """Every message of the topic as RocketMQ's Java consumer reads it."""
    return rocketmq.tool("consume", "--topic", topic, "--count", str(count), "--print")


def user_properties(properties: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in properties.items() if k not in SYSTEM}


def expected_queue(key: str) -> tuple[str, int]:
    """Java's SelectMessageQueueByHash over the publish list: broker names sorted, then queue ids."""
    publish = [(b, q) for b in BROKERS for q in range(QUEUES_PER_BROKER)]
    return publish[abs(java_string_hash(key)) % len(publish)]


def test_a_batch_write_reads_back_equal_in_java_and_in_the_source(
    spark: Any, rocketmq: ClusterHandle, unique: Any
) -> None:
    topic = unique("sink-batch")
    create_topic(rocketmq, topic, queues=QUEUES_PER_BROKER)
    df = spark.range(ROWS).selectExpr(
        "cast(concat('body-', id) as binary) as body",
        "concat('tag-', id % 3) as tags",
        "concat('key-', id, ' k', id % 5) as keys",
        "map('row', cast(id as string), 'TAGS', 'dropped') as properties",
        f"concat('order-', id % {KEYS}) as shardingKey",
    )
    sink(df.repartition(2), rocketmq, topic=topic).save()

    java = java_read(rocketmq, topic, ROWS)
    assert len(java) == ROWS
    by_body = {base64.b64decode(m["body"]).decode(): m for m in java}
    assert len(by_body) == ROWS
    for i in (0, 1, 4999, ROWS - 1):
        message = by_body[f"body-{i}"]
        assert (message["tags"], message["keys"]) == (f"tag-{i % 3}", f"key-{i} k{i % 5}")
        assert user_properties(message["properties"]) == {"row": str(i)}
        assert (message["broker"], message["queueId"]) == expected_queue(f"order-{i % KEYS}")
        assert message["msgId"] == message["properties"]["UNIQ_KEY"] and len(message["msgId"]) == UNIQUE_ID_HEX

    source = batch_read(spark, rocketmq, topic).select("msgId", "body", "tags", "keys", "properties").collect()
    assert len(source) == ROWS
    for row in source:
        message = by_body[bytes(row.body).decode()]
        assert row.msgId == message["msgId"]
        assert (row.tags, row.keys) == (message["tags"], message["keys"])
        assert user_properties(dict(row.properties)) == user_properties(message["properties"])


def test_keys_keep_their_order_on_the_queue_java_picks(spark: Any, rocketmq: ClusterHandle, unique: Any) -> None:
    topic = unique("sink-order")
    create_topic(rocketmq, topic, queues=QUEUES_PER_BROKER)
    rows = 2000
    df = (
        spark.range(rows)
        .selectExpr("cast(id as string) as body", f"concat('k', id % {KEYS}) as shardingKey")
        .coalesce(1)
    )
    sink(df, rocketmq, topic=topic, batchMaxBytes="2048").save()
    per_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for message in java_read(rocketmq, topic, rows):
        row = int(base64.b64decode(message["body"]))
        key = f"k{row % KEYS}"
        assert (message["broker"], message["queueId"]) == expected_queue(key)
        per_key[key].append((message["queueOffset"], row))
    for key, stored in per_key.items():
        assert [row for _, row in sorted(stored)] == sorted(row for _, row in stored), key


def test_rows_read_by_the_source_write_back_with_compressed_and_batched_messages(
    spark: Any, rocketmq: ClusterHandle, unique: Any
) -> None:
    origin, copy = unique("sink-origin"), unique("sink-copy")
    for topic in (origin, copy):
        create_topic(rocketmq, topic, queues=2)
    produce(rocketmq, origin, 300, "--tags", "t", "--keys", "k-{i}", "--quiet")
    big = spark.range(20).selectExpr(
        f"'{origin}' as topic", "repeat(concat('big-', id), 2000) as body", "'large' as tags"
    )  # about 12 KB a body: compressed when sent alone
    sink(big, rocketmq, batchMaxBytes="0").save()
    read = batch_read(spark, rocketmq, origin).select("topic", "tags", "keys", "body", "properties")
    sink(read, rocketmq, topic=copy).save()

    originals = {base64.b64decode(m["body"]): m for m in java_read(rocketmq, origin, 320)}
    copies = {base64.b64decode(m["body"]): m for m in java_read(rocketmq, copy, 320)}
    assert copies.keys() == originals.keys()
    assert sum(1 for body in copies if body.startswith(b"big-")) == 20
    for body, message in copies.items():
        original = originals[body]
        assert (message["tags"], message["keys"]) == (original["tags"], original["keys"])
        assert user_properties(message["properties"]) == user_properties(original["properties"])
        assert message["msgId"] != original["msgId"]  # a new message, with an id of its own


def test_bad_writes_fail_with_errors_that_name_the_problem(spark: Any, rocketmq: ClusterHandle, unique: Any) -> None:
    topic = unique("sink-bad")
    create_topic(rocketmq, topic, queues=1)
    df = spark.createDataFrame([("x", "v")], "body string, value string")
    with pytest.raises(Exception, match="column 'value': is not a column the rocketmq sink writes"):
        sink(df, rocketmq, topic=topic).save()
    with pytest.raises(Exception, match=r"mode\('append'\)"):
        sink(df.select("body"), rocketmq, topic=topic).mode("overwrite").save()
    missing = unique("sink-missing")
    with pytest.raises(Exception, match=f"topic {missing} does not exist"):
        sink(df.select("body"), rocketmq, topic=missing).save()
    nulls = spark.createDataFrame([(None,)], "body binary")
    with pytest.raises(Exception, match=f"a row of topic {topic} has a null body"):
        sink(nulls, rocketmq, topic=topic).save()


def test_a_stream_through_a_transformation_restarts_on_its_checkpoint(
    spark: Any, rocketmq: ClusterHandle, unique: Any, tmp_path: Path
) -> None:
    origin, copy, group = unique("sink-in"), unique("sink-out"), unique("sink-group")
    for topic in (origin, copy):
        create_topic(rocketmq, topic, queues=2)
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        df = stream(spark, rocketmq, origin, group, consumeFromWhere="CONSUME_FROM_FIRST_OFFSET")
        query = (
            df.selectExpr("upper(cast(body as string)) as body", "tags", "keys")
            .writeStream.format("rocketmq")
            .option("nameServer", rocketmq.namesrv_addr)
            .option("topic", copy)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(300), "the stream did not finish"
        assert query.exception() is None, query.exception()

    produce(rocketmq, origin, 500, "--body", "first-{i}", "--tags", "a", "--quiet")
    run()
    produce(rocketmq, origin, 500, "--body", "second-{i}", "--tags", "b", "--quiet")
    run()
    stored = sum(max_offsets(rocketmq, copy).values())  # 1000, or more if a batch was sent twice
    assert stored >= 1000
    bodies = [base64.b64decode(m["body"]).decode() for m in java_read(rocketmq, copy, stored)]
    expected = {f"FIRST-{i}" for i in range(500)} | {f"SECOND-{i}" for i in range(500)}
    assert set(bodies) == expected  # every message at least once, none lost


def test_a_signed_write_on_a_cluster_with_authentication(spark: Any, acl_cluster: Cluster, unique: Any) -> None:
    topic = unique("sink-acl")
    signed = ("--access-key", ACL_USER, "--secret-key", ACL_PASSWORD)
    acl_cluster.tool("create-topic", "--topic", topic, "--queues", "2", *signed)
    df = spark.range(50).selectExpr("cast(id as string) as body", "'signed' as tags")
    (
        df.write.format("rocketmq")
        .mode("append")
        .option("nameServer", acl_cluster.namesrv_addr)
        .option("topic", topic)
        .option("accessKey", ACL_USER)
        .option("secretKey", ACL_PASSWORD)
        .save()
    )
    read = acl_cluster.tool("consume", "--topic", topic, "--count", "50", "--print", *signed)
    assert sorted(int(base64.b64decode(m["body"])) for m in read) == list(range(50))


def test_unordered_rows_land_on_the_other_broker_when_one_is_killed(
    spark: Any, rocketmq: ClusterHandle, unique: Any
) -> None:
    """Last in the module: it kills broker-a of the session's cluster (and starts it again)."""
    topic = unique("sink-kill")
    create_topic(rocketmq, topic, queues=2)
    df = spark.range(FAILOVER_ROWS).selectExpr("concat('m-', id) as body").repartition(2)
    cluster = rocketmq.started
    killer = threading.Timer(KILL_AFTER_S, cluster.kill, ["broker-a"])
    started = time.monotonic()
    killer.start()
    try:
        sink(df, rocketmq, topic=topic, batchMaxBytes="0", sendTimeoutMs="2000").save()
        took = time.monotonic() - started
    finally:
        killer.join()
        if not cluster.running("broker-a"):
            cluster.restart("broker-a")
    assert took > KILL_AFTER_S, f"the write ended in {took:.1f} s, before the kill: raise FAILOVER_ROWS"
    stored = sum(max_offsets(rocketmq, topic).values())  # with broker-a back, its messages too
    bodies = {base64.b64decode(m["body"]).decode() for m in java_read(rocketmq, topic, stored)}
    assert bodies == {f"m-{i}" for i in range(FAILOVER_ROWS)}  # nothing lost
