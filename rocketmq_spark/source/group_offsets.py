"""The consumer group's offsets on the driver: what the stream stored, an operator's resets, storing.

One object owns them so that the stream reader's ``latestOffset`` reads straight through: it asks
whether this trigger must look for resets, which resets the next batch follows, stores once, and
tells which queues the planned batch starts at a reset (``commit`` must not store over those).

Threads: the driver's thread calls every method. The client's reader thread (answering a broker's
GET_CONSUMER_RUNNING_INFO) reads ``stored`` and puts announced resets into ``inbox``; ``stored`` is
therefore replaced whole on every change, never changed in place, and ``inbox`` has its own lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.errors import RocketMQError
from rocketmq_spark.source import resets
from rocketmq_spark.source.offset_reader import OffsetReader
from rocketmq_spark.source.offsets import OffsetMap
from rocketmq_spark.source.option_model import ON_OFFSET_RESET, OnOffsetReset, SourceOptions

log = logging.getLogger(__name__)

# How often a trigger that neither stores nor plans a batch compares the group's stored offsets
# with the stream's, to find an operator's reset (one that stores or plans always compares first).
# An idle stream under the default trigger runs one every few milliseconds, and on a big topic
# each comparison is a consume-stats answer of every queue per broker.
IDLE_RESET_CHECK_MS = 1000


class GroupOffsets:
    """The group's offsets as the stream left them on the brokers, and the resets made since."""

    def __init__(self, options: SourceOptions, offsets: OffsetReader, clock: Callable[[], int]) -> None:
        self.options = options
        self._offsets = offsets
        self._clock = clock
        self.inbox = resets.ResetInbox()  # resets the brokers announce (4.9), put by the reader thread
        self.stored: OffsetMap = {}  # what the stream stored last, per queue; replaced whole
        self._followed: OffsetMap = {}  # resets the batch planned last starts at
        self._waiting = False  # whether that batch waits for more messages (minMessagesPerTrigger)
        self._last_check_ms: int | None = None  # when the stored offsets were last compared

    @property
    def committing(self) -> bool:
        return self.options.commit_offsets

    def must_look(self, start: Mapping[MessageQueue, int]) -> bool:
        """Whether this trigger compares the stored offsets before anything else: it will store
        (its start is not what is stored, and storing would overwrite a reset) or an idle
        trigger's interval has passed."""
        if any(self.stored.get(q) != o for q, o in start.items()):
            return True
        last = self._last_check_ms
        return last is None or self._clock() - last >= IDLE_RESET_CHECK_MS

    def follow_resets(self, start: Mapping[MessageQueue, int], look: bool) -> OffsetMap:
        """Where the next batch starts the queues an operator reset (``onOffsetReset``), including
        resets a batch that waited for more messages had followed; ``look``: compare the group's
        stored offsets with the stream's (announced resets are taken anyway)."""
        found = self._find(look)
        policy = self.options.on_offset_reset
        followed = resets.apply(policy, self.options.consumer_group or "", start, found)
        held = {q: o for q, o in self._followed.items() if q in start} if self._waiting else {}
        moved = {q: o for q, o in found.items() if q in start and start[q] != o}
        if not moved:
            return held
        group = self.options.consumer_group
        if policy is OnOffsetReset.FOLLOW:
            log.warning(
                "consumer group %s: offsets reset by an operator (%s); the next micro-batch starts there (%s=follow)",
                group,
                resets.describe(moved, start),
                ON_OFFSET_RESET,
            )
            return {**held, **followed}
        log.warning(
            "consumer group %s: offsets reset by an operator (%s) are ignored (%s=ignore): the query goes "
            "on from its checkpoint and stores its own offsets again",
            group,
            resets.describe(moved, start),
            ON_OFFSET_RESET,
        )
        self.stored = {q: o for q, o in self.stored.items() if q not in moved}
        return held

    def _find(self, look: bool) -> OffsetMap:
        """The resets brokers announced and, if ``look``, the stored offsets someone else changed."""
        if not self.committing:
            return {}
        self._forget_reconnected()
        found = self.inbox.take()
        ours = {q: o for q, o in self.stored.items() if q not in found}
        if not look or not ours:
            return found
        self._last_check_ms = self._clock()
        group = self.options.consumer_group
        assert group is not None
        now = self._offsets.group_offsets(ours, group)
        # A broker back from a crash may have answered over its first new connection, with what it
        # had flushed before it went down: older than what the stream stored, and no operator's doing.
        back = self._forget_reconnected()
        changed = resets.moved(ours, {q: o for q, o in now.items() if q.broker_name not in back})
        return {**found, **self._confirm_zeros(changed, group)}

    def _confirm_zeros(self, changed: OffsetMap, group: str) -> OffsetMap:
        """Consume stats read 0 where the group stores nothing: after its topic was deleted and
        created again, or its offsets were deleted. Those queues are asked one by one; an offset
        that is gone is no reset (the queue's data-loss check decides), and is stored again."""
        zeros = [q for q, o in changed.items() if o == 0]
        if not zeros:
            return changed
        try:
            gone = {q for q, o in self._offsets.stored_offsets(zeros, group).items() if o is None}
        except RocketMQError as err:
            log.debug("stored offsets of %s not confirmed (%s); asked again at the next look", group, err)
            return {q: o for q, o in changed.items() if o != 0}
        if gone:
            log.info(
                "consumer group %s: nothing is stored any more for %s; the stream stores its own offsets again",
                group,
                ", ".join(str(q) for q in sorted(gone)),
            )
            self.stored = {q: o for q, o in self.stored.items() if q not in gone}
        return {q: o for q, o in changed.items() if q not in gone}

    def store_position(self, start: Mapping[MessageQueue, int], followed: Mapping[MessageQueue, int]) -> None:
        """The trigger's one store: the batch that ended at ``start`` is in Spark's commit log, and
        where a reset is followed its offset is stored instead (a 4.9 broker leaves storing it to
        the group's members)."""
        self.store({**start, **followed})

    def planned(self, followed: Mapping[MessageQueue, int], waiting: bool) -> None:
        """The batch planned from ``followed`` is returned to Spark, or waits for more messages
        (then the batch that runs when enough is there starts at the same resets)."""
        self._followed, self._waiting = dict(followed), waiting

    def commit(self, end: Mapping[MessageQueue, int]) -> None:
        """Spark committed the batch before the one just planned: where that one starts at a
        followed reset, its end is what the reset moved away from, not to be stored again."""
        self.store({q: o for q, o in end.items() if q not in self._followed})

    def store(self, offsets: Mapping[MessageQueue, int]) -> None:
        """Store what changed since the last store; a failure is retried at the next trigger.

        Offsets of a broker reached over a new connection count as changed: if it restarted after
        a crash it may have lost what was stored last, and a queue that sees no new message would
        otherwise keep the older offset for as long as the query runs.
        """
        if not self.committing:
            return
        self._forget_reconnected()
        changed = {q: o for q, o in offsets.items() if self.stored.get(q) != o}
        if not changed:
            return
        try:
            result = self._offsets.commit(changed)
        except RocketMQError as err:
            log.warning(
                "could not store offsets for group %s (%s); the next trigger tries again",
                self.options.consumer_group,
                err,
            )
            return
        self.stored = {**self.stored, **result.stored}
        if result.failed:
            queue, failure = next(iter(result.failed.items()))
            log.warning(
                "could not store the offsets of %d queue(s) for group %s (%s: %s); the next trigger tries again",
                len(result.failed),
                self.options.consumer_group,
                queue,
                failure,
            )

    def _forget_reconnected(self) -> frozenset[str]:
        """Forget what was stored on brokers reached over a new connection since the last call
        (it is stored again); those brokers."""
        again = self._offsets.take_new_masters_for_commits()
        if again:
            self.stored = {q: o for q, o in self.stored.items() if q.broker_name not in again}
        return again
