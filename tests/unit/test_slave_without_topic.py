"""A broker name read from a slave that has not copied the topic yet (a 5.x slave answers its
topic stats with TOPIC_NOT_EXIST and its max offsets with 0): the driver never plans its queues as
empty. A batch waits for a replica that serves them, then fails naming the broker; a stream holds
them and reads the other brokers."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.calls import Call
from rocketmq_spark.remoting.cluster import Cluster
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.errors import ConnectionFailedError, NoReplicaError, RocketMQError
from rocketmq_spark.remoting.route import BrokerData, TopicRoute
from rocketmq_spark.source.batch_reader import RocketMQBatchReader
from rocketmq_spark.source.offset_reader import OffsetReader
from rocketmq_spark.source.offsets import from_spark
from rocketmq_spark.source.option_model import ReadKind, SourceOptions
from rocketmq_spark.source.options import parse_options
from rocketmq_spark.source.partition import RocketMQPartition
from rocketmq_spark.source.spark_api import ReadAllAvailable
from rocketmq_spark.source.stream_reader import RocketMQStreamReader
from tests.fakes import FakeBrokers
from tests.support import TOPICS, ManualClock

DOWN = "broker-1"  # its master is down; a slave without the topic is listed
SLAVE = "127.0.0.99:10911"
BUDGET_S = 30.0
MESSAGES = 10


class SlaveWithoutTopic(FakeBrokers):
    """Fake brokers of which one broker name, while ``master_down``, is listed with a slave only,
    and that slave has not copied the topics; ``back_after`` topic stats asked of it bring the
    master back."""

    def __init__(self, back_after: int | None = None) -> None:
        super().__init__(2, messages=MESSAGES)
        self.master_down = True
        self.back_after = back_after
        self.asked_slave = 0  # topic stats the slave answered

    def topic_route(self, topic: str) -> TopicRoute:
        route = super().topic_route(topic)
        if not self.master_down:
            return route
        brokers = {**route.brokers, DOWN: BrokerData(DOWN, {1: SLAVE})}
        return dataclasses.replace(route, brokers=brokers)

    def call_many(self, addressed: Sequence[tuple[str, Call[Any]]], window: int = 64) -> list[Any]:
        answers = super().call_many([(a, c) for a, c in addressed if a != SLAVE], window)
        return [self._slave_answer(call) if a == SLAVE else answers.pop(0) for a, call in addressed]

    def _slave_answer(self, call: Call[Any]) -> Any:
        self.sent.append(call.code)
        if call.code == RequestCode.GET_TOPIC_STATS_INFO:
            self.asked_slave += 1
            if self.back_after is not None and self.asked_slave >= self.back_after:
                self.master_down = False
            response = RemotingCommand(ResponseCode.TOPIC_NOT_EXIST, remark="topic not exist")
        elif call.code in (RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET):
            response = RemotingCommand(ResponseCode.SUCCESS, ext_fields={"offset": "0"})
        else:
            raise AssertionError(f"the slave was asked {call.code}")
        response.version = self.version
        try:
            return call.read(response, SLAVE)
        except RocketMQError as err:
            return err


class DeadMasterListed(SlaveWithoutTopic):
    """The name server still lists the killed master in the first routes the read asks for; its
    address refuses connections, and the routes asked again list the slave alone."""

    def __init__(self, back_after: int | None = None) -> None:
        super().__init__(back_after)
        self.routes_asked = 0

    def topic_route(self, topic: str) -> TopicRoute:
        self.routes_asked += 1
        if self.routes_asked <= len(TOPICS):  # the first look, one route per topic
            self.master_down = False
            try:
                return super().topic_route(topic)
            finally:
                self.master_down = True
        return super().topic_route(topic)

    def call_many(self, addressed: Sequence[tuple[str, Call[Any]]], window: int = 64) -> list[Any]:
        dead = self.address(DOWN)
        live = super().call_many([(a, c) for a, c in addressed if a != dead], window) if self.master_down else None
        if live is None:
            return super().call_many(addressed, window)
        return [
            ConnectionFailedError(f"cannot connect to {a}: refused") if a == dead else live.pop(0) for a, _ in addressed
        ]


def options(kind: ReadKind, clock: ManualClock) -> SourceOptions:
    parsed = parse_options(
        {
            "nameServer": "127.0.0.1:9876",
            "topic": ",".join(TOPICS),
            "consumerGroup": "g",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "retryBudgetMs": str(int(BUDGET_S * 1000)),
        },
        kind=kind,
    )
    timed = {"sleep": clock.sleep, "clock": clock}
    return dataclasses.replace(
        parsed,
        retry=dataclasses.replace(parsed.retry, **timed),
        start_retry=dataclasses.replace(parsed.start_retry, **timed),
    )


def planned(brokers: SlaveWithoutTopic, clock: ManualClock) -> dict[MessageQueue, tuple[int, int]]:
    reader = RocketMQBatchReader(
        options(ReadKind.BATCH, clock), open_offsets=lambda o: OffsetReader(o, Cluster.of(brokers, clock), clock=clock)
    )
    ranges: dict[MessageQueue, tuple[int, int]] = {}
    for partition in reader.partitions():
        assert isinstance(partition, RocketMQPartition)
        ranges.update({r.queue: (r.start, r.end) for r in partition.ranges})
    return ranges


def test_a_batch_waits_for_a_replica_with_the_topic_and_plans_its_whole_queues() -> None:
    brokers, clock = SlaveWithoutTopic(back_after=3), ManualClock()
    ranges = planned(brokers, clock)
    assert ranges == {q: (0, MESSAGES) for q in brokers.max}
    assert brokers.asked_slave >= 3
    assert RequestCode.GET_MAX_OFFSET not in brokers.sent  # the slave's 0 was never asked for


def test_a_batch_fails_naming_the_broker_and_the_slave_when_none_serves_for_the_budget() -> None:
    brokers, clock = SlaveWithoutTopic(), ManualClock()
    with pytest.raises(NoReplicaError, match=rf"broker {DOWN} .*tried {SLAVE}.*not exist"):
        planned(brokers, clock)
    assert clock.now >= BUDGET_S / 2  # it waited, not failed on the first answer


def test_a_batch_that_finds_the_master_dead_asks_the_slave_for_topic_stats_too() -> None:
    # The dead master's queues are asked again at the slave the fresh routes list: by topic
    # stats, which the slave answers TOPIC_NOT_EXIST, not by a max offset it answers 0.
    brokers, clock = DeadMasterListed(back_after=2), ManualClock()
    ranges = planned(brokers, clock)
    assert ranges == {q: (0, MESSAGES) for q in brokers.max}
    assert brokers.asked_slave >= 2


def test_a_stream_holds_the_queues_and_reads_the_other_brokers() -> None:
    brokers, clock = SlaveWithoutTopic(), ManualClock()
    brokers.master_down = False
    reader = RocketMQStreamReader(
        options(ReadKind.STREAM, clock), open_offsets=lambda o: OffsetReader(o, Cluster.of(brokers, clock), clock=clock)
    )
    start = reader.initialOffset()
    brokers.master_down = True
    for queue in brokers.max:
        brokers.max[queue] += 5
    clock.now += 60  # the routes are asked again
    end = from_spark(reader.latestOffset(start, ReadAllAvailable()))
    held = {q for q in brokers.max if q.broker_name == DOWN}
    assert held
    assert {q: end[q] for q in held} == {q: from_spark(start)[q] for q in held}
    assert {q: end[q] for q in brokers.max if q not in held} == {
        q: brokers.max[q] for q in brokers.max if q not in held
    }
