"""Brokers that are registered but do not answer (a hung host, a network partition), and a
batch run again while its broker is away: what the driver does, against the fake brokers of
tests/fakes.py (real call readers, no network). A batch run again while its broker is away waits
on the executor (tests/unit/test_replica_reads.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from rocketmq_spark.remoting.calls import Call
from rocketmq_spark.remoting.cluster import Cluster
from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.errors import BrokersUnreachableError, RequestTimeoutError
from rocketmq_spark.source.offset_reader import OffsetReader
from rocketmq_spark.source.offsets import from_spark, to_spark
from rocketmq_spark.source.option_model import ReadKind, SourceOptions
from rocketmq_spark.source.options import parse_options
from rocketmq_spark.source.spark_api import ReadAllAvailable
from rocketmq_spark.source.stream_reader import RocketMQStreamReader
from tests.fakes import FakeBrokers
from tests.support import BROKERS, TOPICS, ManualClock

FROZEN = "broker-1"
BUDGET_S = 30.0


class FreezableBrokers(FakeBrokers):
    """Fake brokers of which some take every request and never answer it."""

    def __init__(self, queues_per_broker: int) -> None:
        super().__init__(queues_per_broker)
        self.frozen: set[str] = set()
        self.to_frozen: list[int] = []  # request codes sent to a frozen broker

    def call_many(self, addressed: Sequence[tuple[str, Call[Any]]], window: int = 64) -> list[Any]:
        frozen = {self.address(b) for b in self.frozen}
        answers = super().call_many([(a, c) for a, c in addressed if a not in frozen], window)
        outcomes: list[Any] = []
        for address, call in addressed:
            if address in frozen:
                self.to_frozen.append(call.code)
                outcomes.append(RequestTimeoutError(f"no answer from {address} in time"))
            else:
                outcomes.append(answers.pop(0))
        return outcomes


def stream_options() -> SourceOptions:
    options = parse_options(
        {
            "nameServer": "127.0.0.1:9876",
            "topic": ",".join(TOPICS),
            "consumerGroup": "g",
            "retryBudgetMs": str(int(BUDGET_S * 1000)),
        },
        kind=ReadKind.STREAM,
    )
    return dataclasses.replace(options, retry=dataclasses.replace(options.retry, sleep=lambda _: None))


def running(brokers: FakeBrokers, clock: ManualClock) -> tuple[RocketMQStreamReader, dict[str, Any]]:
    reader = RocketMQStreamReader(
        stream_options(), open_offsets=lambda o: OffsetReader(o, Cluster.of(brokers, clock), clock=clock)
    )  # type: ignore[arg-type]
    start = reader.initialOffset()
    return reader, reader.latestOffset(start, ReadAllAvailable())


def test_a_frozen_broker_is_held_while_the_others_are_read_and_rejoins_where_it_was() -> None:
    brokers, clock = FreezableBrokers(2), ManualClock()
    reader, end = running(brokers, clock)
    brokers.frozen.add(FROZEN)
    for queue in brokers.max:
        brokers.max[queue] += 5
    clock.now += BUDGET_S * 2  # longer than the budget: the other brokers answer, so the query lives
    held = from_spark(reader.latestOffset(end, ReadAllAvailable()))
    assert held == {q: brokers.max[q] - (5 if q.broker_name == FROZEN else 0) for q in brokers.max}
    # Only the max offsets ask it again at the next trigger: commits and reset checks wait.
    sent = len(brokers.to_frozen)
    again = reader.latestOffset(to_spark(held), ReadAllAvailable())
    assert brokers.to_frozen[sent:] == [RequestCode.GET_TOPIC_STATS_INFO] * len(TOPICS)
    brokers.frozen.clear()
    back = from_spark(reader.latestOffset(again, ReadAllAvailable()))
    assert back == brokers.max


def test_the_query_fails_naming_the_brokers_when_none_answers_for_the_budget() -> None:
    brokers, clock = FreezableBrokers(2), ManualClock()
    reader, end = running(brokers, clock)
    brokers.frozen.update(f"broker-{b}" for b in range(BROKERS))
    end = reader.latestOffset(end, ReadAllAvailable())  # within the budget: everything is held
    clock.now += BUDGET_S
    with pytest.raises(
        BrokersUnreachableError,
        match=r"brokers broker-0, broker-1, broker-2, broker-3 are "
        r"registered .* have not answered for 30 s \(retryBudgetMs\)",
    ):
        reader.latestOffset(end, ReadAllAvailable())
