"""Reading a queue range back, for the exactly-once sink's own bookkeeping: its transaction records,
the half queue of a decision's spans, and the target queues from a decision's positions.

Plain pulls (no subscription filter, no consumer registered), decoded with the source's decoder;
each message comes with its queue offset, unique key, keys, tags, body and properties.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.records.decoder import decode_pulls
from rocketmq_spark.remoting.calls import PullSpec, PullStatus, pull
from rocketmq_spark.remoting.errors import RocketMQError
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.sink.shared import SendingClient

# Messages one pull asks for (a broker answers at most 32 by default, and fewer past its byte limit).
PULL_BATCH = 32
# The unique key a producer gives a message (``MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX``).
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
# Where a half's real topic and queue are kept while it waits (``MessageConst``).
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"


class ScanError(RocketMQError):
    """A range could not be read back (expired, or the broker refused it): names the queue and range."""


@dataclass(frozen=True)
class Scanned:
    """One message read back."""

    queue_offset: int
    offset_msg_id: str
    keys: str | None
    tags: str | None
    body: bytes
    properties: dict[str, str]

    @property
    def unique_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)


def scan(
    client: SendingClient, address: str, queue: MessageQueue, group: str, start: int, end: int, retry: Retry
) -> Iterator[Scanned]:
    """Every message of ``queue`` from ``start`` up to ``end`` (exclusive), in order. A range the
    broker no longer holds in full raises ``ScanError``: what it held is the caller's evidence."""
    spec = PullSpec(queue, group)
    offset = start
    while offset < end:
        result = retry.call(
            lambda at=offset: client.call(address, pull(spec, at, min(PULL_BATCH, end - at))),  # type: ignore[misc]
            f"reading {queue} back",
        )
        if result.status is PullStatus.FOUND:
            columns = decode_pulls([result.body])
            rows = zip(
                columns.queue_offset.to_pylist(),
                columns.offset_msg_id.to_pylist(),
                columns.keys.to_pylist(),
                columns.tags.to_pylist(),
                columns.body.to_pylist(),
                columns.properties.to_pylist(),
            )
            for queue_offset, offset_msg_id, keys, tags, body, properties in rows:
                if queue_offset >= end:
                    return
                yield Scanned(queue_offset, offset_msg_id, keys, tags, body, dict(properties or ()))
        elif result.status is not PullStatus.NO_MATCHED_MSG or result.next_begin_offset <= offset:
            raise ScanError(
                f"{queue} could not be read from {offset} to {end} (the broker answered {result.status.value}, "
                f"holding {result.min_offset} to {result.max_offset}): were its files deleted (fileReservedTime)?"
            )
        offset = result.next_begin_offset
