"""The decision record of an exactly-once batch: what the driver writes to the transaction topic
before its first COMMIT, so that any later process can finish the batch (``decisions.Step.FINISH``).

It names the halves by where they lie, not one by one, so it stays small for a batch of millions
of rows: per task attempt that won and per broker, the span of the half topic's queue its halves
were stored in (other tasks' halves lie between; each half carries its attempt's mark, which
tells them apart) and how many there are. Beside them, where each target queue ended before the
first COMMIT: a committed half is put at or after that offset, so looking from there tells which
are stored. The body is JSON, readable with ``mqadmin queryMsgByKey`` when an operator asks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.errors import ProtocolError
from rocketmq_spark.remoting.transactions import Half

# The property each half carries: its batch's and task attempt's mark (``attempt_mark``).
PROPERTY_ATTEMPT = "RSPARK_ATTEMPT"
# RocketMQ's default largest message (the broker's maxMessageSize): a record must fit in one.
MAX_RECORD_BYTES = 4 * 1024 * 1024
RECORD_VERSION = 1
# Separates the parts of keys and marks; ids from Spark (UUIDs) and numbers never contain it.
SEPARATOR = "/"


def record_key(group: str, query: str, batch: int) -> str:
    """The key a batch's records are sent (and found) with."""
    return SEPARATOR.join((group, query, str(batch)))


def attempt_mark(query: str, batch: int, run: str, attempt: int) -> str:
    """What tells one task attempt's halves from every other's: the query, its batch, the run of
    the query (a restarted driver's task attempt ids start again) and the attempt's id."""
    return SEPARATOR.join((query, str(batch), run, str(attempt)))


@dataclass(frozen=True)
class HalfSpan:
    """One task attempt's halves on one broker: the half queue's offsets from ``first`` to
    ``last`` (both included) hold all ``count`` of them."""

    broker_name: str
    first: int
    last: int
    count: int


@dataclass(frozen=True)
class TaskHalves:
    """The halves of one task attempt that won: its mark and, per broker, where they lie."""

    mark: str
    spans: tuple[HalfSpan, ...]

    @classmethod
    def of(cls, mark: str, halves: Iterable[Half]) -> TaskHalves:
        """The spans of ``halves``, one per broker."""
        by_broker: dict[str, list[int]] = {}
        for half in halves:
            by_broker.setdefault(half.broker_name, []).append(half.half_offset)
        spans = tuple(HalfSpan(name, min(o), max(o), len(o)) for name, o in sorted(by_broker.items()))
        return cls(mark, spans)


@dataclass(frozen=True)
class Decision:
    """That the batch ``batch`` of ``query`` commits the halves of ``tasks``."""

    group: str
    query: str
    batch: int
    tasks: tuple[TaskHalves, ...]
    positions: Mapping[MessageQueue, int]  # each target queue's max offset before the first COMMIT

    @property
    def key(self) -> str:
        return record_key(self.group, self.query, self.batch)

    @property
    def count(self) -> int:
        """How many halves the decision commits."""
        return sum(span.count for task in self.tasks for span in task.spans)

    def encode(self) -> bytes:
        """The record's body; one too large for a message says so (it does not depend on the rows'
        sizes, only on tasks x brokers and the target queues)."""
        body = json.dumps(
            {
                "v": RECORD_VERSION,
                "group": self.group,
                "query": self.query,
                "batch": self.batch,
                "tasks": [
                    {"mark": t.mark, "spans": [[s.broker_name, s.first, s.last, s.count] for s in t.spans]}
                    for t in self.tasks
                ],
                "positions": [
                    [q.topic, q.broker_name, q.queue_id, o] for q, o in sorted(self.positions.items(), key=_queue_order)
                ],
            },
            separators=(",", ":"),
        ).encode()
        if len(body) > MAX_RECORD_BYTES:
            raise ValueError(
                f"the decision record of batch {self.batch} takes {len(body)} bytes, more than a message may "
                f"({MAX_RECORD_BYTES}): write with fewer partitions (coalesce) or fewer target queues"
            )
        return body

    @classmethod
    def decode(cls, body: bytes) -> Decision:
        """A record's body back; one this version cannot read is a protocol error naming it."""
        try:
            raw: dict[str, Any] = json.loads(body)
            if raw.get("v") != RECORD_VERSION:
                raise ValueError(f"version {raw.get('v')!r}, not {RECORD_VERSION}")
            tasks = tuple(
                TaskHalves(t["mark"], tuple(HalfSpan(n, int(f), int(la), int(c)) for n, f, la, c in t["spans"]))
                for t in raw["tasks"]
            )
            positions = {MessageQueue(t, b, int(q)): int(o) for t, b, q, o in raw["positions"]}
            return cls(str(raw["group"]), str(raw["query"]), int(raw["batch"]), tasks, positions)
        except (ValueError, KeyError, TypeError) as err:
            raise ProtocolError(f"a decision record this sink cannot read ({err}): {body[:200]!r}") from err


def _queue_order(item: tuple[MessageQueue, int]) -> tuple[str, str, int]:
    queue = item[0]
    return queue.topic, queue.broker_name, queue.queue_id
