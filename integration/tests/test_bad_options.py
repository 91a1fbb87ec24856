"""Bad options fail through Spark itself with the source's clear error, before any job runs: at
load() where Spark lets the source see them, else when the stream starts or the read is planned."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from integration.support import ClusterHandle, create_topic

pytestmark = pytest.mark.integration


def _start_stream(spark: Any, options: dict[str, str], checkpoint: Path) -> None:
    reader = spark.readStream.format("rocketmq")
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
        error = query.exception()
        if error is not None:
            raise error
    finally:
        query.stop()


def _batch(spark: Any, options: dict[str, str]) -> None:
    reader = spark.read.format("rocketmq")
    for key, value in options.items():
        reader = reader.option(key, value)
    reader.load().count()


def test_each_rule_gives_its_error(
    spark: Any, rocketmq: ClusterHandle, unique: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique("bad")
    create_topic(rocketmq, topic, queues=2)
    base = {"nameServer": rocketmq.namesrv_addr, "topic": topic, "consumerGroup": unique("bad-group")}
    jobs_before = len(spark.sparkContext.statusTracker().getJobIdsForGroup())
    stream_cases = [
        ({k: v for k, v in base.items() if k != "consumerGroup"}, "option 'consumerGroup': is required for streams"),
        ({k: v for k, v in base.items() if k != "nameServer"}, "option 'nameServer': is required"),
        ({**base, "consumeFromWhere": "FROM_START"}, "option 'consumeFromWhere': unknown value 'FROM_START'"),
        ({**base, "startingOffsets": '{"x": '}, "option 'startingOffsets': malformed offsets"),
        (
            {**base, "startingOffsets": f'{{"{topic}": {{"broker-a": {{"7": 0}}}}}}'},
            f"option 'startingOffsets': names queues that do not exist: {topic}/broker-a/7",
        ),
        (
            {**base, "startingOffsets": f'{{"{topic}": {{"broker-a": {{"0": 0}}}}}}', "startingTimestamp": "1"},
            "option 'startingTimestamp': cannot be combined with JSON startingOffsets",
        ),
        ({**base, "endingOffsets": "latest"}, "option 'endingOffsets': applies to batch reads only"),
        ({**base, "endingTimestamp": "1"}, "option 'endingTimestamp': applies to batch reads only"),
        ({**base, "topic": unique("missing")}, "does not exist on"),
        (
            {**base, "startingOffsets": f'{{"{topic}": {{"broker-a": {{"0": 5}}}}}}'},
            f"option 'startingOffsets': names offsets past the end of their queues: {topic}/broker-a/0: 5 is beyond "
            "the queue's end (max 0)",
        ),
    ]
    for index, (options, message) in enumerate(stream_cases):
        with pytest.raises(Exception, match=re.escape(message)) as caught:
            _start_stream(spark, options, tmp_path / str(index))
        assert "UnboundLocalError" not in str(caught.value)  # PySpark's own error does not bury ours
    with pytest.raises(Exception, match=r"option 'endingOffsets': names queues that do not exist"):
        _batch(spark, {**base, "endingOffsets": f'{{"{topic}": {{"broker-z": {{"0": 1}}}}}}'})
    past_end = (
        f"option 'endingOffsets': names offsets past the end of their queues: {topic}/broker-a/0: 5 is beyond "
        "the queue's end (max 0)"
    )
    with pytest.raises(Exception, match=re.escape(past_end)):
        _batch(spark, {**base, "endingOffsets": f'{{"{topic}": {{"broker-a": {{"0": 5}}}}}}'})
    with pytest.raises(Exception, match="option 'expressionType': unknown value 'XPATH'. Use one of: TAG, SQL92"):
        _batch(spark, {**base, "expressionType": "XPATH"})
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup()) == jobs_before, "a job ran"


LOAD_CASES = [
    ({"consumeFromWhere": "FROM_START"}, "option 'consumeFromWhere': unknown value 'FROM_START'"),
    ({"pullTimeoutMs": "3s"}, "option 'pullTimeoutMs': '3s' is not a positive whole number"),
    ({"retryBudgetMs": "-1"}, "option 'retryBudgetMs': '-1' is not a whole number of 0 or more"),
    ({"maxMessagePerTrigger": "5"}, "option 'maxMessagePerTrigger': not an option of the rocketmq source"),
    ({"startingOffsets": '{"x": '}, "option 'startingOffsets': malformed offsets"),
]


@pytest.mark.parametrize(("bad", "message"), LOAD_CASES)
@pytest.mark.parametrize("kind", ["stream", "batch"])
def test_bad_options_fail_at_load(spark: Any, kind: str, bad: dict[str, str], message: str) -> None:
    """load() itself raises: nothing needs a broker, so the name server here is never asked."""
    reader = (spark.readStream if kind == "stream" else spark.read).format("rocketmq")
    for key, value in {"nameServer": "127.0.0.1:1", "topic": "t", "consumerGroup": "g", **bad}.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception) as caught:
        reader.load()
    assert message.lower() in str(caught.value).lower()  # Spark hands option names over in lower case
    assert "UnboundLocalError" not in str(caught.value)
