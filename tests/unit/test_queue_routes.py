"""The driver's routes (``source/routes.py``) under the one refresh rule of ``remoting.replicas``:
however often the driver doubts its routes, the name server is asked at most once per
``MIN_ROUTE_REFRESH_S`` per topic, and no queue of a live broker is called gone from a route
asked before the broker's live answer. Against the fake brokers of tests/fakes.py, on a clock
that only the test and the retries' pauses move."""

from __future__ import annotations

import pytest

from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.errors import ConnectionFailedError, TopicNotFoundError
from rocketmq_spark.remoting.replicas import MIN_ROUTE_REFRESH_S, ROUTE_REFRESH_S, Replicas
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.remoting.route import BrokerData, TopicRoute
from rocketmq_spark.source.routes import QueueRoutes, UnroutedQueueError
from tests.fakes import FakeBrokers
from tests.support import TOPICS, ManualClock

BUDGET_S = 30.0
AWAY = "broker-1"


def queue_routes(brokers: FakeBrokers, clock: ManualClock, retry: Retry | None = None) -> QueueRoutes:
    policy = retry or Retry(budget_s=BUDGET_S, sleep=clock.sleep, clock=clock)
    return QueueRoutes(TOPICS, brokers, Replicas(brokers.topic_route, clock), policy, BUDGET_S, clock)  # type: ignore[arg-type]


def routes_asked(brokers: FakeBrokers) -> int:
    return brokers.sent.count(RequestCode.GET_ROUTEINFO_BY_TOPIC)


def test_doubting_callers_ask_the_name_server_at_most_once_per_limit() -> None:
    brokers, clock = FakeBrokers(2), ManualClock()
    routes = queue_routes(brokers, clock)
    routes.queues()
    for _ in range(5):  # a broker that stays down: every request fails and doubts the routes
        clock.now += MIN_ROUTE_REFRESH_S / 10
        routes.changed(failed=[brokers.address(AWAY)])
        routes.queues(suspect=True)
    assert routes_asked(brokers) == len(TOPICS)
    clock.now += MIN_ROUTE_REFRESH_S / 2
    routes.queues()  # the failures' mark: asked once the limit allows, by any caller
    assert routes_asked(brokers) == 2 * len(TOPICS)
    clock.now += ROUTE_REFRESH_S - MIN_ROUTE_REFRESH_S / 10
    routes.queues()
    assert routes_asked(brokers) == 2 * len(TOPICS)
    clock.now += MIN_ROUTE_REFRESH_S / 10  # nothing failed: asked again when the routes age
    routes.queues()
    assert routes_asked(brokers) == 3 * len(TOPICS)


def test_a_live_broker_s_queue_missing_from_a_route_asked_before_its_live_answer_waits() -> None:
    brokers, clock = FakeBrokers(2), ManualClock()
    routes = queue_routes(brokers, clock)
    brokers.away.add(AWAY)
    theirs = {q for q in brokers.max if q.broker_name == AWAY}
    assert not theirs & routes.queues().keys()
    brokers.away.clear()  # it registers again, and its queues are routed again at once
    clock.now += MIN_ROUTE_REFRESH_S / 2
    asked = routes_asked(brokers)
    # Live, missing from the routes held, which were asked before the live answer: waited for,
    # not gone, and no name-server request within the limit.
    assert routes.unavailable(theirs) == theirs
    assert routes_asked(brokers) == asked
    brokers.queues_per_broker = 1  # meanwhile readQueueNums was lowered: queue 1 left the routes
    clock.now += MIN_ROUTE_REFRESH_S / 2
    gone = {q for q in theirs if q.queue_id == 1}
    assert gone and routes.unavailable(theirs) == theirs - gone  # a route asked after the answer says so
    assert routes_asked(brokers) == asked + len(TOPICS)
    assert theirs - gone <= routes.queues().keys()


def test_a_broker_that_is_not_registered_is_waited_for_whatever_the_routes_say() -> None:
    brokers, clock = FakeBrokers(2), ManualClock()
    routes = queue_routes(brokers, clock)
    routes.queues()
    brokers.away.add(AWAY)
    theirs = {q for q in brokers.max if q.broker_name == AWAY}
    assert routes.unavailable(theirs) == theirs
    clock.now += MIN_ROUTE_REFRESH_S
    assert routes.unavailable(theirs) == theirs


def test_routes_wanted_after_a_failure_are_waited_for_through_the_retry_pauses() -> None:
    brokers, clock = FakeBrokers(2), ManualClock()
    routes = queue_routes(brokers, clock)
    routes.queues()
    brokers.away.add(AWAY)
    routes.changed(failed=[brokers.address(AWAY)])
    found = routes.queues_since(routes.marks())
    assert MIN_ROUTE_REFRESH_S <= clock.now < 2 * MIN_ROUTE_REFRESH_S  # paused just past the limit
    assert routes_asked(brokers) == 2 * len(TOPICS)
    assert found and not {q.broker_name for q in found} & {AWAY}
    # A policy that does not retry takes the routes held: no new failure, as before the limit.
    once = queue_routes(brokers, clock, Retry(budget_s=BUDGET_S, sleep=clock.sleep, clock=clock).once())
    once.queues()
    brokers.away.clear()
    assert AWAY not in {q.broker_name for q in once.queues_since(once.marks())}


def test_a_broker_that_does_not_answer_counts_from_its_address_s_first_failure() -> None:
    """How long a registered broker has not answered is read from the process's one memory of
    failed addresses (a pull or a commit may have met the failure first), and its answer clears
    it for everyone: the routes pass that address over no longer."""
    brokers, clock = FakeBrokers(2), ManualClock()
    routes = queue_routes(brokers, clock)
    queues = sorted(routes.queues())
    address = {q.broker_name: a for q, a in routes.listed.items()}
    routes.replicas.failed(address[AWAY], TOPICS[0])  # a request of another kind met it first
    clock.now += 2.0
    cause = ConnectionFailedError("timed out", address[AWAY])
    rest = routes.hold_unreachable(queues, {"broker-0"}, {AWAY: cause}, address)
    assert rest == [q for q in queues if q.broker_name != AWAY]
    assert routes.unreachable == {AWAY: 0.0}
    assert routes.replicas.passed_over(address[AWAY])
    clock.now += 1.0
    assert routes.hold_unreachable(queues, {"broker-0", AWAY}, {}, address) == queues
    assert routes.unreachable == {} and not routes.replicas.passed_over(address[AWAY])


class Forgetful(FakeBrokers):
    """A name server started again: it knows no topic until the brokers register once more."""

    forgot = False

    def topic_route(self, topic: str) -> TopicRoute:
        if self.forgot:
            self.sent.append(RequestCode.GET_ROUTEINFO_BY_TOPIC)
            raise TopicNotFoundError(ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for {topic}")
        return super().topic_route(topic)


def test_a_running_query_waits_for_a_name_server_that_forgot_its_topics() -> None:
    """Asked for a queue it routed before while the name server knows no topic (it was started
    again and no broker registered yet), the routes say so as a failure a retry waits out, not
    as an unknown topic (a configuration error that would end the query at once)."""
    brokers, clock = Forgetful(2), ManualClock()
    routes = queue_routes(brokers, clock)
    queue = sorted(routes.queues())[0]
    brokers.forgot = True
    clock.now += MIN_ROUTE_REFRESH_S
    routes.changed()
    assert routes.queues(missing_ok=True, suspect=True) == {}
    with pytest.raises(UnroutedQueueError, match=str(queue)) as caught:
        routes.address(queue)
    assert caught.value.retriable

    def registered_again(seconds: float) -> None:
        clock.sleep(seconds)
        brokers.forgot = False

    policy = Retry(budget_s=BUDGET_S, sleep=registered_again, clock=clock)
    assert policy.call(lambda: routes.address(queue), "offsets") == brokers.address(queue.broker_name)


class WithSlaves(FakeBrokers):
    """Each broker name with a master (brokerId 0) and a slave (brokerId 1) at its own address."""

    def topic_route(self, topic: str) -> TopicRoute:
        route = super().topic_route(topic)
        brokers = {
            name: BrokerData(name, {0: b.master_address or "", 1: f"slave-of-{name}:10911"})
            for name, b in route.brokers.items()
        }
        return TopicRoute(topic, route.queue_datas, brokers)


def test_a_master_passed_over_sends_its_queues_to_the_slave_and_says_so() -> None:
    """A master that failed is passed over while the route from before its death still lists it:
    its queues' offsets are asked at the slave, which may lack the master's last messages, so
    the broker name counts as read from a slave (its shorter queues wait; they are not a queue
    gone back, nor a failover's loss told against the slave)."""
    brokers, clock = WithSlaves(2), ManualClock()
    routes = queue_routes(brokers, clock)
    assert routes.read_from_slaves() == frozenset()
    routes.changed(failed=[brokers.address(AWAY)])
    queues = routes.queues(suspect=True)
    assert {a for q, a in queues.items() if q.broker_name == AWAY} == {f"slave-of-{AWAY}:10911"}
    assert routes.read_from_slaves() == frozenset({AWAY})
