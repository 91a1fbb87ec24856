"""The stream's consumer group: the heartbeat a broker reads, the member list, and the policy of
registering only while the group is the stream's alone (against fake brokers)."""

from __future__ import annotations

import json
import logging
import time

import pytest

from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.remoting import membership
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.errors import BrokerResponseError, ProtocolError
from rocketmq_spark.remoting.membership import WRITER_CLIENT_MARK, Subscription
from rocketmq_spark.source.group import GroupWatch, is_source_client, new_client_id, sharing_problem
from rocketmq_spark.source.option_model import ReadKind, SourceOptions
from rocketmq_spark.source.options import parse_options
from rocketmq_spark.source.stream_reader import RocketMQStreamReader
from tests.fakes import FakeMembers, FakeOffsets
from tests.support import A0, A1, B0, spark

BROKERS = ("127.0.0.1:10911", "127.0.0.1:10921")
ME = "10.0.0.1@rocketmq-spark-0123456789abcdef"
PUSH = "10.0.0.2@12345#987654321"
OTHER_QUERY = "10.0.0.3@rocketmq-spark-fedcba9876543210"
SUB_VERSION = 1_700_000_000_000
# Java: "Aa".hashCode() == "BB".hashCode() == 2112; "TagA".hashCode() == 2598919.
AA_HASH = 2112
TAG_A_HASH = 2598919
# Long enough for a loaded machine to run a few rounds of a thread beating every TICK_S.
TICK_S = 0.02
WAIT_S = 10.0
GROUP_LOGGER = "rocketmq_spark.source.group"


def options(**extra: str) -> SourceOptions:
    return parse_options(
        {"nameServer": "127.0.0.1:9876", "topic": "orders,refunds", "consumerGroup": "g", **extra}, kind=ReadKind.STREAM
    )


def watch(members: FakeMembers, interval_s: float = 3600.0, **extra: str) -> GroupWatch:
    return GroupWatch(members, options(**extra), lambda: BROKERS, client_id=ME, interval_s=interval_s)


def codes_sent(members: FakeMembers) -> list[int]:
    return [code for _, code in members.sent]


def wait_for(condition: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(TICK_S)


# ------------------------------------------------------------------------------------ the calls


def test_a_heartbeat_is_the_heartbeat_data_of_one_pulling_consumer() -> None:
    body = json.loads(
        membership.heartbeat_body(
            ME,
            "g",
            [
                Subscription("orders", "Aa || TagA", "TAG", frozenset({"Aa", "TagA"})),
                Subscription("refunds", "a > 5", "SQL92"),
            ],
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            sub_version=SUB_VERSION,
        )
    )
    assert body["clientID"] == ME and body["producerDataSet"] == []
    (consumer,) = body["consumerDataSet"]
    assert {k: v for k, v in consumer.items() if k != "subscriptionDataSet"} == {
        "groupName": "g",
        "consumeType": "CONSUME_ACTIVELY",
        "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        "unitMode": False,
    }
    tags, sql = consumer["subscriptionDataSet"]
    assert tags == {
        "classFilterMode": False,
        "topic": "orders",
        "subString": "Aa || TagA",
        "tagsSet": ["Aa", "TagA"],
        "codeSet": [AA_HASH, TAG_A_HASH],
        "subVersion": SUB_VERSION,
        "expressionType": "TAG",
    }
    assert (sql["subString"], sql["expressionType"], sql["tagsSet"], sql["codeSet"]) == ("a > 5", "SQL92", [], [])


def test_the_heartbeat_call_carries_its_body_and_unregister_names_client_and_group() -> None:
    call = membership.heartbeat(ME, "g", [Subscription("orders", "*")], consume_from_where="C", sub_version=1)
    assert call.code == RequestCode.HEART_BEAT and json.loads(call.body)["clientID"] == ME
    leave = membership.unregister(ME, "g")
    assert (leave.code, dict(leave.fields)) == (RequestCode.UNREGISTER_CLIENT, {"clientID": ME, "consumerGroup": "g"})


def test_the_member_list_reads_the_brokers_answers() -> None:
    call = membership.consumer_ids("g")
    assert dict(call.fields) == {"consumerGroup": "g"}
    listed = RemotingCommand(ResponseCode.SUCCESS, body=json.dumps({"consumerIdList": [PUSH, ME]}).encode())
    assert call.read(listed, BROKERS[0]) == [PUSH, ME]
    none = RemotingCommand(ResponseCode.SYSTEM_ERROR, remark="no consumer for this group, g")
    assert call.read(none, BROKERS[0]) == []
    proxy_none = RemotingCommand(
        ResponseCode.SYSTEM_ERROR,
        remark='Cannot invoke "org.apache.rocketmq.broker.client.'
        'ConsumerGroupInfo.getAllClientId()" because "consumerGroupInfo" is null',
    )
    assert call.read(proxy_none, BROKERS[0]) == []
    with pytest.raises(BrokerResponseError, match="disk full"):
        call.read(RemotingCommand(ResponseCode.SYSTEM_ERROR, remark="disk full"), BROKERS[0])
    with pytest.raises(ProtocolError, match="consumer list from 127.0.0.1:10911"):
        call.read(RemotingCommand(ResponseCode.SUCCESS, body=b'{"consumerIdList": 3}'), BROKERS[0])


def test_client_ids_are_unique_and_recognisable() -> None:
    first, second = new_client_id("127.0.0.1:9876"), new_client_id("127.0.0.1:9876")
    assert first != second and is_source_client(first) and first.startswith("127.0.0.1@")
    assert not is_source_client(PUSH)
    # A writing worker's id holds the source's mark too; it is not a stream.
    assert not is_source_client(f"127.0.0.1{WRITER_CLIENT_MARK}4242-0123abcd")


# ------------------------------------------------------------------------------------ the policy


def test_alone_in_its_group_the_stream_registers_on_every_broker() -> None:
    members = FakeMembers()
    group = watch(members)
    group.start()
    try:
        assert group.registered == set(BROKERS)
        assert all(members.listed(b) == {ME} for b in BROKERS)
        assert {s["topic"] for s in members.heartbeats[0]["consumerDataSet"][0]["subscriptionDataSet"]} == {
            "orders",
            "refunds",
        }
        group.round()  # its own id does not count as another member
        assert codes_sent(members).count(RequestCode.HEART_BEAT) == 2 * len(BROKERS)
    finally:
        group.stop()
    assert all(members.listed(b) == set() for b in BROKERS)


def test_a_push_consumer_in_the_group_is_named_in_a_warning_and_the_stream_stays_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    members = FakeMembers(others={PUSH})
    group = watch(members)
    with caplog.at_level(logging.WARNING, GROUP_LOGGER):
        group.start()
        group.round()
    group.stop()
    assert RequestCode.HEART_BEAT not in codes_sent(members), "a heartbeat would make the push consumer rebalance"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, "reported once, not at every round"
    assert PUSH in warnings[0] and "overwrite each other's" in warnings[0] and "failOnSharedGroup" in warnings[0]


def test_with_fail_on_shared_group_a_shared_group_fails_the_start() -> None:
    group = watch(FakeMembers(others={PUSH, OTHER_QUERY}), failOnSharedGroup="true")
    with pytest.raises(ConfigurationError) as raised:
        group.start()
    message = str(raised.value)
    assert message.startswith("option 'consumerGroup': ")
    assert PUSH in message and OTHER_QUERY in message and "a consumer group of its own" in message


def test_another_query_of_this_source_gets_its_own_wording() -> None:
    text = sharing_problem("g", [OTHER_QUERY])
    assert "another query of this source" in text and OTHER_QUERY in text and "other consumers" not in text
    assert "other consumers online" in sharing_problem("g", [PUSH])


def test_a_member_that_joins_later_makes_the_stream_leave_and_fails_the_next_trigger() -> None:
    members = FakeMembers()
    group = watch(members, failOnSharedGroup="true")
    group.start()
    assert group.registered == set(BROKERS)
    members.others.add(PUSH)
    group.round()
    assert group.registered == set() and all(members.listed(b) == {PUSH} for b in BROKERS)
    with pytest.raises(ConfigurationError, match=PUSH):
        group.check()
    group.stop()


def test_when_the_other_member_leaves_the_stream_registers_again(caplog: pytest.LogCaptureFixture) -> None:
    members = FakeMembers(others={PUSH})
    group = watch(members)
    group.start()
    members.others.clear()
    with caplog.at_level(logging.WARNING, GROUP_LOGGER):
        group.round()
    group.stop()
    assert RequestCode.HEART_BEAT in codes_sent(members)
    assert any("no other member now" in r.getMessage() for r in caplog.records)


def test_a_broker_that_is_down_is_registered_on_once_it_is_back() -> None:
    members = FakeMembers()
    members.down.add(BROKERS[1])
    group = watch(members)
    group.start()
    assert group.registered == {BROKERS[0]}
    members.down.clear()
    members.members[BROKERS[1]] = set()  # a restarted broker has forgotten every member
    group.round()
    assert group.registered == set(BROKERS) and members.listed(BROKERS[1]) == {ME}
    group.stop()


def test_the_thread_beats_until_stop_then_leaves() -> None:
    members = FakeMembers()
    group = watch(members, interval_s=TICK_S)
    group.start()
    wait_for(lambda: codes_sent(members).count(RequestCode.HEART_BEAT) >= 3 * len(BROKERS), "no periodic heartbeat")
    group.stop()
    sent = len(members.sent)
    time.sleep(10 * TICK_S)
    assert len(members.sent) == sent, "requests after stop()"
    assert all(members.listed(b) == set() for b in BROKERS)


# ------------------------------------------------------------------------------------ in the stream


QUEUES = (A0, A1, B0)


def stream_of(fake: FakeOffsets, **extra: str) -> RocketMQStreamReader:
    opened = options(topic=A0.topic, **extra)
    return RocketMQStreamReader(opened, open_offsets=lambda _: fake)  # type: ignore[arg-type,return-value]


def test_a_stream_registers_at_its_first_call_and_leaves_at_stop() -> None:
    fake = FakeOffsets({q: (0, 10) for q in QUEUES})
    reader = stream_of(fake)
    reader.initialOffset()
    addresses = fake.broker_addresses()
    assert len(addresses) == 2
    for address in addresses:
        (member,) = fake.client.listed(address)
        assert is_source_client(member)
    reader.stop()
    assert all(fake.client.listed(a) == set() for a in addresses)


def test_a_shared_group_fails_a_stream_before_any_offset_is_stored() -> None:
    fake = FakeOffsets({q: (0, 10) for q in QUEUES})
    fake.client.others.add(PUSH)
    reader = stream_of(fake, failOnSharedGroup="true")
    with pytest.raises(ConfigurationError, match=PUSH):
        reader.latestOffset(spark({q: 5 for q in QUEUES}), None)  # type: ignore[arg-type]
    assert fake.commits == []
    reader.stop()


def test_a_stream_that_commits_nothing_neither_registers_nor_checks() -> None:
    fake = FakeOffsets({q: (0, 10) for q in QUEUES})
    fake.client.others.add(PUSH)
    reader = stream_of(fake, commitOffsets="false", failOnSharedGroup="true")
    reader.initialOffset()
    reader.stop()
    assert fake.client.sent == []
