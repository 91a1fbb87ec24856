"""``deliveryGuarantee=exactly-once`` against the real broker and real Spark: what RocketMQ's Java
consumer finds is each committed row once, and nothing of a batch that did not commit.

Halves that are never committed would show only if something committed one of their copies.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException

from integration.support import ClusterHandle, create_topic, eventually, max_offsets, produce, stream
from rocketmq_spark.model import ClientConfig, MessageQueue
from rocketmq_spark.remoting import calls
from rocketmq_spark.remoting.client import RocketMQClient
from rocketmq_spark.remoting.transactions import Resolution
from rocketmq_spark.sink.commit import HALF_QUEUE_ID, HALF_TOPIC, Committer
from rocketmq_spark.sink.decision_record import record_key
from rocketmq_spark.sink.decisions import Event, Plan, State, decide
from rocketmq_spark.sink.halves import HalfLog, Transaction
from rocketmq_spark.sink.ledger import Entries
from rocketmq_spark.sink.options import parse_sink_options
from rocketmq_spark.sink.task import write_task

pytestmark = pytest.mark.integration

QUEUES = 4
ROWS = 600
CUT_ROWS = 90
# How long the queues must hold still before they are read, and the longest wait for them to fill.
QUIET_S = 1.0
WAIT_S = 30.0
# A refusal comes before any task runs: seconds, whatever the retry budgets.
REFUSED_WITHIN_S = 30.0


def java_bodies(rocketmq: ClusterHandle, topic: str, expected: int = 0) -> list[str]:
    """Every message body of the topic, as RocketMQ's Java consumer reads it, once its queues hold
    at least ``expected`` messages and stopped growing (a committed message enters its consume
    queue a moment after the COMMIT's answer; a duplicate would enter with it)."""
    eventually(lambda: stored_count(rocketmq, topic) >= expected, f"{topic} never held {expected} messages", WAIT_S)
    time.sleep(QUIET_S)
    stored = stored_count(rocketmq, topic)
    if stored == 0:
        return []
    messages = rocketmq.tool("consume", "--topic", topic, "--count", str(stored), "--print")
    return sorted(base64.b64decode(m["body"]).decode() for m in messages)


def stored_count(rocketmq: ClusterHandle, topic: str) -> int:
    return sum(max_offsets(rocketmq, topic).values())


def halves_stored(rocketmq: ClusterHandle, topic: str) -> int:
    """How many halves the brokers serving ``topic`` hold in their half queues (resolved or not)."""
    with RocketMQClient(ClientConfig(name_servers=(rocketmq.namesrv_addr,))) as client:
        route = client.topic_route(topic)
        total = 0
        for broker in route.brokers:
            address = route.master_address(broker)
            assert address is not None
            total += client.call(address, calls.max_offset(MessageQueue(HALF_TOPIC, broker, HALF_QUEUE_ID)))
        return total


def topics(rocketmq: ClusterHandle, unique: Any, *names: str) -> list[str]:
    made = [unique(name) for name in names]
    for topic in made:
        create_topic(rocketmq, topic, queues=QUEUES)
    return made


def exactly_once(writer: Any, rocketmq: ClusterHandle, topic: str, group: str, ledger: str) -> Any:
    return (
        writer.format("rocketmq")
        .option("nameServer", rocketmq.namesrv_addr)
        .option("topic", topic)
        .option("deliveryGuarantee", "exactly-once")
        .option("producerGroup", group)
        .option("transactionTopic", ledger)
    )


def test_a_batch_write_is_seen_once_and_its_rerun_writes_nothing(
    spark: Any, rocketmq: ClusterHandle, unique: Any
) -> None:
    target, ledger = topics(rocketmq, unique, "eo-batch", "eo-ledger")
    group = unique("eo-batch-group")
    df = spark.range(ROWS).selectExpr("cast(concat('row-', id) as binary) as body").repartition(3)
    expected = sorted(f"row-{i}" for i in range(ROWS))
    exactly_once(df.write.mode("append"), rocketmq, target, group, ledger).option("writeId", "nightly-1").save()
    assert java_bodies(rocketmq, target, len(expected)) == expected
    # The job run again (a driver that died after the commit): the same writeId writes nothing.
    exactly_once(df.write.mode("append"), rocketmq, target, group, ledger).option("writeId", "nightly-1").save()
    assert java_bodies(rocketmq, target, len(expected)) == expected
    # Another writeId is another write.
    exactly_once(df.limit(5).write.mode("append"), rocketmq, target, group, ledger).option("writeId", "n-2").save()
    assert len(java_bodies(rocketmq, target, ROWS + 5)) == ROWS + 5


def test_a_stream_whose_batch_fails_after_sending_is_seen_once_after_its_restart(
    spark: Any, rocketmq: ClusterHandle, unique: Any, tmp_path: Path
) -> None:
    origin, target, ledger = topics(rocketmq, unique, "eo-in", "eo-out", "eo-ledger")
    group, producers = unique("eo-group"), unique("eo-producer")
    checkpoint = tmp_path / "checkpoint"
    marker = tmp_path / "failed-once"

    def fail_once(body: bytes) -> bytes:
        """The last row of a partition fails the task the first time, after the rows before it
        were sent as halves."""
        text = body.decode()
        if text.endswith("-299") and not marker.exists():
            marker.write_text("failed")
            raise RuntimeError("a task failing after it sent rows")
        return text.upper().encode()

    spark.udf.register("fail_once", fail_once, "binary")

    def run() -> Any:
        df = stream(spark, rocketmq, origin, group, consumeFromWhere="CONSUME_FROM_FIRST_OFFSET")
        query = (
            exactly_once(df.selectExpr("fail_once(body) as body").writeStream, rocketmq, target, producers, ledger)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(300), "the stream did not finish"
        except StreamingQueryException as err:
            return err
        finally:
            query.stop()  # a failed query may still hold its checkpoint for a moment
        return query.exception()

    produce(rocketmq, origin, 300, "--body", "first-{i}", "--quiet", broker="broker-a", queue=0)
    error = run()
    assert error is not None and "a task failing after it sent rows" in str(error)
    assert java_bodies(rocketmq, target) == [], "an aborted batch's halves must stay invisible"
    produce(rocketmq, origin, 200, "--body", "second-{i}", "--quiet")
    assert run() is None  # the failed batch again (new halves), then one of the new messages
    expected = sorted([f"FIRST-{i}" for i in range(300)] + [f"SECOND-{i}" for i in range(200)])
    assert java_bodies(rocketmq, target, len(expected)) == expected
    # The driver died after the sink's commit and before Spark's commit log: Spark runs the last
    # batch again and commits it a second time; the sink finds it done and publishes nothing.
    commits = checkpoint / "commits"
    last = max(int(path.name) for path in commits.iterdir() if path.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (commits / name).unlink(missing_ok=True)
    before = halves_stored(rocketmq, target)
    assert run() is None
    assert halves_stored(rocketmq, target) > before, "the batch was not run again"
    assert java_bodies(rocketmq, target, len(expected)) == expected


def test_a_proxy_endpoint_and_a_missing_transaction_topic_are_refused_before_sending(
    spark: Any, rocketmq: ClusterHandle, unique: Any
) -> None:
    (target,) = topics(rocketmq, unique, "eo-refused")
    group, missing = unique("eo-refused-group"), unique("eo-no-such-ledger")
    df = spark.range(3).selectExpr("cast(id as string) as body")
    assert rocketmq.proxy_addr, "this test needs the session cluster's proxy (RocketMQ 5.x)"
    began = time.monotonic()
    through_proxy = exactly_once(df.write.mode("append"), rocketmq, target, group, unique("eo-ledger"))
    with pytest.raises(
        Exception, match="is a 5.x proxy, whose remoting port answers END_TRANSACTION without committing"
    ):
        through_proxy.option("nameServer", rocketmq.proxy_addr).save()
    without_ledger = exactly_once(df.write.mode("append"), rocketmq, target, group, missing)
    with pytest.raises(Exception, match=f"(?s)topic {missing} does not exist.*mqadmin updateTopic .* -t {missing}"):
        without_ledger.save()
    assert time.monotonic() - began < REFUSED_WITHIN_S
    assert java_bodies(rocketmq, target) == []


def test_a_decision_cut_off_in_the_middle_of_its_commits_is_finished_once(rocketmq: ClusterHandle, unique: Any) -> None:
    """The driver died after the decision and some COMMITs: the next start reads the decided halves
    back, finds which are stored by their unique keys, and commits only the others. Run without
    Spark: a task's sends and the driver's steps, against the real brokers."""
    target, ledger = topics(rocketmq, unique, "eo-cut", "eo-cut-ledger")
    group = unique("eo-cut-group")
    options = parse_sink_options(
        {
            "nameServer": rocketmq.namesrv_addr,
            "topic": target,
            "deliveryGuarantee": "exactly-once",
            "producerGroup": group,
            "transactionTopic": ledger,
        }
    )
    transaction = Transaction(unique("query"), 3, "run-1")
    bodies = [f"cut-{i}".encode() for i in range(CUT_ROWS)]
    halves = HalfLog(group, transaction, attempt=1)
    written = write_task(options, {"body": "body"}, iter([pa.record_batch({"body": pa.array(bodies)})]), halves)
    assert written.halves is not None and len(written.halves) == CUT_ROWS
    committer = Committer(options)
    plan = decide(State.UNDECIDED, Event.COMMIT)
    # The decision, then COMMITs of the first third only: the driver dies there.
    cut = Plan(plan.steps[:1], plan.says)
    committer._run(
        cut, record_key(group, transaction.query, transaction.batch), [written.halves], Entries(), transaction
    )
    first = list(zip(written.halves.halves(), written.halves.queues(), written.halves.pinned))[: CUT_ROWS // 3]
    committer._end(first, Resolution.COMMIT)
    assert len(java_bodies(rocketmq, target, CUT_ROWS // 3)) == CUT_ROWS // 3
    entries = Committer(options).recover()  # the next start, in a fresh committer
    assert not entries.pending()
    assert java_bodies(rocketmq, target, CUT_ROWS) == sorted(b.decode() for b in bodies)
    # A second recovery finds the batch done and commits nothing more.
    Committer(options).recover()
    assert len(java_bodies(rocketmq, target, CUT_ROWS)) == CUT_ROWS
