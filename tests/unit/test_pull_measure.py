"""A user granted Sub but not Get on a topic (ACL 2.0) reads it as RocketMQ's subscribing
consumers do: the offsets the refused requests would give come from pulls' headers, warned once.
What needs Get and has no stand-in (a search by time) fails naming the grant."""

from __future__ import annotations

import logging

import pytest

from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.errors import AuthorizationError
from rocketmq_spark.source.offsets import from_spark
from rocketmq_spark.source.spark_api import ReadAllAvailable
from tests.fakes import FakeBrokers
from tests.support import TOPIC, TOPICS
from tests.unit.test_requests import idle_trigger, started

QUEUES_PER_BROKER = 8
OTHER = next(t for t in TOPICS if t != TOPIC)


def test_a_topic_the_user_may_not_get_is_measured_by_pulls(caplog: pytest.LogCaptureFixture) -> None:
    brokers = FakeBrokers(QUEUES_PER_BROKER)
    brokers.no_get = {TOPIC}
    with caplog.at_level(logging.WARNING):
        reader, end = started(brokers)
        assert from_spark(end) == brokers.max  # every queue's end, through the denial
        for queue in brokers.max:
            brokers.max[queue] += 3
        later = reader.latestOffset(end, ReadAllAvailable())
    assert from_spark(later) == brokers.max
    warned = [r.getMessage() for r in caplog.records if "may not Get" in r.getMessage()]
    assert len(warned) == 1 and f"topic '{TOPIC}'" in warned[0] and f"Get on Topic:{TOPIC}" in warned[0]

    reader.commit(later)
    with caplog.at_level(logging.WARNING):
        sent = idle_trigger(reader, later, brokers)
    # The group's stored offsets too: the brokers refuse its consume stats on that topic.
    group_warned = [r.getMessage() for r in caplog.records if "refuse its consume stats" in r.getMessage()]
    assert len(group_warned) == 1 and "consumer group 'g'" in group_warned[0]
    assert "-a Sub,Get -d Allow" in group_warned[0]
    pulled = sum(1 for q in brokers.max if q.topic == TOPIC)
    assert sent.count(RequestCode.PULL_MESSAGE) == pulled  # one per queue of the topic
    assert sent.count(RequestCode.GET_MAX_OFFSET) == sum(1 for q in brokers.max if q.topic == OTHER)
    assert RequestCode.GET_MIN_OFFSET not in sent


def test_a_search_by_time_names_the_missing_get() -> None:
    brokers = FakeBrokers(QUEUES_PER_BROKER)
    brokers.no_get = {TOPIC}
    reader, _ = started(brokers)
    queues = [q for q in brokers.max if q.topic == TOPIC]
    with pytest.raises(AuthorizationError) as caught:
        reader.offsets.offsets_for_time(queues, 0)
    assert caught.value.denial.resource == f"Topic:{TOPIC}" and caught.value.denial.needed == ("Get",)
    assert "-a Sub,Get -d Allow" in str(caught.value)
