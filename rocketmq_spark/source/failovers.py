"""New masters that hold fewer messages than the masters before them showed, on the driver.

When a broker name's master changes (a DLedger election, a slave promoted, a master restarted
after a crash), the new master may lack messages the old one had stored and acknowledged: they
were not copied before it stopped. Its queues then end below where the stream had read or seen
them. This module keeps the facts from before that ``planning.reconcile`` needs to call it a
failover's loss (not a recreated topic): which broker names have a new master, and the highest
max offset seen per queue. Before a shorter queue counts as loss, it asks the new master again
for up to ``retryBudgetMs``, in case its queues trail its commit log for a moment.

A new master may also have stored new messages past the old end before the driver looks (the
driver was slow, or the broker answered late): offsets alone then look healthy. The store time
of each queue's last message, which topic stats give with the max offsets at every trigger, is
the fact from before: once a master changed, one search by time per queue of that broker finds
where the messages stored after the old master's last one begin (as Kafka's consumer asks a new
leader where its epoch ends, KIP-320).

A healthy trigger costs nothing here: no request, only a comparison per queue. The facts live in
the driver's memory, and one of them also in the offset log: per broker name, the newest store
time seen when each batch was planned (``offsets.STAMPS_KEY``). A restarted driver knows no master
changed hands, so it makes that comparison once, for the batch Spark gives it first (``since``):
a failover while the query was stopped, or after a task stopped it, is seen the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.errors import IndexMismatchError, RocketMQError
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.source.offset_reader import OffsetReader
from rocketmq_spark.source.offsets import STORE_TIME_SLACK_MS, OffsetMap
from rocketmq_spark.source.planning import DataLoss, Failover, on_data_loss

log = logging.getLogger(__name__)


class _StillShort(RocketMQError):
    """A new master's queues still end below the stream's starts: asked again while the budget lasts."""

    retriable = True


class Failovers:
    """Broker names with a new master whose queues are not checked yet, and per queue the facts
    from before: the highest max offset seen, and the last max offset with its message's store
    time (from topic stats, where the broker serves them)."""

    def __init__(self, offsets: OffsetReader, retry: Retry) -> None:
        self._offsets = offsets
        self._retry = retry
        self._new_masters: frozenset[str] = frozenset()
        self._highest: OffsetMap = {}
        self._stamps: dict[MessageQueue, tuple[int, int]] = {}  # as of the trigger before

    def settle(
        self, begins: Mapping[MessageQueue, int], latest: OffsetMap
    ) -> tuple[OffsetMap, dict[MessageQueue, Failover]]:
        """The max offsets to plan from, and per queue of a broker name with a new master what the
        query saw before and what the new master kept (``BrokerFacts.before_failover``).

        A queue of a new master that ends below the stream's start is asked again until it does
        not or the budget is spent. A broker name is checked once its queues answer: the next
        trigger compares them as usual (the stream moved to their new end, or failed).
        """
        changed = self._new_masters | self._offsets.take_new_masters_for_data_loss()
        short = [q for q, o in latest.items() if q.broker_name in changed and o < begins.get(q, o)]
        if short:
            latest = {**latest, **self._wait(short, begins)}
        mine = [q for q in latest if q.broker_name in changed]
        if mine:
            self._check_index({q: latest[q] - 1 for q in mine if latest[q] > 0})
            # Where the query stands, unless that is the end just checked (a query caught up).
            self._check_index({q: begins[q] - 1 for q in mine if 0 < begins.get(q, 0) < latest[q]})
        kept = {**latest, **self._new_messages_from(mine)} if mine else {}
        before = {q: Failover(max(self._highest.get(q, 0), begins.get(q, 0)), min(latest[q], kept[q])) for q in mine}
        self._highest = {
            **{q: max(o, self._highest.get(q, o)) for q, o in latest.items()},
            **{q: o for q, o in latest.items() if q.broker_name in changed},
        }
        # A slave that answers while its broker name has no master may lack the old master's last
        # messages: its facts would hide where a new master's own begin, so they are not kept.
        slaves = self._offsets.read_from_slaves()
        self._stamps = {
            **self._stamps,
            **{q: fact for q, fact in self._offsets.last_stored.items() if q.broker_name not in slaves},
        }
        self._new_masters = changed - {q.broker_name for q in latest}
        return latest, before

    def since(self, ends: Mapping[MessageQueue, int], stamps: Mapping[str, int]) -> OffsetMap:
        """Per queue of ``ends`` (a batch's end in the offset log, with its brokers' newest store
        times ``stamps``), the offset below its end from which the queue now holds messages stored
        after that batch was planned, or nothing: other messages than the query read or planned.

        Without a failover, every message below a queue's end was stored no later than the time
        kept, so nothing is found and only one search per queue is spent, once per restart. A
        queue shorter than its end is asked again for up to ``retryBudgetMs`` first, as a new
        master's is while the query runs.
        """
        # Queues of a broker that is away now are left out: they wait for it, as planned.
        routed = self._offsets.queues(missing_ok=True)
        queues = [q for q in ends if q.broker_name in stamps and q in routed]
        latest = self._offsets.max_offsets(queues, hold_unreachable=True) if queues else {}
        short = [q for q, o in latest.items() if o < ends[q]]
        if short:
            latest = {**latest, **self._wait(short, ends)}
        self._check_index({q: min(o, ends[q]) - 1 for q, o in latest.items() if min(o, ends[q]) > 0})
        found: OffsetMap = {}
        for broker in sorted({q.broker_name for q in latest}):
            mine = [q for q in latest if q.broker_name == broker]
            try:
                firsts = self._offsets.offsets_for_time(mine, stamps[broker] + STORE_TIME_SLACK_MS)
            except RocketMQError as err:
                log.warning("could not compare %s's messages with the checkpoint's (%s)", broker, err)
                firsts = {}
            found.update({q: min(latest[q], firsts.get(q, latest[q])) for q in mine})
        moved = {q: o for q, o in found.items() if o < ends[q]}
        if moved:
            log.info("queues %s hold other messages than when the checkpoint's batch was planned", sorted(moved))
        return moved

    def _check_index(self, last: Mapping[MessageQueue, int]) -> None:
        """A new master's queues must hold each message at the offset it was stored as: a replica
        restarted and elected may serve an index shifted against its messages (RocketMQ's
        '[BUG]logic queue order maybe wrong'), whose max offsets would look like lost messages.
        One pull of one message per queue and offset asked (its last, where the query stands),
        only after a master change and once per restart."""
        if not last:
            return
        try:
            stored = self._offsets.stored_as(last)
        except RocketMQError as err:
            log.warning("could not check the new master's index against its messages (%s)", err)
            return
        wrong = sorted(q for q, offset in stored.items() if offset != last[q])
        if wrong:
            raise IndexMismatchError.at(wrong[0], last[wrong[0]], stored[wrong[0]])

    def _new_messages_from(self, queues: list[MessageQueue]) -> OffsetMap:
        """Per queue, where the new master's own messages begin, if below the last max offset seen
        before: the first offset stored after the old master's last message (one search per queue).

        The old master stored every message below a queue's last max offset seen no later than
        the last one's store time; a new master keeps their store times, and stores its own after
        its election. The latest such time over a broker's queues is compared, so a late queue
        never takes old messages for new ones.
        """
        found: OffsetMap = {}
        for broker in sorted({q.broker_name for q in queues}):
            facts = {q: self._stamps[q] for q in queues if q.broker_name == broker and q in self._stamps}
            if not facts:
                continue  # no store times known (no topic stats): the max offsets alone decide
            newest = max(stamp for _, stamp in facts.values())
            try:
                firsts = self._offsets.offsets_for_time(facts, newest + STORE_TIME_SLACK_MS)
            except RocketMQError as err:
                log.warning("could not compare %s's messages with those before its new master (%s)", broker, err)
                continue
            found.update({q: o for q, o in firsts.items() if o < facts[q][0]})
        return found

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


def rerun_ends(
    starts: Mapping[MessageQueue, int],
    ends: Mapping[MessageQueue, int],
    moved: Mapping[MessageQueue, int],
    fail_on_data_loss: bool,
) -> OffsetMap:
    """The ends a batch from the offset log is read to when a restarted driver runs it again and
    its queues hold other messages from ``moved`` on: the data-loss policy first (the offsets
    below a queue's start the query had read, those from it on it had planned), then each such
    queue read only below where the messages stored since begin."""
    losses = [
        DataLoss.failover(q, offset, starts.get(q, ends[q]), ends[q], stopped=True)
        for q, offset in sorted(moved.items())
        if q in ends
    ]
    on_data_loss(losses, fail_on_data_loss)
    return {q: max(starts.get(q, end), min(end, moved.get(q, end))) for q, end in ends.items()}
