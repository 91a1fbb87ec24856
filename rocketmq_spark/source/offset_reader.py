"""Offsets from the brokers, on the driver: min/max offsets, stored offsets, search by time.

The micro-batch and batch readers ask this module every question that needs a broker; it decides
no policy (where a query starts is ``starts.py``, what counts as data loss ``planning.py``).

Where each queue is asked, and which brokers answer, is ``routes.py``'s. What it costs grows with
brokers, not queues, wherever RocketMQ allows:
- min and max offsets of all of a topic's queues on a broker come in one GET_TOPIC_STATS_INFO
  answer; where a broker does not serve it (a 5.x proxy) or denies it, per-queue requests go out
  back to back on one connection (``RocketMQClient.call_many``);
- stored offsets and searches by time (with, on 4.x, the pulls that make them exact) are
  per-queue requests, sent back to back.

Storing the group's offsets is the commit protocol's (``commits.py``), over these routes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from operator import attrgetter
from typing import TypeVar

from rocketmq_spark.config.cluster import TLS_TRUST_CERT_PATH, TLS_VERIFY
from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.model import MessageQueue
from rocketmq_spark.records.layout import first_stored_as
from rocketmq_spark.remoting import calls
from rocketmq_spark.remoting.calls import Boundary, Call, PullResult, PullStatus, QueueOffsets
from rocketmq_spark.remoting.cluster import Cluster, shared_cluster
from rocketmq_spark.remoting.errors import (
    AuthorizationError,
    NoReplicaError,
    ProtocolError,
    RocketMQError,
)
from rocketmq_spark.remoting.replicas import not_copied_yet
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.source import time_search
from rocketmq_spark.source.commits import CommitResult, GroupCommits
from rocketmq_spark.source.offsets import OffsetMap
from rocketmq_spark.source.option_model import TOPIC, SourceOptions
from rocketmq_spark.source.pull_measure import PullMeasure, no_stats
from rocketmq_spark.source.routes import QueueRoutes, UnknownTopicError

log = logging.getLogger(__name__)

T = TypeVar("T")
K = TypeVar("K")

# Logged once per query, by the driver (each query opens one OffsetReader; executors open none).
UNVERIFIED_TLS_WARNING = (
    f"{TLS_VERIFY}=false: server certificates are not verified, so any server at the "
    "name-server and broker addresses is trusted; use it for tests only, and give the "
    f"servers' CA in {TLS_TRUST_CERT_PATH} instead"
)


class OffsetReader:
    """Broker-side facts about the queues of the source's topics."""

    def __init__(
        self, options: SourceOptions, cluster: Cluster | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.options = options
        if options.client.tls and not options.client.tls_verify:
            log.warning(UNVERIFIED_TLS_WARNING)
        # The process's view of the cluster, shared with every other query and task reading or
        # writing it here: one connection pool, one route cache, one memory of failed addresses.
        self.cluster = cluster or shared_cluster(options.client)
        self.cluster.answer_brokers()
        self.client = self.cluster.client
        self.routes = QueueRoutes(
            options.topics, self.client, self.cluster.replicas, options.start_retry, options.retry.budget_s, clock
        )
        self._no_topic_stats: set[str] = set()  # broker addresses that do not answer topic stats
        self._no_group_stats: set[str] = set()  # nor consume stats
        self._known_min: OffsetMap = {}  # min offsets the last topic stats gave
        self.measure = PullMeasure(options.pull_group)  # topics the user may not Get
        # Per queue, the max offset topic stats gave last and the store time of the message below
        # it: a fact from before a failover that tells a new master's messages from the old ones'.
        self.last_stored: dict[MessageQueue, tuple[int, int]] = {}
        self.commits = GroupCommits(self.client, options, self.routes.masters, self.routes.changed)

    # ------------------------------------------------------------------ routes

    @property
    def retry(self) -> Retry:
        """The short policy until the query runs (see ``running``): a wrong address or port fails
        its start in seconds."""
        return self.routes.retry

    def running(self) -> None:
        """The query runs: retry failures for its budget (retryBudgetMs) from now on, as their
        likely cause is now a broker restarting, not a wrong address."""
        self.routes.retry = self.options.retry

    @property
    def unreachable(self) -> Mapping[str, float]:
        """Registered brokers that did not answer a running stream, since when."""
        return self.routes.unreachable

    def queues(self, missing_ok: bool = False, suspect: bool = False) -> dict[MessageQueue, str]:
        """Every readable queue of the source's topics, with the address its offsets are asked at;
        a topic the name server does not know is a configuration error (unless ``missing_ok``)."""
        try:
            return self.routes.queues(missing_ok, suspect)
        except UnknownTopicError as err:
            raise ConfigurationError(
                TOPIC,
                f"topic '{self.options.display_topic(err.topic)}' does not exist on "
                f"{';'.join(self.options.client.name_servers)}",
                "Create it, or check the topic name and the nameServer option",
            ) from err

    def unavailable(self, absent: Iterable[MessageQueue]) -> set[MessageQueue]:
        """Of queues missing from the routes, those that wait for their broker (``routes.py``)."""
        return self.routes.unavailable(absent)

    def broker_addresses(self) -> set[str]:
        return self.routes.broker_addresses()

    def read_from_slaves(self) -> frozenset[str]:
        """Broker names read from a slave now: no master is listed, or the one listed is passed over."""
        return self.routes.read_from_slaves()

    def take_new_masters_for_commits(self) -> frozenset[str]:
        """Brokers reached at a new address or over a new connection since the last call (each
        change is taken once); since they may have lost the group's offset tables too, their
        commit tables are forgotten here, so that their first commits go first again."""
        again = self.routes.take_new_masters("commits")
        self.commits.forget(again)
        return again

    def take_new_masters_for_data_loss(self) -> frozenset[str]:
        """Broker names with a new master (or a master reached over a new connection) since the
        last call, each change taken once: a queue of theirs that is shorter than before lost
        messages in the failover."""
        return self.routes.take_new_masters("data loss")

    def address(self, queue: MessageQueue) -> str:
        return self.routes.address(queue)

    # ----------------------------------------------------------------- requests

    def _gather(self, keys: Iterable[K], make: Callable[[K], tuple[str, Call[T]]], what: str) -> dict[K, T]:
        """One call per key, sent back to back; those that fail in a way a retry can fix are sent
        again under the retry policy, and any other failure is raised."""
        values: dict[K, T] = {}
        todo = list(keys)

        def attempt() -> None:
            nonlocal todo
            failed: list[K] = []
            first: RocketMQError | None = None
            for key, outcome in zip(todo, self.client.call_many([make(key) for key in todo])):
                if isinstance(outcome, RocketMQError):
                    if not outcome.retriable:
                        raise outcome
                    failed.append(key)
                    first = first or outcome
                else:
                    values[key] = outcome
            todo = failed
            if first is not None:
                self.routes.changed()
                raise first

        if todo:
            self.retry.call(attempt, what)
        return values

    def _per_queue(
        self, queues: Iterable[MessageQueue], call: Callable[[MessageQueue], Call[T]], what: str
    ) -> dict[MessageQueue, T]:
        return self._gather(queues, lambda q: (self.address(q), call(q)), what)

    def _queue_offsets(
        self,
        queues: list[MessageQueue],
        call: Callable[[MessageQueue], Call[int]],
        pick: Callable[[PullResult], int],
        what: str,
    ) -> dict[MessageQueue, int]:
        """Max or min offsets queue by queue: asked, or pulled where the topic's Get is refused."""
        asked, pulled = self.measure.split(queues)
        try:
            found = self._per_queue(asked, call, what)
        except AuthorizationError as err:
            if not self.measure.take(err, self.options.display_topic(err.denial.name)):
                raise
            return self._queue_offsets(queues, call, pick, what)
        answers = self._per_queue(pulled, self.measure.call, what)
        found.update({q: pick(self.measure.took(q, answer)) for q, answer in answers.items()})
        return found

    # ----------------------------------------------------------------- offsets

    def _topic_stats(
        self, queues: list[MessageQueue]
    ) -> tuple[dict[MessageQueue, QueueOffsets], dict[str, RocketMQError], dict[str, str]]:
        """Min and max offsets of the queues' topics on each broker that answers topic stats, the
        brokers that failed in a way that may mean they went away or hang, with why, and the
        address each broker was asked at."""
        address = {q: self.address(q) for q in queues}
        stats_of = sorted(
            {(q.topic, q.broker_name, address[q]) for q in queues if address[q] not in self._no_topic_stats}
        )
        outcomes = (
            self.client.call_many([(a, calls.topic_stats(topic, broker)) for topic, broker, a in stats_of])
            if stats_of
            else []
        )
        found: dict[MessageQueue, QueueOffsets] = {}
        unanswered: dict[str, RocketMQError] = {}
        asked = {broker: a for _, broker, a in stats_of}
        from_slaves = self.read_from_slaves()
        for (_, broker, a), outcome in zip(stats_of, outcomes):
            if isinstance(outcome, ProtocolError) or no_stats(outcome):
                self._no_topic_stats.add(a)  # from now on, queue by queue
            elif isinstance(outcome, RocketMQError) and not_copied_yet(outcome, broker in from_slaves):
                # Its max offsets would be 0, which is not where its queues stand: no replica
                # serves them until it catches up or a master is back.
                unanswered[broker] = NoReplicaError(broker, [a], outcome)
                self.routes.changed(failed=[a])
            elif isinstance(outcome, RocketMQError):
                # Retriable: the broker may have gone; else (a topic deleted on the broker, say)
                # its queues' own answers say where they stand, as they did before stats.
                if outcome.retriable:
                    unanswered[broker] = outcome
                    self.routes.changed(failed=[a])  # another replica may serve it
            else:
                if any(q not in self.routes.listed for q in outcome):
                    self.routes.changed()  # the broker has queues the route does not list yet
                found.update(outcome)
        return found, unanswered, asked

    def max_offsets(self, queues: Iterable[MessageQueue], hold_unreachable: bool = False) -> OffsetMap:
        """Each queue's next offset; the min offsets come with them where topic stats answer.

        A broker that does not answer sends the routes to be asked again (as soon as
        ``MIN_ROUTE_REFRESH_S`` allows; anyone but a running stream waits for that): its queues
        are left out if it is no longer registered (the caller waits for them). If it is still
        registered, a running stream (``hold_unreachable``) leaves its queues out too and reads
        the other brokers' (a hung host, a network partition), unless no broker has answered for
        ``retryBudgetMs``; anyone else asks its queues one by one under the retry policy.
        """
        wanted = list(queues)
        stats, unanswered, asked = self._topic_stats(wanted)
        self._known_min = {q: s.min_offset for q, s in stats.items()}
        self.last_stored = {
            **self.last_stored,
            **{q: (s.max_offset, s.last_stored_ms) for q, s in stats.items() if s.last_stored_ms},
        }
        latest = {q: s.max_offset for q, s in stats.items()}
        if unanswered:
            # A stream holds what a route from before the failure still lists (see
            # ``hold_unreachable``); anyone else waits for a route asked after it.
            routed = (
                self.queues(missing_ok=True, suspect=True)
                if hold_unreachable
                else self.routes.queues_since(self.routes.marks())
            )
            wanted = [q for q in wanted if q in routed]
        if hold_unreachable:
            wanted = self.routes.hold_unreachable(wanted, {q.broker_name for q in stats}, unanswered, asked)
        else:
            latest.update(self._served_again([q for q in wanted if q not in latest], unanswered))
        rest = [q for q in wanted if q not in latest]
        latest.update(self._queue_offsets(rest, calls.max_offset, attrgetter("max_offset"), "max offsets"))
        return {q: latest[q] for q in wanted}

    def _served_again(
        self, unknown: list[MessageQueue], unanswered: Mapping[str, RocketMQError]
    ) -> dict[MessageQueue, int]:
        """Of queues whose max offset is not known yet, those no replica serves now or that a
        slave serves since the routes were asked again (their master died meanwhile): their max
        offsets from topic stats, once a replica serves them, as a slave without the topic
        answers a max offset of 0. A read that cannot hold them (a batch) waits for a master or a
        slave that caught up, under the retry policy, then fails naming the broker and the
        replicas tried; it never plans them as empty."""
        from_slaves = self.read_from_slaves()
        waiting = [
            q
            for q in unknown
            if q.broker_name in from_slaves or isinstance(unanswered.get(q.broker_name), NoReplicaError)
        ]
        latest: dict[MessageQueue, int] = {}

        def attempt() -> None:
            routed = self.queues(missing_ok=True)  # asked again after a failure (``changed``)
            ask = [q for q in waiting if q not in latest]
            stats, still, _ = self._topic_stats([q for q in ask if q in routed])
            self._known_min.update({q: s.min_offset for q, s in stats.items()})
            latest.update({q: s.max_offset for q, s in stats.items() if q in waiting})
            for queue in ask:
                if queue not in routed:  # the slave left too: no replica of it is registered
                    still.setdefault(queue.broker_name, NoReplicaError(queue.broker_name, []))
            missing = sorted({q.broker_name for q in ask if q not in latest and q.broker_name in still})
            if missing:
                raise still[missing[0]]

        if waiting:  # the broker is known, so not the short start policy: its whole budget
            self.options.retry.call(attempt, "max offsets")
        return latest

    def min_offsets(self, queues: Iterable[MessageQueue]) -> OffsetMap:
        """Each queue's first offset: from the last topic stats where they gave it, else from
        topic stats asked now, else queue by queue."""
        wanted = list(queues)
        rest = [q for q in wanted if q not in self._known_min]
        if rest:
            stats, _, _ = self._topic_stats(rest)
            self._known_min.update({q: s.min_offset for q, s in stats.items()})
            rest = [q for q in rest if q not in self._known_min]
        found = {
            **self._known_min,
            **self._queue_offsets(rest, calls.min_offset, attrgetter("min_offset"), "min offsets"),
        }
        return {q: found[q] for q in wanted}

    def offsets_for_time(self, queues: Iterable[MessageQueue], timestamp_ms: int) -> OffsetMap:
        """Per queue, the first offset stored at or after the time (the max offset if none is).

        A 5.x broker answers just that (-1 from a RocksDB consume queue with no entry left is read as its min
        offset, the file store's answer). A 4.x broker answers only near it; store times around its answer settle
        the offset (``time_search``): a pull of three messages per queue, more rounds where many share a store time.
        """
        answers = self._per_queue(
            queues, lambda q: calls.search_offset(q, timestamp_ms, Boundary.LOWER), "offsets by time"
        )
        found = {q: answer.offset for q, answer in answers.items() if not answer.nearest}
        near = {q: answer.offset for q, answer in answers.items() if answer.nearest}
        found.update(time_search.first_at_or_after(near, timestamp_ms, self._pull_round))
        found.update(self.min_offsets([q for q, offset in found.items() if offset < 0]))
        return {q: found[q] for q in answers}

    def stored_as(self, offsets: Mapping[MessageQueue, int]) -> dict[MessageQueue, int]:
        """Per queue, the offset its message at the given one says it was stored as: its index
        and its messages agree where the two are equal (or an inner batch's starts below)."""
        group = self.options.pull_group
        answers = self._per_queue(
            offsets, lambda q: calls.pull(calls.PullSpec(q, group), offsets[q], 1), "the index's messages"
        )
        return {
            q: first_stored_as(a.body, offsets[q])
            for q, a in answers.items()
            if a.status is PullStatus.FOUND and a.body
        }

    def _pull_round(self, probes: Mapping[MessageQueue, time_search.Probe]) -> dict[MessageQueue, PullResult]:
        group = self.options.pull_group
        return self._per_queue(
            probes,
            lambda q: calls.pull(calls.PullSpec(q, group), probes[q].offset, probes[q].max_messages),
            "store times",
        )

    def stored_offsets(self, queues: Iterable[MessageQueue], group: str) -> dict[MessageQueue, int | None]:
        """The group's stored offset per queue; None where it has stored none.

        Where a 4.x broker answers 0, which may mean either, its whole offset table says which.
        """
        answers = self._per_queue(queues, lambda q: calls.query_consumer_offset(q, group), "stored offsets")
        stored = {q: answer.offset for q, answer in answers.items()}
        unsure = [q for q, answer in answers.items() if answer.unsure]
        brokers = sorted({(q.broker_name, self.address(q)) for q in unsure})
        tables = self._gather(brokers, lambda b: (b[1], calls.all_consumer_offsets(b[0])), "consumer offsets")
        for queue in unsure:
            entries = tables[(queue.broker_name, self.address(queue))].get(f"{queue.topic}@{group}", {})
            stored[queue] = entries.get(queue.queue_id)
        return stored

    def group_offsets(self, queues: Iterable[MessageQueue], group: str) -> dict[MessageQueue, int]:
        """The group's stored offsets, as cheaply as the brokers allow: one answer per topic and
        broker where they serve consume stats, else one per queue. One attempt: a queue whose
        broker does not answer now is left out."""
        routes = self.routes.masters()
        wanted = [q for q in queues if q in routes]
        by_table = sorted(
            {(q.topic, q.broker_name, routes[q]) for q in wanted if routes[q] not in self._no_group_stats}
        )
        found: dict[MessageQueue, int] = {}
        outcomes = (
            self.client.call_many([(a, calls.group_offsets(topic, group, broker)) for topic, broker, a in by_table])
            if by_table
            else []
        )
        for (_, _, address), outcome in zip(by_table, outcomes):
            if isinstance(outcome, ProtocolError) or no_stats(outcome, self.measure.warned_group(group)):
                self._no_group_stats.add(address)  # from now on, queue by queue
            elif not isinstance(outcome, RocketMQError):
                found.update(outcome)
        rest = [q for q in wanted if routes[q] in self._no_group_stats]
        answers = (
            self.client.call_many([(routes[q], calls.query_consumer_offset(q, group)) for q in rest]) if rest else []
        )
        found.update(
            {
                q: a.offset
                for q, a in zip(rest, answers)
                if not isinstance(a, RocketMQError) and a.offset is not None and not a.unsure
            }
        )
        return {q: found[q] for q in wanted if q in found}

    def commit(self, offsets: Mapping[MessageQueue, int]) -> CommitResult:
        """Store each queue's next offset for the group (``commits.py``); queues not routed now
        are left to a later call."""
        return self.commits.commit(offsets)
