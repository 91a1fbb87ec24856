"""New masters that hold fewer messages than the masters before them showed, on the driver.

When a broker name's master changes (a DLedger election, a slave promoted, a master restarted
after a crash), the new master may lack messages the old one had stored and acknowledged: they
were not copied before it stopped. Its queues then end below where the stream had read or seen
them. This module keeps the facts from before that ``planning.reconcile`` needs to call it a
failover's loss (not a recreated topic): which broker names have a new master, and the highest
max offset seen per queue. Before a shorter queue counts as loss, it asks the new master again
for up to ``retryBudgetMs``, in case its queues trail its commit log for a moment.

A healthy trigger costs nothing here: no request, only a comparison per queue.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.errors import RocketMQError
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.source.offset_reader import OffsetReader
from rocketmq_spark.source.offsets import OffsetMap

log = logging.getLogger(__name__)


class _StillShort(RocketMQError):
    """A new master's queues still end below the stream's starts: asked again while the budget lasts."""

    retriable = True


class Failovers:
    """Broker names with a new master whose queues are not checked yet, and the highest max
    offset seen per queue (replaced whole: the stream reader's other threads do not read it)."""

    def __init__(self, offsets: OffsetReader, retry: Retry) -> None:
        self._offsets = offsets
        self._retry = retry
        self._new_masters: frozenset[str] = frozenset()
        self._highest: OffsetMap = {}

    def settle(self, begins: Mapping[MessageQueue, int], latest: OffsetMap) -> tuple[OffsetMap, OffsetMap]:
        """The max offsets to plan from, and per queue of a broker name with a new master the
        highest max offset seen before it (``BrokerFacts.before_failover``).

        A queue of a new master that ends below the stream's start is asked again until it does
        not or the budget is spent. A broker name is checked once its queues answer: the next
        trigger compares them as usual (the stream moved to their new end, or failed).
        """
        self._new_masters |= self._offsets.masters_changed()
        changed = self._new_masters
        short = [q for q, o in latest.items() if q.broker_name in changed and o < begins.get(q, o)]
        if short:
            latest = {**latest, **self._wait(short, begins)}
        before = {q: max(self._highest.get(q, 0), begins.get(q, 0)) for q in latest if q.broker_name in changed}
        self._highest = {
            **{q: max(o, self._highest.get(q, o)) for q, o in latest.items()},
            **{q: o for q, o in latest.items() if q.broker_name in changed},
        }
        self._new_masters = changed - {q.broker_name for q in latest}
        return latest, before

    def _wait(self, short: list[MessageQueue], begins: Mapping[MessageQueue, int]) -> OffsetMap:
        """The short queues' max offsets, asked again while any ends below its start."""
        found: OffsetMap = {}

        def attempt() -> None:
            found.update(self._offsets.max_offsets(short, hold_unreachable=True))
            behind = sorted(q for q in short if found.get(q, begins[q]) < begins[q])
            if behind:
                brokers = ", ".join(sorted({q.broker_name for q in behind}))
                raise _StillShort(
                    f"the new master of {brokers} ends {len(behind)} queue(s) below what this query read "
                    f"(first {behind[0]}: max {found[behind[0]]}, read to {begins[behind[0]]})"
                )

        log.info("queues %s of a new master end below what this query read; asking again", short)
        try:
            self._retry.call(attempt, "max offsets of a new master")
        except _StillShort:
            pass  # planning decides: a failover's loss
        return found
