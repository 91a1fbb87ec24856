"""Bad options fail through Spark itself with the source's clear error, before any job runs."""

from __future__ import annotations

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
    query = (reader.load().writeStream.format("noop").option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
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


def test_each_rule_gives_its_error(spark: Any, rocketmq: ClusterHandle, unique: Callable[[str], str],
                                   tmp_path: Path) -> None:
    topic = unique("bad")
    create_topic(rocketmq, topic, queues=2)
    base = {"nameServer": rocketmq.namesrv_addr, "topic": topic, "consumerGroup": unique("bad-group")}
    jobs_before = len(spark.sparkContext.statusTracker().getJobIdsForGroup())
    stream_cases = [
        ({k: v for k, v in base.items() if k != "consumerGroup"}, "option 'consumerGroup': is required for streams"),
        ({k: v for k, v in base.items() if k != "nameServer"}, "option 'nameServer': is required"),
        ({**base, "consumeFromWhere": "FROM_START"}, "option 'consumeFromWhere': unknown value 'FROM_START'"),
        ({**base, "startingOffsets": '{"x": '}, "option 'startingOffsets': malformed offsets"),
        ({**base, "startingOffsets": f'{{"{topic}": {{"broker-a": {{"7": 0}}}}}}'},
         f"option 'startingOffsets': names queues that do not exist: {topic}/broker-a/7"),
        ({**base, "startingOffsets": f'{{"{topic}": {{"broker-a": {{"0": 0}}}}}}', "startingTimestamp": "1"},
         "option 'startingTimestamp': cannot be combined with JSON startingOffsets"),
        ({**base, "endingOffsets": "latest"}, "option 'endingOffsets': applies to batch reads only"),
        ({**base, "endingTimestamp": "1"}, "option 'endingTimestamp': applies to batch reads only"),
        ({**base, "topic": unique("missing")}, "does not exist on"),
    ]
    for index, (options, message) in enumerate(stream_cases):
        with pytest.raises(Exception, match=message.replace("{", r"\{").replace("}", r"\}")):
            _start_stream(spark, options, tmp_path / str(index))
    with pytest.raises(Exception, match=r"option 'endingOffsets': names queues that do not exist"):
        _batch(spark, {**base, "endingOffsets": f'{{"{topic}": {{"broker-z": {{"0": 1}}}}}}'})
    with pytest.raises(Exception, match="option 'expressionType': unknown value 'XPATH'. Use one of: TAG, SQL92"):
        _batch(spark, {**base, "expressionType": "XPATH"})
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup()) == jobs_before, "a job ran"
