"""The driver's answers to what brokers ask its registered client: running info as mqadmin
consumerStatus reads it (fastjson, MessageQueue keys), offsets per topic, and reset notices."""

from __future__ import annotations

from rocketmq_spark.remoting import fastjson
from rocketmq_spark.remoting.client_requests import QueueStanding
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.membership import Subscription
from rocketmq_spark.source.broker_requests import BrokerRequests
from rocketmq_spark.source.resets import ResetInbox
from tests.support import A0, A1, TOPIC, notice, options

STANDING = {A0: QueueStanding(40, 40, 55), A1: QueueStanding(30, 30, 30)}


def handler(inbox: ResetInbox | None = None) -> BrokerRequests:
    return BrokerRequests(options(), inbox or ResetInbox(), lambda: STANDING, [Subscription(TOPIC, "*")], 7)


def test_running_info_shows_the_subscription_and_each_queues_stored_offset_and_batch() -> None:
    answer = handler()(
        RemotingCommand(
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            ext_fields={"consumerGroup": "g", "clientId": "c", "jstackEnable": "false"},
        )
    )
    assert answer is not None and answer.code == ResponseCode.SUCCESS
    info = fastjson.loads(answer.body.decode())
    assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_ACTIVELY"
    assert int(info["properties"]["PROP_CONSUMER_START_TIMESTAMP"]) > 0
    assert [(s["topic"], s["subString"], s["subVersion"]) for s in info["subscriptionSet"]] == [(TOPIC, "*", 7)]
    table = {(key["topic"], key["brokerName"], key["queueId"]): value for key, value in info["mqTable"]}
    assert {
        k: (v["commitOffset"], v["cachedMsgMinOffset"], v["cachedMsgMaxOffset"], v["cachedMsgCount"])
        for k, v in table.items()
    } == {(TOPIC, "broker-a", 0): (40, 40, 55, 15), (TOPIC, "broker-a", 1): (30, 30, 30, 0)}


def test_consumer_status_gives_the_stored_offsets_of_the_topic_asked() -> None:
    answer = handler()(
        RemotingCommand(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, ext_fields={"topic": TOPIC, "group": "g"})
    )
    assert answer is not None
    table = fastjson.loads(answer.body.decode())["messageQueueTable"]
    assert {(k["brokerName"], k["queueId"]): v for k, v in table} == {("broker-a", 0): 40, ("broker-a", 1): 30}


def test_a_reset_notice_goes_to_the_inbox_and_is_not_answered() -> None:
    inbox = ResetInbox()
    assert handler(inbox)(notice({A0: 25})) is None
    assert inbox.take() == {A0: 25} and inbox.take() == {}
    assert handler()(RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED)) is None
