"""Which replica of a broker name is asked, against fake routes: master listed, master gone with a
reading slave, a slave refusing, ``suggestWhichBrokerId``, a master that moved (a DLedger election,
a controller's switch), and no replica at all."""

from __future__ import annotations

import pytest

from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.errors import (
    BrokerResponseError,
    ConnectionFailedError,
    NoReplicaError,
    TopicNotFoundError,
)
from rocketmq_spark.remoting.replicas import (
    MIN_ROUTE_REFRESH_S,
    PASSED_OVER_S,
    ROUTE_REFRESH_S,
    Replicas,
    not_copied_yet,
    read_order,
    rejected,
)
from rocketmq_spark.remoting.route import BrokerData, TopicRoute
from tests.support import ManualClock

TOPIC = "orders"
MASTER, SLAVE, OTHER = "127.0.0.1:10911", "127.0.0.1:10912", "127.0.0.1:10913"


class FakeNameServer:
    """Routes of one broker name, changed by the test; counts how often it is asked."""

    def __init__(self, addresses: dict[int, str]) -> None:
        self.addresses = addresses
        self.asked = 0

    def route(self, topic: str) -> TopicRoute:
        self.asked += 1
        return TopicRoute(topic, (), {"broker-a": BrokerData("broker-a", dict(self.addresses))})


def replicas(addresses: dict[int, str]) -> tuple[Replicas, FakeNameServer, ManualClock]:
    names, clock = FakeNameServer(addresses), ManualClock(1000.0)
    return Replicas(names.route, clock), names, clock


def test_the_master_is_read_while_it_is_listed() -> None:
    assert read_order({1: SLAVE, 0: MASTER}) == [(0, MASTER), (1, SLAVE)]
    found, _, _ = replicas({0: MASTER, 1: SLAVE})
    assert found.read_replica(TOPIC, "broker-a")[1] == MASTER
    assert found.master(TOPIC, "broker-a") == MASTER


def test_a_slave_is_read_while_no_master_is_listed_and_nothing_is_written_there() -> None:
    found, _, _ = replicas({1: SLAVE, 2: OTHER})
    assert found.read_replica(TOPIC, "broker-a")[1] == SLAVE  # lowest id first
    assert found.master(TOPIC, "broker-a") is None


def test_a_slave_that_refuses_is_passed_over_for_another_replica() -> None:
    refusal = BrokerResponseError(
        ResponseCode.SYSTEM_BUSY, "[REJECTREQUEST]system busy, start flow control for a while"
    )
    busy = BrokerResponseError(ResponseCode.SYSTEM_BUSY, "[PCBUSY_CLEAN_QUEUE]broker busy")
    assert rejected(refusal) and refusal.retriable
    assert not rejected(busy)  # flow control: the same broker, after a pause
    found, _, clock = replicas({1: SLAVE, 2: OTHER})
    found.failed(SLAVE, TOPIC)
    assert found.read_replicas(TOPIC, "broker-a") == [(2, OTHER), (1, SLAVE)]  # the refusing one last, not gone
    clock.now += PASSED_OVER_S
    assert found.read_replica(TOPIC, "broker-a")[1] == SLAVE


def test_a_pull_answer_s_suggestion_is_followed_within_the_broker_name() -> None:
    found, _, _ = replicas({0: MASTER, 1: SLAVE})
    found.suggest(TOPIC, "broker-a", 3, 1)
    assert found.read_replica(TOPIC, "broker-a", 3)[1] == SLAVE
    assert found.read_replica(TOPIC, "broker-a", 4)[1] == MASTER  # per queue
    found.suggest(TOPIC, "broker-a", 3, 7)  # an id the routes do not list: the usual order
    assert found.read_replica(TOPIC, "broker-a", 3)[1] == MASTER
    found.suggest(TOPIC, "broker-a", 3, 1)
    found.failed(SLAVE, TOPIC)  # the suggested replica failed: the hint is dropped
    assert found.read_replica(TOPIC, "broker-a", 3)[1] == MASTER


@pytest.mark.parametrize("how", ["DLedger election", "controller switch"])
def test_a_master_that_moved_is_found_within_a_second_of_a_failure(how: str) -> None:
    found, names, clock = replicas({0: MASTER, 1: SLAVE} if how == "controller switch" else {0: MASTER})
    assert found.read_replica(TOPIC, "broker-a")[1] == MASTER
    names.addresses = {0: OTHER} if how == "DLedger election" else {0: SLAVE}
    found.failed(MASTER, TOPIC)  # cannot connect to the old master
    asked = names.asked
    # Within the second, the old routes: the failed master goes last, after a listed slave.
    assert found.read_replica(TOPIC, "broker-a")[1] == (MASTER if how == "DLedger election" else SLAVE)
    assert names.asked == asked
    clock.now += MIN_ROUTE_REFRESH_S
    new = OTHER if how == "DLedger election" else SLAVE
    assert found.read_replica(TOPIC, "broker-a")[1] == new and found.master(TOPIC, "broker-a") == new
    assert names.asked == asked + 1


def test_a_follower_that_refused_is_read_at_once_once_elected() -> None:
    """A DLedger follower refuses reads (no slaveReadEnable) while the group has no leader; elected
    a moment later, what it said as a follower no longer counts. A master that cannot be reached is
    still passed over while a slave is listed."""
    found, names, clock = replicas({1: SLAVE, 2: OTHER})  # the leader gone
    found.failed(SLAVE, TOPIC, as_slave=True)
    found.failed(OTHER, TOPIC, as_slave=True)
    names.addresses = {0: SLAVE, 2: OTHER}  # SLAVE elected
    clock.now += MIN_ROUTE_REFRESH_S
    assert found.read_replicas(TOPIC, "broker-a") == [(0, SLAVE), (2, OTHER)]
    clock.now += PASSED_OVER_S  # the refusals are forgotten
    found.failed(SLAVE, TOPIC)  # the new leader cannot be reached
    assert found.read_replica(TOPIC, "broker-a")[1] == OTHER


def test_routes_are_reused_until_they_age_when_nothing_fails() -> None:
    found, names, clock = replicas({0: MASTER})
    for _ in range(3):
        found.read_replica(TOPIC, "broker-a")
    assert names.asked == 1
    clock.now += ROUTE_REFRESH_S
    found.read_replica(TOPIC, "broker-a")
    assert names.asked == 2


def test_no_replica_at_all_is_a_retriable_error_naming_the_broker() -> None:
    found, _, _ = replicas({})
    with pytest.raises(NoReplicaError, match="broker-a") as caught:
        found.read_replica(TOPIC, "broker-a")
    assert caught.value.retriable and caught.value.tried == []
    with pytest.raises(NoReplicaError, match="broker-b"):  # a broker name the routes do not list
        found.read_replica(TOPIC, "broker-b")


def test_an_error_after_trying_names_every_address_tried() -> None:
    cause = ConnectionFailedError("cannot connect to 127.0.0.1:10911")
    error = NoReplicaError("broker-a", [MASTER, SLAVE], cause)
    assert MASTER in str(error) and SLAVE in str(error) and "broker-a" in str(error)


def test_a_suspect_route_is_asked_again_at_most_once_per_limit() -> None:
    """Callers that doubt the route (a failed request, a queue it lacks) ask for it often; a broker
    that stays down must not turn each of them into a name-server request."""
    found, names, clock = replicas({0: MASTER})
    found.route(TOPIC)
    for _ in range(5):
        clock.now += MIN_ROUTE_REFRESH_S / 10
        found.route(TOPIC, suspect=True)
    assert names.asked == 1
    clock.now += MIN_ROUTE_REFRESH_S / 2  # a second since the last ask
    found.route(TOPIC, suspect=True)
    assert names.asked == 2
    found.route(TOPIC, suspect=True)
    assert names.asked == 2


def test_a_doubt_within_the_limit_is_kept_until_the_limit_allows_an_ask() -> None:
    found, names, clock = replicas({0: MASTER})
    found.route(TOPIC)
    found.route(TOPIC, suspect=True)  # too soon: the route held is the answer
    clock.now += MIN_ROUTE_REFRESH_S
    found.route(TOPIC)  # an undoubting caller a second later gets routes asked after the doubt
    assert names.asked == 2
    clock.now += MIN_ROUTE_REFRESH_S
    found.route(TOPIC)  # nothing doubted since: reused until ROUTE_REFRESH_S
    assert names.asked == 2


@pytest.mark.parametrize("how", ["failed", "suspect"])
def test_a_stale_mark_is_asked_again_once_the_limit_allows(how: str) -> None:
    found, names, clock = replicas({0: MASTER})
    found.route(TOPIC)
    if how == "failed":
        found.failed(MASTER, TOPIC)
    else:
        found.suspect(TOPIC)  # a broker lists queues the route lacks
    found.route(TOPIC)
    clock.now += MIN_ROUTE_REFRESH_S - 0.1
    found.route(TOPIC)
    assert names.asked == 1
    clock.now += 0.1
    found.route(TOPIC)
    assert names.asked == 2


def test_a_route_that_could_not_be_asked_stays_suspect() -> None:
    found, names, clock = replicas({0: MASTER})
    found.route(TOPIC)
    down = ConnectionFailedError("cannot connect to the name server")

    def failing(topic: str) -> TopicRoute:
        names.asked += 1
        raise down

    found.fetch_route = failing
    clock.now += MIN_ROUTE_REFRESH_S
    with pytest.raises(ConnectionFailedError):
        found.route(TOPIC, suspect=True)
    found.fetch_route = names.route
    assert found.route(TOPIC).brokers["broker-a"].addresses == {0: MASTER}  # within the limit: the old route
    clock.now += MIN_ROUTE_REFRESH_S
    found.route(TOPIC)  # asked again a second later, though no caller doubts it now
    assert names.asked == 3


def test_routes_asked_after_a_mark_are_told_from_older_ones_and_never_replaced_by_them() -> None:
    found, names, clock = replicas({0: MASTER})
    mark = found.asks(TOPIC)
    assert not found.asked_after(TOPIC, mark)
    found.route(TOPIC)
    assert found.asked_after(TOPIC, mark) and not found.asked_after(TOPIC, found.asks(TOPIC))
    # Two threads ask at once: the older ask's answer, given last, does not replace the newer one.
    late = True

    def slow(topic: str) -> TopicRoute:
        nonlocal late
        old = names.route(topic)
        if late:
            late = False
            names.addresses = {0: OTHER}
            clock.now += MIN_ROUTE_REFRESH_S
            found.route(TOPIC, suspect=True)  # the other thread's ask, answered first
        return old

    found.fetch_route = slow
    clock.now += MIN_ROUTE_REFRESH_S
    mark = found.asks(TOPIC)
    found.route(TOPIC, suspect=True)
    assert found.master(TOPIC, "broker-a") == OTHER
    assert found.asked_after(TOPIC, mark)


def test_a_topic_not_found_is_the_answer_for_a_second_then_asked_again() -> None:
    found, names, clock = replicas({0: MASTER})
    known = names.route

    def unknown(topic: str) -> TopicRoute:
        names.asked += 1
        raise TopicNotFoundError(17, f"No topic route info in name server for the topic: {topic}")

    found.fetch_route = unknown
    for _ in range(3):
        with pytest.raises(TopicNotFoundError, match="No topic route info"):
            found.route(TOPIC, suspect=True)
    assert names.asked == 1
    found.fetch_route = known  # the topic is created
    clock.now += MIN_ROUTE_REFRESH_S
    assert found.master(TOPIC, "broker-a") == MASTER
    assert names.asked == 2


def test_a_read_under_way_waits_out_a_name_server_that_knows_no_topic_yet() -> None:
    """A name server restarted knows no route until the brokers register again: a pull whose
    route is due then finds no replica (retriable), not an unknown topic (fatal to a task)."""
    found, names, clock = replicas({0: MASTER})
    assert found.read_replica(TOPIC, "broker-a") == (0, MASTER)
    known = names.route

    def restarted(topic: str) -> TopicRoute:
        names.asked += 1
        raise TopicNotFoundError(17, f"No topic route info in name server for the topic: {topic}")

    found.fetch_route = restarted
    clock.now += ROUTE_REFRESH_S
    with pytest.raises(NoReplicaError, match="broker-a") as caught:
        found.read_replica(TOPIC, "broker-a")
    assert caught.value.retriable
    found.fetch_route = known  # the brokers registered again
    clock.now += MIN_ROUTE_REFRESH_S
    assert found.read_replica(TOPIC, "broker-a") == (0, MASTER)


def test_only_a_master_says_a_topic_is_gone() -> None:
    """A slave's "no such topic" waits for its copy or the master; a master's is the answer, and
    other errors are not this rule's to judge."""
    missing = TopicNotFoundError(ResponseCode.TOPIC_NOT_EXIST, "topic[t] not exist")
    assert not_copied_yet(missing, from_slave=True)
    assert not not_copied_yet(missing, from_slave=False)
    assert not not_copied_yet(ConnectionFailedError("lost", SLAVE), from_slave=True)
