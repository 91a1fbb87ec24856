"""A consumer group's membership as brokers keep it: heartbeats, unregistering, the member list.

A broker knows a consumer group's members only from heartbeats (HEART_BEAT with a
``HeartbeatData`` JSON body, as ``MQClientInstance.sendHeartbeatToAllBroker`` sends it every
30 s). The first heartbeat of a group also makes the broker create the group's ``%RETRY%`` topic,
which is how ``mqadmin consumerProgress -g`` finds a group's brokers. A broker ties the member
to the connection the heartbeat came on: it forgets the member when that connection closes,
after about two minutes without a heartbeat, or on UNREGISTER_CLIENT.

A producer registers the same way, with its group in ``producerDataSet``. These are the calls as
values (see ``calls.py``), the pace both keep, and the marks that tell this package's client ids
apart; when to send them is the source's and the sink's policy.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from rocketmq_spark.model import EXPRESSION_TAG
from rocketmq_spark.remoting.calls import Call, accepted, done_call
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.errors import ProtocolError

# How a consumer that pulls by itself (no push, no rebalancing of its own) tells the broker what
# it is (``ConsumeType``, ``MessageModel``): a group of such members is not rebalanced by them.
CONSUME_ACTIVELY = "CONSUME_ACTIVELY"
CLUSTERING = "CLUSTERING"
# How GET_CONSUMER_LIST_BY_GROUP is answered for a group without any member (as SYSTEM_ERROR): a
# broker says so in its remark; a 5.x proxy's remoting port fails on the missing group (5.3.3 on
# JDK 17 gives the NullPointerException's message). Both are an empty list, not a failure.
NO_CONSUMER_REMARK = "no consumer for this group"
PROXY_NO_GROUP_REMARK = '"consumerGroupInfo" is null'
# As the Java clients beat (heartbeatBrokerInterval): a broker forgets a consumer group's member
# or a producer after 120 s without one. The stream's group watch and the sink's producer both
# keep it.
HEARTBEAT_INTERVAL_S = 30.0
# What marks a client id as one of this package's: a stream's is ``<ip>@rocketmq-spark-<hex id>``,
# a writing worker's ``<ip>@rocketmq-spark-writer-<pid>-<id>`` (which also holds the first mark).
SOURCE_CLIENT_MARK = "@rocketmq-spark-"
WRITER_CLIENT_MARK = "@rocketmq-spark-writer-"
# Java's String.hashCode works on 32-bit signed ints over UTF-16 code units.
_JAVA_HASH_MULTIPLIER = 31
_UINT32_MASK = (1 << 32) - 1
_INT32_SIGN = 1 << 31
_UTF16_UNIT = struct.Struct(">H")


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()``, ``h = 31*h + unit`` over UTF-16 code units as a signed 32-bit
    int: the code a broker stores for a message's tag and compares a subscription's codes with."""
    value = 0
    for (unit,) in _UTF16_UNIT.iter_unpack(text.encode("utf-16-be", "surrogatepass")):
        value = (_JAVA_HASH_MULTIPLIER * value + unit) & _UINT32_MASK
    return value - (1 << 32) if value & _INT32_SIGN else value


def is_source_client(client_id: str) -> bool:
    """Whether a group member is a stream of this source (a writer's id holds the mark too)."""
    return SOURCE_CLIENT_MARK in client_id and WRITER_CLIENT_MARK not in client_id


@dataclass(frozen=True)
class Subscription:
    """One topic of a member's subscription (``SubscriptionData``).

    ``tags``: the tag set of a TAG expression, None for ``*`` or a SQL92 expression; the broker
    filters by their hash codes, which the heartbeat carries next to them.
    """

    topic: str
    expression: str
    expression_type: str = EXPRESSION_TAG
    tags: frozenset[str] | None = None

    def to_json(self, version: int) -> dict[str, object]:
        tags = sorted(self.tags or ())
        return {
            "classFilterMode": False,
            "topic": self.topic,
            "subString": self.expression,
            "tagsSet": tags,
            "codeSet": sorted({java_string_hash(tag) for tag in tags}),
            "subVersion": version,
            "expressionType": self.expression_type,
        }


def heartbeat_body(
    client_id: str, group: str, subscriptions: Sequence[Subscription], *, consume_from_where: str, sub_version: int
) -> bytes:
    """``HeartbeatData`` of one pulling consumer in one group, as fastjson reads it.

    ``sub_version`` stays the same for a member's life: a broker takes a higher one as a changed
    subscription, and a change makes it notify the group's other members.
    """
    consumer = {
        "groupName": group,
        "consumeType": CONSUME_ACTIVELY,
        "messageModel": CLUSTERING,
        "consumeFromWhere": consume_from_where,
        "unitMode": False,
        "subscriptionDataSet": [s.to_json(sub_version) for s in subscriptions],
    }
    return json.dumps(
        {"clientID": client_id, "producerDataSet": [], "consumerDataSet": [consumer]}, separators=(",", ":")
    ).encode("utf-8")


def heartbeat(
    client_id: str, group: str, subscriptions: Sequence[Subscription], *, consume_from_where: str, sub_version: int
) -> Call[None]:
    """Register (or keep registered) the client in the group, on the connection it goes over."""
    body = heartbeat_body(
        client_id, group, subscriptions, consume_from_where=consume_from_where, sub_version=sub_version
    )
    return done_call(RequestCode.HEART_BEAT, {}, body)


def producer_heartbeat_body(client_id: str, group: str) -> bytes:
    """``HeartbeatData`` of one producer group, as the Java producer's client sends it: the group in
    ``producerDataSet``, no consumer."""
    return json.dumps(
        {"clientID": client_id, "producerDataSet": [{"groupName": group}], "consumerDataSet": []},
        separators=(",", ":"),
    ).encode("utf-8")


def producer_heartbeat(client_id: str, group: str) -> Call[int]:
    """Register the client as a producer of the group (what ``mqadmin producerConnection`` and
    transaction checks see); its answer is the ``version`` of the server, which tells its line."""
    code = RequestCode.HEART_BEAT

    def read(response: RemotingCommand, address: str) -> int:
        return accepted(response, code, address).version

    return Call(code, {}, read, producer_heartbeat_body(client_id, group))


def unregister(client_id: str, group: str) -> Call[None]:
    """Leave the group at once, rather than when the connection closes or the member expires."""
    return done_call(RequestCode.UNREGISTER_CLIENT, {"clientID": client_id, "consumerGroup": group})


def consumer_ids(group: str) -> Call[list[str]]:
    """The client ids of the group's members registered on the broker (or proxy) asked."""
    code = RequestCode.GET_CONSUMER_LIST_BY_GROUP

    def read(response: RemotingCommand, address: str) -> list[str]:
        remark = response.remark or ""
        if response.code == ResponseCode.SYSTEM_ERROR and (
            remark.startswith(NO_CONSUMER_REMARK) or PROXY_NO_GROUP_REMARK in remark
        ):
            return []
        accepted(response, code, address)
        return parse_consumer_ids(response.body, address)

    return Call(code, {"consumerGroup": group}, read)


def parse_consumer_ids(body: bytes, address: str) -> list[str]:
    """A ``GetConsumerListByGroupResponseBody``: ``{"consumerIdList": [...]}``."""
    try:
        ids = json.loads(body.decode("utf-8")).get("consumerIdList") or []
        if not isinstance(ids, list):
            raise TypeError(f"consumerIdList is a {type(ids).__name__}")
        return [str(client_id) for client_id in ids]
    except (AttributeError, TypeError, ValueError, UnicodeDecodeError) as err:
        raise ProtocolError(f"consumer list from {address} is malformed: {err!r}") from err
