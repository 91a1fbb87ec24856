"""Where an exactly-once group's records go (``sink/ledger.py``): the group's order of the brokers
keeps each broker's place as others come and go, a broker lost under a write gives its place to
the next, and where a later reader of each broker starts."""

from __future__ import annotations

from typing import Any, TypeVar, cast

import pytest

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.calls import Call
from rocketmq_spark.remoting.codes import PERM_READ, PERM_WRITE, RequestCode
from rocketmq_spark.remoting.errors import ConnectionFailedError
from rocketmq_spark.remoting.outages import Outages
from rocketmq_spark.remoting.replicas import Replicas
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.remoting.route import MASTER_BROKER_ID, BrokerData, QueueData, TopicRoute
from rocketmq_spark.remoting.sending import SendResult, SendStatus
from rocketmq_spark.sink.decision_record import Decision, record_key
from rocketmq_spark.sink.ledger import COPIES, Entries, Ledger, ranked

T = TypeVar("T")

BROKERS = [f"broker-{i}" for i in range(6)]
GROUPS = [f"orders-eo-{i}" for i in range(200)]


def test_each_group_has_its_own_order_and_it_does_not_depend_on_the_order_given() -> None:
    firsts = {ranked(group, BROKERS)[0] for group in GROUPS}
    assert firsts == set(BROKERS), "groups' first brokers spread over all brokers"
    for group in GROUPS[:20]:
        assert ranked(group, BROKERS) == ranked(group, list(reversed(BROKERS)))


def test_a_broker_added_or_lost_moves_no_other_broker() -> None:
    for group in GROUPS:
        order = ranked(group, BROKERS[:5])
        grown = ranked(group, BROKERS)
        assert [b for b in grown if b != BROKERS[5]] == order
        for lost in BROKERS[:5]:
            assert ranked(group, [b for b in BROKERS[:5] if b != lost]) == [b for b in order if b != lost]


def test_a_record_kept_on_the_first_brokers_survives_any_one_of_them_lost() -> None:
    """A reader reads every broker of the route: with ``COPIES`` >= 2, losing any single broker
    still leaves one that holds every record."""
    assert COPIES >= 2
    for group in GROUPS:
        holders = set(ranked(group, BROKERS)[:COPIES])
        assert all(holders - {lost} for lost in BROKERS)


def decision(batch: int) -> Decision:
    return Decision("g", "q", batch, (), {MessageQueue("t", "broker-0", 0): 0})


def test_each_broker_is_settled_at_its_own_oldest_pending_decision() -> None:
    first, second = record_key("g", "q", 1), record_key("g", "q", 2)
    entries = Entries(
        decisions={first: decision(1), second: decision(2)},
        done={first},
        ends={"broker-0": 50, "broker-1": 9, "broker-2": 4},
        first={"broker-0": {first: 40, second: 44}, "broker-1": {first: 7}, "broker-2": {}},
    )
    assert entries.keep_from("broker-0") == 44, "the pending batch's record"
    assert entries.keep_from("broker-1") == 7, "no pending decision there: the last batch's records"
    assert entries.keep_from("broker-2") == 4, "none of the group's records: the end"
    assert entries.keep_from("broker-9") == 0, "a broker not read"
    entries.done.add(second)
    assert entries.keep_from("broker-0") == 44, "the last batch's records stay readable for a replayed commit"


class Brokers:
    """Masters that store what is sent to them, but the ones ``dead`` names, which refuse the
    connection as a killed broker's port does."""

    def __init__(self, names: list[str], dead: set[str]) -> None:
        self.addresses = {name: f"10.0.0.{i}:10911" for i, name in enumerate(names)}
        self.dead = {self.addresses[name] for name in dead}
        self.stored: dict[str, int] = {}  # broker name -> records it holds
        self.route = TopicRoute(
            "records",
            tuple(QueueData(name, 8, 8, PERM_READ | PERM_WRITE) for name in names),
            {name: BrokerData(name, {MASTER_BROKER_ID: address}) for name, address in self.addresses.items()},
        )

    def call(self, address: str, call: Call[T], timeout: float | None = None) -> T:
        if address in self.dead:
            raise ConnectionFailedError("connection refused", address)
        name = next(n for n, a in self.addresses.items() if a == address)
        self.stored[name] = self.stored.get(name, 0) + 1
        return cast(T, SendResult(SendStatus.SEND_OK, "id", 0, 0, 0))

    def submit(self, address: str, call: Call[object], timeout: float | None = None) -> Any:
        raise AssertionError("records are sent one at a time")


def test_a_record_whose_broker_is_lost_is_kept_by_the_next_brokers_in_the_group_s_order() -> None:
    """A broker lost under a commit, still in the route: the record goes to the next broker in
    the group's order instead, within the retry budget, and never waits for the lost one."""
    group = GROUPS[0]
    order = ranked(group, BROKERS[:3])
    brokers = Brokers(BROKERS[:3], dead={order[0]})
    now = [0.0]
    replicas = Replicas(lambda topic: brokers.route, clock=lambda: now[0], outages=Outages())

    def sleep(seconds: float) -> None:
        now[0] += seconds

    retry = Retry(budget_s=5.0, sleep=sleep, clock=lambda: now[0], outages=replicas.outages)
    ledger = Ledger(brokers, replicas, retry, "records", group, timeout_s=1.0)
    ledger.done(record_key(group, "q", 1))
    assert brokers.stored == {order[1]: 1, order[2]: 1}, "each copy on a live broker, once"
    assert now[0] < 1.0, "the record waited for the lost broker"
    assert replicas.passed_over(brokers.addresses[order[0]]), "the lost broker is passed over for a while"
    brokers.dead = set(brokers.addresses.values())
    with pytest.raises(ConnectionFailedError):
        ledger.done(record_key(group, "q", 2))  # no live broker left: the budget runs out
    assert now[0] >= retry.budget_s - retry.max_backoff_s


class Offsets(Brokers):
    """Brokers whose record queues are empty: a read asks each for its queue's ends."""

    def call(self, address: str, call: Call[T], timeout: float | None = None) -> T:
        if address in self.dead:
            raise ConnectionFailedError("connection refused", address)
        assert call.code in (RequestCode.GET_MIN_OFFSET, RequestCode.GET_MAX_OFFSET), call.code
        return cast(T, 0)


def test_a_read_passes_over_a_broker_killed_under_it_once_the_route_drops_it() -> None:
    """A broker killed between the route's answer and the read: the read reports it, asks the
    route again, and goes on without it once the name server dropped it, instead of asking the
    dead address again for the whole retry budget (its records have copies on the next brokers)."""
    group = GROUPS[0]
    order = ranked(group, BROKERS[:3])
    brokers = Offsets(BROKERS[:3], dead={order[0]})
    without = TopicRoute(
        "records",
        tuple(q for q in brokers.route.queue_datas if q.broker_name != order[0]),
        {n: b for n, b in brokers.route.brokers.items() if n != order[0]},
    )
    now = [0.0]
    asked: list[float] = []

    def route(topic: str) -> TopicRoute:
        asked.append(now[0])
        return brokers.route if len(asked) == 1 else without  # the name server saw the broker go

    replicas = Replicas(route, clock=lambda: now[0], outages=Outages())

    def sleep(seconds: float) -> None:
        now[0] += seconds

    retry = Retry(budget_s=60.0, sleep=sleep, clock=lambda: now[0], outages=replicas.outages)
    ledger = Ledger(brokers, replicas, retry, "records", group, timeout_s=1.0)
    entries = ledger.read(whole=True)
    assert set(entries.ends) == {order[1], order[2]}, "the live brokers are read, the dropped one is not"
    assert now[0] < 5.0, f"the read waited {now[0]:.1f} s for a broker the route no longer lists"
    brokers.dead = {brokers.addresses[order[1]]}  # dead, and still listed: waited for, then raised
    with pytest.raises(ConnectionFailedError):
        Ledger(
            brokers,
            Replicas(lambda topic: brokers.route, clock=lambda: now[0], outages=Outages()),
            retry,
            "records",
            group,
            timeout_s=1.0,
        ).read(whole=True)
