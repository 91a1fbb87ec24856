"""Which replica of a broker name to ask, as RocketMQ's own clients choose, and how that changes.

A broker name is served by a master (brokerId 0 in the routes) and any number of slaves (ids 1
and up), or by a DLedger group or a controller-mode group whose master moves between hosts. The
routes list who serves now; a reader pulls from:

1. the replica the broker suggested in its last pull answer (``suggestWhichBrokerId``: a slave
   while the master's data has left memory and slave reads are on), if it is listed;
2. else the master, if it is listed;
3. else a slave, lowest id first (4.9 slaves always serve pulls; 5.x slaves only with
   ``slaveReadEnable``, and otherwise answer "[REJECTREQUEST]system busy", which means "ask
   another replica").

An address that failed to answer or refused is passed over for ``PASSED_OVER_S`` while another
replica is listed, and the routes are asked again (at most every ``MIN_ROUTE_REFRESH_S`` per
topic), so a new master elected at another address is found within a second of being
registered. What a replica said as a slave (it refuses reads, is behind, lacks the topic) no
longer counts once the routes list it as the master: a follower just elected is read at once.
Offsets are the same on every replica, so any replica serves a planned range.

What a slave says is never a verdict on the data: it may not have copied a topic (it copies its
master's topics every 10 s on 4.9, once a minute on 5.x, and not at all while the master is down)
or the newest offsets yet. A slave's "no such topic" (``not_copied_yet``) or an answer behind a
planned offset passes it over (``failed(..., as_slave=True)``) and the request waits for the
master or for the slave to catch up; only a master's word says data or a topic is gone.

Writes and the group's stored offsets go only to a master (``master``). An acting master (a slave
that 5.x name servers list as brokerId 0 while ``enableActingMaster`` is on and the master is
down) is taken for the master, as the Java client does: the routes are all it sees.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from rocketmq_spark.remoting.errors import NoReplicaError, RocketMQError, TopicNotFoundError
from rocketmq_spark.remoting.outages import Outages
from rocketmq_spark.remoting.route import MASTER_BROKER_ID, TopicRoute

# How long routes are trusted before the name server is asked again, when nothing failed.
ROUTE_REFRESH_S = 10.0
# The least time between two route requests of one topic that a failure sends: a broker that
# stays down must not turn every pull into a name-server request.
MIN_ROUTE_REFRESH_S = 1.0
# How long an address that failed or refused is asked only when no other replica is listed.
PASSED_OVER_S = 10.0
# The remark a 5.x broker's remoting layer sends with code 2 (SYSTEM_BUSY) when its processor
# rejects the request: on a slave without slaveReadEnable, every pull.
REJECTED_REMARK = "[REJECTREQUEST]"


def read_order(
    addresses: Mapping[int, str], suggested: int | None = None, passed_over: Collection[str] = ()
) -> list[tuple[int, str]]:
    """The replicas of one broker name to pull from, as (broker id, address), best first: the
    suggested replica, the master, the slaves by id; those passed over go last, in the same order."""
    ids = sorted(addresses, key=lambda i: (i != suggested, i != MASTER_BROKER_ID, i))
    ordered = [(i, addresses[i]) for i in ids]
    return [r for r in ordered if r[1] not in passed_over] + [r for r in ordered if r[1] in passed_over]


def rejected(error: RocketMQError) -> bool:
    """Whether a broker refused a request because of what it is (a slave that does not serve
    reads), not because it is busy: the request goes to another replica, not back after a pause."""
    return REJECTED_REMARK in str(error)


def not_copied_yet(error: RocketMQError, from_slave: bool) -> bool:
    """Whether ``error`` only says a slave has not copied the topic yet (see the module's rules),
    not that the topic is gone: pulls and the driver's offset questions alike wait on it."""
    return from_slave and isinstance(error, TopicNotFoundError)


def _again(missing: TopicNotFoundError) -> TopicNotFoundError:
    """The name server's "no such topic" once more, as a new error: one raised in several threads
    would gather each one's traceback."""
    return TopicNotFoundError(missing.code, missing.remark, request_code=missing.request_code, address=missing.address)


@dataclass
class _Topic:
    route: TopicRoute | None = None
    asked_at: float | None = None  # when the name server was last asked
    stale: bool = False  # a failure since then: ask again as soon as MIN_ROUTE_REFRESH_S allows
    asks: int = 0  # how many times the name server was asked, the one under way included
    held: int = 0  # which of those asks gave ``route``: an older answer never replaces a newer one
    missing: TopicNotFoundError | None = None  # the last answer, when it was "no such topic"

    def due(self, now: float, suspect: bool) -> bool:
        """The one refresh rule: ask when it is older than ``ROUTE_REFRESH_S``, or when it is
        suspect (a failure, a caller's doubt, a topic not found) and at least
        ``MIN_ROUTE_REFRESH_S`` old. The limit wins over a caller's doubt: a broker that stays
        down fails every request, and each would otherwise be a name-server request too."""
        if self.asked_at is None or (self.route is None and self.missing is None):
            return True  # no answer to reuse
        age = now - self.asked_at
        doubted = suspect or self.stale or self.route is None
        return age >= ROUTE_REFRESH_S or (doubted and age >= MIN_ROUTE_REFRESH_S)


@dataclass
class Replicas:
    """The routes of the topics a process reads or writes, and the addresses that failed lately
    (``outages``: the process's one memory of them, which its retry policies share).

    Safe to share between threads (one lock); the driver and every task of an executor process
    ask one per client configuration. Whether the name server is asked is decided here alone
    (``_Topic.due``), whatever callers think of the route they hold.
    """

    fetch_route: Callable[[str], TopicRoute]
    clock: Callable[[], float] = time.monotonic
    outages: Outages = field(default_factory=Outages)
    _topics: dict[str, _Topic] = field(default_factory=dict)
    _suggested: dict[tuple[str, str, int], int] = field(default_factory=dict)  # (topic, broker, queue) -> id
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def route(self, topic: str, suspect: bool = False) -> TopicRoute:
        """The topic's route, asked again when older than ``ROUTE_REFRESH_S``, or when it is
        ``suspect`` or a failure was reported since, but then at most every ``MIN_ROUTE_REFRESH_S``:
        within that second the route held is the answer."""
        with self._lock:
            entry = self._topics.setdefault(topic, _Topic())
            now = self.clock()
            if not entry.due(now, suspect):
                entry.stale = entry.stale or suspect  # the doubt is kept: asked once the limit allows
                if entry.route is None:
                    assert entry.missing is not None
                    raise _again(entry.missing)
                return entry.route
            entry.asked_at, entry.stale = now, False
            entry.asks += 1
            ask = entry.asks
        try:
            route = self.fetch_route(topic)
        except TopicNotFoundError as err:
            self._answered(entry, ask, None, err)
            raise
        except Exception:
            with self._lock:
                entry.stale = True  # no answer: what was suspect still is, and is asked after the limit
            raise
        self._answered(entry, ask, route)
        return route

    def _answered(
        self, entry: _Topic, ask: int, route: TopicRoute | None, missing: TopicNotFoundError | None = None
    ) -> None:
        """Keep the name server's answer to ask number ``ask``, unless a later ask's answer came
        first (threads ask at once): what ``asked_after`` tells must hold for the route held."""
        with self._lock:
            if ask >= entry.held:
                entry.route, entry.held, entry.missing = route, ask, missing

    def asks(self, topic: str) -> int:
        """How many times the topic's route was asked so far: a mark taken at some moment, for
        ``asked_after``."""
        with self._lock:
            entry = self._topics.get(topic)
            return 0 if entry is None else entry.asks

    def asked_after(self, topic: str, mark: int) -> bool:
        """Whether the route held now was asked after ``mark`` (``asks`` at that moment) was taken:
        it then tells what the name server knew at that moment, or later."""
        with self._lock:
            entry = self._topics.get(topic)
            return entry is not None and entry.held > mark

    def suspect(self, topic: str | None = None) -> None:
        """The routes of ``topic`` (of every topic if None) may be out of date (a broker lists
        queues they lack, say): asked again as soon as ``MIN_ROUTE_REFRESH_S`` allows."""
        with self._lock:
            self._stale(topic)

    def _stale(self, topic: str | None) -> None:
        for name, entry in self._topics.items():
            if topic is None or name == topic:
                entry.stale = True

    def read_replicas(self, topic: str, broker_name: str, queue_id: int | None = None) -> list[tuple[int, str]]:
        """The replicas to pull a queue of ``broker_name`` from, as (broker id, address), best
        first (see the module's rules); empty while no replica of it is registered, the topic's
        whole route included: a name server that restarted knows no topic until the brokers'
        next registration, up to 30 s later, and a read under way waits that out."""
        try:
            broker = self.route(topic).brokers.get(broker_name)
        except TopicNotFoundError:
            return []
        if broker is None:
            return []
        master = broker.addresses.get(MASTER_BROKER_ID)
        with self._lock:
            suggested = None if queue_id is None else self._suggested.get((topic, broker_name, queue_id))
        now = self.clock()
        passed = {a for a in broker.addresses.values() if self.outages.passed_over(a, now, as_master=a == master)}
        return read_order(broker.addresses, suggested, passed)

    def read_replica(self, topic: str, broker_name: str, queue_id: int | None = None) -> tuple[int, str]:
        """The best replica to pull from, as (broker id, address); raises ``NoReplicaError`` while
        none is registered."""
        replicas = self.read_replicas(topic, broker_name, queue_id)
        if not replicas:
            raise NoReplicaError(broker_name, [])
        return replicas[0]

    def master(self, topic: str, broker_name: str) -> str | None:
        """The master's address (brokerId 0), where writes and stored offsets go; None while the
        broker name has none."""
        broker = self.route(topic).brokers.get(broker_name)
        return None if broker is None else broker.master_address

    def suggest(self, topic: str, broker_name: str, queue_id: int, broker_id: int) -> None:
        """Keep a pull answer's ``suggestWhichBrokerId`` for the queue's next pull."""
        with self._lock:
            self._suggested[(topic, broker_name, queue_id)] = broker_id

    def failed(self, address: str, topic: str | None = None, as_slave: bool = False) -> None:
        """An address did not answer or refused: pass it over for a while, and ask the routes of
        ``topic`` (of every topic if None) again soon, as a new master may be registered elsewhere.
        ``as_slave``: it answered as a slave does (refused reads, behind, without the topic),
        which says nothing of it once the routes list it as the master."""
        now = self.clock()
        self.outages.failed(address, now, pass_over_until=now + PASSED_OVER_S, as_slave=as_slave)
        with self._lock:
            self._stale(topic)
            # A hint that named a replica that just failed is dropped.
            self._suggested = {k: v for k, v in self._suggested.items() if topic is not None and k[0] != topic}

    def passed_over(self, address: str) -> bool:
        """Whether the address failed within ``PASSED_OVER_S`` and has not answered since: the
        sink's unordered rows go to other brokers meanwhile, as the Java producer avoids a broker
        that failed a send. What an address said as a slave does not count here: sends go only to
        the masters the routes list. Asked for every row, so it takes no lock."""
        return self.outages.passed_over(address, self.clock(), as_master=True)
