"""A task's range read while the replicas of its broker name change under it: a master killed
with a slave serving, a new master elected at another address, a slave that refuses reads or is
behind the planned offsets, the broker's suggestion of a replica, and no replica at all. Against
fake replicas (tests/fake_queues.py); the integration tests kill real replicated brokers."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rocketmq_spark.remoting.client import PullResult, PullSpec
from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.errors import (
    BrokerResponseError,
    ConnectionFailedError,
    NoReplicaError,
    TopicNotFoundError,
)
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.remoting.route import BrokerData, TopicRoute
from rocketmq_spark.source.partition import RocketMQPartition
from rocketmq_spark.source.partition_reader import PULLS_IN_FLIGHT, read_partition
from tests.fake_queues import FakePending, FakeQueue, HeldPulls, partition

MASTER, SLAVE, ELECTED = "127.0.0.1:10911", "127.0.0.1:10912", "127.0.0.1:10913"
SLAVE_ID = 1
END = 100
# Retries that wait little, so a test that waits for a master's return takes a second or two.
QUICK = Retry(budget_s=30.0, first_backoff_s=0.01, max_backoff_s=0.05)
REFUSAL = "[REJECTREQUEST]system busy, start flow control for a while"
NO_TOPIC = "topic[t] not exist, apply first please!"


class Replicas(HeldPulls):
    """One broker name served at several addresses, each a replica holding the queue up to its own
    max offset; the routes list what the test says, and ``after`` changes them after a number of
    pulls (a master killed, a leader elected, a master back)."""

    def __init__(self, routes: dict[int, str], holds: dict[str, int]) -> None:
        super().__init__()
        self.routes = dict(routes)
        self.queues = {address: FakeQueue(max_offset) for address, max_offset in holds.items()}
        self.down: set[str] = set()
        self.refusing: set[str] = set()
        self.without_topic: set[str] = set()  # replicas that have not copied the topic yet
        self.suggesting: dict[str, int] = {}  # address -> the broker id its answers suggest
        self.sent_to: list[str] = []
        self.changes: list[tuple[int, dict[int, str], set[str]]] = []  # (after n pulls, routes, down)

    def after(self, pulls: int, routes: dict[int, str], down: set[str]) -> None:
        self.changes.append((pulls, routes, down))

    def topic_route(self, topic: str) -> TopicRoute:
        brokers = {"broker-a": BrokerData("broker-a", dict(self.routes))} if self.routes else {}
        return TopicRoute(topic, (), brokers)

    def pull_async(self, address: str, spec: PullSpec, offset: int, max_messages: int) -> Any:
        self.sent_to.append(address)
        while self.changes and len(self.sent_to) > self.changes[0][0]:
            _, self.routes, self.down = self.changes.pop(0)
        if address in self.down:
            raise ConnectionFailedError(f"cannot connect to {address}", address)
        pending: Any = self.queues[address].pull_async(address, spec, offset, max_messages)
        if address in self.refusing:
            pending = Refused(address)
        elif address in self.without_topic:
            pending = NoTopic(address)
        elif address in self.suggesting:
            pending = Suggesting(pending, self.suggesting[address])
        return self.checked(offset, pending)

    def pull(self, *args: Any, **kwargs: Any) -> PullResult:
        raise AssertionError("the range reader pulls without waiting")


class Refused:
    """A 5.x slave without slaveReadEnable: every pull refused with code 2."""

    def __init__(self, address: str) -> None:
        self.address = address

    def result(self) -> PullResult:
        raise BrokerResponseError(ResponseCode.SYSTEM_BUSY, REFUSAL, address=self.address)


class NoTopic:
    """A slave that has not copied the topic from its master: every pull answered code 17."""

    def __init__(self, address: str) -> None:
        self.address = address

    def result(self) -> PullResult:
        raise TopicNotFoundError(ResponseCode.TOPIC_NOT_EXIST, NO_TOPIC, address=self.address)


class Suggesting:
    def __init__(self, pending: FakePending, broker_id: int) -> None:
        self.pending = pending
        self.broker_id = broker_id

    def result(self) -> PullResult:
        return dataclasses.replace(self.pending.result(), suggested_broker_id=self.broker_id)


def read(client: Replicas, part: RocketMQPartition | None = None) -> list[int]:
    part = part or partition(0, END, pull_batch_size=10, retry=QUICK)
    batches = list(read_partition(part, client))  # type: ignore[arg-type]
    assert client.unbatched == []
    return [o for b in batches for o in b.column("queueOffset").to_pylist()]


def test_a_master_killed_mid_read_is_read_on_from_its_slave() -> None:
    client = Replicas({0: MASTER, SLAVE_ID: SLAVE}, {MASTER: END, SLAVE: END})
    client.after(3, {SLAVE_ID: SLAVE}, {MASTER})
    assert read(client) == list(range(END))
    assert client.sent_to[0] == MASTER and client.sent_to[-1] == SLAVE


def test_a_new_master_elected_at_another_address_is_read_from() -> None:
    client = Replicas({0: MASTER}, {MASTER: END, ELECTED: END})
    client.after(3, {}, {MASTER})  # the old leader gone, nobody registered yet
    client.after(8, {0: ELECTED}, {MASTER})  # a follower elected
    assert read(client) == list(range(END))
    assert client.sent_to[-1] == ELECTED


def test_a_slave_that_refuses_reads_is_waited_past_until_the_master_is_back() -> None:
    client = Replicas({0: MASTER, SLAVE_ID: SLAVE}, {MASTER: END, SLAVE: END})
    client.refusing.add(SLAVE)
    client.after(3, {SLAVE_ID: SLAVE}, {MASTER})
    client.after(12, {0: MASTER, SLAVE_ID: SLAVE}, set())  # the master back
    assert read(client) == list(range(END))
    assert SLAVE in client.sent_to and client.sent_to[-1] == MASTER


def test_a_slave_that_has_not_copied_the_topic_is_waited_past_until_the_master_is_back() -> None:
    """A slave answers TOPIC_NOT_EXIST for a topic created less than a minute before its master
    died (5.x slaves copy topics once a minute): that is no word on the topic, only a master's is."""
    client = Replicas({0: MASTER, SLAVE_ID: SLAVE}, {MASTER: END, SLAVE: END})
    client.without_topic.add(SLAVE)
    client.after(3, {SLAVE_ID: SLAVE}, {MASTER})
    client.after(12, {0: MASTER, SLAVE_ID: SLAVE}, set())
    assert read(client) == list(range(END))
    assert SLAVE in client.sent_to and client.sent_to[-1] == MASTER


def test_a_master_without_the_topic_fails_the_read_at_once() -> None:
    client = Replicas({0: MASTER, SLAVE_ID: SLAVE}, {MASTER: END, SLAVE: END})
    client.without_topic.add(MASTER)
    with pytest.raises(TopicNotFoundError):
        read(client)
    assert client.sent_to == [MASTER] * len(client.sent_to)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_slave_behind_the_planned_offsets_is_waited_for_never_data_loss(fail_on_data_loss: bool) -> None:
    """An asynchronous slave that had copied 60 of the 100 planned offsets when its master died:
    it serves them, then the rest waits for the master, even where data loss is allowed."""
    client = Replicas({0: MASTER, SLAVE_ID: SLAVE}, {MASTER: END, SLAVE: 60})
    client.after(1, {SLAVE_ID: SLAVE}, {MASTER})
    client.after(20, {0: MASTER, SLAVE_ID: SLAVE}, set())
    part = partition(0, END, pull_batch_size=10, fail_on_data_loss=fail_on_data_loss, retry=QUICK)
    assert read(client, part) == list(range(END))
    assert client.sent_to[-1] == MASTER


def test_the_broker_s_suggestion_sends_the_next_pulls_to_that_replica() -> None:
    client = Replicas({0: MASTER, SLAVE_ID: SLAVE}, {MASTER: END, SLAVE: END})
    client.suggesting[MASTER] = SLAVE_ID  # the master's data left its memory: read the slave
    client.suggesting[SLAVE] = SLAVE_ID
    assert read(client) == list(range(END))
    # Pulls sent before the first answer went to the master; every one after it to the slave.
    first = client.sent_to.index(SLAVE)
    assert client.sent_to[0] == MASTER and first <= PULLS_IN_FLIGHT and set(client.sent_to[first:]) == {SLAVE}


def test_a_range_no_replica_serves_within_the_budget_fails_naming_the_broker_and_the_addresses() -> None:
    client = Replicas({0: MASTER}, {MASTER: END})
    client.after(0, {0: MASTER}, {MASTER})  # registered, but nothing answers there
    part = partition(0, END, retry=Retry(budget_s=0.5, first_backoff_s=0.01))
    with pytest.raises(NoReplicaError, match=rf"no replica of broker broker-a serves .*tried {MASTER}"):
        read(client, part)


def test_a_broker_name_with_no_replica_listed_fails_after_the_budget_saying_so() -> None:
    client = Replicas({}, {MASTER: END})
    part = partition(0, END, retry=Retry(budget_s=0.3, first_backoff_s=0.01))
    with pytest.raises(NoReplicaError, match="no replica of it is registered"):
        read(client, part)
    assert client.sent_to == []


def test_the_master_is_read_while_it_is_listed() -> None:
    client = Replicas({0: MASTER, SLAVE_ID: SLAVE}, {MASTER: END, SLAVE: END})
    assert read(client) == list(range(END))
    assert set(client.sent_to) == {MASTER}
