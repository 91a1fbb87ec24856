"""Which replica of a broker name is asked, against fake routes: master listed, master gone with a
reading slave, a slave refusing, ``suggestWhichBrokerId``, a master that moved (a DLedger election,
a controller's switch), and no replica at all."""

from __future__ import annotations

import pytest

from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.errors import BrokerResponseError, ConnectionFailedError, NoReplicaError
from rocketmq_spark.remoting.replicas import (
    MIN_ROUTE_REFRESH_S,
    PASSED_OVER_S,
    ROUTE_REFRESH_S,
    Replicas,
    read_order,
    rejected,
)
from rocketmq_spark.remoting.route import BrokerData, TopicRoute

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


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def replicas(addresses: dict[int, str]) -> tuple[Replicas, FakeNameServer, Clock]:
    names, clock = FakeNameServer(addresses), Clock()
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
