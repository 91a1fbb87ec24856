"""Queues a running stream cannot read now but must not count as lost: those of brokers that left
the name server or do not answer, and queues that left the routes after they were read to their end.

The stream reader asks at each trigger which queues to hold (``next_batch`` keeps their offsets);
this module decides that and logs each broker's leaving and return once, not at every trigger.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.source.offset_reader import OffsetReader
from rocketmq_spark.source.offsets import OffsetMap

log = logging.getLogger(__name__)


class Absences:
    """What was away at the last trigger, to tell leaving from returning."""

    def __init__(self, offsets: OffsetReader) -> None:
        self._offsets = offsets
        self._away: frozenset[str] = frozenset()  # brokers whose queues wait for their return
        self._unreachable: frozenset[str] = frozenset()  # registered brokers that do not answer
        self._hidden: frozenset[MessageQueue] = frozenset()  # drained queues that left the routes
        self._last_max: OffsetMap = {}  # each queue's max offset when last seen
        self._behind: frozenset[str] = frozenset()  # brokers read from a slave behind the stream

    def held(
        self,
        begins: Mapping[MessageQueue, int],
        latest: Mapping[MessageQueue, int],
        behind: frozenset[MessageQueue] = frozenset(),
    ) -> frozenset[MessageQueue]:
        """Of the queues the stream reads (``begins``), those missing from ``latest`` that wait:
        their broker is not registered or does not answer, or they left the routes of a live
        broker (readQueueNums lowered, read permission taken away) after the query read them to
        their end, so nothing was lost; and the ``behind`` queues, read from a slave that has not
        copied all the stream read from their master."""
        absent = [q for q in begins if q not in latest and q not in behind]
        away = self._offsets.unavailable(absent)
        drained = {q for q in absent if q not in away and begins[q] >= self._last_max.get(q, begins[q] + 1)}
        self._note(away, drained, frozenset(q.broker_name for q in latest))
        self._note_behind(behind)
        self._last_max.update(latest)
        return frozenset(away | drained | behind)

    def _note_behind(self, behind: frozenset[MessageQueue]) -> None:
        brokers = frozenset(q.broker_name for q in behind)
        if brokers - self._behind:
            log.warning(
                "brokers %s have no master that answers now and their slaves have not copied all this query "
                "has read; their queues wait for a master or the slaves' catching up",
                sorted(brokers - self._behind),
            )
        self._behind = brokers

    def _note(self, away: set[MessageQueue], drained: set[MessageQueue], serving: frozenset[str]) -> None:
        """Log when brokers or queues leave or return. A broker that serves some of the queues is
        registered: its other queues are only not routed yet (or any more)."""
        unreachable = frozenset(self._offsets.unreachable)
        brokers = frozenset(q.broker_name for q in away) - unreachable - serving
        if brokers - self._away:
            log.warning(
                "brokers %s are not registered with the name server; their queues resume when they return",
                sorted(brokers - self._away),
            )
        if unreachable - self._unreachable:
            log.warning(
                "brokers %s are registered but do not answer; the other brokers' queues are read, and "
                "theirs resume when they answer",
                sorted(unreachable - self._unreachable),
            )
        if self._away - brokers or self._unreachable - unreachable:
            log.warning("brokers %s are back", sorted((self._away - brokers) | (self._unreachable - unreachable)))
        if drained - self._hidden:
            log.info(
                "queues %s left the routes after they were read to their end (readQueueNums lowered, or read "
                "permission taken away); they resume from there if they return",
                ", ".join(map(str, sorted(drained - self._hidden))),
            )
        self._away, self._unreachable, self._hidden = brokers, unreachable, frozenset(drained)
