"""The one memory of failing servers: what the routes, the sink's picker and the retry policies
each see of one failure."""

from __future__ import annotations

import logging
import pickle

import pytest

from rocketmq_spark.model import ClientConfig
from rocketmq_spark.remoting.cluster import shared_cluster
from rocketmq_spark.remoting.errors import ConnectionFailedError
from rocketmq_spark.remoting.outages import PROCESS_OUTAGES, Outages
from rocketmq_spark.remoting.replicas import Replicas
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.remoting.route import TopicRoute

MASTER, SLAVE = "m:1", "s:1"


def test_an_address_passed_over_is_asked_last_until_its_time_ends() -> None:
    memory = Outages()
    memory.failed(MASTER, 10.0, pass_over_until=20.0)
    assert memory.passed_over(MASTER, 19.9) and not memory.passed_over(MASTER, 20.0)
    assert memory.down_since(MASTER) == 10.0


def test_what_a_replica_said_as_a_slave_stops_counting_once_it_is_the_master() -> None:
    memory = Outages()
    memory.failed(SLAVE, 0.0, pass_over_until=10.0, as_slave=True)
    assert memory.passed_over(SLAVE, 1.0)
    assert not memory.passed_over(SLAVE, 1.0, as_master=True)


def test_an_outage_is_warned_once_and_its_end_told_from_the_warning() -> None:
    memory = Outages()
    memory.failed(MASTER, 1.0, pass_over_until=11.0)  # a pull saw it first
    assert memory.warn(MASTER, 2.0) and not memory.warn(MASTER, 3.0)
    assert memory.passed_over(MASTER, 4.0)  # warning keeps the routes' view
    assert memory.answered(MASTER, 5.5) == pytest.approx(3.5)
    assert memory.down_since(MASTER) is None and not memory.passed_over(MASTER, 5.5)


def test_calls_that_gave_up_leave_the_next_failure_to_be_told_again() -> None:
    memory = Outages()
    assert memory.warn(MASTER, 0.0)
    memory.quiet(MASTER)
    assert memory.down_since(MASTER) == 0.0  # still failing, as far as anyone saw
    assert memory.warn(MASTER, 1.0)
    assert memory.answered("never-failed:1", 2.0) is None


def test_one_failure_is_seen_by_the_routes_and_by_the_retry_policy(caplog: pytest.LogCaptureFixture) -> None:
    """A retry that meets an address the routes passed over, and a route lookup after a retried
    failure, read the same entry: one memory, not one per user."""
    now = [0.0]
    memory = Outages()
    replicas = Replicas(lambda topic: TopicRoute(topic, (), {}), clock=lambda: now[0], outages=memory)
    replicas.failed(MASTER, "t")
    assert replicas.passed_over(MASTER)
    answers = iter([ConnectionFailedError("lost", MASTER), "ok"])

    def call() -> object:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    caplog.set_level(logging.WARNING, logger="rocketmq_spark.remoting.retry")
    retry = Retry(budget_s=5.0, sleep=lambda s: None, clock=lambda: now[0], outages=memory)
    assert retry.call(call, "pull") == "ok"
    assert not replicas.passed_over(MASTER)  # it answered: asked like any other again


def test_a_process_has_one_memory_whatever_travels_to_it() -> None:
    """The process's clusters and its default policies share it; a pickled policy arrives with
    the receiving process's memory, not the sender's."""
    cluster = shared_cluster(ClientConfig(("127.0.0.1:1",)))
    assert cluster.replicas.outages is PROCESS_OUTAGES
    assert Retry().outages is PROCESS_OUTAGES
    assert pickle.loads(pickle.dumps(Retry())).outages is PROCESS_OUTAGES
    assert pickle.loads(pickle.dumps(Outages())) is PROCESS_OUTAGES
