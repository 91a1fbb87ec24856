"""The remoting client against a real RocketMQ 5.3.3: name server, two brokers and the 5.x proxy.

Every expected value comes from the official Java client (the test tool) or from the broker's
own answers, never from this project's code: what the tool says it sent, what the official
consumer read back, the offsets the official admin API reads. Topic and group names are unique
to the run, so the suite can share a cluster with other users.
"""

from __future__ import annotations

import base64
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from integration import support
from integration.cluster_config import BROKER_A, BROKER_NAMES, CLUSTER_NAME
from integration.constants import (
    COMPRESSIBLE_BODY_BYTES,
    CONSUMER_ADDED_PROPERTIES,
    LOOPBACK,
    ONE_HOUR_MS,
    POLL_S,
    PULL_BATCH,
    WAVE_GAP_S,
)
from integration.support import ClusterHandle, create_topic, create_topic_on_broker, position
from rocketmq_spark.model import EXPRESSION_SQL92, ClientConfig, MessageQueue, parse_tag_expression
from rocketmq_spark.records.columns import walk_columns
from rocketmq_spark.records.walk import Message, decode_messages
from rocketmq_spark.remoting import calls, codes
from rocketmq_spark.remoting.client import Boundary, PullResult, PullSpec, PullStatus, RocketMQClient
from rocketmq_spark.remoting.errors import (
    BrokerResponseError,
    ConnectionFailedError,
    NameServersUnavailableError,
    TopicNotFoundError,
)

pytestmark = pytest.mark.integration

Row = dict[str, Any]

QUEUES_PER_BROKER = 4
POOL_QUEUES = 32
SMALL_PULL = 3
# Bounds every pull-to-the-end loop, so a client that never advances fails instead of hanging.
MAX_PULLS = 1_000
LONG_POLL_MS = 15_000
LONG_POLL_ATTEMPTS = 4
ROUTE_WAIT_S = 30.0
# Properties the broker adds to every message it stores (cluster name, region, trace switch).
BROKER_ADDED_PROPERTIES = {"CLUSTER": CLUSTER_NAME, "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}

# offsetMsgId: hex of store IPv4 (8 digits), store port (8) and commit-log offset (16).
_IPV4_HEX = 8
_PORT_HEX = 8

# Record layout (MessageDecoder), read here by hand to see what the broker stored rather than
# what the decoder made of it: sysFlag sits after totalSize, magic, bodyCRC, queueId, flag,
# queueOffset and commitLogOffset; an IPv4 record's body length ends its 84-byte prefix.
_SYS_FLAG_AT = 36
_BODY_LENGTH_AT = 80
_COMPRESSION_TYPE = {"ZLIB": codes.COMPRESSION_ZLIB, "LZ4": codes.COMPRESSION_LZ4, "ZSTD": codes.COMPRESSION_ZSTD}


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def client(rocketmq: ClusterHandle) -> Iterator[RocketMQClient]:
    with RocketMQClient(ClientConfig((rocketmq.namesrv_addr,))) as c:
        yield c


@pytest.fixture(scope="module")
def proxy_client(rocketmq: ClusterHandle) -> Iterator[RocketMQClient]:
    """A client whose only name server is the proxy: its routes name the proxy for every broker."""
    assert rocketmq.proxy_addr, "the proxy tests need ROCKETMQ_PROXY (or a cluster this run starts)"
    with RocketMQClient(ClientConfig((rocketmq.proxy_addr,))) as c:
        yield c


@dataclass(frozen=True)
class Target:
    """One queue no other test writes to, with its broker's address as the client's route has it."""

    topic: str
    broker: str
    queue_id: int
    address: str
    queue: MessageQueue


@pytest.fixture(scope="module")
def queue_pool(rocketmq: ClusterHandle, client: RocketMQClient) -> Iterator[Target]:
    """Fresh queues for tests that read a single queue: one topic of many queues, created once,
    because every tool run starts a JVM. Tests that look at a whole topic make their own."""
    topic = f"it-pool-{uuid.uuid4().hex[:8]}"
    create_topic(rocketmq, topic, POOL_QUEUES, (BROKER_A,))
    address = client.topic_route(topic).master_address(BROKER_A)
    assert address is not None
    return iter([Target(topic, BROKER_A, q, address, MessageQueue(topic, BROKER_A, q)) for q in range(POOL_QUEUES)])


@pytest.fixture
def fresh_queue(queue_pool: Iterator[Target]) -> Callable[[], Target]:
    def take() -> Target:
        target = next(queue_pool, None)
        assert target is not None, f"more than {POOL_QUEUES} pool queues taken; raise POOL_QUEUES"
        return target

    return take


def produce_to(rocketmq: ClusterHandle, target: Target, count: int, *extra: str) -> list[Row]:
    return produce(rocketmq, target.topic, count, *extra, broker=target.broker, queue=target.queue_id)


def produce(
    rocketmq: ClusterHandle, topic: str, count: int, *extra: str, broker: str | None = BROKER_A, queue: int | None = 0
) -> list[Row]:
    """Send with the official producer (to one queue unless broker is None); its report, checked."""
    rows = support.produce(rocketmq, topic, count, "--print-body", *extra, broker=broker, queue=queue)
    assert len(rows) == count
    assert {row["status"] for row in rows} == {"SEND_OK"}
    return rows


def consume(rocketmq: ClusterHandle, topic: str, count: int) -> dict[tuple[str, int, int], Row]:
    """What the official lite pull consumer reads from the topic, by (broker, queue id, offset)."""
    rows = rocketmq.tool("consume", "--topic", topic, "--count", str(count), "--print")
    assert len(rows) == count
    return {position(row): row for row in rows}


def route_queue(client: RocketMQClient, topic: str, broker: str, queue_id: int) -> tuple[str, MessageQueue]:
    """The master address and the MessageQueue of one queue, as the client's route has them."""
    route = client.topic_route(topic)
    queue = MessageQueue(topic, broker, queue_id)
    assert queue in route.readable_queues()
    address = route.master_address(broker)
    assert address is not None
    return address, queue


def pull_to_end(
    client: RocketMQClient,
    address: str,
    queue: MessageQueue,
    group: str,
    *,
    start: int = 0,
    max_messages: int = PULL_BATCH,
    subscription: str = "*",
    expression_type: str = "TAG",
) -> tuple[list[Message], list[PullResult]]:
    """Pull from ``start`` until the broker says there is nothing newer, following next_begin_offset."""
    messages: list[Message] = []
    results: list[PullResult] = []
    offset = start
    for _ in range(MAX_PULLS):
        result = client.pull_async(
            address, PullSpec(queue, group, subscription, expression_type), offset, max_messages
        ).result()
        results.append(result)
        if result.status is PullStatus.FOUND:
            messages += decode_messages(result.body)
        elif result.status is PullStatus.NO_NEW_MSG:
            return messages, results
        else:
            assert result.status is PullStatus.NO_MATCHED_MSG, result
        assert result.next_begin_offset > offset
        offset = result.next_begin_offset
    raise AssertionError(f"{queue} still had messages after {MAX_PULLS} pulls")


def store_address(offset_msg_id: str) -> str:
    """The broker address an offsetMsgId names (IPv4 form)."""
    ip = socket.inet_ntoa(bytes.fromhex(offset_msg_id[:_IPV4_HEX]))
    port = int(offset_msg_id[_IPV4_HEX : _IPV4_HEX + _PORT_HEX], 16)
    return f"{ip}:{port}"


def commit_log_offset(offset_msg_id: str) -> int:
    return int(offset_msg_id[_IPV4_HEX + _PORT_HEX :], 16)


def body_of(row: Row) -> bytes:
    return base64.b64decode(row["body"])


def assert_is_sent_message(message: Message, sent: Row) -> None:
    """Every field the producer's report fixes equals what the client decoded."""
    assert message.topic == sent["topic"]
    assert message.queue_id == sent["queueId"]
    assert message.queue_offset == sent["queueOffset"]
    assert message.msg_id == sent["msgId"] == sent["properties"]["UNIQ_KEY"]
    assert message.offset_msg_id == sent["offsetMsgId"]
    assert message.commit_log_offset == commit_log_offset(sent["offsetMsgId"])
    assert message.store_host == store_address(sent["offsetMsgId"])
    assert message.tags == sent["tags"]
    assert message.keys == sent["keys"]
    assert message.body == body_of(sent)
    assert message.properties == {**sent["properties"], **BROKER_ADDED_PROPERTIES}


def assert_is_consumed_message(message: Message, consumed: Row, *, batch_sent: bool = False) -> None:
    """Every field equals what the official consumer decoded from the same broker, but for the id
    of a batch-sent message: the consumer reports the batch's, this client the message's own."""
    assert (message.msg_id == consumed["msgId"]) != batch_sent
    assert message.offset_msg_id == consumed["offsetMsgId"]
    assert (message.topic, message.queue_id, message.queue_offset) == (
        consumed["topic"],
        consumed["queueId"],
        consumed["queueOffset"],
    )
    assert message.store_timestamp == consumed["storeTimestamp"]
    assert message.born_timestamp == consumed["bornTimestamp"]
    assert message.born_host == consumed["bornHost"]
    assert message.store_host == consumed["storeHost"]
    assert message.commit_log_offset == consumed["commitLogOffset"]
    assert message.sys_flag == consumed["sysFlag"]
    assert message.flag == consumed["flag"]
    assert message.reconsume_times == consumed["reconsumeTimes"]
    assert message.prepared_transaction_offset == consumed["preparedTransactionOffset"]
    assert message.tags == consumed["tags"]
    assert message.keys == consumed["keys"]
    assert message.body == body_of(consumed)
    official = {k: v for k, v in consumed["properties"].items() if k not in CONSUMER_ADDED_PROPERTIES}
    assert message.properties == ({**official, "UNIQ_KEY": message.msg_id} if batch_sent else official)


def raw_records(body: bytes) -> Iterator[bytes]:
    """The raw records of a pull body, split by their totalSize field."""
    position = 0
    while position < len(body):
        size = int.from_bytes(body[position : position + 4], "big")
        yield body[position : position + size]
        position += size


def closed_port() -> int:
    """A loopback port nobody listens on: bound, then released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


# ----------------------------------------------------------------------------- route


def test_route_lists_every_queue_and_the_master_of_each_broker(
    rocketmq: ClusterHandle, client: RocketMQClient, unique: Callable[[str], str]
) -> None:
    topic = unique("it-route")
    create_topic(rocketmq, topic)
    # The official producer reports each broker's store address inside its offsetMsgId.
    stored_at = {
        broker: store_address(produce(rocketmq, topic, 1, broker=broker)[0]["offsetMsgId"]) for broker in BROKER_NAMES
    }

    route = client.topic_route(topic)

    assert route.readable_queues() == sorted(
        MessageQueue(topic, broker, q) for broker in BROKER_NAMES for q in range(QUEUES_PER_BROKER)
    )
    assert {qd.broker_name: (qd.read_queue_nums, qd.write_queue_nums) for qd in route.queue_datas} == {
        broker: (QUEUES_PER_BROKER, QUEUES_PER_BROKER) for broker in BROKER_NAMES
    }
    assert {broker: route.master_address(broker) for broker in BROKER_NAMES} == stored_at
    assert len(set(stored_at.values())) == len(BROKER_NAMES)


def test_unknown_topic_is_topic_not_found_and_not_retriable(
    client: RocketMQClient, unique: Callable[[str], str]
) -> None:
    with pytest.raises(TopicNotFoundError) as caught:
        client.topic_route(unique("it-no-such-topic"))
    assert caught.value.code == codes.ResponseCode.TOPIC_NOT_EXIST
    assert caught.value.retriable is False


# --------------------------------------------------------------------------- offsets


def test_min_and_max_offset_count_what_was_produced(
    rocketmq: ClusterHandle, client: RocketMQClient, unique: Callable[[str], str]
) -> None:
    topic = unique("it-minmax")
    count = 7
    create_topic(rocketmq, topic)
    sent = produce(rocketmq, topic, count)
    assert [row["queueOffset"] for row in sent] == list(range(count))
    official = {
        (o["broker"], o["queueId"]): o
        for o in rocketmq.tool("offsets", "--topic", topic, "--group", unique("it-nobody"))
    }

    route = client.topic_route(topic)
    for queue in route.readable_queues():
        address = route.master_address(queue.broker_name)
        assert address is not None
        expected = official[(queue.broker_name, queue.queue_id)]
        assert client.call(address, calls.min_offset(queue)) == expected["minOffset"] == 0
        assert client.call(address, calls.max_offset(queue)) == expected["maxOffset"]
    assert official[(BROKER_A, 0)]["maxOffset"] == count


# ------------------------------------------------------------------------------ pull


def test_pull_in_small_batches_returns_every_field_the_official_client_sees(
    rocketmq: ClusterHandle, client: RocketMQClient, unique: Callable[[str], str]
) -> None:
    topic = unique("it-pull")
    count = 10
    create_topic(rocketmq, topic)
    before_ms = int(time.time() * 1000)
    sent = produce(
        rocketmq,
        topic,
        count,
        "--tags",
        "TagA,TagB",
        "--keys",
        "order-{i} alt-{i}",
        "--body",
        "payload {i}",
        "--prop",
        "seq={i}",
        "--prop",
        "color=blue",
    )
    after_ms = int(time.time() * 1000)
    consumed = consume(rocketmq, topic, count)
    address, queue = route_queue(client, topic, BROKER_A, 0)

    messages: list[Message] = []
    offset = 0
    while offset < count:
        result = client.pull_async(address, PullSpec(queue, unique("it-g")), offset, SMALL_PULL).result()
        assert result.status is PullStatus.FOUND
        batch = decode_messages(result.body)
        assert [m.queue_offset for m in batch] == list(range(offset, min(offset + SMALL_PULL, count)))
        assert result.next_begin_offset == batch[-1].queue_offset + 1
        assert (result.min_offset, result.max_offset) == (0, count)
        messages += batch
        offset = result.next_begin_offset

    assert len(messages) == count
    for message, row in zip(messages, sent):
        assert_is_sent_message(message, row)
        assert_is_consumed_message(message, consumed[position(row)])
        assert message.store_host == address
        born_ip, _, born_port = message.born_host.rpartition(":")
        assert born_ip == LOOPBACK and int(born_port) > 0
        assert before_ms <= message.born_timestamp <= message.store_timestamp <= after_ms
        assert message.reconsume_times == 0
        assert message.prepared_transaction_offset == 0
    assert [m.store_timestamp for m in messages] == sorted(m.store_timestamp for m in messages)
    assert messages[3].keys == "order-3 alt-3"
    assert messages[3].properties["seq"] == "3"


def test_walk_columns_agree_with_the_producer(
    rocketmq: ClusterHandle,
    client: RocketMQClient,
    unique: Callable[[str], str],
    fresh_queue: Callable[[], Target],
) -> None:
    target = fresh_queue()
    sent = produce_to(rocketmq, target, 6, "--tags", "TagA", "--keys", "k{i}")

    result = client.pull_async(target.address, PullSpec(target.queue, unique("it-g")), 0, PULL_BATCH).result()
    columns = walk_columns(result.body)

    assert columns.queue_offset.to_pylist() == [row["queueOffset"] for row in sent]
    assert columns.msg_id.to_pylist() == [row["msgId"] for row in sent]
    assert columns.offset_msg_id.to_pylist() == [row["offsetMsgId"] for row in sent]
    assert columns.body.to_pylist() == [body_of(row) for row in sent]
    assert columns.keys.to_pylist() == [row["keys"] for row in sent]
    assert columns.tags.to_pylist() == [row["tags"] for row in sent]
    assert [dict(pairs) for pairs in columns.properties.to_pylist()] == [
        {**row["properties"], **BROKER_ADDED_PROPERTIES} for row in sent
    ]


def test_pull_statuses_at_and_beyond_the_end(
    rocketmq: ClusterHandle,
    client: RocketMQClient,
    unique: Callable[[str], str],
    fresh_queue: Callable[[], Target],
) -> None:
    target = fresh_queue()
    empty = fresh_queue()
    count = 4
    produce_to(rocketmq, target, count)
    group = unique("it-g")

    caught_up = client.pull_async(target.address, PullSpec(target.queue, group), count, PULL_BATCH).result()
    assert caught_up.status is PullStatus.NO_NEW_MSG
    assert caught_up.next_begin_offset == count
    assert (caught_up.min_offset, caught_up.max_offset) == (0, count)
    assert caught_up.body == b""

    beyond = client.pull_async(target.address, PullSpec(target.queue, group), count + 5, PULL_BATCH).result()
    assert beyond.status is PullStatus.OFFSET_ILLEGAL
    assert beyond.next_begin_offset == count
    assert beyond.body == b""

    # A queue that never held a message: offset 0 is "nothing new", any other offset is illegal
    # and corrected to 0.
    at_zero = client.pull_async(empty.address, PullSpec(empty.queue, group), 0, PULL_BATCH).result()
    assert (at_zero.status, at_zero.next_begin_offset) == (PullStatus.NO_NEW_MSG, 0)
    moved = client.pull_async(empty.address, PullSpec(empty.queue, group), 3, PULL_BATCH).result()
    assert (moved.status, moved.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, 0)


def test_long_poll_returns_a_message_produced_while_it_waits(
    rocketmq: ClusterHandle,
    client: RocketMQClient,
    unique: Callable[[str], str],
    fresh_queue: Callable[[], Target],
) -> None:
    target = fresh_queue()
    produce_to(rocketmq, target, 2)
    max_offset = client.call(target.address, calls.max_offset(target.queue))
    sent: list[Row] = []
    producer = threading.Thread(
        target=lambda: sent.extend(produce_to(rocketmq, target, 1, "--body", "arrived while polling"))
    )

    producer.start()
    try:
        # A loaded machine may take longer than one poll to start the producer's JVM: poll again
        # then. A broker that did not hold the poll would burn the attempts at once and fail.
        for _ in range(LONG_POLL_ATTEMPTS):
            spec = PullSpec(target.queue, unique("it-g"), suspend_timeout_ms=LONG_POLL_MS)
            result = client.pull_async(target.address, spec, max_offset, PULL_BATCH).result()
            if result.status is not PullStatus.NO_NEW_MSG:
                break
    finally:
        producer.join()

    assert result.status is PullStatus.FOUND
    (message,) = decode_messages(result.body)
    assert message.body == b"arrived while polling"
    assert message.queue_offset == max_offset == 2
    assert_is_sent_message(message, sent[0])


# ------------------------------------------------------ messages of the official client


@pytest.mark.parametrize(
    "options",
    [
        pytest.param((), id="plain"),
        pytest.param(
            ("--tags", "TagA,TagB", "--keys", "key-{i} second-{i}", "--prop", "seq={i}", "--prop", "region=eu-west"),
            id="keys-tags-properties",
        ),
        pytest.param(
            ("--tags", "标签,タグ", "--keys", "ключ-{i}", "--body", "héllo wörld ✓ {i}", "--prop", "città=Zürich-{i}"),
            id="unicode",
        ),
    ],
)
def test_messages_of_the_official_producer_decode_exactly(
    rocketmq: ClusterHandle,
    client: RocketMQClient,
    unique: Callable[[str], str],
    fresh_queue: Callable[[], Target],
    options: tuple[str, ...],
) -> None:
    target = fresh_queue()
    count = 5
    sent = produce_to(rocketmq, target, count, *options)

    messages, _ = pull_to_end(client, target.address, target.queue, unique("it-g"))

    assert len(messages) == count
    for message, row in zip(messages, sent):
        assert_is_sent_message(message, row)


@pytest.mark.parametrize("compression", ["ZLIB", "LZ4", "ZSTD"])
def test_bodies_compressed_by_the_producer_decode_to_the_original(
    rocketmq: ClusterHandle,
    client: RocketMQClient,
    unique: Callable[[str], str],
    fresh_queue: Callable[[], Target],
    compression: str,
) -> None:
    target = fresh_queue()
    count = 3
    sent = produce_to(
        rocketmq, target, count, "--body-size", str(COMPRESSIBLE_BODY_BYTES), "--compress", compression, "--tags", "Big"
    )

    result = client.pull_async(target.address, PullSpec(target.queue, unique("it-g")), 0, PULL_BATCH).result()
    messages = decode_messages(result.body)

    # The broker stored them compressed, with the producer's compression type in the flag...
    for record in raw_records(result.body):
        sys_flag = int.from_bytes(record[_SYS_FLAG_AT : _SYS_FLAG_AT + 4], "big")
        assert sys_flag & codes.MSG_FLAG_COMPRESSED
        assert (sys_flag & codes.MSG_COMPRESSION_TYPE_MASK) >> codes.MSG_COMPRESSION_TYPE_SHIFT == (
            _COMPRESSION_TYPE[compression]
        )
        assert int.from_bytes(record[_BODY_LENGTH_AT : _BODY_LENGTH_AT + 4], "big") < COMPRESSIBLE_BODY_BYTES
    # ...and they decode to exactly what was sent.
    assert len(messages) == count
    for message, row in zip(messages, sent):
        assert len(message.body) == COMPRESSIBLE_BODY_BYTES
        assert_is_sent_message(message, row)
        assert not message.sys_flag & codes.MSG_FLAG_COMPRESSED


def test_a_batch_send_is_one_record_per_message_with_consecutive_offsets(
    rocketmq: ClusterHandle, client: RocketMQClient, unique: Callable[[str], str]
) -> None:
    """5.3.3 appends the batch's own properties to every message of a batch, UNIQ_KEY included.
    The Java consumer keeps the later key, so all messages of one send show the batch's id; here
    each shows its own, the id the producer reported."""
    topic = unique("it-batch")
    batch = 10
    count = 2 * batch
    create_topic(rocketmq, topic)
    produce(rocketmq, topic, 1)  # the batches start at offset 1
    sent = produce(
        rocketmq, topic, count, "--batch", str(batch), "--keys", "batch-{i}", "--tags", "Batched", "--prop", "seq={i}"
    )
    consumed = consume(rocketmq, topic, count + 1)
    address, queue = route_queue(client, topic, BROKER_A, 0)

    result = client.pull_async(address, PullSpec(queue, unique("it-g")), 1, PULL_BATCH).result()
    messages = decode_messages(result.body)

    assert len(list(raw_records(result.body))) == count
    assert [m.queue_offset for m in messages] == list(range(1, count + 1)) == [r["queueOffset"] for r in sent]
    for message, row in zip(messages, sent):
        assert_is_consumed_message(message, consumed[position(row)], batch_sent=True)
        assert message.offset_msg_id == row["offsetMsgId"]
        assert (message.body, message.tags, message.keys) == (body_of(row), row["tags"], row["keys"])
        assert message.properties["seq"] == row["properties"]["seq"]
    assert [m.msg_id for m in messages] == [row["msgId"] for row in sent]
    official_ids = [{consumed[position(row)]["msgId"] for row in sent[i : i + batch]} for i in range(0, count, batch)]
    assert [len(ids) for ids in official_ids] == [1, 1]  # the official consumer: the batch's id


def test_an_inner_batch_record_of_a_batch_cq_topic_unwraps_into_its_messages(
    rocketmq: ClusterHandle, client: RocketMQClient, unique: Callable[[str], str]
) -> None:
    """A BatchCQ topic stores a batch send as ONE record (INNER_BATCH); a pull that starts inside
    it gets the whole record, from its first offset: readers must drop what precedes their offset."""
    topic = unique("it-innerbatch")
    batch = 5
    create_topic(rocketmq, topic, 1, (BROKER_A,), "--attr", "+queue.type=BatchCQ")
    sent = produce(
        rocketmq, topic, batch, "--batch", str(batch), "--tags", "Inner", "--keys", "inner-{i}", "--prop", "seq={i}"
    )
    sent += produce(rocketmq, topic, batch, "--batch", str(batch), "--tags", "Inner", "--keys", "inner-{i}")
    consumed = consume(rocketmq, topic, 2 * batch)
    address, queue = route_queue(client, topic, BROKER_A, 0)

    result = client.pull_async(address, PullSpec(queue, unique("it-g")), 0, PULL_BATCH).result()
    records = list(raw_records(result.body))
    messages = decode_messages(result.body)

    assert len(records) == 2
    for record in records:
        sys_flag = int.from_bytes(record[_SYS_FLAG_AT : _SYS_FLAG_AT + 4], "big")
        assert sys_flag & codes.MSG_FLAG_INNER_BATCH and sys_flag & codes.MSG_FLAG_NEED_UNWRAP
    assert result.next_begin_offset == client.call(address, calls.max_offset(queue)) == 2 * batch
    assert [m.queue_offset for m in messages] == [row["queueOffset"] for row in sent] == list(range(2 * batch))
    for message, row in zip(messages, sent):
        official = consumed[position(row)]
        assert message.msg_id == row["msgId"] == official["msgId"]
        assert (message.body, message.tags, message.keys) == (body_of(row), row["tags"], row["keys"])
        assert message.store_timestamp == official["storeTimestamp"]
        assert message.born_timestamp == official["bornTimestamp"]
        official_properties = {k: v for k, v in official["properties"].items() if k not in CONSUMER_ADDED_PROPERTIES}
        assert message.properties == official_properties == row["properties"]

    inside = client.pull_async(address, PullSpec(queue, unique("it-g")), batch + 2, PULL_BATCH).result()
    assert inside.status is PullStatus.FOUND
    assert [m.queue_offset for m in decode_messages(inside.body)] == list(range(batch, 2 * batch))
    assert inside.next_begin_offset == 2 * batch


# ---------------------------------------------------------------------------- filters


def test_tag_filter_passes_hash_collisions_that_the_exact_tag_check_removes(
    rocketmq: ClusterHandle,
    client: RocketMQClient,
    unique: Callable[[str], str],
    fresh_queue: Callable[[], Target],
) -> None:
    target = fresh_queue()
    count = 12
    sent = produce_to(rocketmq, target, count, "--tags", "Aa,BB,TagC")
    group = unique("it-g")

    result = client.pull_async(target.address, PullSpec(target.queue, group, "Aa"), 0, PULL_BATCH).result()
    returned = decode_messages(result.body)

    # The broker compares hash codes only, and Java's "Aa".hashCode() == "BB".hashCode() == 2112.
    assert [(m.queue_offset, m.tags) for m in returned] == [
        (row["queueOffset"], row["tags"]) for row in sent if row["tags"] in ("Aa", "BB")
    ]
    wanted = parse_tag_expression("Aa")
    assert wanted == frozenset({"Aa"})
    kept = [m for m in returned if m.tags in wanted]
    assert [(m.queue_offset, m.msg_id) for m in kept] == [
        (row["queueOffset"], row["msgId"]) for row in sent if row["tags"] == "Aa"
    ]

    # Following next_begin_offset with small pulls walks past the BB and TagC messages to the end.
    messages, results = pull_to_end(client, target.address, target.queue, group, max_messages=2, subscription="Aa")
    assert results[-1].status is PullStatus.NO_NEW_MSG
    assert results[-1].next_begin_offset == client.call(target.address, calls.max_offset(target.queue)) == count
    assert [m.queue_offset for m in messages] == [m.queue_offset for m in returned]


def test_or_of_tags_returns_exactly_those_tags(
    rocketmq: ClusterHandle,
    client: RocketMQClient,
    unique: Callable[[str], str],
    fresh_queue: Callable[[], Target],
) -> None:
    target = fresh_queue()
    sent = produce_to(rocketmq, target, 12, "--tags", "TagA,TagB,TagC")

    messages, _ = pull_to_end(client, target.address, target.queue, unique("it-g"), subscription="TagA || TagB")

    assert [(m.queue_offset, m.tags) for m in messages] == [
        (row["queueOffset"], row["tags"]) for row in sent if row["tags"] in ("TagA", "TagB")
    ]


def test_sql92_subscription_returns_exactly_the_matching_messages(
    rocketmq: ClusterHandle,
    client: RocketMQClient,
    unique: Callable[[str], str],
    fresh_queue: Callable[[], Target],
) -> None:
    target = fresh_queue()
    count = 20
    sent = produce_to(rocketmq, target, count, "--prop", "seq={i}", "--tags", "TagA")

    messages, results = pull_to_end(
        client,
        target.address,
        target.queue,
        unique("it-g"),
        max_messages=4,
        subscription="seq >= 5 AND seq < 10",
        expression_type=EXPRESSION_SQL92,
    )

    expected = [row for row in sent if 5 <= int(row["properties"]["seq"]) < 10]
    assert [m.msg_id for m in messages] == [row["msgId"] for row in expected]
    assert [m.properties["seq"] for m in messages] == ["5", "6", "7", "8", "9"]
    assert results[-1].next_begin_offset == count


# -------------------------------------------------------------------- consumer offsets


def test_consumer_offset_of_a_new_group_is_none_then_what_was_stored(
    rocketmq: ClusterHandle,
    client: RocketMQClient,
    unique: Callable[[str], str],
    fresh_queue: Callable[[], Target],
) -> None:
    target = fresh_queue()
    group = unique("it-group")
    committed = 5
    produce_to(rocketmq, target, 8)

    # The queue's first message is still in memory: a broker asked without setZeroIfNotFound=false
    # would say 0 here.
    assert client.call(target.address, calls.query_consumer_offset(target.queue, group)).offset is None
    client.pull_async(target.address, PullSpec(target.queue, group), 0, 1).result()  # creates the group
    client.call(target.address, calls.update_consumer_offset(target.queue, group, committed))

    assert client.call(target.address, calls.query_consumer_offset(target.queue, group)).offset == committed
    official = {
        (o["broker"], o["queueId"]): o["consumerOffset"]
        for o in rocketmq.tool("offsets", "--topic", target.topic, "--group", group)
    }
    assert official.pop((target.broker, target.queue_id)) == committed
    assert len(official) == POOL_QUEUES - 1
    assert set(official.values()) == {None}


def test_committing_for_a_group_the_broker_never_saw_is_refused(
    rocketmq: ClusterHandle,
    client: RocketMQClient,
    unique: Callable[[str], str],
    fresh_queue: Callable[[], Target],
) -> None:
    target = fresh_queue()
    produce_to(rocketmq, target, 1)

    with pytest.raises(BrokerResponseError) as caught:
        client.call(target.address, calls.update_consumer_offset(target.queue, unique("it-group"), 1))
    assert caught.value.code == codes.ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


# ---------------------------------------------------------------------- search by time


def test_search_offset_by_store_time(
    rocketmq: ClusterHandle, client: RocketMQClient, unique: Callable[[str], str]
) -> None:
    topic = unique("it-search")
    wave = 5
    create_topic(rocketmq, topic, 1, (BROKER_A,))
    first = produce(rocketmq, topic, wave)
    time.sleep(WAVE_GAP_S)
    second = produce(rocketmq, topic, wave)
    stored = consume(rocketmq, topic, 2 * wave)
    first_times = [stored[position(row)]["storeTimestamp"] for row in first]
    second_times = [stored[position(row)]["storeTimestamp"] for row in second]
    assert max(first_times) < min(second_times)
    address, queue = route_queue(client, topic, BROKER_A, 0)
    max_offset = client.call(address, calls.max_offset(queue))
    assert max_offset == 2 * wave

    assert (
        client.call(address, calls.search_offset(queue, second_times[0], Boundary.LOWER)).offset
        == second[0]["queueOffset"]
    )
    assert (
        client.call(address, calls.search_offset(queue, first_times[-1], Boundary.UPPER)).offset
        == first[-1]["queueOffset"]
    )
    assert (
        client.call(address, calls.search_offset(queue, second_times[-1] + ONE_HOUR_MS, Boundary.LOWER)).offset
        == max_offset
    )
    assert client.call(address, calls.search_offset(queue, first_times[0] - ONE_HOUR_MS, Boundary.LOWER)).offset == 0
    # Between the waves: LOWER finds wave 2's first, UPPER wave 1's last.
    between = (first_times[-1] + second_times[0]) // 2
    assert client.call(address, calls.search_offset(queue, between, Boundary.LOWER)).offset == wave
    assert client.call(address, calls.search_offset(queue, between, Boundary.UPPER)).offset == wave - 1
    assert client.call(address, calls.earliest_store_time(queue)) == first_times[0]


# ------------------------------------------------------------------------ create topic


def test_a_topic_created_by_the_client_takes_messages_from_the_official_producer(
    rocketmq: ClusterHandle,
    client: RocketMQClient,
    unique: Callable[[str], str],
    fresh_queue: Callable[[], Target],
) -> None:
    address = fresh_queue().address  # broker-a's, from the route of an existing topic
    topic = unique("it-created")
    queues = 2

    create_topic_on_broker(client, address, topic, queues, BROKER_A)

    # Exactly the topic the client asked for (not one auto-created from TBW102 by a send).
    deadline = time.monotonic() + ROUTE_WAIT_S
    while True:
        try:
            route = client.topic_route(topic)
            break
        except TopicNotFoundError:
            assert time.monotonic() < deadline, f"{topic} never appeared in the route"
            time.sleep(POLL_S)
    assert [(qd.broker_name, qd.read_queue_nums, qd.write_queue_nums, qd.perm) for qd in route.queue_datas] == [
        (BROKER_A, queues, queues, codes.PERM_READ | codes.PERM_WRITE)
    ]
    sent = produce(rocketmq, topic, 3, queue=1)
    _, queue = route_queue(client, topic, BROKER_A, 1)
    messages, _ = pull_to_end(client, address, queue, unique("it-g"))
    assert [m.msg_id for m in messages] == [row["msgId"] for row in sent]


# ------------------------------------------------------------------------------ proxy


def test_proxy_route_names_the_proxy_for_every_broker(
    rocketmq: ClusterHandle, proxy_client: RocketMQClient, unique: Callable[[str], str]
) -> None:
    topic = unique("it-proxy-route")
    create_topic(rocketmq, topic)

    route = proxy_client.topic_route(topic)

    assert route.readable_queues() == sorted(
        MessageQueue(topic, broker, q) for broker in BROKER_NAMES for q in range(QUEUES_PER_BROKER)
    )
    assert {broker: route.master_address(broker) for broker in BROKER_NAMES} == {
        broker: rocketmq.proxy_addr for broker in BROKER_NAMES
    }


@pytest.mark.parametrize("broker", BROKER_NAMES)
def test_pull_offsets_and_search_through_the_proxy(
    rocketmq: ClusterHandle, proxy_client: RocketMQClient, unique: Callable[[str], str], broker: str
) -> None:
    topic = unique("it-proxy")
    group = unique("it-proxy-group")
    queue_id = 1
    count = 9
    committed = 4
    create_topic(rocketmq, topic)
    sent = produce(rocketmq, topic, count, "--tags", "TagA,TagB,TagC", "--keys", "p-{i}", broker=broker, queue=queue_id)
    address, queue = route_queue(proxy_client, topic, broker, queue_id)
    assert address == rocketmq.proxy_addr

    assert proxy_client.call(address, calls.min_offset(queue)) == 0
    assert proxy_client.call(address, calls.max_offset(queue)) == count

    messages, results = pull_to_end(proxy_client, address, queue, group, max_messages=2, subscription="TagB")
    assert [(m.queue_offset, m.msg_id) for m in messages] == [
        (row["queueOffset"], row["msgId"]) for row in sent if row["tags"] == "TagB"
    ]
    for message in messages:
        assert_is_sent_message(message, sent[message.queue_offset])
    assert results[-1].next_begin_offset == count

    assert proxy_client.call(address, calls.query_consumer_offset(queue, group)).offset is None
    proxy_client.call(address, calls.update_consumer_offset(queue, group, committed))
    assert proxy_client.call(address, calls.query_consumer_offset(queue, group)).offset == committed
    official = {
        (o["broker"], o["queueId"]): o["consumerOffset"]
        for o in rocketmq.tool("offsets", "--topic", topic, "--group", group)
    }
    assert official.pop((broker, queue_id)) == committed
    assert set(official.values()) == {None}

    times = [
        m.store_timestamp
        for m in decode_messages(proxy_client.pull_async(address, PullSpec(queue, group), 0, PULL_BATCH).result().body)
    ]
    assert proxy_client.call(address, calls.search_offset(queue, times[0] - ONE_HOUR_MS, Boundary.LOWER)).offset == 0
    assert (
        proxy_client.call(address, calls.search_offset(queue, times[-1] + ONE_HOUR_MS, Boundary.LOWER)).offset == count
    )
    assert proxy_client.call(address, calls.search_offset(queue, times[-1], Boundary.UPPER)).offset == count - 1


def test_the_proxy_does_not_serve_earliest_store_time(
    rocketmq: ClusterHandle,
    proxy_client: RocketMQClient,
    fresh_queue: Callable[[], Target],
) -> None:
    """GET_EARLIEST_MSG_STORETIME is not among the codes the 5.x proxy's remoting port forwards."""
    target = fresh_queue()
    produce_to(rocketmq, target, 1)
    address, queue = route_queue(proxy_client, target.topic, target.broker, target.queue_id)

    with pytest.raises(BrokerResponseError) as caught:
        proxy_client.call(address, calls.earliest_store_time(queue))
    assert caught.value.code == codes.ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert caught.value.retriable is False


# ------------------------------------------------------------------------ connections


def test_a_closed_port_is_a_retriable_connection_failure(unique: Callable[[str], str]) -> None:
    address = f"{LOOPBACK}:{closed_port()}"
    with RocketMQClient(ClientConfig((address,), request_timeout=2.0)) as dead:
        with pytest.raises(NameServersUnavailableError) as caught:
            dead.topic_route(unique("it-any"))
    assert caught.value.retriable is True
    assert isinstance(caught.value.answers[address], ConnectionFailedError)


def test_route_falls_over_to_the_next_name_server(rocketmq: ClusterHandle, unique: Callable[[str], str]) -> None:
    topic = unique("it-failover")
    create_topic(rocketmq, topic)
    servers = (f"{LOOPBACK}:{closed_port()}", rocketmq.namesrv_addr)
    with RocketMQClient(ClientConfig(servers, request_timeout=2.0)) as c:
        assert len(c.topic_route(topic).readable_queues()) == len(BROKER_NAMES) * QUEUES_PER_BROKER
        # Asked again, it goes on using the name server that answered.
        assert len(c.topic_route(topic).readable_queues()) == len(BROKER_NAMES) * QUEUES_PER_BROKER


# ------------------------------------------------------------------------ concurrency


def test_threads_pulling_different_queues_over_one_client_all_get_their_own_data(
    rocketmq: ClusterHandle, client: RocketMQClient, unique: Callable[[str], str]
) -> None:
    topic = unique("it-threads")
    per_queue = 40
    queues = len(BROKER_NAMES) * QUEUES_PER_BROKER
    create_topic(rocketmq, topic)
    sent = produce(rocketmq, topic, per_queue * queues, "--keys", "t-{i}", broker=None)
    expected: dict[tuple[str, int], list[str]] = {}
    for row in sent:
        expected.setdefault((row["broker"], row["queueId"]), []).append(row["msgId"])
    assert len(expected) == queues
    route = client.topic_route(topic)
    start = threading.Barrier(queues)
    group = unique("it-g")

    def read(queue: MessageQueue) -> list[Message]:
        address = route.master_address(queue.broker_name)
        assert address is not None
        start.wait()
        messages, _ = pull_to_end(client, address, queue, group, max_messages=SMALL_PULL)
        return messages

    with ThreadPoolExecutor(max_workers=queues) as pool:
        results = dict(zip(route.readable_queues(), pool.map(read, route.readable_queues())))

    for queue, messages in results.items():
        assert [m.msg_id for m in messages] == expected[(queue.broker_name, queue.queue_id)]
        assert {(m.topic, m.queue_id) for m in messages} == {(topic, queue.queue_id)}
        assert [m.queue_offset for m in messages] == list(range(len(messages)))


# ------------------------------------------------------------------------------- TLS


@pytest.mark.parametrize("through", ["brokers", "proxy"])
def test_tls_reads_what_a_plain_connection_reads(
    rocketmq: ClusterHandle, client: RocketMQClient, unique: Callable[[str], str], through: str
) -> None:
    """Name servers, brokers and the proxy accept TLS and plain connections on the same port by
    default (``tls.server.mode=permissive``, with a self-signed certificate each server makes, which
    only ``tls_verify=False`` accepts; test_tls.py verifies certificates)."""
    topic = unique("it-tls")
    create_topic(rocketmq, topic, 1, (BROKER_A,))
    produce(rocketmq, topic, 20, "--keys", "tls-{i}", broker=BROKER_A)
    entry = rocketmq.namesrv_addr if through == "brokers" else rocketmq.proxy_addr
    assert entry is not None
    plain_route = client.topic_route(topic)
    queue = plain_route.readable_queues()[0]
    plain_address = plain_route.master_address(queue.broker_name)
    assert plain_address is not None
    expected, _ = pull_to_end(client, plain_address, queue, unique("it-g"))
    with RocketMQClient(ClientConfig((entry,), tls=True, tls_verify=False)) as secure:
        route = secure.topic_route(topic)
        address = route.master_address(queue.broker_name)
        assert address is not None
        messages, _ = pull_to_end(secure, address, queue, unique("it-g"))
        assert [m.keys for m in messages] == [f"tls-{i}" for i in range(20)]
        assert [m.msg_id for m in messages] == [m.msg_id for m in expected]
        for server in (entry, address):
            assert secure._pool.get(server).tls_version, server
