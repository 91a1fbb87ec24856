"""A query restarted on its checkpoint after its queue came to hold other messages at the offsets
the checkpoint counted on: what a new master that lacks messages does, made certain by deleting
and recreating the topic while the query is stopped (on one broker, in seconds).

The restarted driver saw no change happen; the store times in its offset log tell it
(docs/offsets.md#data-loss). Without them, the batch run again would read the new messages at its
planned offsets and the query would go on from its end, never reading those below.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from integration.constants import POLL_S, QUERY_TIMEOUT_S
from integration.support import ClusterHandle, create_topic, produce, stream, wait_rows
from rocketmq_spark.model import MS_PER_SECOND
from rocketmq_spark.source.offsets import STORE_TIME_SLACK_MS

pytestmark = pytest.mark.integration

Unique = Callable[[str], str]

BEFORE = 30  # messages the first query reads and commits
POISON = 5  # messages of the batch the first query fails in (a task stopping it)
AFTER = 50  # messages of the recreated topic: more than the checkpoint had read, so no queue looks short
TRIGGER = "1 second"


class Run:
    """A stream of one topic into a list through foreachBatch, failing on a batch with a poison key."""

    def __init__(self, spark: Any, rocketmq: ClusterHandle, topic: str, checkpoint: Path, **options: str) -> None:
        self.keys: list[str] = []
        df = stream(spark, rocketmq, topic, f"{topic}-group", consumeFromWhere="CONSUME_FROM_FIRST_OFFSET", **options)
        self.query = (
            df.writeStream.option("checkpointLocation", str(checkpoint))
            .foreachBatch(self._batch)
            .trigger(processingTime=TRIGGER)
            .start()
        )

    def _batch(self, batch: Any, _: int) -> None:
        keys = [r.keys for r in batch.select("keys").collect()]
        if any(k.startswith("poison") for k in keys):
            raise RuntimeError("a poison batch: the query stops with this batch planned, not committed")
        self.keys.extend(keys)

    def wait_failed(self) -> str:
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        while self.query.exception() is None:
            assert time.monotonic() < deadline, "the query did not stop"
            time.sleep(POLL_S)
        return str(self.query.exception())

    def wait_keys(self, expected: set[str]) -> None:
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        while not expected <= set(self.keys):
            assert self.query.exception() is None, self.query.exception()
            assert time.monotonic() < deadline, f"missing {sorted(expected - set(self.keys))[:10]}"
            time.sleep(POLL_S)


def recreated(rocketmq: ClusterHandle, topic: str) -> None:
    """The topic deleted and created again, with AFTER new messages from offset 0.

    First a wait past the store-time slack: a message stored within it of the newest one the
    checkpoint saw counts as one the checkpoint had (docs/offsets.md#data-loss), and this test is
    about the ones stored after it, as a new master's are (an election takes seconds)."""
    time.sleep(STORE_TIME_SLACK_MS / MS_PER_SECOND)
    rocketmq.tool("delete-topic", "--topic", topic)
    create_topic(rocketmq, topic, queues=1, brokers="broker-a")
    produce(rocketmq, topic, AFTER, "--keys", "after-{i}")


def first_run(spark: Any, rocketmq: ClusterHandle, topic: str, checkpoint: Path, poison: bool) -> None:
    """BEFORE messages read and committed; with ``poison``, then a batch planned that fails."""
    create_topic(rocketmq, topic, queues=1, brokers="broker-a")
    produce(rocketmq, topic, BEFORE, "--keys", "before-{i}")
    run = Run(spark, rocketmq, topic, checkpoint)
    try:
        wait_rows(run.query, BEFORE)
        if poison:
            produce(rocketmq, topic, POISON, "--keys", "poison-{i}")
            assert "poison batch" in run.wait_failed()
    finally:
        run.query.stop()
    assert sorted(run.keys) == sorted(f"before-{i}" for i in range(BEFORE))


@pytest.mark.parametrize("poison", [True, False], ids=["batch-run-again", "committed-batch"])
def test_a_restart_reads_every_message_stored_since_at_offsets_the_checkpoint_counted_on(
    spark: Any, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path, poison: bool
) -> None:
    topic = unique("restart-check")
    first_run(spark, rocketmq, topic, tmp_path / "c", poison)
    recreated(rocketmq, topic)
    run = Run(spark, rocketmq, topic, tmp_path / "c", failOnDataLoss="false")
    try:
        run.wait_keys({f"after-{i}" for i in range(AFTER)})
        time.sleep(2)  # a trigger or two more: nothing is read twice
    finally:
        run.query.stop()
    assert sorted(run.keys) == sorted(f"after-{i}" for i in range(AFTER))


def test_a_batch_run_again_on_other_messages_stops_naming_them(
    spark: Any, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path
) -> None:
    topic = unique("restart-stop")
    first_run(spark, rocketmq, topic, tmp_path / "c", poison=True)
    recreated(rocketmq, topic)
    run = Run(spark, rocketmq, topic, tmp_path / "c")
    try:
        said = run.wait_failed()
    finally:
        run.query.stop()
    assert "since this query's checkpoint was written, broker-a came to hold other messages" in said
    first = f"{topic}/broker-a/0: offsets [0, {BEFORE + POISON}) ({BEFORE + POISON}: {BEFORE} read, {POISON} not)"
    assert first in said, said[:2000]
    assert "failOnDataLoss=false" in said and run.keys == []
