"""What a real broker does with half messages: the facts the exactly-once sink stands on.

A broker of its own with short transaction timings (a half is checked one second after it was
sent, every second, at most ``CHECK_MAX`` times), and this project's remoting client sending
halves and END_TRANSACTION as the sink will. Each test states one fact; where the design depends
on it (a second COMMIT stores again, check-backs name copies, an original stays committable after
its copies were rolled back or discarded), the test is what says it holds on this release.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from integration.cluster_config import (
    BROKER_A,
    PAST_THE_CHECKS_S,
    TRANSACTION_CHECK_MAX,
    ClusterConfig,
    shifted,
)
from integration.support import ClusterHandle, create_topic, create_topic_on_broker, eventually, own_cluster
from rocketmq_spark.model import ClientConfig, MessageQueue
from rocketmq_spark.records.outgoing import UniqueIds, encode_properties, message_properties
from rocketmq_spark.remoting import calls, codes
from rocketmq_spark.remoting.client import RocketMQClient
from rocketmq_spark.remoting.codec import RemotingCommand
from rocketmq_spark.remoting.errors import RocketMQError
from rocketmq_spark.remoting.membership import producer_heartbeat
from rocketmq_spark.remoting.sending import send_message
from rocketmq_spark.remoting.transactions import (
    Half,
    Resolution,
    end_transaction,
    half_properties,
    stored_half,
)

pytestmark = pytest.mark.integration

NAMESRV_PORT = shifted(21876)
BROKER_PORT = shifted(22911)
CHECK_MAX = TRANSACTION_CHECK_MAX
QUIET_S = 3.0
WAIT_S = 30.0
# A topic the proxy lets halves through to (it checks the topic's message type; brokers do not).
TRANSACTION_TYPE = "+message.type=TRANSACTION"
# The template topic every broker that may create topics registers: a way to its address.
TEMPLATE_TOPIC = "TBW102"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    config = ClusterConfig(
        workdir=tmp_path_factory.mktemp("transactions"),
        brokers=1,
        namesrv_port=NAMESRV_PORT,
        broker_ports=(BROKER_PORT,),
        timer_messages=False,
        short_transaction_checks=True,
    )
    with own_cluster(config) as handle:
        yield handle


class Checks:
    """The CHECK_TRANSACTION_STATE requests a broker sends this client (answered by the test)."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, request: RemotingCommand) -> RemotingCommand | None:
        if request.code == codes.RequestCode.CHECK_TRANSACTION_STATE:
            with self.lock:
                self.seen.append(dict(request.ext_fields))
        return None


class Producer:
    """One producer group on the broker: sends halves, resolves them, counts what is visible."""

    def __init__(self, handle: ClusterHandle, topic: str, group: str) -> None:
        self.client = RocketMQClient(ClientConfig(name_servers=(handle.namesrv_addr,)))
        self.topic, self.group = topic, group
        self.queue = MessageQueue(topic, BROKER_A, 0)
        route = self.client.topic_route(topic)
        address = route.master_address(BROKER_A)
        assert address is not None, route
        self.address = address
        self.ids = UniqueIds(os.urandom(4))

    def register(self, checks: Checks) -> None:
        """Heartbeat as a producer of the group, so that the broker's checks come here."""
        self.client.serve(checks)
        self.client.call(self.address, producer_heartbeat(f"facts-{os.getpid()}-{id(self)}", self.group))

    def send_half(self, body: bytes) -> Half:
        msg_id = self.ids.next()
        properties = {**message_properties(tags=None, keys=None, unique_id=msg_id), **half_properties(self.group)}
        result = self.client.call(
            self.address,
            send_message(
                self.queue,
                body,
                group=self.group,
                properties=encode_properties(properties),
                sys_flag=codes.MSG_FLAG_TRANSACTION_PREPARED,
                born_ms=int(time.time() * 1000),
            ),
        )
        return stored_half(result, BROKER_A, self.topic, msg_id)

    def end(self, half: Half, resolution: Resolution, *, from_check: bool) -> None:
        self.client.call(self.address, end_transaction(half, self.group, resolution, from_check=from_check))

    def visible(self) -> int:
        """How many messages the real topic's queue holds."""
        return self.client.call(self.address, calls.max_offset(self.queue))

    def close(self) -> None:
        self.client.close()


@pytest.fixture
def producer(broker: ClusterHandle) -> Iterator[Producer]:
    suffix = f"{os.getpid()}-{time.monotonic_ns()}"
    topic, group = f"facts-{suffix}", f"facts-producer-{suffix}"
    create_topic(broker, topic, queues=1)
    producer = Producer(broker, topic, group)
    try:
        yield producer
    finally:
        producer.close()


def settles_at(producer: Producer, expected: int) -> int:
    """How many messages the real queue shows QUIET_S after it reached ``expected`` (within
    WAIT_S): the consume queue is built a moment after the put is answered."""
    eventually(lambda: producer.visible() == expected, f"the queue never showed {expected} message(s)", WAIT_S)
    time.sleep(QUIET_S)
    return producer.visible()


def test_a_half_is_invisible_until_a_two_way_commit_puts_it(producer: Producer) -> None:
    half = producer.send_half(b"one")
    time.sleep(QUIET_S)
    assert producer.visible() == 0, "a half must not be visible before it is committed"
    producer.end(half, Resolution.COMMIT, from_check=False)
    assert settles_at(producer, 1) == 1


def test_a_second_commit_of_one_half_stores_it_again(producer: Producer) -> None:
    """Why the sink resolves each half once, and learns from the topic which it resolved."""
    half = producer.send_half(b"twice")
    producer.end(half, Resolution.COMMIT, from_check=False)
    assert settles_at(producer, 1) == 1
    producer.end(half, Resolution.COMMIT, from_check=False)
    assert settles_at(producer, 2) == 2


def test_checks_name_copies_and_the_original_stays_committable_after_each_is_rolled_back(
    producer: Producer,
) -> None:
    checks = Checks()
    producer.register(checks)
    half = producer.send_half(b"checked")
    eventually(lambda: len(checks.seen) >= CHECK_MAX, f"fewer than {CHECK_MAX} checks came", WAIT_S)
    copies = [(int(seen["commitLogOffset"]), int(seen["tranStateTableOffset"])) for seen in checks.seen]
    assert len(copies) == CHECK_MAX, checks.seen
    assert len(set(copies)) == len(copies), f"each check names a copy of its own: {copies}"
    assert (half.commit_log_offset, half.half_offset) not in copies, f"no check names the original: {copies}"
    assert all(seen["msgId"] == half.msg_id for seen in checks.seen), checks.seen
    for commit_log, half_offset in copies:
        copy = Half(BROKER_A, producer.topic, commit_log, half_offset, half.msg_id)
        producer.end(copy, Resolution.ROLLBACK, from_check=True)
    assert settles_at(producer, 0) == 0
    producer.end(half, Resolution.COMMIT, from_check=True)
    assert settles_at(producer, 1) == 1
    assert len(checks.seen) == CHECK_MAX, "the broker checks a half no more than transactionCheckMax times"


def test_an_unanswered_half_past_its_checks_stays_committable(producer: Producer) -> None:
    """No process has to answer checks, or be alive, between a half's send and its commit."""
    half = producer.send_half(b"unanswered")
    time.sleep(PAST_THE_CHECKS_S)
    assert producer.visible() == 0, "an unanswered half must not be delivered"
    producer.end(half, Resolution.COMMIT, from_check=False)
    assert settles_at(producer, 1) == 1


def test_a_half_stays_committable_across_a_broker_restart(broker: ClusterHandle, producer: Producer) -> None:
    """A broker killed (SIGKILL) and started again between the tasks' sends and the driver's
    commit still finds the half by its offsets: the commit after the restart puts it, once."""
    cluster = broker.cluster
    assert cluster is not None, "this test kills its own broker"
    half = producer.send_half(b"restarted")
    cluster.kill(BROKER_A)
    cluster.restart(BROKER_A)
    eventually(lambda: _succeeds(producer.visible), "the restarted broker never answered", WAIT_S)
    assert producer.visible() == 0, "a half must not be delivered by a restart"
    producer.end(half, Resolution.COMMIT, from_check=True)
    assert settles_at(producer, 1) == 1


def _succeeds(request: Callable[[], object]) -> bool:
    """Whether ``request`` is answered now (a restarted broker, a topic the proxy routes)."""
    try:
        request()
    except RocketMQError:
        return False
    return True


def test_through_a_proxy_a_commit_is_answered_and_does_nothing(rocketmq: ClusterHandle) -> None:
    """Why exactly-once refuses a 5.x proxy's remoting port: it forwards a half (to a topic of
    message type TRANSACTION, which it checks) and answers END_TRANSACTION SUCCESS, yet the half
    is not committed; the same half committed at its broker is."""
    assert rocketmq.proxy_addr, "this test needs the session cluster's proxy (RocketMQ 5.x)"
    topic, group = f"facts-proxy-{os.getpid()}-{time.monotonic_ns()}", "facts-proxy-producer"
    with (
        RocketMQClient(ClientConfig(name_servers=(rocketmq.namesrv_addr,))) as direct,
        RocketMQClient(ClientConfig(name_servers=(rocketmq.proxy_addr,))) as proxy,
    ):
        broker_address = direct.topic_route(TEMPLATE_TOPIC).master_address(BROKER_A)
        assert broker_address is not None
        create_topic_on_broker(direct, broker_address, topic, 1, BROKER_A, TRANSACTION_TYPE)
        queue = MessageQueue(topic, BROKER_A, 0)
        eventually(lambda: _succeeds(lambda: proxy.topic_route(topic)), f"the proxy never routed {topic}", WAIT_S)
        msg_id = UniqueIds(os.urandom(4)).next()
        properties = {**message_properties(tags=None, keys=None, unique_id=msg_id), **half_properties(group)}
        sent = proxy.call(
            rocketmq.proxy_addr,
            send_message(
                queue,
                b"through the proxy",
                group=group,
                properties=encode_properties(properties),
                sys_flag=codes.MSG_FLAG_TRANSACTION_PREPARED,
                born_ms=int(time.time() * 1000),
            ),
        )
        half = stored_half(sent, BROKER_A, topic, msg_id)
        proxy.call(rocketmq.proxy_addr, end_transaction(half, group, Resolution.COMMIT, from_check=True))
        time.sleep(QUIET_S)
        assert direct.call(broker_address, calls.max_offset(queue)) == 0, "the proxy's END_TRANSACTION committed"
        direct.call(broker_address, end_transaction(half, group, Resolution.COMMIT, from_check=True))
        eventually(
            lambda: direct.call(broker_address, calls.max_offset(queue)) == 1,
            "the half the proxy forwarded was not committable at its broker",
            WAIT_S,
        )
