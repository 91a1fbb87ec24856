"""A task's half messages (``deliveryGuarantee=exactly-once``): what each of its sends carries
besides the row's own properties, and what the brokers stored, for the driver's decision and
COMMITs (``sink.commit``).

Each half carries its task attempt's mark (``decision_record.attempt_mark``): the query (or
write), the batch, the run and the attempt, so that whoever finishes a decision later picks this
attempt's halves out of the half queue, where every task's halves lie side by side. The task
learns the query and batch from Spark's local properties, which reach its Python worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from pyspark import TaskContext

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.records.outgoing import encode_properties, properties_bytes
from rocketmq_spark.remoting.sending import SendResult
from rocketmq_spark.remoting.transactions import Half, half_properties, stored_half
from rocketmq_spark.sink.crash_points import Point, reached
from rocketmq_spark.sink.decision_record import PROPERTY_ATTEMPT, TaskHalves, attempt_mark

# Spark's local properties of a streaming query's tasks: its checkpointed id and the batch id.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
# The batch id of a df.write: one batch per write.
WRITE_BATCH = 0


@dataclass(frozen=True)
class Transaction:
    """Which batch a task's halves belong to: the query (or the write's id), the batch, and the
    run (the writer made at the query's start, or the write's; a restarted driver is a new run)."""

    query: str
    batch: int
    run: str

    @classmethod
    def of_task(cls, run: str, write: str | None) -> Transaction:
        """For the running task: a stream's query and batch from Spark's local properties, or the
        write's own id (``write``) as a query of one batch."""
        if write is not None:
            return cls(write, WRITE_BATCH, run)
        context = TaskContext.get()
        query = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        if query is None or batch is None:
            raise RuntimeError(
                "an exactly-once stream task did not get its query and batch ids from Spark "
                f"(local properties {QUERY_ID_PROPERTY}, {BATCH_ID_PROPERTY}); this PySpark does not pass them"
            )
        return cls(query, int(batch), run)


@dataclass
class SentHalves:
    """One task attempt's stored halves, column by column (a batch of a million rows travels to the
    driver as arrays, not objects): where each went, its offsets and unique id, whether its queue
    keeps order (its COMMITs go one at a time)."""

    transaction: Transaction
    mark: str
    places: list[MessageQueue] = field(default_factory=list)  # the target queues, by index
    place: list[int] = field(default_factory=list)
    commit_log: list[int] = field(default_factory=list)
    half_offset: list[int] = field(default_factory=list)
    msg_ids: list[str] = field(default_factory=list)
    pinned: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.msg_ids)

    def halves(self) -> list[Half]:
        """Each half as END_TRANSACTION names it."""
        queues = self.places
        return [
            Half(queues[int(p)].broker_name, queues[int(p)].topic, int(c), int(h), m)
            for p, c, h, m in zip(self.place, self.commit_log, self.half_offset, self.msg_ids)
        ]

    def queues(self) -> list[MessageQueue]:
        """Each half's target queue."""
        return [self.places[int(p)] for p in self.place]

    def spans(self) -> TaskHalves:
        """Where the halves lie in the brokers' half queues, for the decision record."""
        return TaskHalves.of(self.mark, self.halves())

    def compact(self) -> SentHalves:
        """The same, with numeric columns as arrays, for the trip to the driver."""
        for name in ("place", "commit_log", "half_offset"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        self.pinned = np.asarray(self.pinned, dtype=bool)  # type: ignore[assignment]
        return self


class HalfLog:
    """What one task attempt's sends add to each message, and what the brokers stored."""

    def __init__(self, group: str, transaction: Transaction, attempt: int) -> None:
        mark = attempt_mark(transaction.query, transaction.batch, transaction.run, attempt)
        self.extra = properties_bytes(encode_properties({**half_properties(group), PROPERTY_ATTEMPT: mark}))
        self.sent = SentHalves(transaction, mark)
        self._index: dict[MessageQueue, int] = {}

    def stored(self, queue: MessageQueue, result: SendResult, msg_id: str, pinned: bool) -> None:
        """A half the broker stored (its answer names the half's offsets)."""
        half = stored_half(result, queue.broker_name, queue.topic, msg_id)
        index = self._index.get(queue)
        if index is None:
            index = self._index[queue] = len(self.sent.places)
            self.sent.places.append(queue)
        sent = self.sent
        sent.place.append(index)
        sent.commit_log.append(half.commit_log_offset)
        sent.half_offset.append(half.half_offset)
        sent.msg_ids.append(msg_id)
        sent.pinned.append(pinned)
        if len(sent.msg_ids) == 1:
            reached(Point.SENDING)
