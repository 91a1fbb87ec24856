"""The driver's view of where the source's queues are served: routes, and which brokers answer.

Built on ``remoting.replicas`` (which replica of a broker name to ask, shared with the executors):
this module adds what only the driver needs. Per queue the address its offsets are asked at (the
master, or a replica that serves reads while no master is listed), per queue the master's address
where the group's offsets are stored (none while a broker name has no master: those commits wait),
brokers that are registered but do not answer, and brokers reached at a new address or over a new
connection (a restart, an election), whose stored offsets must be written again.

Routes come from the name server at most every ``ROUTE_REFRESH_S``, and again after a broker
request failed (a broker that went away) or a broker listed queues the route lacks, as soon as
``MIN_ROUTE_REFRESH_S`` allows: ``remoting.replicas`` alone decides when the name server is asked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.client import RocketMQClient
from rocketmq_spark.remoting.errors import BrokersUnreachableError, RocketMQError, TopicNotFoundError
from rocketmq_spark.remoting.replicas import MIN_ROUTE_REFRESH_S, ROUTE_REFRESH_S, Replicas
from rocketmq_spark.remoting.retry import Retry

__all__ = ["ROUTE_REFRESH_S", "QueueRoutes"]


class UnroutedQueueError(RocketMQError):
    """A queue asked about that the topic's route does not list (any more). It came from an
    earlier route, so its broker may only be registering again (a name server restarted knows
    no topic until the brokers' next registration): a retry waits for it within its budget."""

    retriable = True


class RoutesNotAskedError(RocketMQError):
    """Routes asked after some moment are wanted, and the name server was not asked since: it is
    asked at most every ``MIN_ROUTE_REFRESH_S`` per topic, so a pause gets them."""

    retriable = True

    def __init__(self, topics: list[str]) -> None:
        super().__init__(
            f"the routes of {', '.join(topics)} were not asked again yet (at most every {MIN_ROUTE_REFRESH_S:g} s)"
        )


class UnknownTopicError(RocketMQError):
    """A topic of the query that the name server does not know; ``topic`` names it."""

    def __init__(self, topic: str, cause: TopicNotFoundError) -> None:
        self.topic = topic
        super().__init__(f"topic {topic} is not known to the name server: {cause}")


class QueueRoutes:
    """Routes of the source's topics as the driver uses them, and the brokers' liveness."""

    def __init__(
        self,
        topics: Iterable[str],
        client: RocketMQClient,
        replicas: Replicas,
        retry: Retry,
        budget_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topics = tuple(topics)
        self.client = client
        self.replicas = replicas
        self.retry = retry  # the start's short policy; the offset reader switches it when the query runs
        self._budget_s = budget_s  # how long no registered broker may answer before the query fails
        self._clock = clock
        self._addresses: dict[MessageQueue, str] = {}  # where each queue's offsets are asked
        self._masters: dict[str, str] = {}  # broker name -> its master's address, where one is listed
        # Per watcher (storing offsets, the data-loss check), broker name -> (master address,
        # connections) at its last look: each watcher sees every change once.
        self._seen: dict[str, dict[str, tuple[str, int]]] = {}
        # Brokers that are registered but did not answer a running stream, with the address that
        # did not: their queues are held, as those of a broker that went away are (see
        # ``hold_unreachable``); since when, the memory of failed addresses tells.
        self._held: dict[str, str] = {}

    def queues(self, missing_ok: bool = False, suspect: bool = False) -> dict[MessageQueue, str]:
        """Every readable queue of the source's topics, with the address to ask its offsets at.

        The routes are those ``Replicas`` holds, asked again by its one rule (``suspect``: the
        caller doubts them, as after a failure; the name server is still asked at most every
        ``MIN_ROUTE_REFRESH_S``). A topic the name server does not know raises
        ``UnknownTopicError`` (a configuration error when a query starts, which the caller, who
        knows the options, says); once a query runs (``missing_ok``) it means that no broker
        serving the topic is registered right now.
        """
        found: dict[MessageQueue, str] = {}
        masters: dict[str, str] = {}
        for topic in self.topics:
            try:
                route = self.retry.call(partial(self.replicas.route, topic, suspect), f"route of {topic}")
            except TopicNotFoundError as err:
                if missing_ok:
                    continue
                raise UnknownTopicError(topic, err) from err
            masters.update({name: b.master_address for name, b in route.brokers.items() if b.master_address})
            first: dict[str, str | None] = {}  # broker name -> the replica its offsets are asked at
            for queue in route.readable_queues():
                if queue.broker_name not in first:
                    replicas = self.replicas.read_replicas(topic, queue.broker_name)
                    first[queue.broker_name] = replicas[0][1] if replicas else None
                address = first[queue.broker_name]
                if address is not None:
                    found[queue] = address
        self._addresses, self._masters = found, masters  # replaced whole: other threads read them
        return dict(found)

    def marks(self) -> dict[str, int]:
        """Per topic, how many times its route was asked so far: taken when a failure is seen,
        for ``queues_since``."""
        return {topic: self.replicas.asks(topic) for topic in self.topics}

    def queues_since(self, marks: Mapping[str, int]) -> dict[MessageQueue, str]:
        """``queues(missing_ok=True)`` from routes asked after ``marks`` were taken, waiting for
        ``Replicas``' limit through the retry policy's pauses: a route from before a failure may
        still list a broker that went away, and a read that cannot hold its queues (a batch)
        must not plan them from it. Once the policy gives up, the routes held are the answer."""
        attempts = self.retry.start()
        while True:
            found = self.queues(missing_ok=True, suspect=True)
            late = sorted(t for t, mark in marks.items() if not self.replicas.asked_after(t, mark))
            if not late or not attempts.again(RoutesNotAskedError(late)):
                return found
            attempts.pause()

    @property
    def listed(self) -> Mapping[MessageQueue, str]:
        """The last routes, as they are: not asked again however old."""
        return self._addresses

    def changed(self, failed: Iterable[str] = ()) -> None:
        """Ask the name server again as soon as ``MIN_ROUTE_REFRESH_S`` allows: a broker failed
        (its ``failed`` addresses are asked last while another replica is listed) or knows queues
        the route lacks."""
        for address in failed:
            self.replicas.failed(address)
        self.replicas.suspect()

    def address(self, queue: MessageQueue) -> str:
        """Where the queue's offsets are asked. A queue no route lists raises ``UnroutedQueueError``:
        the queues users name are checked against the routes before any is asked about
        (``starts.check_queues_exist``), so this one came from a route that changed since."""
        if queue not in self._addresses:
            self.queues(missing_ok=True, suspect=True)
        if queue not in self._addresses:
            raise UnroutedQueueError(
                f"queue {queue} is not in its topic's route (its broker is not registered now, or the route changed)"
            )
        return self._addresses[queue]

    def masters(self) -> dict[MessageQueue, str]:
        """The queues whose broker name has a master that answered last time, with its address:
        where the group's offsets are stored and read back, and the group's members listed."""
        return {
            q: self._masters[q.broker_name]
            for q in self._addresses
            if q.broker_name in self._masters and q.broker_name not in self._held
        }

    def read_from_slaves(self) -> frozenset[str]:
        """Broker names whose queues the last routes have asked at a slave: none is listed as
        master, or the master listed failed and is passed over (a route from before its death).
        A slave may lack the master's last messages, so its answers never count as a queue gone
        back, and it is the new master, once listed, that a failover's loss is told against."""
        return frozenset(q.broker_name for q, a in self._addresses.items() if self._masters.get(q.broker_name) != a)

    def broker_addresses(self) -> set[str]:
        """The masters of the last routes (a broker each, or a proxy): safe to ask from another
        thread, as the routes are replaced whole, never changed in place."""
        return set(self._masters.values())

    def unavailable(self, absent: Iterable[MessageQueue]) -> set[MessageQueue]:
        """Of queues missing from the routes, those whose broker is not registered right now.

        A stopped or restarting broker drops out of the routes; its queues come back with it, so
        they are waited for, not lost; so are those of a registered broker that does not answer.
        A queue whose broker is up but no longer lists it is gone, once a route asked after the
        live brokers' answer says so: a broker that registered again between an older route and
        that answer lists its queues again by now. The route is asked again only as the one rule
        of ``Replicas`` allows (at most every ``MIN_ROUTE_REFRESH_S``); until one asked after the
        answer comes, such a queue is waited for (a trigger later), as calling it gone would lose
        its unread messages, and waiting out the limit here would hold up the whole trigger.
        """
        queues = set(absent)
        if not queues:
            return set()
        live = self.retry.call(self.client.live_brokers, "cluster info")
        if live is None:
            return queues
        marks = {topic: self.replicas.asks(topic) for topic in {q.topic for q in queues}}
        back = self.queues(missing_ok=True, suspect=True)
        return {
            q
            for q in queues
            if q.broker_name not in live
            or q in back
            or q.broker_name in self._held
            or not self.replicas.asked_after(q.topic, marks[q.topic])
        }

    def take_new_masters(self, watcher: str) -> frozenset[str]:
        """Broker names whose master this driver reaches at a new address (an election, a slave
        promoted, a master back after its slave served) or over a new connection since
        ``watcher`` last took them: each watcher (storing offsets, the data-loss check) takes each
        change once; the first look does not count.

        A broker that crashed (SIGKILL, power loss) and came back has lost the offsets stored in
        its last seconds: it writes them to disk every few seconds (flushConsumerOffsetInterval);
        a new master has only what its replication had copied, and may lack messages too.
        """
        again = set()
        seen = self._seen.setdefault(watcher, {})
        for broker, address in self._masters.items():
            now = (address, self.client.connections_opened(address))
            if seen.setdefault(broker, now) != now:
                again.add(broker)
                seen[broker] = now
        return frozenset(again)

    @property
    def unreachable(self) -> dict[str, float]:
        """Registered brokers that did not answer a running stream, since when (clock time): since
        their address first failed, as the process's memory of failed addresses holds it."""
        now = self._clock()
        since = {broker: self.replicas.outages.down_since(a) for broker, a in self._held.items()}
        return {broker: now if t is None else t for broker, t in since.items()}

    def hold_unreachable(
        self,
        wanted: list[MessageQueue],
        answered: set[str],
        unanswered: Mapping[str, RocketMQError],
        asked: Mapping[str, str],
    ) -> list[MessageQueue]:
        """Of ``wanted``, the queues to ask one by one: not those of registered brokers that did not
        answer, unless no broker has answered for ``retryBudgetMs`` (then the query fails).
        ``asked``: per broker name, the address it was asked at."""
        now = self._clock()
        for broker in answered:
            self.replicas.outages.answered(asked[broker], now)
            self._held.pop(broker, None)
        for broker in unanswered:
            address = self._held.setdefault(broker, asked[broker])
            self.replicas.outages.failed(address, now)
        held = [q for q in wanted if q.broker_name in unanswered]
        rest = [q for q in wanted if q.broker_name not in unanswered]
        budget = self._budget_s
        if held and not answered and not rest and all(now - t >= budget for t in self.unreachable.values()):
            brokers = sorted({q.broker_name for q in held})
            raise BrokersUnreachableError(brokers, budget, unanswered[brokers[0]])
        return rest
