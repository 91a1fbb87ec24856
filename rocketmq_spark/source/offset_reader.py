"""Offsets from the brokers, on the driver: routes, min/max offsets, stored offsets, search by time.

The micro-batch and batch readers ask this module every question that needs a broker; it decides
no policy (where a query starts is ``starts.py``, what counts as data loss ``planning.py``).

What it costs grows with brokers, not queues, wherever RocketMQ allows:
- routes come from the name server at most every ``ROUTE_REFRESH_S``, and again at once after a
  broker request failed (a broker that went away) or a broker listed queues the route lacks;
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
from typing import TypeVar

from rocketmq_spark.config.cluster import TLS_TRUST_CERT_PATH, TLS_VERIFY
from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting import calls
from rocketmq_spark.remoting.calls import Boundary, Call, PullResult, QueueOffsets
from rocketmq_spark.remoting.client import RocketMQClient
from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.errors import (
    BrokerResponseError, BrokersUnreachableError, ProtocolError, QueueNotRoutedError,
    RocketMQError, TopicNotFoundError,
)
from rocketmq_spark.source import time_search
from rocketmq_spark.source.commits import CommitResult, GroupCommits
from rocketmq_spark.source.offsets import OffsetMap
from rocketmq_spark.source.options import STARTING_OFFSETS, TOPIC, SourceOptions

log = logging.getLogger(__name__)

T = TypeVar("T")
K = TypeVar("K")

# How long a topic's route is trusted before the name server is asked again. It delays when a new
# queue starts being read (from where ``starts.first_seen_offsets`` says, so nothing is missed) and
# when a queue hidden by a lower readQueueNums stops being planned (docs/offsets.md).
ROUTE_REFRESH_S = 10.0
# Answers to GET_TOPIC_STATS_INFO that mean "ask queue by queue": a proxy does not serve it, and
# an ACL may allow the per-queue requests only.
_NO_TOPIC_STATS = frozenset({ResponseCode.REQUEST_CODE_NOT_SUPPORTED, ResponseCode.NO_PERMISSION})
# Logged once per query, by the driver (each query opens one OffsetReader; executors open none).
UNVERIFIED_TLS_WARNING = (f"{TLS_VERIFY}=false: server certificates are not verified, so any server at the "
                          "name-server and broker addresses is trusted; use it for tests only, and give the "
                          f"servers' CA in {TLS_TRUST_CERT_PATH} instead")


class OffsetReader:
    """Broker-side facts about the queues of the source's topics."""

    def __init__(self, options: SourceOptions, client: RocketMQClient | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        if options.client.tls and not options.client.tls_verify:
            log.warning(UNVERIFIED_TLS_WARNING)
        self.client = client or RocketMQClient(options.client)
        # The short policy until the query runs (see ``running``): a wrong address or port fails
        # its start in seconds.
        self.retry = options.start_retry
        self._clock = clock
        self._addresses: dict[MessageQueue, str] = {}
        self._routes_at: float | None = None
        self._no_topic_stats: set[str] = set()  # broker addresses that do not answer topic stats
        self._no_group_stats: set[str] = set()  # nor consume stats
        self._known_min: OffsetMap = {}  # min offsets the last topic stats gave
        self._opened: dict[str, int] = {}  # connections opened per broker address, at the last look
        self.commits = GroupCommits(self.client, options, self.reachable_routes, self._routes_changed)
        # Brokers that are registered but did not answer a running stream, since when (clock time):
        # their queues are held, as those of a broker that went away are (see ``max_offsets``).
        self.unreachable: dict[str, float] = {}

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------------ routes

    def queues(self, missing_ok: bool = False, fresh: bool = False) -> dict[MessageQueue, str]:
        """Every readable queue of the source's topics, with the address to send its requests to.

        Routes younger than ``ROUTE_REFRESH_S`` are reused unless ``fresh``. A topic the name
        server does not know is a configuration error when a query starts; once it runs
        (``missing_ok``) it means that no broker serving the topic is registered right now.
        """
        now = self._clock()
        if not fresh and self._routes_at is not None and now - self._routes_at < ROUTE_REFRESH_S:
            return dict(self._addresses)
        found: dict[MessageQueue, str] = {}
        for topic in self.options.topics:
            try:
                route = self.retry.call(lambda: self.client.topic_route(topic), f"route of {topic}")
            except TopicNotFoundError as err:
                if missing_ok:
                    continue
                raise ConfigurationError(
                    TOPIC, f"topic '{self.options.display_topic(topic)}' does not exist on "
                    f"{';'.join(self.options.client.name_servers)}",
                    "Create it, or check the topic name and the nameServer option") from err
            for queue in route.readable_queues():
                address = route.master_address(queue.broker_name)
                if address is not None:
                    found[queue] = address
        self._addresses = found  # the routes as they are now: a stopped broker drops out
        self._routes_at = now
        return dict(found)

    def running(self) -> None:
        """The query runs: retry failures for its budget (retryBudgetMs) from now on, as their
        likely cause is now a broker restarting, not a wrong address."""
        self.retry = self.options.retry

    def _routes_changed(self) -> None:
        """Ask the name server again next time: a broker failed or knows queues the route lacks."""
        self._routes_at = None

    def unavailable(self, absent: Iterable[MessageQueue]) -> set[MessageQueue]:
        """Of queues missing from the routes, those whose broker is not registered right now.

        A stopped or restarting broker drops out of the routes; its queues come back with it, so
        they are waited for, not lost; so are those of a registered broker that does not answer
        (``max_offsets``). A queue whose broker is up but no longer lists it is gone.
        """
        queues = set(absent)
        if not queues:
            return set()
        live = self.retry.call(self.client.live_brokers, "cluster info")
        if live is None:
            return queues
        # A broker that registered again between the routes and this answer lists its queues
        # again by now: only a queue still missing from fresh routes is gone.
        back = self.queues(missing_ok=True, fresh=True)
        return {q for q in queues if q.broker_name not in live or q in back or q.broker_name in self.unreachable}

    def broker_addresses(self) -> set[str]:
        """Where the queues of the last routes are served (a broker each, or a proxy): safe to ask
        from another thread, as the routes are replaced whole, never changed in place."""
        return set(self._addresses.values())

    def reconnected(self) -> frozenset[str]:
        """Brokers this reader has reached over a new connection since it last asked (the first
        connection does not count).

        A broker that crashed (SIGKILL, power loss) and came back has lost the offsets stored in
        its last seconds: it writes them to disk every few seconds (flushConsumerOffsetInterval).
        Its connection breaking is how the driver can tell, so the caller stores them again; and
        since it may have lost the group's offset tables too, their first commits go first again.
        """
        again = set()
        for broker, address in {q.broker_name: a for q, a in self._addresses.items()}.items():
            count = self.client.connections_opened(address)
            if self._opened.setdefault(address, count) != count:
                again.add(broker)
                self._opened[address] = count
        self.commits.forget(again)
        return frozenset(again)

    def reachable_routes(self) -> dict[MessageQueue, str]:
        """The routes without the queues of brokers that did not answer last time: requests that
        can wait (commits, reset checks) are not sent to them until they answer again."""
        return {q: a for q, a in self._addresses.items() if q.broker_name not in self.unreachable}

    def planned_address(self, queue: MessageQueue) -> str:
        """The address of a queue that a batch in Spark's offset log reads. The batch must read
        the same ranges whenever it runs, so a broker that is away now is waited for, for
        ``retryBudgetMs``, with routes asked again while waiting."""
        def routed() -> str:
            if queue not in self._addresses:
                self.queues(missing_ok=True, fresh=True)
            if queue not in self._addresses:
                raise QueueNotRoutedError(queue.broker_name, str(queue))
            return self._addresses[queue]

        return self.options.retry.call(routed, f"route of {queue}")

    def address(self, queue: MessageQueue) -> str:
        if queue not in self._addresses:
            self.queues(fresh=True)
        if queue not in self._addresses:
            raise ConfigurationError(STARTING_OFFSETS, f"queue {queue} does not exist",
                                     "Name only queues the topic's route lists")
        return self._addresses[queue]

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
                    values[key] = outcome  # type: ignore[assignment]
            todo = failed
            if first is not None:
                self._routes_changed()
                raise first

        if todo:
            self.retry.call(attempt, what)
        return values

    def _per_queue(self, queues: Iterable[MessageQueue], call: Callable[[MessageQueue], Call[T]],
                   what: str) -> dict[MessageQueue, T]:
        return self._gather(queues, lambda q: (self.address(q), call(q)), what)

    # ----------------------------------------------------------------- offsets

    def _topic_stats(self, queues: list[MessageQueue]) -> tuple[dict[MessageQueue, QueueOffsets],
                                                                 dict[str, RocketMQError]]:
        """Min and max offsets of the queues' topics on each broker that answers topic stats, and
        the brokers that failed in a way that may mean they went away or hang, with why."""
        address = {q: self.address(q) for q in queues}
        stats_of = sorted({(q.topic, q.broker_name, address[q]) for q in queues
                           if address[q] not in self._no_topic_stats})
        outcomes = self.client.call_many([(a, calls.topic_stats(topic, broker))
                                          for topic, broker, a in stats_of]) if stats_of else []
        found: dict[MessageQueue, QueueOffsets] = {}
        unanswered: dict[str, RocketMQError] = {}
        for (_, broker, a), outcome in zip(stats_of, outcomes):
            if isinstance(outcome, ProtocolError) or (
                    isinstance(outcome, BrokerResponseError) and outcome.code in _NO_TOPIC_STATS):
                self._no_topic_stats.add(a)  # from now on, queue by queue
            elif isinstance(outcome, RocketMQError):
                # Retriable: the broker may have gone; else (a topic deleted on the broker, say)
                # its queues' own answers say where they stand, as they did before stats.
                if outcome.retriable:
                    unanswered[broker] = outcome
            else:
                if any(q not in self._addresses for q in outcome):
                    self._routes_changed()  # the broker has queues the route does not list yet
                found.update(outcome)
        return found, unanswered

    def max_offsets(self, queues: Iterable[MessageQueue], hold_unreachable: bool = False) -> OffsetMap:
        """Each queue's next offset; the min offsets come with them where topic stats answer.

        A broker that does not answer sends the routes to be asked again at once: its queues are
        left out if it is no longer registered (the caller waits for them). If it is still
        registered, a running stream (``hold_unreachable``) leaves its queues out too and reads
        the other brokers' (a hung host, a network partition), unless no broker has answered for
        ``retryBudgetMs``; anyone else asks its queues one by one under the retry policy.
        """
        wanted = list(queues)
        stats, unanswered = self._topic_stats(wanted)
        self._known_min = {q: s.min_offset for q, s in stats.items()}
        latest = {q: s.max_offset for q, s in stats.items()}
        if unanswered:
            routed = self.queues(missing_ok=True, fresh=True)
            wanted = [q for q in wanted if q in routed]
        if hold_unreachable:
            wanted = self._hold_unreachable(wanted, {q.broker_name for q in stats}, unanswered)
        rest = [q for q in wanted if q not in latest]
        latest.update(self._per_queue(rest, calls.max_offset, "max offsets"))
        return {q: latest[q] for q in wanted}

    def _hold_unreachable(self, wanted: list[MessageQueue], answered: set[str],
                          unanswered: Mapping[str, RocketMQError]) -> list[MessageQueue]:
        """The queues to ask one by one: not those of registered brokers that did not answer."""
        now = self._clock()
        for broker in answered:
            self.unreachable.pop(broker, None)
        for broker in unanswered:
            self.unreachable.setdefault(broker, now)
        held = [q for q in wanted if q.broker_name in unanswered]
        rest = [q for q in wanted if q.broker_name not in unanswered]
        budget = self.options.retry.budget_s
        if held and not answered and not rest and all(now - t >= budget for t in self.unreachable.values()):
            brokers = sorted({q.broker_name for q in held})
            raise BrokersUnreachableError(brokers, budget, unanswered[brokers[0]])
        return rest

    def min_offsets(self, queues: Iterable[MessageQueue]) -> OffsetMap:
        """Each queue's first offset: from the last topic stats where they gave it, else from
        topic stats asked now, else queue by queue."""
        wanted = list(queues)
        rest = [q for q in wanted if q not in self._known_min]
        if rest:
            stats, _ = self._topic_stats(rest)
            self._known_min.update({q: s.min_offset for q, s in stats.items()})
            rest = [q for q in rest if q not in self._known_min]
        found = {**self._known_min, **self._per_queue(rest, calls.min_offset, "min offsets")}
        return {q: found[q] for q in wanted}

    def offsets_for_time(self, queues: Iterable[MessageQueue], timestamp_ms: int) -> OffsetMap:
        """Per queue, the first offset stored at or after the time (the max offset if none is).

        A 5.x broker answers just that. A 4.x broker answers only near it, and the store times of
        the messages around its answer settle the offset (``time_search``): a pull of three
        messages per queue in the usual case, a few rounds more where many share a store time.
        """
        answers = self._per_queue(queues, lambda q: calls.search_offset(q, timestamp_ms, Boundary.LOWER),
                                  "offsets by time")
        found = {q: answer.offset for q, answer in answers.items() if not answer.nearest}
        near = {q: answer.offset for q, answer in answers.items() if answer.nearest}
        if near:
            found.update(time_search.first_at_or_after(near, timestamp_ms, self._pull_round))
        return {q: found[q] for q in answers}

    def _pull_round(self, probes: Mapping[MessageQueue, time_search.Probe]) -> dict[MessageQueue, PullResult]:
        group = self.options.pull_group
        return self._per_queue(probes, lambda q: calls.pull(q, probes[q].offset, group=group,
                                                            max_messages=probes[q].max_messages), "store times")

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
        routes = self.reachable_routes()
        wanted = [q for q in queues if q in routes]
        by_table = sorted({(q.topic, q.broker_name, routes[q]) for q in wanted
                           if routes[q] not in self._no_group_stats})
        found: dict[MessageQueue, int] = {}
        outcomes = self.client.call_many([(a, calls.group_offsets(topic, group, broker))
                                          for topic, broker, a in by_table]) if by_table else []
        for (_, _, address), outcome in zip(by_table, outcomes):
            if isinstance(outcome, ProtocolError) or (
                    isinstance(outcome, BrokerResponseError) and outcome.code in _NO_TOPIC_STATS):
                self._no_group_stats.add(address)  # from now on, queue by queue
            elif not isinstance(outcome, RocketMQError):
                found.update(outcome)
        rest = [q for q in wanted if routes[q] in self._no_group_stats]
        answers = self.client.call_many([(routes[q], calls.query_consumer_offset(q, group))
                                         for q in rest]) if rest else []
        found.update({q: a.offset for q, a in zip(rest, answers) if not isinstance(a, RocketMQError) and a.offset is not None and not a.unsure})
        return {q: found[q] for q in wanted if q in found}

    def commit(self, offsets: Mapping[MessageQueue, int]) -> CommitResult:
        """Store each queue's next offset for the group (``commits.py``); queues not routed now
        are left to a later call."""
        return self.commits.commit(offsets)
