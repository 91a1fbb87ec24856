"""Sending messages as calls (see ``calls.py``): SEND_MESSAGE_V2 for one message, SEND_BATCH_MESSAGE
for several of one queue, and how a broker's answer reads. No I/O.

Both carry ``SendMessageRequestHeaderV2``, the header the Java producer sends, whose fields have
one-letter names so that brokers parse them fast. A 5.x proxy's remoting port forwards a send to
the broker its field ``n`` (the broker name) names.

Four answers mean the message is stored (``SendStatus``): SUCCESS, and three that say it is not
yet flushed or replicated as the broker is configured to wait for. The Java producer returns
those to the caller as a result, not an error, and resending would store the message twice.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.calls import Call, accepted, int_field
from rocketmq_spark.remoting.codec import Body, RemotingCommand
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode

# The topic brokers with autoCreateTopicEnable copy a new topic's settings from, and the queue
# count they give it (the Java producer's createTopicKey and defaultTopicQueueNums): sent as the
# Java producer sends them, though the sink creates no topic of its own.
DEFAULT_TOPIC = "TBW102"
DEFAULT_TOPIC_QUEUE_NUMS = 4


class SendStatus(enum.Enum):
    """What a broker did with a stored message, named as the Java client names it."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # stored, not yet flushed (SYNC_FLUSH brokers)
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"  # stored, not yet on the slave (SYNC_MASTER brokers)
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"  # stored, no slave to copy it to (SYNC_MASTER brokers)


SEND_STATUS_BY_CODE: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(frozen=True)
class SendResult:
    """A stored send: its status, the broker's offset message id(s) and the queue offset of its
    (first) message, and the ``version`` the broker answered with (which line it runs)."""

    status: SendStatus
    offset_msg_id: str
    queue_id: int
    queue_offset: int
    server_version: int


def send_fields(
    queue: MessageQueue, *, group: str, properties: str, sys_flag: int, born_ms: int, flag: int, batch: bool
) -> dict[str, object]:
    """A ``SendMessageRequestHeaderV2``: a producer group, topic, default topic and its queue
    count, queue id, sysFlag, born time, flag, properties, reconsume times, unit mode, batch and
    broker name, under their one-letter names."""
    return {
        "a": group,
        "b": queue.topic,
        "c": DEFAULT_TOPIC,
        "d": DEFAULT_TOPIC_QUEUE_NUMS,
        "e": queue.queue_id,
        "f": sys_flag,
        "g": born_ms,
        "h": flag,
        "i": properties,
        "j": 0,
        "k": False,
        "m": batch,
        "n": queue.broker_name,
    }


def read_send(response: RemotingCommand, address: str, code: int = RequestCode.SEND_MESSAGE_V2) -> SendResult:
    """A send's answer: the result when the message is stored, else the error it stands for."""
    accepted(response, code, address, SEND_STATUS_BY_CODE)
    return SendResult(
        status=SEND_STATUS_BY_CODE[response.code],
        offset_msg_id=response.ext_fields.get("msgId", ""),
        queue_id=int_field(response, "queueId"),
        queue_offset=int_field(response, "queueOffset"),
        server_version=response.version,
    )


def send_message(
    queue: MessageQueue, body: bytes, *, group: str, properties: str, sys_flag: int, born_ms: int, flag: int = 0
) -> Call[SendResult]:
    """One message to one queue (SEND_MESSAGE_V2); ``properties`` is its property string and
    ``sys_flag`` says how ``body`` is compressed."""
    fields = send_fields(
        queue, group=group, properties=properties, sys_flag=sys_flag, born_ms=born_ms, flag=flag, batch=False
    )
    return Call(RequestCode.SEND_MESSAGE_V2, fields, read_send, body)


def send_batch(queue: MessageQueue, body: Body, *, group: str, properties: str, born_ms: int) -> Call[SendResult]:
    """Several messages to one queue (SEND_BATCH_MESSAGE): ``body`` holds them
    (``records.outgoing.encode_batch``), whole or in pieces, and ``properties`` is the batch's own
    property string."""
    code = RequestCode.SEND_BATCH_MESSAGE
    fields = send_fields(queue, group=group, properties=properties, sys_flag=0, born_ms=born_ms, flag=0, batch=True)
    return Call(code, fields, lambda response, address: read_send(response, address, code), body)
