"""``deliveryGuarantee=exactly-once`` against the real broker and real Spark: what RocketMQ's Java
consumer finds is each committed row once, and nothing of a batch that did not commit.

Halves that are never committed would show only if something committed one of their copies.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException

from integration.cluster_config import BROKER_NAMES, FIRST_CHECK_DONE_S
from integration.support import (
    ClusterHandle,
    PushConsumer,
    create_topic,
    eventually,
    max_offsets,
    position,
    produce,
    push_consumer,
    stream,
)
from integration.tests.test_sink import expected_queue
from rocketmq_spark.model import ClientConfig, MessageQueue
from rocketmq_spark.remoting import calls
from rocketmq_spark.remoting.client import RocketMQClient
from rocketmq_spark.remoting.replicas import ROUTE_REFRESH_S
from rocketmq_spark.remoting.transactions import Resolution
from rocketmq_spark.sink.commit import HALF_QUEUE_ID, HALF_TOPIC, Committer
from rocketmq_spark.sink.decision_record import record_key
from rocketmq_spark.sink.decisions import Event, Plan, State, decide
from rocketmq_spark.sink.fence import GroupInUseError
from rocketmq_spark.sink.halves import HalfLog, Transaction
from rocketmq_spark.sink.ledger import Entries
from rocketmq_spark.sink.options import SinkOptions, parse_sink_options
from rocketmq_spark.sink.task import write_task

pytestmark = pytest.mark.integration

QUEUES = 4
ROWS = 600
CUT_ROWS = 90
# The transaction topic's queues per broker before and after an operator grows it.
LEDGER_QUEUES_BEFORE, LEDGER_QUEUES_AFTER = 2, 8
ORDER_ROWS = 400
ORDER_BATCHES = 4
ORDER_KEYS = 6
# The longest wait for the queues to fill.
WAIT_S = 30.0
# Longer than a test runs with a consumer tailing its target (it is stopped at the test's end).
TAIL_S = 900
# A refusal comes before any task runs: seconds, whatever the retry budgets.
REFUSED_WITHIN_S = 30.0


def java_bodies(rocketmq: ClusterHandle, topic: str, expected: int = 0) -> list[str]:
    """Every message body of the topic, as RocketMQ's Java consumer reads it, once its queues hold
    at least ``expected`` messages and the brokers' first check-back of the halves sent so far has
    come (the session's brokers check within seconds: ``SHORT_TRANSACTION_CHECKS``), so a copy
    committed by mistake, like a duplicate COMMIT, would be among them."""
    eventually(lambda: stored_count(rocketmq, topic) >= expected, f"{topic} never held {expected} messages", WAIT_S)
    time.sleep(FIRST_CHECK_DONE_S)
    stored = stored_count(rocketmq, topic)
    if stored == 0:
        return []
    messages = rocketmq.tool("consume", "--topic", topic, "--count", str(stored), "--print")
    return sorted(base64.b64decode(m["body"]).decode() for m in messages)


def tailed_bodies(tail: PushConsumer, expected: int) -> list[str]:
    """The bodies a tailing push consumer was given, one per stored message (a push consumer may
    be given a message twice; a message stored twice has two positions), once it had ``expected``."""

    def given() -> dict[tuple[str, int, int], str]:
        return {position(m): base64.b64decode(m["body"]).decode() for m in tail.messages()}

    eventually(lambda: len(given()) >= expected, f"the tailing consumer was not given {expected} messages", WAIT_S)
    return sorted(given().values())


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


def driver_options(rocketmq: ClusterHandle, target: str, group: str, ledger: str) -> SinkOptions:
    """The checked options of an exactly-once write, for tests that run the driver's steps without Spark."""
    return parse_sink_options(
        {
            "nameServer": rocketmq.namesrv_addr,
            "topic": target,
            "deliveryGuarantee": "exactly-once",
            "producerGroup": group,
            "transactionTopic": ledger,
        }
    )


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


def test_a_rerun_finds_its_write_after_the_transaction_topic_gained_queues_and_a_broker(
    spark: Any, rocketmq: ClusterHandle, unique: Any
) -> None:
    """The write's records are kept on one broker's topic of two queues; an operator then gives the
    topic eight queues on both brokers. The rerun of the committed writeId still finds them and
    writes nothing (a pick among the queues the route lists would look elsewhere and write again)."""
    (target,) = topics(rocketmq, unique, "eo-grown")
    ledger, group = unique("eo-grown-ledger"), unique("eo-grown-group")
    create_topic(rocketmq, ledger, queues=LEDGER_QUEUES_BEFORE, brokers=BROKER_NAMES[0])
    df = spark.range(CUT_ROWS).selectExpr("cast(concat('grown-', id) as binary) as body").repartition(2)
    expected = sorted(f"grown-{i}" for i in range(CUT_ROWS))
    exactly_once(df.write.mode("append"), rocketmq, target, group, ledger).option("writeId", "grown-1").save()
    assert java_bodies(rocketmq, target, CUT_ROWS) == expected
    create_topic(rocketmq, ledger, queues=LEDGER_QUEUES_AFTER)
    grown = {(b, q) for b in BROKER_NAMES for q in range(LEDGER_QUEUES_AFTER)}
    eventually(lambda: set(max_offsets(rocketmq, ledger)) == grown, f"{ledger} never grew", WAIT_S)
    time.sleep(ROUTE_REFRESH_S)  # routes cached by the writer's processes are asked again
    exactly_once(df.write.mode("append"), rocketmq, target, group, ledger).option("writeId", "grown-1").save()
    assert java_bodies(rocketmq, target, CUT_ROWS) == expected


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
    # An application's consumer tails the target all along, as RocketMQ's Java client delivers.
    with push_consumer(rocketmq, target, unique("eo-tail"), TAIL_S, "--print", "--from-first") as tail:
        error = run()
        assert error is not None and "a task failing after it sent rows" in str(error)
        assert java_bodies(rocketmq, target) == [], "an aborted batch's halves must stay invisible"
        assert tail.messages() == [], "the tailing consumer was given rows of an aborted batch"
        produce(rocketmq, origin, 200, "--body", "second-{i}", "--quiet")
        assert run() is None  # the failed batch again (new halves), then one of the new messages
        expected = sorted([f"FIRST-{i}" for i in range(300)] + [f"SECOND-{i}" for i in range(200)])
        assert java_bodies(rocketmq, target, len(expected)) == expected
        assert tailed_bodies(tail, len(expected)) == expected
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


def test_a_proxy_endpoint_is_refused_before_sending(spark: Any, rocketmq: ClusterHandle, unique: Any) -> None:
    """5.x only: 4.9 has no proxy (make compat leaves this test out on 4.9.7)."""
    (target,) = topics(rocketmq, unique, "eo-proxy")
    df = spark.range(3).selectExpr("cast(id as string) as body")
    assert rocketmq.proxy_addr, "this test needs the session cluster's proxy (RocketMQ 5.x)"
    halves = halves_stored(rocketmq, target)
    began = time.monotonic()
    through_proxy = exactly_once(
        df.write.mode("append"), rocketmq, target, unique("eo-proxy-group"), unique("eo-ledger")
    )
    with pytest.raises(
        Exception, match="is a 5.x proxy, whose remoting port answers END_TRANSACTION without committing"
    ):
        through_proxy.option("nameServer", rocketmq.proxy_addr).save()
    assert time.monotonic() - began < REFUSED_WITHIN_S
    assert halves_stored(rocketmq, target) == halves, "a write through the proxy sent halves"


def test_a_missing_transaction_topic_is_refused_before_sending(
    spark: Any, rocketmq: ClusterHandle, unique: Any, tmp_path: Path
) -> None:
    (target,) = topics(rocketmq, unique, "eo-refused")
    group, missing = unique("eo-refused-group"), unique("eo-no-such-ledger")
    df = spark.range(3).selectExpr("cast(id as string) as body")
    began = time.monotonic()
    without_ledger = exactly_once(df.write.mode("append"), rocketmq, target, group, missing)
    with pytest.raises(Exception, match=f"(?s)topic {missing} does not exist.*mqadmin updateTopic .* -t {missing}"):
        without_ledger.save()
    halves = halves_stored(rocketmq, target)
    rows = spark.readStream.format("rate").load().selectExpr("cast(value as string) as body")
    query = (
        exactly_once(rows.writeStream, rocketmq, target, group, missing)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        with pytest.raises(StreamingQueryException, match=f"topic {missing} does not exist"):
            query.awaitTermination(REFUSED_WITHIN_S)
    finally:
        query.stop()
    assert time.monotonic() - began < 2 * REFUSED_WITHIN_S
    assert halves_stored(rocketmq, target) == halves, "a stream without its transaction topic sent halves"
    assert java_bodies(rocketmq, target) == []


def test_a_decision_cut_off_in_the_middle_of_its_commits_is_finished_once(rocketmq: ClusterHandle, unique: Any) -> None:
    """The driver died after the decision and some COMMITs: the next start reads the decided halves
    back, finds which are stored by their unique keys, and commits only the others. Run without
    Spark: a task's sends and the driver's steps, against the real brokers."""
    target, ledger = topics(rocketmq, unique, "eo-cut", "eo-cut-ledger")
    group = unique("eo-cut-group")
    options = driver_options(rocketmq, target, group, ledger)
    transaction = Transaction(unique("query"), 3, "run-1")
    bodies = [f"cut-{i}".encode() for i in range(CUT_ROWS)]
    halves = HalfLog(group, transaction, attempt=1)
    written = write_task(options, {"body": "body"}, iter([pa.record_batch({"body": pa.array(bodies)})]), halves)
    assert written.halves is not None and len(written.halves) == CUT_ROWS
    committer = Committer(options, transaction.query)
    plan = decide(State.UNDECIDED, Event.COMMIT)
    # The decision, then COMMITs of the first third only: the driver dies there.
    cut = Plan(plan.steps[:1], plan.says)
    committer._run(
        cut, record_key(group, transaction.query, transaction.batch), [written.halves], Entries(), transaction
    )
    first = list(zip(written.halves.halves(), written.halves.queues(), written.halves.pinned))[: CUT_ROWS // 3]
    committer._end(first, Resolution.COMMIT)
    assert len(java_bodies(rocketmq, target, CUT_ROWS // 3)) == CUT_ROWS // 3
    entries = Committer(options, transaction.query).recover()  # the next start, in a fresh committer
    assert not entries.pending()
    assert java_bodies(rocketmq, target, CUT_ROWS) == sorted(b.decode() for b in bodies)
    # A second recovery finds the batch done and commits nothing more.
    Committer(options, transaction.query).recover()
    assert len(java_bodies(rocketmq, target, CUT_ROWS)) == CUT_ROWS


def test_a_second_writer_of_one_producer_group_is_refused_naming_it(rocketmq: ClusterHandle, unique: Any) -> None:
    """Two writers of one producer group at once would each finish the group's leftovers: the
    broker's lock on the group's transaction queue lets one resolve halves at a time. A second
    query's commit is refused naming the group and sends nothing visible (its own halves rolled
    back); the first one's restart holds the lock again at once; once it lets go, the second
    commits. Run without Spark: the driver's steps, against the real brokers."""
    target, ledger = topics(rocketmq, unique, "eo-fence", "eo-fence-ledger")
    group = unique("eo-fence-group")
    options = driver_options(rocketmq, target, group, ledger)
    first, second = Transaction(unique("query-a"), 0, "run-a"), Transaction(unique("query-b"), 0, "run-b")
    holding = Committer(options, first.query)
    assert holding.fence.take(0), "the lock of a group nobody writes is taken at once"
    bodies = [f"fence-{i}".encode() for i in range(CUT_ROWS)]
    written = write_task(
        options, {"body": "body"}, iter([pa.record_batch({"body": pa.array(bodies)})]), HalfLog(group, second, 1)
    )
    assert written.halves is not None
    refused = Committer(options, second.query, lock_wait_s=3.0)
    started = time.monotonic()
    with pytest.raises(GroupInUseError, match=f"producer group '{group}' is in use") as caught:
        refused.commit(second, [written.halves])
    assert time.monotonic() - started < REFUSED_WITHIN_S
    assert "producerGroup" in str(caught.value)
    aborted = Committer(options, second.query).abort(second, [written.halves])  # what Spark does next
    assert "rolled back" in aborted.says, aborted.says
    assert Committer(options, first.query).fence.take(0), "the first query's restart holds its lock again"
    holding.release()
    retried = Transaction(second.query, 1, "run-b")
    again = HalfLog(group, retried, 2)
    rewritten = write_task(options, {"body": "body"}, iter([pa.record_batch({"body": pa.array(bodies)})]), again)
    assert rewritten.halves is not None
    plan = Committer(options, second.query, lock_wait_s=3.0).commit(retried, [rewritten.halves])
    assert "committed once" in plan.says, plan.says
    assert java_bodies(rocketmq, target, CUT_ROWS) == sorted(b.decode() for b in bodies)


def test_sharding_key_rows_keep_their_order_across_batches_on_java_s_hash_queue(
    spark: Any, rocketmq: ClusterHandle, unique: Any, tmp_path: Path
) -> None:
    """Rows of one shardingKey go to the queue Java's SelectMessageQueueByHash picks, and a queue
    offset is given when a half is committed: each queue's COMMITs go one at a time, in the rows'
    order, batch after batch. One source queue, so one task per batch sends the rows in order."""
    origin, target, ledger = topics(rocketmq, unique, "eo-order-in", "eo-order-out", "eo-order-ledger")
    group, producers = unique("eo-order-group"), unique("eo-order-producer")
    produce(rocketmq, origin, ORDER_ROWS, "--body", "seq-{i}", "--quiet", broker="broker-a", queue=0)
    df = stream(
        spark,
        rocketmq,
        origin,
        group,
        consumeFromWhere="CONSUME_FROM_FIRST_OFFSET",
        maxMessagesPerTrigger=str(ORDER_ROWS // ORDER_BATCHES),
    ).selectExpr(
        "body",
        f"concat('order-', cast(split(cast(body as string), '-')[1] as int) % {ORDER_KEYS}) as shardingKey",
    )
    query = (
        exactly_once(df.writeStream, rocketmq, target, producers, ledger)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(300), "the stream did not finish"
    finally:
        query.stop()
    assert len(query.recentProgress) >= ORDER_BATCHES, "the rows were not spread over several batches"
    java_bodies(rocketmq, target, ORDER_ROWS)  # until every COMMIT entered its queue
    messages = rocketmq.tool("consume", "--topic", target, "--count", str(ORDER_ROWS), "--print")
    assert len(messages) == ORDER_ROWS
    by_key: dict[int, list[tuple[str, int, int, int]]] = {}
    for m in messages:
        seq = int(base64.b64decode(m["body"]).decode().split("-")[1])
        by_key.setdefault(seq % ORDER_KEYS, []).append((m["broker"], m["queueId"], m["queueOffset"], seq))
    for key, stored in by_key.items():
        assert {(b, q) for b, q, _, _ in stored} == {expected_queue(f"order-{key}")}, f"order-{key} left its queue"
        in_queue_order = [seq for _, _, _, seq in sorted(stored)]
        assert in_queue_order == sorted(in_queue_order), f"order-{key} is out of order: {in_queue_order}"


def test_a_zombie_attempt_s_halves_are_never_seen(rocketmq: ClusterHandle, unique: Any) -> None:
    """An attempt Spark gave up on (a speculative copy, a task it thinks lost) keeps sending: its
    halves lie among those of the attempt Spark took, in the same half-queue spans, before and
    after the decision. The driver dies after the decision; the next start reads the spans back
    and commits the decided attempt's halves only. Run without Spark, against the real brokers."""
    target, ledger = topics(rocketmq, unique, "eo-zombie", "eo-zombie-ledger")
    group = unique("eo-zombie-group")
    options = driver_options(rocketmq, target, group, ledger)
    transaction = Transaction(unique("query"), 5, "run-1")
    taken, zombie = HalfLog(group, transaction, attempt=2), HalfLog(group, transaction, attempt=1)

    def rows(prefix: str) -> Any:
        return pa.record_batch({"body": pa.array([f"{prefix}-{i}".encode() for i in range(CUT_ROWS // 3)])})

    def taken_rows() -> Iterator[Any]:
        """The taken attempt's rows, with the zombie's whole first run sent between its two batches."""
        yield rows("taken-a")
        write_task(options, {"body": "body"}, iter([rows("zombie-a")]), zombie)
        yield rows("taken-b")

    written = write_task(options, {"body": "body"}, taken_rows(), taken)
    inside = [
        h
        for h in zombie.sent.halves()
        for span in written.halves.spans().spans  # type: ignore[union-attr]
        if span.broker_name == h.broker_name and span.first < h.half_offset < span.last
    ]
    print(f"{len(inside)} of the zombie's halves lie inside the taken attempt's spans")
    assert inside, "the zombie's halves should lie among the taken attempt's in the half queue"
    assert written.halves is not None and len(written.halves) == 2 * (CUT_ROWS // 3)
    plan = decide(State.UNDECIDED, Event.COMMIT)
    key = record_key(group, transaction.query, transaction.batch)
    Committer(options, transaction.query)._run(
        Plan(plan.steps[:1], plan.says), key, [written.halves], Entries(), transaction
    )  # the decision, then the driver dies before any COMMIT
    # The zombie goes on after the decision (a fresh log: each run of a task has its own).
    write_task(options, {"body": "body"}, iter([rows("zombie-b")]), HalfLog(group, transaction, attempt=1))
    Committer(options, transaction.query).recover()
    expected = sorted(f"taken-{part}-{i}" for part in "ab" for i in range(CUT_ROWS // 3))
    assert java_bodies(rocketmq, target, len(expected)) == expected
