"""Messages that expired (``fileReservedTime``), as every release and consume queue store answers
for them: where each queue starts, what a batch read and a time window return, and a group's
stored offset that points at messages no longer there (docs/offsets.md, "Data loss").

A one-broker cluster of its own with short retention (1 MiB commit-log files, deleted as soon as
they are full). A topic's first wave is pushed out by a filler topic's messages, then a second
wave is sent; another topic keeps only expired messages. ``ROCKETMQ_VERSION`` and
``ROCKETMQ_STORE`` pick the release and the store: a RocksDB consume queue answers a search by
time on a queue that expired entirely with -1, where the file store answers its min offset.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from integration.cluster_config import (
    BROKER_A,
    SHORT_RETENTION_COMMIT_LOG_FILE_BYTES,
    ClusterConfig,
    ClusterError,
    shifted,
)
from integration.failfast import fail_stream
from integration.support import (
    EARLY,
    ClusterHandle,
    Early,
    batch_read,
    create_topic,
    eventually,
    own_cluster,
    produce,
    run_available_now,
    stored_offsets,
    stream,
)
from integration.versions import Release, release, selected_version
from rocketmq_spark.model import ClientConfig, MessageQueue
from rocketmq_spark.remoting import calls
from rocketmq_spark.remoting.client import RocketMQClient

pytestmark = pytest.mark.integration

NAMESRV_PORT = shifted(14876)
BROKER_PORT = shifted(15911)
QUEUES = 2
OLD = 60
NEW = 40
BODY_BYTES = 1024
# Three commit-log files' worth: the files holding the first wave fill up and are deleted.
FILLER_FILES = 3
FILLER_MESSAGES = FILLER_FILES * SHORT_RETENTION_COMMIT_LOG_FILE_BYTES // BODY_BYTES
FILLER_BATCH = 32
EXPIRE_WITHIN_S = 90.0
# A store time before anything the module sends, and the wait that makes it so.
BEFORE_MS_MARGIN = 1_000
MS_PER_S = 1_000
# The first major release whose store moves a fully expired queue's min offset to its end.
MIN_OFFSET_MOVES_MAJOR = 5


def selected_release() -> Release:
    return release(selected_version())


@dataclass(frozen=True)
class Expired:
    """What the module's fixture left on its broker."""

    handle: ClusterHandle
    topic: str  # its first wave expired, a second wave after it
    gone: str  # every message expired, nothing after
    group: str  # stored 0 on every queue of ``topic`` before the first wave expired
    starts: dict[tuple[str, int], int]  # ``topic``'s min offsets: where the second wave begins
    before_ms: int  # a time before the first wave
    second_wave_ms: int  # a time after the first wave and before the second

    @property
    def new_keys(self) -> list[str]:
        return sorted(f"new-{i}" for i in range(NEW))

    def options(self, topic: str, **more: str) -> dict[str, str]:
        return {"nameServer": self.handle.namesrv_addr, "topic": topic, **more}


def min_offsets(handle: ClusterHandle, topic: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(min, max) offset per queue of the topic, as the broker answers them."""
    with RocketMQClient(ClientConfig(name_servers=(handle.namesrv_addr,))) as client:
        route = client.topic_route(topic)
        address = route.master_address(BROKER_A)
        assert address is not None
        bounds = {}
        for queue_id in range(QUEUES):
            queue = MessageQueue(topic, BROKER_A, queue_id)
            bounds[(BROKER_A, queue_id)] = (
                client.call(address, calls.min_offset(queue)),
                client.call(address, calls.max_offset(queue)),
            )
        return bounds


@contextmanager
def expired_messages(workdir: Path) -> Iterator[Expired]:
    """The module's cluster and what expired on it; entered as the session starts (``EARLY``):
    the broker's cleanup starts a minute after the broker, a wait that passes beside other tests."""
    release = selected_release()
    if release.major < MIN_OFFSET_MOVES_MAJOR:
        raise ClusterError(
            f"RocketMQ {release.version} leaves the min offset of a queue whose every message expired where it "
            "was, so this module's expectations do not hold there (docs/running-rocketmq.md, tested releases); "
            "the source's handling of it is unit-tested (tests/unit/test_removed_entries.py)"
        )
    config = ClusterConfig(
        workdir=workdir,
        brokers=1,
        namesrv_port=NAMESRV_PORT,
        broker_ports=(BROKER_PORT,),
        short_retention=True,
        timer_messages=False,
    )
    with own_cluster(config) as handle:
        suffix = uuid.uuid4().hex[:8]
        topic, gone, filler, group = (f"r-{name}-{suffix}" for name in ("topic", "gone", "filler", "group"))
        for name in (topic, gone, filler):
            create_topic(handle, name, queues=QUEUES, brokers=BROKER_A)
        before_ms = int(time.time() * MS_PER_S) - BEFORE_MS_MARGIN
        for name in (topic, gone):
            produce(handle, name, OLD, "--keys", "old-{i}", "--body-size", str(BODY_BYTES), "--quiet")
        for queue_id in range(QUEUES):
            handle.tool(
                "set-offset", "--topic", topic, "--group", group, "--broker", BROKER_A, "--queue", str(queue_id),
                "--offset", "0",
            )  # fmt: skip
        produce(
            handle, filler, FILLER_MESSAGES, "--body-size", str(BODY_BYTES), "--batch", str(FILLER_BATCH), "--quiet"
        )
        filled = time.monotonic()
        eventually(
            lambda: all(low == high > 0 for low, high in [*min_offsets(handle, topic).values(), *min_offsets(handle, gone).values()]),
            "the first wave did not expire",
            EXPIRE_WITHIN_S,
        )  # fmt: skip
        print(f"the first wave expired {time.monotonic() - filled:.1f} s after the filler was stored")
        second_wave_ms = int(time.time() * MS_PER_S)
        starts = {queue: low for queue, (low, _) in min_offsets(handle, topic).items()}
        time.sleep(BEFORE_MS_MARGIN / MS_PER_S)  # the second wave is stored after second_wave_ms
        produce(handle, topic, NEW, "--keys", "new-{i}", "--quiet")
        yield Expired(handle, topic, gone, group, starts, before_ms, second_wave_ms)


EARLY[__name__] = expired_messages


@pytest.fixture(scope="module")
def expired(early: dict[str, Early[Expired]]) -> Iterator[Expired]:
    """The early fixture's cluster, stopped when the module ends: it does not idle beside the rest."""
    prepared = early[__name__]
    yield prepared.result()
    prepared.close()


def keys_of(df: Any) -> list[str]:
    return sorted(row.keys for row in df.select("keys").collect())


def test_a_batch_read_returns_what_is_left_as_the_java_consumer_does(spark: Any, expired: Expired) -> None:
    java = expired.handle.tool("consume", "--topic", expired.topic, "--count", str(NEW), "--print")
    assert sorted(m["keys"] for m in java) == expired.new_keys
    assert keys_of(batch_read(spark, expired.handle, expired.topic)) == expired.new_keys
    assert batch_read(spark, expired.handle, expired.gone).count() == 0


def test_first_starts_each_queue_at_its_min_offset(spark: Any, expired: Expired, tmp_path: Path) -> None:
    group = f"r-first-{uuid.uuid4().hex[:8]}"
    rows: list[Any] = []
    df = stream(spark, expired.handle, expired.topic, group, consumeFromWhere="CONSUME_FROM_FIRST_OFFSET")
    run_available_now(
        df.select("keys", "queueId", "queueOffset"), tmp_path / "c", lambda b, _: rows.extend(b.collect())
    )
    assert sorted(r.keys for r in rows) == expired.new_keys
    assert min(r.queueOffset for r in rows if r.queueId == 0) == expired.starts[(BROKER_A, 0)]
    ends = {queue: high for queue, (_, high) in min_offsets(expired.handle, expired.topic).items()}
    assert stored_offsets(expired.handle, expired.topic, group) == ends


def test_a_stored_offset_below_the_min_offset_is_data_loss(spark: Any, expired: Expired, tmp_path: Path) -> None:
    """The group stored 0 before the first wave expired: offsets [0, min) are gone. With
    failOnDataLoss=true the query fails naming them; with false it reads what is left."""
    options = expired.options(expired.topic, consumerGroup=expired.group, commitOffsets="false")
    _, error = fail_stream(spark, {**options, "failOnDataLoss": "true"}, tmp_path / "fail")
    start = expired.starts[(BROKER_A, 0)]
    assert f"{expired.topic}/{BROKER_A}/0: offsets [0, {start}) were deleted or expired" in error, error
    assert "failOnDataLoss=false" in error, error
    rows: list[Any] = []
    df = stream(spark, expired.handle, expired.topic, expired.group, commitOffsets="false", failOnDataLoss="false")
    run_available_now(df.select("keys"), tmp_path / "skip", lambda b, _: rows.extend(b.collect()))
    assert sorted(r.keys for r in rows) == expired.new_keys


def test_times_before_what_is_left_start_at_the_min_offset(spark: Any, expired: Expired) -> None:
    """A window over the expired wave only is empty, one from before it reads what is left, and a
    queue that expired entirely reads nothing (RocksDB answers its search with -1)."""
    window = batch_read(
        spark,
        expired.handle,
        expired.topic,
        startingTimestamp=str(expired.before_ms),
        endingTimestamp=str(expired.second_wave_ms),
    )
    assert window.count() == 0
    since = batch_read(spark, expired.handle, expired.topic, startingTimestamp=str(expired.before_ms))
    assert keys_of(since) == expired.new_keys
    gone = batch_read(spark, expired.handle, expired.gone, startingTimestamp=str(expired.before_ms))
    assert gone.count() == 0
