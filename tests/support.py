"""Constants and small builders the unit tests share: the queues and brokers the fakes of
``tests/fakes.py`` serve, the options of a query over them, a stream reader on a fake offset
reader, offsets as Spark hands them back, the ranges of planned partitions, and a 4.9 broker's
reset notice. Here rather than in one test module, so that no test module imports another."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.codes import FLAG_ONEWAY, RequestCode
from rocketmq_spark.source.offsets import to_spark
from rocketmq_spark.source.option_model import ReadKind, SourceOptions
from rocketmq_spark.source.options import parse_options
from rocketmq_spark.source.partition import RocketMQPartition
from rocketmq_spark.source.stream_reader import RocketMQStreamReader

if TYPE_CHECKING:  # the fakes import the constants below, so only the type checker goes the other way
    from tests.fakes import Offsets

# The topic of the fake offset reader (FakeOffsets) and three of its queues on two brokers.
TOPIC = "orders"
A0, A1, B0 = MessageQueue(TOPIC, "broker-a", 0), MessageQueue(TOPIC, "broker-a", 1), MessageQueue(TOPIC, "broker-b", 0)
ADDRESS = {"broker-a": "127.0.0.1:10911", "broker-b": "127.0.0.1:10921"}

# The fake brokers (FakeBrokers): broker-0 to broker-3, each serving queues of both topics.
BROKERS = 4
TOPICS = (TOPIC, "refunds")
# The ``version`` a broker puts in its answers: 4.9.7's and 5.3.3's ordinals.
VERSION_4_9_7 = 407
VERSION_5_3_3 = 479
# A route's queue permission: readable and writable.
PERM_READ_WRITE = 6
# When the operator's reset of a notice was made, as the broker writes it.
NOTICE_TIMESTAMP_MS = "1700000000000"


def options(streaming: bool = True, **extra: str) -> SourceOptions:
    """The options of a query of TOPIC; a stream's consumer group is ``g``."""
    raw = {"nameServer": "127.0.0.1:9876", "topic": TOPIC, **extra}
    if streaming:
        raw.setdefault("consumerGroup", "g")
    return parse_options(raw, kind=ReadKind.STREAM if streaming else ReadKind.BATCH)


def stream(fake: Offsets, **extra: str) -> RocketMQStreamReader:
    """A stream reader whose offset reader is the fake."""
    return RocketMQStreamReader(options(**extra), open_offsets=lambda _: fake)  # type: ignore[arg-type,return-value]


def spark(offsets: Mapping[MessageQueue, int]) -> dict[str, Any]:
    """Offsets as Spark hands them back: through the JSON of its offset log."""
    returned: dict[str, Any] = json.loads(json.dumps(to_spark(offsets)))
    return returned


def ranges(parts: Iterable[Any]) -> list[tuple[MessageQueue, int, int]]:
    """The queue ranges of the partitions, in order."""
    out = []
    for part in parts:
        assert isinstance(part, RocketMQPartition)
        for r in part.ranges:
            out.append((r.queue, r.start, r.end))
    return out


def notice(offsets: dict[MessageQueue, int], group: str = "g") -> RemotingCommand:
    """RESET_CONSUMER_CLIENT_OFFSET as a 4.9 broker sends it: a ResetOffsetBody in fastjson."""
    table = ",".join(
        json.dumps({"brokerName": q.broker_name, "queueId": q.queue_id, "topic": q.topic}) + f":{o}"
        for q, o in offsets.items()
    )
    return RemotingCommand(
        RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
        flag=FLAG_ONEWAY,
        ext_fields={"topic": TOPIC, "group": group, "timestamp": NOTICE_TIMESTAMP_MS},
        body=('{"offsetTable":{' + table + "}}").encode(),
    )


class ManualClock:
    """A monotonic clock the test moves: ``now`` by hand, or a retry's ``sleep``."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
