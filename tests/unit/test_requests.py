"""What the driver sends per trigger, counted against fake brokers: it must grow with brokers and
topics, not with queues (a production topic has hundreds to thousands of queues).

The fake (``tests/fakes.py``) answers with the bytes a broker sends (topic stats as fastjson,
offsets in header fields), so the calls' own readers run as they do against a real broker.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from rocketmq_spark.remoting.calls import parse_topic_stats
from rocketmq_spark.remoting.cluster import Cluster
from rocketmq_spark.remoting.codes import FIRST_5X_VERSION, RequestCode
from rocketmq_spark.remoting.errors import DataLossError
from rocketmq_spark.remoting.replicas import MIN_ROUTE_REFRESH_S
from rocketmq_spark.source.offset_reader import OffsetReader
from rocketmq_spark.source.offsets import from_spark
from rocketmq_spark.source.option_model import ReadKind
from rocketmq_spark.source.options import parse_options
from rocketmq_spark.source.spark_api import ReadAllAvailable
from rocketmq_spark.source.stream_reader import IDLE_RESET_CHECK_MS, RocketMQStreamReader
from tests.fakes import FakeBrokers
from tests.support import BROKERS, TOPICS, VERSION_4_9_7, VERSION_5_3_3, ManualClock


def started(
    brokers: FakeBrokers, clock: Callable[[], float] = time.monotonic
) -> tuple[RocketMQStreamReader, dict[str, Any]]:
    """A stream of both topics after its first trigger and commit: the next trigger is idle."""
    options = parse_options(
        {
            "nameServer": "127.0.0.1:9876",
            "topic": ",".join(TOPICS),
            "consumerGroup": "g",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        },
        kind=ReadKind.STREAM,
    )
    reader = RocketMQStreamReader(
        options, open_offsets=lambda o: OffsetReader(o, Cluster.of(brokers, clock), clock=clock)
    )  # type: ignore[arg-type]
    end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    reader.commit(end)
    return reader, end


def idle_trigger(reader: RocketMQStreamReader, end: dict[str, Any], brokers: FakeBrokers) -> list[int]:
    before = len(brokers.sent)
    assert reader.latestOffset(end, ReadAllAvailable()) == end
    return brokers.sent[before:]


@pytest.mark.parametrize("queues_per_broker", [16, 256])
def test_an_idle_trigger_asks_each_broker_twice_per_topic(queues_per_broker: int) -> None:
    """The group's stored offsets (has an operator reset them?), then the queues' offsets."""
    brokers = FakeBrokers(queues_per_broker)
    reader, end = started(brokers)
    assert brokers.stored == brokers.max  # the first batch was committed on every queue
    sent = idle_trigger(reader, end, brokers)
    per_topic = BROKERS * len(TOPICS)
    assert sent == [RequestCode.GET_CONSUME_STATS] * per_topic + [RequestCode.GET_TOPIC_STATS_INFO] * per_topic


def test_requests_per_idle_trigger_do_not_grow_with_queues() -> None:
    counts = []
    for queues_per_broker in (16, 256):
        brokers = FakeBrokers(queues_per_broker)
        reader, end = started(brokers)
        counts.append(len(idle_trigger(reader, end, brokers)))
    assert counts[0] == counts[1]


def test_without_topic_stats_an_idle_trigger_asks_only_for_stored_and_max_offsets(clock: list[int]) -> None:
    """A 5.x proxy serves no per-topic answer: one request per queue for the group's stored
    offsets and one for its max offset, but no min offsets where nothing can have been lost, each
    kind back to back."""
    brokers = FakeBrokers(64, topic_stats=False)
    reader, end = started(brokers)
    idle_trigger(reader, end, brokers)  # the first check of stored offsets learns the proxy has no consume stats
    clock[0] += IDLE_RESET_CHECK_MS
    rounds = brokers.rounds
    sent = idle_trigger(reader, end, brokers)
    queues = BROKERS * 64 * len(TOPICS)
    assert sent == [RequestCode.QUERY_CONSUMER_OFFSET] * queues + [RequestCode.GET_MAX_OFFSET] * queues
    assert brokers.rounds - rounds == 2
    assert RequestCode.GET_TOPIC_STATS_INFO not in sent  # not asked again once refused
    assert RequestCode.GET_CONSUME_STATS not in sent


def test_idle_triggers_look_for_resets_once_a_second_and_a_trigger_that_stores_always_first(clock: list[int]) -> None:
    """An idle stream under the default trigger calls latestOffset every few milliseconds: it asks
    what is new each time, but for the group's stored offsets (an operator's reset) only every
    IDLE_RESET_CHECK_MS. A trigger that stores asks first, however soon: its store would
    overwrite a reset."""
    brokers = FakeBrokers(16)
    reader, end = started(brokers)
    per_topic = BROKERS * len(TOPICS)
    compared = [RequestCode.GET_CONSUME_STATS] * per_topic
    asked = [RequestCode.GET_TOPIC_STATS_INFO] * per_topic
    assert idle_trigger(reader, end, brokers) == compared + asked
    clock[0] += IDLE_RESET_CHECK_MS - 1
    assert idle_trigger(reader, end, brokers) == asked
    clock[0] += 1
    assert idle_trigger(reader, end, brokers) == compared + asked
    for queue in brokers.max:
        brokers.max[queue] += 5
    later = reader.latestOffset(end, ReadAllAvailable())  # plans a batch; its start is stored already
    before = len(brokers.sent)
    reader.latestOffset(later, ReadAllAvailable())  # the batch ran: its end is stored now
    sent = brokers.sent[before:]
    assert sent[:per_topic] == compared
    assert sent[per_topic : per_topic + len(brokers.max)] == [RequestCode.UPDATE_CONSUMER_OFFSET] * len(brokers.max)


def test_a_commit_is_one_round_of_requests() -> None:
    brokers = FakeBrokers(256)
    reader, end = started(brokers)
    for queue in brokers.max:
        brokers.max[queue] += 5
    rounds = brokers.rounds
    later = reader.latestOffset(end, ReadAllAvailable())
    before = len(brokers.sent)
    reader.commit(later)
    assert brokers.sent[before:] == [RequestCode.UPDATE_CONSUMER_OFFSET] * len(brokers.max)
    assert brokers.rounds - rounds == 3  # the trigger's stored offsets and topic stats, then the commit
    assert brokers.stored == from_spark(later)


@pytest.mark.parametrize("known_on", [0, 2])
def test_a_new_groups_first_commit_adds_a_pull_per_broker_not_per_queue(known_on: int) -> None:
    """A broker refuses offsets of a group it has never seen, until a pull creates the group."""
    brokers = FakeBrokers(256)
    brokers.group_known = {f"broker-{b}" for b in range(known_on)}
    options = parse_options(
        {
            "nameServer": "127.0.0.1:9876",
            "topic": ",".join(TOPICS),
            "consumerGroup": "g",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        },
        kind=ReadKind.STREAM,
    )
    reader = RocketMQStreamReader(options, open_offsets=lambda o: OffsetReader(o, Cluster.of(brokers)))  # type: ignore[arg-type]
    # The first trigger stores where each queue starts: the group's first commit.
    end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    refused = (BROKERS - known_on) * len(TOPICS)  # each topic's first commit on each broker
    assert brokers.sent.count(RequestCode.PULL_MESSAGE) == BROKERS - known_on
    assert brokers.sent.count(RequestCode.UPDATE_CONSUMER_OFFSET) == len(brokers.max) + refused
    assert brokers.stored == {q: 0 for q in brokers.max}
    reader.commit(end)
    assert brokers.stored == from_spark(end)


def test_a_broker_reached_again_over_a_new_connection_has_all_its_offsets_stored_again() -> None:
    brokers = FakeBrokers(4)
    reader, end = started(brokers)
    crashed = FakeBrokers.address("broker-2")
    brokers.stored = {q: o for q, o in brokers.stored.items() if q.broker_name != "broker-2"}  # lost unflushed
    brokers.connections[crashed] += 1  # the driver's connection broke and was opened again
    before = len(brokers.sent)
    reader.latestOffset(end, ReadAllAvailable())
    stores = brokers.sent[before:].count(RequestCode.UPDATE_CONSUMER_OFFSET)
    assert stores == len(TOPICS) * brokers.queues_per_broker  # that broker's queues, no other's
    assert brokers.stored == from_spark(end)
    before = len(brokers.sent)
    reader.latestOffset(end, ReadAllAvailable())
    assert RequestCode.UPDATE_CONSUMER_OFFSET not in brokers.sent[before:]  # once, not at every trigger


def test_topic_stats_read_fastjson_object_keys() -> None:
    body = (
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":6,"topic":"T8"}:{"lastUpdateTimestamp":17,'
        b'"maxOffset":3,"minOffset":0},{"brokerName":"broker-a","queueId":5,"topic":"T8"}:{"maxOffset":9,'
        b'"minOffset":-1}},"topicPutTps":200.0}'
    )
    stats = parse_topic_stats(body, "broker-a")
    assert {q.queue_id: (s.min_offset, s.max_offset) for q, s in stats.items()} == {6: (0, 3), 5: (0, 9)}
    assert parse_topic_stats(b'{"offsetTable":{}}', "broker-a") == {}
    # Another field order or spacing than fastjson's usual goes the general way to the same values.
    other = body.replace(
        b'{"brokerName":"broker-a","queueId":5,"topic":"T8"}', b'{"topic":"T8", "queueId":5, "brokerName":"broker-a"}'
    )
    assert parse_topic_stats(other, "broker-a") == stats


def test_a_broker_that_left_while_routes_were_cached_is_waited_for_not_retried() -> None:
    brokers, clock = FakeBrokers(16), ManualClock()
    reader, end = started(brokers, clock)
    brokers.away.add("broker-1")
    clock.now += MIN_ROUTE_REFRESH_S  # the routes are asked again after a failure, at most this often
    later = reader.latestOffset(end, ReadAllAvailable())
    assert later == end  # its queues keep their offsets until it is back
    assert brokers.sent.count(RequestCode.GET_ROUTEINFO_BY_TOPIC) > len(TOPICS)  # the routes were asked again
    brokers.away.clear()
    for queue in brokers.max:
        brokers.max[queue] += 1
    clock.now += MIN_ROUTE_REFRESH_S
    reader.offsets.queues(suspect=True)
    assert from_spark(reader.latestOffset(later, ReadAllAvailable())) == brokers.max


def test_a_topic_deleted_on_its_brokers_is_asked_queue_by_queue() -> None:
    """Topic stats answer TOPIC_NOT_EXIST for a deleted topic; its queues' own answers then say
    where they stand (here: back at 0, which the planning calls data loss)."""
    brokers = FakeBrokers(4)
    reader, end = started(brokers)
    brokers.deleted.add("orders")
    for queue in brokers.max:
        if queue.topic == "orders":
            brokers.max[queue] = 0
    before = len(brokers.sent)
    with pytest.raises(DataLossError, match="went backwards"):
        reader.latestOffset(end, ReadAllAvailable())
    assert brokers.sent[before:].count(RequestCode.GET_MAX_OFFSET) == BROKERS * 4


@pytest.mark.parametrize("version", [VERSION_4_9_7, VERSION_5_3_3])
def test_a_stored_zero_is_told_from_none_stored_on_every_release(version: int) -> None:
    """4.9 answers 0 where nothing is stored; its offset table settles it, asked once per broker."""
    brokers = FakeBrokers(4, version=version)
    stored_zero = [q for q in brokers.max if q.queue_id == 0]
    brokers.stored = dict.fromkeys(stored_zero, 0)
    options = parse_options(
        {"nameServer": "127.0.0.1:9876", "topic": ",".join(TOPICS), "consumerGroup": "g"}, kind=ReadKind.STREAM
    )  # CONSUME_FROM_LAST_OFFSET where nothing is stored
    reader = RocketMQStreamReader(options, open_offsets=lambda o: OffsetReader(o, Cluster.of(brokers)))  # type: ignore[arg-type]
    start = from_spark(reader.initialOffset())
    assert start == {q: 0 if q in stored_zero else brokers.max[q] for q in brokers.max}
    tables_asked = brokers.sent.count(RequestCode.GET_ALL_CONSUMER_OFFSET)
    assert tables_asked == (BROKERS if version < FIRST_5X_VERSION else 0)


def test_a_new_query_from_the_first_offsets_asks_topic_stats_not_each_queue() -> None:
    brokers = FakeBrokers(64)
    started(brokers)  # CONSUME_FROM_FIRST_OFFSET, nothing stored yet
    assert RequestCode.GET_MIN_OFFSET not in brokers.sent and RequestCode.GET_MAX_OFFSET not in brokers.sent
    assert brokers.sent.count(RequestCode.GET_TOPIC_STATS_INFO) <= 2 * BROKERS * len(TOPICS)


class ProxiedBrokers(FakeBrokers):
    """The same brokers behind a 5.x proxy: one address serves them all, the broker named in
    each request."""

    @staticmethod
    def address(broker: str) -> str:
        return "127.0.0.1:8080"


@pytest.mark.parametrize("kind", [FakeBrokers, ProxiedBrokers])
def test_a_topics_first_commit_on_a_broker_goes_alone(kind: type[FakeBrokers]) -> None:
    """Of a topic's first commits that reach a broker at once, all but one can be lost: one queue
    per broker and topic goes first, then the others in one more round."""
    brokers = kind(16)
    options = parse_options(
        {"nameServer": "127.0.0.1:9876", "topic": ",".join(TOPICS), "consumerGroup": "g"}, kind=ReadKind.STREAM
    )
    reader = OffsetReader(options, Cluster.of(brokers))  # type: ignore[arg-type]
    queues = reader.queues()
    rounds = brokers.rounds
    result = reader.commit(brokers.max)
    assert result.stored == brokers.max and not result.failed
    assert brokers.stored == brokers.max
    assert brokers.rounds - rounds == 2
    assert brokers.sent[-len(queues) :].count(RequestCode.UPDATE_CONSUMER_OFFSET) == len(queues)
