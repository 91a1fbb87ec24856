"""The queue-lock calls: the body a broker's ``LockBatchRequestBody`` reads, and the answer's set."""

from __future__ import annotations

import json

import pytest

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.errors import ProtocolError
from rocketmq_spark.remoting.locks import lock_queues, unlock_queues

ADDRESS = "127.0.0.1:10911"
QUEUE = MessageQueue("rocketmq-spark-transactions", "broker-a", 3)


def test_a_lock_names_the_group_the_holder_and_the_queues_as_the_java_body_does() -> None:
    call = lock_queues("orders-eo", "rocketmq-spark/q1", [QUEUE])
    assert call.code == RequestCode.LOCK_BATCH_MQ
    assert isinstance(call.body, bytes)
    assert json.loads(call.body) == {
        "consumerGroup": "orders-eo",
        "clientId": "rocketmq-spark/q1",
        "onlyThisBroker": True,
        "mqSet": [{"topic": QUEUE.topic, "brokerName": "broker-a", "queueId": 3}],
    }
    assert unlock_queues("orders-eo", "rocketmq-spark/q1", [QUEUE]).code == RequestCode.UNLOCK_BATCH_MQ


def test_the_answer_is_the_set_of_queues_the_holder_has_now() -> None:
    read = lock_queues("g", "c", [QUEUE]).read
    held = b'{"lockOKMQSet":[{"brokerName":"broker-a","queueId":3,"topic":"rocketmq-spark-transactions"}]}'
    assert read(RemotingCommand(code=ResponseCode.SUCCESS, body=held), ADDRESS) == frozenset({QUEUE})
    assert read(RemotingCommand(code=ResponseCode.SUCCESS, body=b'{"lockOKMQSet":[]}'), ADDRESS) == frozenset()
    with pytest.raises(ProtocolError, match=ADDRESS):
        read(RemotingCommand(code=ResponseCode.SUCCESS, body=b'{"lockOKMQSet":[{"queueId":3}]}'), ADDRESS)
