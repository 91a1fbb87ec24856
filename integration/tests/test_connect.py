"""The source from a Spark Connect client, unchanged, against the real broker.

The client is a process of its own (``integration/sparkjobs.py``) talking to a local Connect
server over gRPC; the source runs in the server's Python workers. What it wrote is read back with
the tests' classic session, and what it stored on the broker with the official Java client.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from integration.connect import CONNECT_CLIENT, ConnectServer, job_error, job_result, source_options
from integration.constants import QUERY_TIMEOUT_S, WAVE_GAP_S
from integration.faults import StreamJob
from integration.support import (
    ClusterHandle,
    consumer_connections,
    consumer_progress,
    create_topic,
    eventually,
    max_offsets,
    position,
    produce,
    source_members,
    spark_offsets,
    store_times,
    stored_offsets,
)

pytestmark = pytest.mark.integration

Unique = Callable[[str], str]
MESSAGES = 800
PER_TRIGGER = 200
WAVES = 3
MEMBER_MESSAGES = 40
WAVE_MESSAGES = 40
SOURCE_ERROR = re.compile(r"option '[^']+': [^\n]*")


def test_stream_writes_every_message_once_and_stores_the_end_offsets(
    connect_server: ConnectServer, spark: Any, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path
) -> None:
    """Found by ``format("rocketmq")`` with no register call; several micro-batches, each committed."""
    topic, group = unique("connect"), unique("connect-group")
    create_topic(rocketmq, topic, queues=4)
    sent = produce(rocketmq, topic, MESSAGES, "--keys", "c-{i}", "--batch", "100")
    sink = tmp_path / "sink"
    result = job_result(
        "stream",
        [
            "--remote",
            connect_server.url,
            "--sink",
            str(sink),
            "--checkpoint",
            str(tmp_path / "checkpoint"),
            *source_options(
                nameServer=rocketmq.namesrv_addr,
                topic=topic,
                consumerGroup=group,
                consumeFromWhere="CONSUME_FROM_FIRST_OFFSET",
                maxMessagesPerTrigger=str(PER_TRIGGER),
            ),
        ],
        tmp_path / "client",
    )

    assert result["client"] == CONNECT_CLIENT
    assert result["rows"] == MESSAGES
    assert result["batches"] >= MESSAGES // PER_TRIGGER
    keys = Counter(row.keys for row in spark.read.parquet(str(sink)).select("keys").collect())
    assert set(keys) == {m["keys"] for m in sent}
    assert max(keys.values()) == 1, "a message reached the sink twice"
    ends = max_offsets(rocketmq, topic)
    assert spark_offsets(result["endOffset"], topic) == ends
    assert stored_offsets(rocketmq, topic, group) == ends


def test_a_stream_through_connect_is_an_online_member_and_its_progress_shows_in_mqadmin(
    connect_server: ConnectServer, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path
) -> None:
    """The group heartbeat runs in the Connect server's Python worker as in a classic driver: while
    the query runs, the release's own mqadmin lists it in the group and shows every queue committed
    with no lag; once it stops, it has left the group."""
    topic, group = unique("connect-member"), unique("connect-member-group")
    create_topic(rocketmq, topic, queues=2)
    produce(rocketmq, topic, MEMBER_MESSAGES, "--quiet")
    job = StreamJob(
        tmp_path,
        {
            "nameServer": rocketmq.namesrv_addr,
            "topic": topic,
            "consumerGroup": group,
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        },
        1,
        remote=connect_server.url,
    )

    def listed() -> list[str]:
        assert job.alive(), f"the stream ended early:\n{job.tail()}"
        return source_members(rocketmq, group)

    try:
        (member,) = eventually(listed, "the stream is not listed as online")
        maxima = max_offsets(rocketmq, topic)
        eventually(
            lambda: consumer_progress(rocketmq, group, topic) == {q: (top, top) for q, top in maxima.items()},
            "consumerProgress -g does not show every queue committed with no lag",
        )
        answer = job.finish()
        assert "result" in answer, answer
    finally:
        job.close()
    eventually(lambda: member not in consumer_connections(rocketmq, group), "the stopped stream is still listed")
    assert stored_offsets(rocketmq, topic, group) == maxima


def test_registered_batch_read_returns_exactly_the_time_window(
    connect_server: ConnectServer, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path
) -> None:
    """Registered explicitly from the client; the middle wave of three, by store time."""
    topic = unique("connect-window")
    create_topic(rocketmq, topic, queues=2)
    waves: list[list[dict[str, Any]]] = []
    for wave in range(WAVES):
        if waves:
            time.sleep(WAVE_GAP_S)
        waves.append(produce(rocketmq, topic, WAVE_MESSAGES, "--keys", f"w{wave}-{{i}}", "--batch", "10"))
    times = store_times(rocketmq, topic, WAVES * WAVE_MESSAGES)
    start = min(times[position(m)] for m in waves[1])
    end = min(times[position(m)] for m in waves[2])
    assert max(times[position(m)] for m in waves[0]) < start

    result = job_result(
        "batch",
        [
            "--remote",
            connect_server.url,
            "--register",
            *source_options(
                nameServer=rocketmq.namesrv_addr, topic=topic, startingTimestamp=str(start), endingTimestamp=str(end)
            ),
        ],
        tmp_path / "client",
    )
    assert result["client"] == CONNECT_CLIENT
    assert sorted(result["keys"]) == sorted(m["keys"] for m in waves[1])


def classic_error(action: Callable[[], Any]) -> str:
    with pytest.raises(Exception) as caught:
        action()
    return str(caught.value)


def source_error(message: str) -> str:
    """The source's own sentence in an error as Spark passes it on."""
    found = SOURCE_ERROR.search(message)
    assert found is not None, f"no source error in: {message[:2000]}"
    return found.group(0)


def test_a_bad_option_gives_the_same_error_as_in_classic_pyspark(
    connect_server: ConnectServer, spark: Any, rocketmq: ClusterHandle, unique: Unique, tmp_path: Path
) -> None:
    topic, group = unique("connect-bad"), unique("connect-bad-group")
    create_topic(rocketmq, topic, queues=1)
    base = {"nameServer": rocketmq.namesrv_addr, "topic": topic}
    stream_options = {**base, "consumerGroup": group, "consumeFromWhere": "FROM_START"}
    batch_options = {**base, "expressionType": "XPATH"}

    def classic_stream() -> None:
        query = (
            spark.readStream.format("rocketmq")
            .options(**stream_options)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "classic"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(QUERY_TIMEOUT_S)
        finally:
            query.stop()

    classic = {
        "stream": classic_error(classic_stream),
        "batch": classic_error(lambda: spark.read.format("rocketmq").options(**batch_options).load().count()),
    }
    connect = {
        "stream": job_error(
            "stream",
            [
                "--remote",
                connect_server.url,
                "--sink",
                str(tmp_path / "sink"),
                "--checkpoint",
                str(tmp_path / "connect"),
                *source_options(**stream_options),
            ],
            tmp_path / "client",
        ),
        "batch": job_error(
            "batch", ["--remote", connect_server.url, *source_options(**batch_options)], tmp_path / "client"
        ),
    }
    assert (
        source_error(connect["stream"])
        == source_error(classic["stream"])
        == (
            "option 'consumeFromWhere': unknown value 'FROM_START'. "
            "Use one of: CONSUME_FROM_FIRST_OFFSET, CONSUME_FROM_LAST_OFFSET, CONSUME_FROM_TIMESTAMP"
        )
    )
    assert (
        source_error(connect["batch"])
        == source_error(classic["batch"])
        == ("option 'expressionType': unknown value 'XPATH'. Use one of: TAG, SQL92")
    )
