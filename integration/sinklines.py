"""The sink's scenarios of test_spark_lines.py, run by each PySpark line's Spark process (a
``Driver``): a batch write, and a stream from the source into the sink restarted on its
checkpoint. PySpark 4.0 writes a stream's rows through the row-based stream writer, 4.1 and later
through the Arrow one. What arrived is read with RocketMQ's Java consumer and compared exactly.
"""

from __future__ import annotations

import base64
import time
from collections import Counter
from pathlib import Path
from typing import Any

from integration.constants import QUERY_TIMEOUT_S
from integration.lines import Driver
from integration.support import ClusterHandle, create_topic, eventually, offsets_and_ends, produce

QUEUES = 2  # per broker
# The batch write: rows, tasks, and the sharding keys that spread them.
WRITTEN = 1000
WRITE_TASKS = 2
SHARDING_KEYS = 7
# The stream: two waves the source reads, a restart on the checkpoint between them.
FIRST_WAVE = 300
SECOND_WAVE = 200
COPY_COLUMNS = ["upper(cast(body as string)) as body", "keys", "tags"]
# How long a topic's queues must hold still before its messages are counted.
SETTLE_S = 1.0


def java_messages(rocketmq: ClusterHandle, topic: str) -> list[dict[str, Any]]:
    """Every message the topic holds (duplicates too), as RocketMQ's Java consumer reads them,
    once its queues stopped growing (a committed half enters its queue a moment after its END)."""

    def settled() -> int | None:
        first = sum(offsets_and_ends(rocketmq, topic, f"{topic}-probe")[1].values())
        time.sleep(SETTLE_S)
        again = sum(offsets_and_ends(rocketmq, topic, f"{topic}-probe")[1].values())
        return again if again == first else None

    stored = eventually(settled, f"{topic} kept growing")
    return rocketmq.tool("consume", "--topic", topic, "--count", str(stored), "--print")


def exactly_once(rocketmq: ClusterHandle, group: str, ledger: str) -> dict[str, str]:
    """The sink options of ``deliveryGuarantee=exactly-once``, its transaction topic created."""
    create_topic(rocketmq, ledger, queues=QUEUES)
    return {"deliveryGuarantee": "exactly-once", "producerGroup": group, "transactionTopic": ledger}


def batch_write_arrives_exactly(
    driver: Driver, rocketmq: ClusterHandle, topic: str, extra: dict[str, str] | None = None
) -> None:
    """Each row once, with its body, tags, keys and properties; ``extra`` sink options (with a
    ``writeId``, the same write is made twice, and the second writes nothing)."""
    create_topic(rocketmq, topic, queues=QUEUES)
    columns = [
        "cast(concat('w-', id) as binary) as body",
        "concat('t', id % 3) as tags",
        "concat('k-', id) as keys",
        "map('row', cast(id as string)) as properties",
        f"concat('s', id % {SHARDING_KEYS}) as shardingKey",
    ]
    options = {"nameServer": rocketmq.namesrv_addr, "topic": topic, **(extra or {})}
    for _ in range(2 if "writeId" in options else 1):
        driver.call("write_rows", options=options, rows=WRITTEN, columns=columns, partitions=WRITE_TASKS)
    got = Counter(
        (base64.b64decode(m["body"]).decode(), m["tags"], m["keys"], m["properties"]["row"])
        for m in java_messages(rocketmq, topic)
    )
    assert got == Counter((f"w-{i}", f"t{i % 3}", f"k-{i}", str(i)) for i in range(WRITTEN))


def stream_into_the_sink_writes_each_row_once(
    driver: Driver,
    rocketmq: ClusterHandle,
    origin: str,
    copy: str,
    group: str,
    checkpoint: Path,
    extra: dict[str, str] | None = None,
) -> None:
    """Two AvailableNow runs on one checkpoint, each after a wave of messages: every message of
    both waves is in ``copy`` once, transformed, and each run read exactly its wave; ``extra``
    sink options."""
    for topic in (origin, copy):
        create_topic(rocketmq, topic, queues=QUEUES)
    source = {
        "nameServer": rocketmq.namesrv_addr,
        "topic": origin,
        "consumerGroup": group,
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
    }
    run = {
        "source": source,
        "sink": {"nameServer": rocketmq.namesrv_addr, "topic": copy, **(extra or {})},
        "checkpoint": str(checkpoint),
        "columns": COPY_COLUMNS,
        "timeout_s": QUERY_TIMEOUT_S,
    }
    produce(rocketmq, origin, FIRST_WAVE, "--body", "a-{i}", "--keys", "a{i}", "--tags", "x", "--quiet")
    first = driver.call("copy_available_now", **run)
    produce(rocketmq, origin, SECOND_WAVE, "--body", "b-{i}", "--keys", "b{i}", "--tags", "y", "--quiet")
    second = driver.call("copy_available_now", **run)

    assert sum(first["rows"]) == FIRST_WAVE and sum(second["rows"]) == SECOND_WAVE
    got = Counter((base64.b64decode(m["body"]).decode(), m["keys"], m["tags"]) for m in java_messages(rocketmq, copy))
    expected = [(f"A-{i}", f"a{i}", "x") for i in range(FIRST_WAVE)]
    expected += [(f"B-{i}", f"b{i}", "y") for i in range(SECOND_WAVE)]
    assert got == Counter(expected)
