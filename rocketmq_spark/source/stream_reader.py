"""The micro-batch reader on the driver: plans each batch's queue ranges and commits offsets.

Written against PySpark 4.2's stream API; on 4.0 and 4.1 ``spark_api.PlainStreamReader`` drives
it. Spark calls ``latestOffset(start, limit)`` to plan a batch and ``commit(end)`` once a batch is
in its commit log. ``commit`` trails by one batch and is never called for the last batch before a
query stops, while ``latestOffset(start)`` is only called once the batch ending at ``start`` is
committed. So both store offsets on the broker: the broker then trails the sink by at most one
trigger, and the final batch of an AvailableNow run is stored too (on 4.2 and later; see
``spark_api`` for 4.0 and 4.1).

Before storing, the driver looks for an operator's reset of the group (``resets.py``) and plans the
next batch by ``onOffsetReset``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from rocketmq_spark.model import MessageQueue, now_ms
from rocketmq_spark.remoting.client_requests import QueueStanding
from rocketmq_spark.remoting.errors import RocketMQError
from rocketmq_spark.source.group import GroupWatch
from rocketmq_spark.source.offset_reader import OffsetReader
from rocketmq_spark.source import resets
from rocketmq_spark.source.broker_requests import BrokerRequests
from rocketmq_spark.source.next_batch import BrokerFacts, NextBatch, next_batch
from rocketmq_spark.source.offsets import (
    OffsetMap, from_spark, has_metadata, resets_from_spark, starts_from_spark, to_spark,
)
from rocketmq_spark.source.options import ON_OFFSET_RESET, OnOffsetReset, SourceOptions
from rocketmq_spark.source.partition import RocketMQPartition, plan_partitions
from rocketmq_spark.source.partition_reader import read_partition
from rocketmq_spark.source.spark_api import (
    ReadAllAvailable, ReadLimit, ReadMaxRows, ReadMinRows, SupportsTriggerAvailableNow,
)
from rocketmq_spark.source.starts import first_seen_offsets, starting_offsets

log = logging.getLogger(__name__)

# How often a trigger that neither stores nor plans a batch compares the group's stored offsets
# with the stream's, to find an operator's reset (one that stores or plans always compares first).
# An idle stream under the default trigger runs one every few milliseconds, and on a big topic
# each comparison is a consume-stats answer of every queue per broker.
IDLE_RESET_CHECK_MS = 1000


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streams the source's topics as offset ranges per queue, with admission control."""

    def __init__(self, options: SourceOptions,
                 open_offsets: Callable[[SourceOptions], OffsetReader] = OffsetReader,
                 open_watch: Callable[[SourceOptions, OffsetReader], GroupWatch] | None = None) -> None:
        self.options = options
        self._open_offsets = open_offsets
        self._open_watch = open_watch or _watch_group
        self._reader: OffsetReader | None = None
        self._watch: GroupWatch | None = None
        self._stored: OffsetMap = {}
        self._inbox: resets.ResetInbox | None = resets.ResetInbox()  # resets the brokers announce
        self._resets: OffsetMap = {}  # resets found and not yet planned for
        self._held: OffsetMap = {}  # resets followed by a batch that waits for more messages
        self._starting_at_reset: OffsetMap = {}  # queues the batch planned last starts at a reset
        self._batch: tuple[OffsetMap, OffsetMap] = ({}, {})  # the last batch planned: starts, ends
        self._latest: OffsetMap = {}
        self._target: OffsetMap | None = None
        self._away: frozenset[str] = frozenset()  # brokers whose queues wait for their return
        self._unreachable: frozenset[str] = frozenset()  # registered brokers that do not answer
        self._hidden: frozenset[MessageQueue] = frozenset()  # drained queues that left the routes
        self._last_max: OffsetMap = {}  # each queue's max offset when last seen
        self._since_ms: int | None = None  # when the query started, if it started in this process
        self._last_batch_ms = now_ms()
        self._last_reset_check_ms: int | None = None  # when the stored offsets were last compared

    def __getstate__(self) -> dict[str, Any]:
        # Spark ships the reader to executors for read(); connections stay on the driver.
        state = dict(self.__dict__)
        state["_reader"] = None
        state["_watch"] = None
        state["_inbox"] = None
        return state

    @property
    def offsets(self) -> OffsetReader:
        if self._reader is None:
            self._reader = self._open_offsets(self.options)
        return self._reader

    # ---------------------------------------------------------------- offsets

    def _group(self) -> None:
        """Register in the group and watch it from the first call on (the routes are known by
        then); raise if failOnSharedGroup is set and the group is shared. Only a stream that
        commits offsets takes part in its group: one that does not writes nothing a member could
        overwrite, and may read a busy group's offsets without troubling its consumers."""
        if not self.options.commit_offsets:
            return
        if self._watch is None:
            self._watch = self._open_watch(self.options, self.offsets)
            assert self._inbox is not None
            self.offsets.client.serve(BrokerRequests(  # before the first heartbeat
                self.options, self._inbox, self._standing, self._watch.subscriptions, self._watch.sub_version))
            self._watch.start()
        self._watch.check()

    def initialOffset(self) -> dict[str, Any]:
        self._since_ms = now_ms()
        queues = self.offsets.queues()
        self._group()
        return to_spark(starting_offsets(self.options, queues, self.offsets))

    def getDefaultReadLimit(self) -> ReadLimit:
        opts = self.options
        if opts.max_messages_per_trigger is not None:
            return ReadMaxRows(opts.max_messages_per_trigger)
        if opts.min_messages_per_trigger is not None:
            return ReadMinRows(opts.min_messages_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an AvailableNow run: what each queue holds now, and no queue added later."""
        self._target = self.offsets.max_offsets(self.offsets.queues())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        start_map = from_spark(start)
        routes = self.offsets.queues(missing_ok=True)
        self._group()  # before anything is stored: a shared group may be an error
        # Look for an operator's reset before storing (the store would overwrite it) and before
        # planning a batch; a trigger that does neither looks every IDLE_RESET_CHECK_MS.
        look = any(self._stored.get(q) != o for q, o in start_map.items()) or self._reset_check_due()
        followed = self._follow_resets(start_map, look)
        # The batch that ended at start is in Spark's commit log; a followed reset is stored instead.
        self._store({q: o for q, o in start_map.items() if q not in followed})
        self.offsets.running()  # the cluster answered: from now on a failure is waited out
        limited = not isinstance(limit, ReadAllAvailable)
        batch = self._plan(start_map, followed, routes, limited)
        if not look and (batch.first or batch.ends != start_map):
            # New messages on a trigger that did not look: look now, and plan again from a reset.
            found = self._follow_resets(start_map, look=True)
            self._store({q: o for q, o in start_map.items() if q not in found})  # an ignored reset is overwritten
            if found:
                followed = {**followed, **found}
                batch = self._plan(start_map, followed, routes, limited)
        self._starting_at_reset = followed
        if limited and self._waiting_for_more(batch.available):
            self._held = followed  # the batch that runs when enough is there starts there
            return start
        if batch.available:
            self._last_batch_ms = now_ms()
        if not followed and not batch.first and has_metadata(start) and batch.ends == start_map:
            return start  # no new batch: the last one's resets and first starts are not new either
        return to_spark(batch.ends, {q: o for q, o in followed.items() if q in batch.ends}, batch.first)

    def _plan(self, start: OffsetMap, followed: OffsetMap, routes: Mapping[MessageQueue, str],
              limited: bool) -> NextBatch:
        return next_batch(start, followed, self._ask_brokers(routes, {**start, **followed}),
                          max_rows=self.options.max_messages_per_trigger if limited else None,
                          fail_on_data_loss=self.options.fail_on_data_loss)

    def _ask_brokers(self, routes: Mapping[MessageQueue, str], begins: OffsetMap) -> BrokerFacts:
        """What the next batch is planned from: each readable queue's offsets, the queues held for
        their broker's return, and where queues seen for the first time start."""
        latest = self.offsets.max_offsets(routes, hold_unreachable=True)
        self._latest = latest if self._target is None else {q: min(o, self._target[q]) for q, o in latest.items()
                                                              if q in self._target}
        # Min offsets only where data can have been lost: a queue whose start is its end has
        # nothing in between (min <= max = start). Most brokers gave them with the max anyway.
        earliest = self.offsets.min_offsets([q for q in latest if begins.get(q) != latest[q]])
        absent = [q for q in begins if q not in latest]
        away = self.offsets.unavailable(absent)
        # A queue that left the routes of a live broker after the query read it to its end
        # (readQueueNums lowered, read permission taken away) lost nothing: it is held too.
        drained = {q for q in absent if q not in away and begins[q] >= self._last_max.get(q, begins[q] + 1)}
        self._note_away(away, drained, frozenset(q.broker_name for q in latest))
        self._last_max.update(latest)
        new = [q for q in self._latest if q not in begins]  # not those an AvailableNow run leaves out
        first = first_seen_offsets(self.options, new, self.offsets, self._since_ms) if new else {}
        return BrokerFacts(latest, earliest, frozenset(away | drained), first, self._target)

    def _follow_resets(self, start: OffsetMap, look: bool) -> OffsetMap:
        """Where the next batch starts the queues an operator reset (``onOffsetReset``); ``look``:
        compare the group's stored offsets with the stream's (announced resets are taken anyway)."""
        self._find_resets(look)
        found, self._resets = self._resets, {}
        policy = self.options.on_offset_reset
        followed = resets.apply(policy, self.options.consumer_group or "", start, found)
        moved = {q: o for q, o in found.items() if q in start and start[q] != o}
        held, self._held = self._held, {}
        if not moved:
            return {q: o for q, o in held.items() if q in start}
        group = self.options.consumer_group
        if policy is OnOffsetReset.FOLLOW:
            log.warning("consumer group %s: offsets reset by an operator (%s); the next micro-batch starts there "
                        "(%s=follow)", group, resets.describe(moved, start), ON_OFFSET_RESET)
            self._store(followed)  # a 4.9 broker leaves storing them to the group's members
            followed = {**{q: o for q, o in held.items() if q in start}, **followed}
        else:
            log.warning("consumer group %s: offsets reset by an operator (%s) are ignored (%s=ignore): the query goes "
                        "on from its checkpoint and stores its own offsets again", group,
                        resets.describe(moved, start), ON_OFFSET_RESET)
            for queue in moved:
                self._stored.pop(queue, None)
        return followed

    def _reset_check_due(self) -> bool:
        last = self._last_reset_check_ms
        return last is None or now_ms() - last >= IDLE_RESET_CHECK_MS

    def _find_resets(self, look: bool) -> None:
        """Add the resets brokers announced and, if ``look``, the stored offsets someone else
        changed."""
        if not self.options.commit_offsets:
            return
        self._forget_reconnected()
        if self._inbox is not None:
            self._resets.update(self._inbox.take())
        ours = {q: o for q, o in self._stored.items() if q not in self._resets}
        if not look or not ours or (self._watch is not None and self._watch.shared):
            return  # another member's commits are not an operator's reset
        self._last_reset_check_ms = now_ms()
        group = self.options.consumer_group
        assert group is not None
        found = self.offsets.group_offsets(ours, group)
        # A broker back from a crash may have answered over its first new connection, with what it
        # had flushed before it went down: older than what the stream stored, and no operator's doing.
        back = self._forget_reconnected()
        self._resets.update(resets.moved(ours, {q: o for q, o in found.items() if q.broker_name not in back}))

    def _note_away(self, away: set[MessageQueue], drained: set[MessageQueue], serving: frozenset[str]) -> None:
        """Log when brokers or queues leave or return, not at every trigger while they are away.
        A broker that serves some of the queues is registered: its other queues are only not
        routed yet (or any more)."""
        unreachable = frozenset(self.offsets.unreachable)
        brokers = frozenset(q.broker_name for q in away) - unreachable - serving
        if brokers - self._away:
            log.warning("brokers %s are not registered with the name server; their queues resume "
                        "when they return", sorted(brokers - self._away))
        if unreachable - self._unreachable:
            log.warning("brokers %s are registered but do not answer; the other brokers' queues are read, and "
                        "theirs resume when they answer", sorted(unreachable - self._unreachable))
        if self._away - brokers or self._unreachable - unreachable:
            log.warning("brokers %s are back", sorted((self._away - brokers) | (self._unreachable - unreachable)))
        if drained - self._hidden:
            log.info("queues %s left the routes after they were read to their end (readQueueNums lowered, or read "
                     "permission taken away); they resume from there if they return",
                     ", ".join(map(str, sorted(drained - self._hidden))))
        self._away, self._unreachable, self._hidden = brokers, unreachable, frozenset(drained)

    def _waiting_for_more(self, available: int) -> bool:
        """minMessagesPerTrigger: hold the batch until enough is there or maxTriggerDelay passed."""
        wanted = self.options.min_messages_per_trigger
        if wanted is None or self._target is not None or available >= wanted:
            return False
        return now_ms() - self._last_batch_ms < self.options.max_trigger_delay_ms

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_spark(self._latest) if self._latest else None

    # ------------------------------------------------------------- partitions

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        start_map, end_map = from_spark(start), from_spark(end)
        # Queues an operator reset, and queues the batch is the first to read, start where the
        # batch's end offsets say (they are in the offset log). Queues that went backwards (their
        # start is past their end), and new queues of an offset log written before first starts
        # were recorded, begin at their min offset; latestOffset applied the data-loss policy.
        given = {**starts_from_spark(end), **resets_from_spark(end)}
        renew = [q for q in end_map if q not in given and (q not in start_map or start_map[q] > end_map[q])]
        earliest = self.offsets.min_offsets(renew) if renew else {}
        full_start = {q: given.get(q, earliest.get(q, start_map.get(q, 0))) for q in end_map}
        self._batch = (full_start, end_map)
        return plan_partitions(self.options, full_start, end_map, self.offsets.planned_address)

    def _standing(self) -> dict[MessageQueue, QueueStanding]:
        """Per queue, the stored offset and the last batch planned (what consumerStatus shows)."""
        starts, ends = self._batch
        stored = dict(self._stored)
        queues = set(stored) | set(ends) | set(self._latest)
        return {q: QueueStanding(stored.get(q, starts.get(q, 0)), starts.get(q, ends.get(q, stored.get(q, 0))),
                                 ends.get(q, stored.get(q, 0))) for q in sorted(queues)}

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RocketMQPartition)
        return read_partition(partition)

    # ----------------------------------------------------------------- commit

    def commit(self, end: dict[str, Any]) -> None:
        # latestOffset has stored this end already, unless Spark calls in an order not seen so far.
        # Spark commits the batch before the one it just planned: where that one starts at a
        # followed reset, its end is what the reset moved away from, not to be stored again.
        skip = self._resets.keys() | self._starting_at_reset.keys()
        self._store({q: o for q, o in from_spark(end).items() if q not in skip})

    def _store(self, offsets: Mapping[MessageQueue, int]) -> None:
        """Store what changed since the last store; a failure is retried at the next trigger.

        Offsets of a broker reached over a new connection count as changed: if it restarted after
        a crash it may have lost what was stored last, and a queue that sees no new message would
        otherwise keep the older offset for as long as the query runs.
        """
        if not self.options.commit_offsets:
            return
        self._forget_reconnected()
        changed = {q: o for q, o in offsets.items() if self._stored.get(q) != o}
        if not changed:
            return
        try:
            result = self.offsets.commit(changed)
        except RocketMQError as err:
            log.warning("could not store offsets for group %s (%s); the next trigger tries again",
                        self.options.consumer_group, err)
            return
        self._stored.update(result.stored)
        if result.failed:
            queue, failure = next(iter(result.failed.items()))
            log.warning("could not store the offsets of %d queue(s) for group %s (%s: %s); the next trigger "
                        "tries again", len(result.failed), self.options.consumer_group, queue, failure)

    def _forget_reconnected(self) -> frozenset[str]:
        """Forget what was stored on brokers reached over a new connection since the last call
        (it is stored again); those brokers."""
        again = self.offsets.reconnected()
        if again:
            self._stored = {q: o for q, o in self._stored.items() if q.broker_name not in again}
        return again

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def _watch_group(options: SourceOptions, offsets: OffsetReader) -> GroupWatch:
    return GroupWatch(offsets.client, options, offsets.broker_addresses)
