"""What the next micro-batch reads, from what the brokers said at one trigger: pure, no I/O.

The stream reader's ``latestOffset`` gathers the facts (routes, min and max offsets, which queues
are held for their broker's return, where queues seen for the first time start) and this function
decides, the way Spark's Kafka source leaves its offset ranges to a calculator tested alone
(tests/unit/test_next_batch.py). The data-loss policy is applied here, through ``planning``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.source.offsets import OffsetMap
from rocketmq_spark.source.planning import Failover, backlog, checked_starts, rate_limit


@dataclass(frozen=True)
class BrokerFacts:
    """What the brokers said at one trigger."""

    latest: OffsetMap  # the next offset of each queue that can be read now
    earliest: OffsetMap  # the first offset of each of those whose start may be below it
    held: frozenset[MessageQueue] = frozenset()  # queues not readable now whose offsets wait for their return
    first: OffsetMap = field(default_factory=dict)  # where queues seen for the first time start
    target: OffsetMap | None = None  # the end of an AvailableNow run: no queue reads past it
    # Per queue of a broker name with a new master since the last trigger that read it: what the
    # query saw before and what the new master kept, to tell a failover's loss from a recreated topic.
    before_failover: Mapping[MessageQueue, Failover] = field(default_factory=dict)


@dataclass(frozen=True)
class NextBatch:
    """The batch: where each readable queue starts and where every queue ends."""

    starts: OffsetMap  # readable queues, after the data-loss policy
    ends: OffsetMap  # every queue of the batch; a held queue ends where it starts
    # Starts Spark's offset log keeps: queues seen for the first time, and queues a failover's loss
    # moved to their new end (a rerun of the batch must not start them anywhere else).
    first: OffsetMap
    available: int  # offsets readable now beyond the starts, before any read limit


def next_batch(
    start: Mapping[MessageQueue, int],
    followed: Mapping[MessageQueue, int],
    facts: BrokerFacts,
    *,
    max_rows: int | None,
    fail_on_data_loss: bool,
) -> NextBatch:
    """The batch after the one that ended at ``start``.

    Queues an operator reset start where ``followed`` says; queues seen for the first time where
    ``facts.first`` says; held queues keep their offsets; a queue that left the routes and is not
    held, or a start outside its queue's offsets, is data loss, decided by ``fail_on_data_loss``.
    ``max_rows`` (maxMessagesPerTrigger) shares a limit over the queues by backlog.
    """
    latest = dict(facts.latest)
    if facts.target is not None:
        latest = {q: min(offset, facts.target[q]) for q, offset in latest.items() if q in facts.target}
    begins = {**start, **followed}
    held = {q: begins[q] for q in facts.held if q in begins and q not in latest}
    wanted = {q: begins[q] if q in begins else facts.first[q] for q in latest}
    gone = {q: offset for q, offset in begins.items() if q not in latest and q not in held}
    earliest = {**latest, **facts.earliest}
    fixed = checked_starts({**wanted, **gone}, earliest, latest, fail_on_data_loss, facts.before_failover)
    ends = rate_limit(fixed, latest, max_rows) if max_rows is not None else latest
    moved = {q for q in facts.before_failover if q in begins and q in fixed and fixed[q] != begins[q]}
    first = {q: fixed[q] for q in latest if q not in begins or q in moved}
    return NextBatch(fixed, {**held, **ends}, first, sum(backlog(fixed, latest).values()))
