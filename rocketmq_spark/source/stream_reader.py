"""The micro-batch reader on the driver: plans each batch's queue ranges and commits offsets.

Written against PySpark 4.2's stream API; on 4.0 and 4.1 ``spark_api.PlainStreamReader`` drives
it. Spark calls ``latestOffset(start, limit)`` to plan a batch and ``commit(end)`` once a batch is
in its commit log. ``commit`` trails by one batch and is never called for the last batch before a
query stops, while ``latestOffset(start)`` is only called once the batch ending at ``start`` is
committed. So both store offsets on the broker: the broker then trails the sink by at most one
trigger, and the final batch of an AvailableNow run is stored too (on 4.2 and later; see
``spark_api`` for 4.0 and 4.1).

The group's stored offsets, the operator's resets found among them and the one store per trigger
belong to ``group_offsets.py``; which queues wait for their broker, to ``absences.py``; what the
next batch reads, to ``next_batch.py``. This class gathers the facts and answers Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from rocketmq_spark.model import MessageQueue, now_ms
from rocketmq_spark.remoting.client_requests import QueueStanding
from rocketmq_spark.source.absences import Absences
from rocketmq_spark.source.broker_requests import BrokerRequests
from rocketmq_spark.source.failovers import Failovers, rerun_ends
from rocketmq_spark.source.group import GroupWatch
from rocketmq_spark.source.group_offsets import IDLE_RESET_CHECK_MS, GroupOffsets
from rocketmq_spark.source.next_batch import BrokerFacts, next_batch
from rocketmq_spark.source.offset_reader import OffsetReader
from rocketmq_spark.source.offsets import (
    OffsetMap,
    from_spark,
    resets_from_spark,
    stamps_from_spark,
    stamps_of,
    starts_from_spark,
    to_spark,
)
from rocketmq_spark.source.option_model import SourceOptions
from rocketmq_spark.source.partition import RocketMQPartition, plan_partitions
from rocketmq_spark.source.partition_reader import read_partition
from rocketmq_spark.source.planning import Failover
from rocketmq_spark.source.spark_api import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from rocketmq_spark.source.starts import first_seen_offsets, starting_offsets

__all__ = ["IDLE_RESET_CHECK_MS", "RocketMQStreamReader"]


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streams the source's topics as offset ranges per queue, with admission control.

    Threads: Spark calls every method on the driver's thread, which alone changes this object's
    state. Two other threads read it: the client's reader thread answers a broker's questions about
    the stream (``_standing``: the group's stored offsets, the batch planned last, the latest
    offsets), and the group watch's thread lists the brokers to send heartbeats to (the offset
    reader's routes). Each of those values is replaced whole, never changed in place, so a reader
    sees one version or the next; announced resets go through a locked inbox.
    """

    def __init__(
        self,
        options: SourceOptions,
        open_offsets: Callable[[SourceOptions], OffsetReader] = OffsetReader,
        open_watch: Callable[[SourceOptions, OffsetReader], GroupWatch] | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.options = options
        self._open_offsets = open_offsets
        self._open_watch = open_watch or _watch_group
        self._clock = clock or now_ms  # epoch milliseconds
        self._reader: OffsetReader | None = None
        self._group_offsets: GroupOffsets | None = None
        self._absences: Absences | None = None
        self._failovers: Failovers | None = None
        self._watch: GroupWatch | None = None
        self._batch: tuple[OffsetMap, OffsetMap] = ({}, {})  # the last batch planned: starts, ends
        self._planned: OffsetMap | None = None  # the end latestOffset returned last, in this process
        # The first batch end Spark gives a restarted driver, from its offset log, with the queues
        # that hold other messages below it since (``Failovers.since``): searched once, kept for
        # Spark's second call with that end; ``_restart_checked`` once a decision was taken on it.
        self._restart: tuple[OffsetMap, OffsetMap] | None = None
        self._restart_checked = False
        self._rewound: OffsetMap = {}  # where the batch after a rerun starts the queues it cut short
        self._latest: OffsetMap = {}  # the max offsets of the last trigger (an AvailableNow run's at most)
        self._target: OffsetMap | None = None  # the end of an AvailableNow run
        self._since_ms: int | None = None  # when the query started, if it started in this process
        self._last_batch_ms = self._clock()

    def __getstate__(self) -> dict[str, Any]:
        # Spark ships the reader to executors for read(); connections and the driver's state stay.
        state = dict(self.__dict__)
        state.update(_reader=None, _group_offsets=None, _absences=None, _failovers=None, _watch=None)
        return state

    @property
    def offsets(self) -> OffsetReader:
        if self._reader is None:
            self._reader = self._open_offsets(self.options)
        return self._reader

    @property
    def failovers(self) -> Failovers:
        if self._failovers is None:
            self._failovers = Failovers(self.offsets, self.options.retry)
        return self._failovers

    @property
    def group(self) -> GroupOffsets:
        """The group's offsets on the brokers, as this stream stores and watches them."""
        if self._group_offsets is None:
            self._group_offsets = GroupOffsets(self.options, self.offsets, self._clock)
        return self._group_offsets

    # ---------------------------------------------------------------- offsets

    def _join_group(self) -> None:
        """Register in the group and watch it from the first call on (the routes are known by
        then); raise if failOnSharedGroup is set and the group is shared. Only a stream that
        commits offsets takes part in its group: one that does not writes nothing a member could
        overwrite, and may read a busy group's offsets without troubling its consumers."""
        if not self.options.commit_offsets:
            return
        if self._watch is None:
            self._watch = self._open_watch(self.options, self.offsets)
            self.offsets.cluster.members.add(  # before the first heartbeat
                self._watch.client_id,
                self._watch.group,
                BrokerRequests(
                    self.options, self.group.inbox, self._standing, self._watch.subscriptions, self._watch.sub_version
                ),
            )
            self._watch.start()
        self._watch.check()

    def initialOffset(self) -> dict[str, Any]:
        self._since_ms = self._clock()
        queues = self.offsets.queues()
        self._join_group()
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
        """The end of the next batch: the brokers' facts, the resets it follows, one store of the
        group's offsets, ``next_batch``'s plan, and the answer (``start`` when nothing is new)."""
        start_map = from_spark(start)
        routes = self.offsets.queues(missing_ok=True)
        self._join_group()  # before anything is stored: a shared group may be an error
        restarted = self._since_checkpoint(start_map, start)
        self._restart_checked = True
        # Look for an operator's reset before storing (the store would overwrite it) and before
        # planning a batch: a trigger that does neither looks every IDLE_RESET_CHECK_MS.
        latest = None if self.group.must_look(start_map) else self._max_offsets(routes)
        look = latest is None or _has_news(start_map, self._latest)
        # Queues a rerun batch read short start where it stopped, as an operator's reset would.
        followed = {**self._rewound, **self.group.follow_resets(start_map, look and not self._shared())}
        self._rewound = {}
        self.group.store_position(start_map, followed)
        self.offsets.running()  # the cluster answered: from now on a failure is waited out
        begins = {**start_map, **followed}
        facts = self._facts(self._max_offsets(routes) if latest is None else latest, begins, restarted)
        limited = not isinstance(limit, ReadAllAvailable)
        batch = next_batch(
            start_map,
            followed,
            facts,
            max_rows=self.options.max_messages_per_trigger if limited else None,
            fail_on_data_loss=self.options.fail_on_data_loss,
        )
        waiting = limited and self._waiting_for_more(batch.available)
        self.group.planned(followed, waiting)
        if waiting:
            return start  # the batch that runs when enough is there starts at the same resets
        if batch.available:
            self._last_batch_ms = self._clock()
        if not followed and not batch.first and batch.ends == start_map:
            return start  # no new batch: the last one's resets, first starts and store times are not new either
        self._planned = batch.ends
        resets = {q: o for q, o in followed.items() if q in batch.ends}
        return to_spark(batch.ends, resets, batch.first, stamps_of(batch.ends, self.offsets.last_stored))

    def _since_checkpoint(self, ends: OffsetMap, nested: Mapping[str, Any]) -> OffsetMap:
        """For the first batch end a restarted driver is given (it did not plan it), the queues
        that hold other messages below it since, from where; nothing for any later one."""
        if self._restart_checked or ends == self._planned:
            return {}
        if self._restart is None or self._restart[0] != ends:
            stamps = stamps_from_spark(nested)
            self._restart = (ends, self.failovers.since(ends, stamps) if stamps else {})
        return self._restart[1]

    def _shared(self) -> bool:
        """Whether others are registered in the group: their commits are not an operator's reset."""
        return self._watch is not None and self._watch.shared

    def _max_offsets(self, routes: Mapping[MessageQueue, str]) -> OffsetMap:
        """Each readable queue's max offset; those of brokers that do not answer are left out."""
        latest = self.offsets.max_offsets(routes, hold_unreachable=True)
        target = self._target
        self._latest = latest if target is None else {q: min(o, target[q]) for q, o in latest.items() if q in target}
        return latest

    def _facts(self, latest: OffsetMap, begins: OffsetMap, restarted: OffsetMap) -> BrokerFacts:
        """What the next batch is planned from: each readable queue's offsets, the queues held for
        their broker's return, where queues seen for the first time start, and what failovers
        lost (``restarted``: what a restarted driver found below the checkpoint's end)."""
        # Min offsets only where data can have been lost: a queue whose start is its end has
        # nothing in between (min <= max = start). Most brokers gave them with the max anyway.
        # A slave serving while no master is listed, or while the one listed is passed over (it
        # died, and the route is from before), may not have copied all the stream has read: its
        # queues wait for a master or for the slave to catch up, never count as gone back.
        slave_read = self.offsets.read_from_slaves()
        behind = frozenset(q for q, o in latest.items() if q.broker_name in slave_read and o < begins.get(q, o))
        latest = {q: o for q, o in latest.items() if q not in behind}
        # A new master's queue shorter than the stream's start is asked again before it counts as lost.
        latest, before_failover = self.failovers.settle(begins, latest)
        stopped = {q: Failover(begins[q], kept, stopped=True) for q, kept in restarted.items() if q in begins}
        before_failover = {**stopped, **before_failover}
        earliest = self.offsets.min_offsets([q for q in latest if begins.get(q) != latest[q]])
        if self._absences is None:
            self._absences = Absences(self.offsets)
        held = self._absences.held(begins, latest, behind)
        new = [q for q in self._latest if q not in begins]  # not those an AvailableNow run leaves out
        first = first_seen_offsets(self.options, new, self.offsets, self._since_ms) if new else {}
        return BrokerFacts(latest, earliest, held, first, self._target, before_failover)

    def _waiting_for_more(self, available: int) -> bool:
        """minMessagesPerTrigger: hold the batch until enough is there or maxTriggerDelay passed."""
        wanted = self.options.min_messages_per_trigger
        if wanted is None or self._target is not None or available >= wanted:
            return False
        return self._clock() - self._last_batch_ms < self.options.max_trigger_delay_ms

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_spark(self._latest) if self._latest else None

    # ------------------------------------------------------------- partitions

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        start_map, end_map = from_spark(start), from_spark(end)
        # Queues an operator reset, queues the batch is the first to read, and queues a failover's
        # loss moved to their new end, start where the batch's end offsets say (they are in the
        # offset log). Queues that went backwards otherwise (their start is past their end), and new queues of an offset log written before first starts
        # were recorded, begin at their min offset; latestOffset applied the data-loss policy.
        given = {**starts_from_spark(end), **resets_from_spark(end)}
        renew = [q for q in end_map if q not in given and (q not in start_map or start_map[q] > end_map[q])]
        earliest = self.offsets.min_offsets(renew) if renew else {}
        full_start = {q: given.get(q, earliest.get(q, start_map.get(q, 0))) for q in end_map}
        # A batch from the offset log, run again by a restarted driver: queues that hold other
        # messages below its end since it was planned (a new master; Spark's own call with
        # start = end only says where the query stands) are read up to those, and the next batch
        # starts there, so that the messages stored since are read once.
        moved = self._since_checkpoint(end_map, end)
        ends = end_map
        if moved and full_start != end_map:
            ends = rerun_ends(full_start, end_map, moved, self.options.fail_on_data_loss)
            self._rewound = {q: o for q, o in moved.items() if q in end_map}
            self._restart_checked = True
        self._batch = (full_start, ends)
        return plan_partitions(self.options, full_start, ends, stamps_from_spark(end))

    def _standing(self) -> dict[MessageQueue, QueueStanding]:
        """Per queue, the stored offset and the last batch planned (what consumerStatus shows).
        Runs on the client's reader thread: see the class's note on threads."""
        (starts, ends), stored, latest = self._batch, self.group.stored, self._latest
        queues = set(stored) | set(ends) | set(latest)
        return {
            q: QueueStanding(
                stored.get(q, starts.get(q, 0)),
                starts.get(q, ends.get(q, stored.get(q, 0))),
                ends.get(q, stored.get(q, 0)),
            )
            for q in sorted(queues)
        }

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RocketMQPartition)
        return read_partition(partition)

    # ----------------------------------------------------------------- commit

    def commit(self, end: dict[str, Any]) -> None:
        # latestOffset has stored this end already, unless Spark calls in an order not seen so far.
        self.group.commit(from_spark(end))

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()
            if self._reader is not None:
                self._reader.cluster.members.remove(self._watch.client_id)
            self._watch = None
        self._reader = None  # the process's cluster view outlives the query (``remoting.cluster``)


def _has_news(start: Mapping[MessageQueue, int], latest: Mapping[MessageQueue, int]) -> bool:
    """Whether the brokers hold what the batch after ``start`` would read: a queue moved, or a
    queue is new. Queues missing from ``latest`` are held or lost, which no reset changes."""
    return any(start.get(q) != o for q, o in latest.items())


def _watch_group(options: SourceOptions, offsets: OffsetReader) -> GroupWatch:
    return GroupWatch(offsets.client, options, offsets.broker_addresses)
