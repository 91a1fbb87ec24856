"""A broker's queue locks as calls: what RocketMQ's orderly consumers take so that one client at a
time consumes a queue (LOCK_BATCH_MQ, UNLOCK_BATCH_MQ). No I/O.

A lock is the broker's, in its memory, per (group, queue), held by a client id: asked again by
the same id it is renewed, by another it is refused until the holder has not renewed it for the
broker's ``rocketmq.broker.rebalance.lockMaxLiveTime`` (60 s by default). A broker that restarts,
or a new master after a failover, holds none.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting import fastjson
from rocketmq_spark.remoting.calls import Call, accepted, done_call
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.errors import ProtocolError

# RocketMQ's default lockMaxLiveTime: a lock not renewed for this long goes to the next asker.
LOCK_LIFETIME_S = 60.0


def _body(group: str, client_id: str, queues: Iterable[MessageQueue]) -> bytes:
    """A LockBatchRequestBody (an UnlockBatchRequestBody has the same fields). ``onlyThisBroker``:
    the lock is this broker's own, not a quorum of its replicas'."""
    mq_set = [{"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id} for q in queues]
    document = {"consumerGroup": group, "clientId": client_id, "onlyThisBroker": True, "mqSet": mq_set}
    return json.dumps(document, separators=(",", ":")).encode("utf-8")


def lock_queues(group: str, client_id: str, queues: Iterable[MessageQueue]) -> Call[frozenset[MessageQueue]]:
    """Take or renew the locks of ``queues`` for ``client_id``; the answer is those it holds now."""
    code = RequestCode.LOCK_BATCH_MQ

    def read(response: RemotingCommand, address: str) -> frozenset[MessageQueue]:
        accepted(response, code, address)
        try:
            held = fastjson.loads(response.body.decode("utf-8")).get("lockOKMQSet") or []
            return frozenset(MessageQueue(str(q["topic"]), str(q["brokerName"]), int(q["queueId"])) for q in held)
        except (AttributeError, KeyError, TypeError, ValueError, UnicodeDecodeError) as err:
            raise ProtocolError(f"the lock answer of {address} is malformed: {err!r}") from err

    return Call(code, {}, read, _body(group, client_id, queues))


def unlock_queues(group: str, client_id: str, queues: Iterable[MessageQueue]) -> Call[None]:
    """Give the locks of ``queues`` up, so that the next asker need not wait for them to lapse."""
    return done_call(RequestCode.UNLOCK_BATCH_MQ, {}, _body(group, client_id, queues))
