"""Arrow batches sent a batch at a time (``sink.vectorized``) send the same bytes as their rows sent
one by one: the same batch records for the same rows and ids, the same sends per queue, the same
round robin; and a batch with anything unusual goes row by row, with the same errors."""

from __future__ import annotations

import dataclasses
import json
import random
import struct
from typing import Any

import pyarrow as pa
import pytest

from rocketmq_spark.records.outgoing import UniqueIds, encode_batch, month_start_ms
from rocketmq_spark.records.outgoing_batch import encode_records, record_parts
from rocketmq_spark.records.properties import parse_properties
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from rocketmq_spark.remoting.replicas import Replicas
from rocketmq_spark.remoting.route import TopicRoute, parse_route
from rocketmq_spark.sink import task as writer_module
from rocketmq_spark.sink import vectorized as vectorized_module
from rocketmq_spark.sink.messages import Row, RowError, encoded_properties, rows_of
from rocketmq_spark.sink.options import parse_sink_options, sink_retry
from rocketmq_spark.sink.producer import TaskProducer
from rocketmq_spark.sink.queues import QueuePicker
from rocketmq_spark.sink.shared import WorkerProducer
from rocketmq_spark.sink.vectorized import send_arrow_batch, vectorized
from tests.fake_sends import FakeClient, inner_bodies

LOOPBACK = b"\x7f\x00\x00\x01"
NOW_MS = month_start_ms(1_700_000_000_000)[0] + 0x01020304
# Just below the counter's wrap, so that runs of ids cross it.
COUNTER_NEAR_WRAP = 0xFFF0
HEAD_BYTES = 20
PROPERTIES_LENGTH_BYTES = 2
TEXTS = ("", "a", "paid", "k1 k2", "é€😀", "x" * 40)


def inner_properties(body: bytes) -> list[dict[str, str]]:
    """The properties of a batch send's messages."""
    found, position = [], 0
    while position < len(body):
        size, _, _, _, length = struct.unpack_from(">iiiii", body, position)
        start = position + HEAD_BYTES + length + PROPERTIES_LENGTH_BYTES
        found.append(parse_properties(body[start : position + size].decode()))
        position += size
    return found


def ids() -> UniqueIds:
    made = UniqueIds(LOOPBACK, clock=lambda: NOW_MS, fixed=0xCAFEBABE)
    for _ in range(COUNTER_NEAR_WRAP):
        made.next()
    return made


def text(rnd: random.Random) -> str | None:
    return None if rnd.random() < 0.2 else rnd.choice(TEXTS) + rnd.choice(TEXTS)


def random_columns(seed: int, count: int, max_body: int = 1500) -> dict[str, list[Any]]:
    rnd = random.Random(seed)
    return {
        "body": [rnd.randbytes(rnd.randint(1, max_body)) for _ in range(count)],
        "tags": [text(rnd) for _ in range(count)],
        "keys": [text(rnd) for _ in range(count)],
    }


@pytest.mark.parametrize("namespace", [None, "ns1"])
@pytest.mark.parametrize("seed", range(5))
def test_records_are_byte_identical_to_encode_batch(seed: int, namespace: str | None) -> None:
    columns = random_columns(seed, 300)
    one_by_one = ids()
    expected = encode_batch(
        (0, body, encoded_properties(Row("t", body, tags, keys), one_by_one.next(), five_x=True, namespace=namespace))
        for body, tags, keys in zip(columns["body"], columns["tags"], columns["keys"])
    )
    id_head, first = ids().reserve(300)
    records = encode_records(
        pa.array(columns["body"], pa.binary()),
        pa.array(columns["tags"], pa.string()),
        pa.array(columns["keys"], pa.string()),
        id_head=id_head,
        first_counter=first,
        namespace=namespace,
    )
    assert records.data.to_pybytes() == expected
    assert inner_bodies(expected) == columns["body"]


def test_records_without_tags_or_keys_columns_are_byte_identical() -> None:
    bodies = random_columns(7, 50)["body"]
    one_by_one = ids()
    expected = encode_batch(
        (0, b, encoded_properties(Row("t", b), one_by_one.next(), five_x=False, namespace=None)) for b in bodies
    )
    id_head, first = ids().reserve(50)
    records = encode_records(
        pa.array(bodies, pa.binary()), None, None, id_head=id_head, first_counter=first, namespace=None
    )
    assert records.data.to_pybytes() == expected
    body, properties = record_parts(records.array[0].as_py())
    assert (body, properties) == (
        bodies[0],
        encoded_properties(Row("t", bodies[0]), f"{id_head}FFF0", five_x=True, namespace=None),
    )


def test_reserved_ids_are_next_s_ids_and_next_continues_after_them() -> None:
    one_by_one, reserved = ids(), ids()
    expected = [one_by_one.next() for _ in range(40)]
    id_head, first = reserved.reserve(39)
    assert [f"{id_head}{(first + i) & 0xFFFF:04X}" for i in range(39)] == expected[:39]
    assert reserved.next() == expected[39]


def topic_route(topic: str) -> TopicRoute:
    """``topic`` on brokers a and b (masters a:1 and b:1), three queues each."""
    datas = [{"brokerName": n, "readQueueNums": 3, "writeQueueNums": 3, "perm": 6} for n in ("a", "b")]
    brokers = [{"brokerName": n, "brokerAddrs": {"0": f"{n}:1"}} for n in ("a", "b")]
    return parse_route(topic, json.dumps({"queueDatas": datas, "brokerDatas": brokers}).encode())


def producer(client: FakeClient) -> WorkerProducer:
    """The producer a task shares, over ``client`` and ``topic_route``."""
    return WorkerProducer(client, "g", "ip@x", ids(), Replicas(topic_route))


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    """The client a write task's shared producer sends through."""
    client = FakeClient()
    shared = producer(client)
    monkeypatch.setattr(writer_module, "shared_producer", lambda config, group: shared)
    return client


def no_wait(seconds: float) -> None:
    """The task's retries pause without waiting."""


def task(client: FakeClient, **options: str) -> TaskProducer:
    parsed = parse_sink_options({"nameServer": "h:1", **options})
    shared = producer(client)
    picker = QueuePicker(shared.replicas)
    picker._next = 5
    return TaskProducer(parsed, shared, dataclasses.replace(sink_retry(parsed), sleep=no_wait), picker)


def sends_by_queue(client: FakeClient) -> dict[tuple[str, int], list[tuple[int, bytes, object, object]]]:
    found: dict[tuple[str, int], list[tuple[int, bytes, object, object]]] = {}
    for sent in client.sent:
        found.setdefault(sent.queue, []).append((sent.code, sent.body, sent.fields["b"], sent.fields["i"]))
    return found


def both_ways(batches: list[pa.RecordBatch], names: dict[str, str], **options: str) -> tuple[FakeClient, FakeClient]:
    """The batches sent row by row and a batch at a time, each to a client of its own."""
    rows, whole = FakeClient(), FakeClient()
    one_by_one, at_once = task(rows, **options), task(whole, **options)
    parsed = parse_sink_options({"nameServer": "h:1", **options})
    assert vectorized(parsed, names)
    for batch in batches:
        for row in rows_of(batch, names, parsed.topic, parsed.namespace):
            one_by_one.add(row)
        assert send_arrow_batch(at_once, batch, names, parsed)
    one_by_one.close()
    at_once.close()
    assert one_by_one.stored == at_once.stored == sum(b.num_rows for b in batches)
    return rows, whole


@pytest.mark.parametrize("namespace", [None, "ns1"])
@pytest.mark.parametrize("limit", ["3000", "1048576"])
def test_a_batch_at_a_time_sends_what_rows_one_by_one_send(limit: str, namespace: str | None) -> None:
    batches = [pa.RecordBatch.from_pydict(random_columns(seed, 97), schema=SCHEMA) for seed in range(4)]
    extra = {"namespace": namespace} if namespace else {}
    rows, whole = both_ways(
        batches, {"body": "body", "tags": "tags", "keys": "keys"}, topic="t", batchMaxBytes=limit, **extra
    )
    assert sends_by_queue(whole) == sends_by_queue(rows)
    assert len(whole.sent) == len(rows.sent)


SCHEMA = pa.schema([("body", pa.binary()), ("tags", pa.string()), ("keys", pa.string())])


def test_topics_of_a_column_each_take_their_turns_and_a_lone_row_goes_alone_compressed() -> None:
    columns = {"Body": ["x" * 5000, "yy", "zzz"], "TOPIC": [" u ", "v", "u"]}
    batch = pa.RecordBatch.from_pydict(columns)
    client = FakeClient()
    sending = task(client, compressBodyOverBytes="4096")
    parsed = parse_sink_options({"nameServer": "h:1"})
    assert send_arrow_batch(sending, batch, {"body": "Body", "topic": "TOPIC"}, parsed)
    sending.close()
    by_topic = {(s.fields["b"], s.code, s.fields["f"]) for s in client.sent}
    assert by_topic == {
        ("u", RequestCode.SEND_MESSAGE_V2, 0x301),
        ("u", RequestCode.SEND_MESSAGE_V2, 0),
        ("v", RequestCode.SEND_MESSAGE_V2, 0),
    }
    assert sending.stored == 3


@pytest.mark.parametrize(
    ("columns", "options", "error"),
    [
        ({"body": [b"a", None]}, {"topic": "t"}, "a row of topic t has a null body"),
        ({"body": [b"a", b""]}, {"topic": "t"}, "a row of topic t has an empty body"),
        ({"body": [b"a"], "topic": [None]}, {}, "a row has no topic"),
        ({"body": [b"a"], "topic": ["  "]}, {}, "a row has no topic"),
        ({"body": [b"a"], "tags": ["t" * 40000]}, {"topic": "t"}, "more than RocketMQ's 32767"),
    ],
)
def test_a_batch_with_a_bad_row_goes_row_by_row_and_fails_as_before(
    columns: dict[str, list[Any]], options: dict[str, str], error: str
) -> None:
    batch = pa.RecordBatch.from_pydict(columns)
    names = {name: name for name in columns}
    parsed = parse_sink_options({"nameServer": "h:1", **options})
    client = FakeClient()
    assert not send_arrow_batch(task(client, **options), batch, names, parsed)
    with pytest.raises(RowError, match=error):
        for row in rows_of(batch, names, parsed.topic, parsed.namespace):
            task(client, **options).add(row)
    assert client.sent == []


def test_a_row_too_large_for_a_batch_sends_the_batch_row_by_row() -> None:
    batch = pa.RecordBatch.from_pydict({"body": [b"a", b"b" * 200]})
    parsed = parse_sink_options({"nameServer": "h:1", "topic": "t", "batchMaxBytes": "200"})
    assert not send_arrow_batch(task(FakeClient(), topic="t", batchMaxBytes="200"), batch, {"body": "body"}, parsed)


def test_other_columns_or_unbatched_writes_go_row_by_row() -> None:
    batched = parse_sink_options({"nameServer": "h:1", "topic": "t"})
    assert vectorized(batched, {"body": "body", "topic": "topic", "tags": "tags", "keys": "keys"})
    assert not vectorized(batched, {"body": "body", "shardingKey": "shardingKey"})
    assert not vectorized(batched, {"body": "body", "properties": "p"})
    assert not vectorized(parse_sink_options({"nameServer": "h:1", "topic": "t", "batchMaxBytes": "0"}), {"body": "b"})


def test_spread_is_what_next_queue_gives_one_by_one_with_failed_brokers() -> None:
    for failed in ([], ["a:1"], ["a:1", "b:1"]):
        routes = Replicas(topic_route)
        one, many = QueuePicker(routes), QueuePicker(routes)
        one._next = many._next = 4
        for address in failed:
            routes.failed(address, "t")
        for count in (1, 7, 13):
            expected = [one.next_queue("t") for _ in range(count)]
            queues, chosen = many.spread("t", count)
            assert [queues[i] for i in chosen] == expected
        assert one.next_queue("t") == many.next_queue("t")


def test_records_that_fail_go_to_another_broker_with_the_same_bytes() -> None:
    client = FakeClient({"a:1": [ResponseCode.SYSTEM_BUSY]})
    sending = task(client, topic="t")
    batch = pa.RecordBatch.from_pydict({"body": [b"1", b"2", b"3", b"4", b"5", b"6"]})
    assert send_arrow_batch(sending, batch, {"body": "body"}, parse_sink_options({"nameServer": "h:1", "topic": "t"}))
    sending.close()
    failed = next(s for s in client.sent if s.address == "a:1")
    again = [s for s in client.sent if s.address == "b:1" and s.body == failed.body]
    assert again and sending.stored == 6


def test_a_broker_that_cannot_be_registered_with_gets_no_rows() -> None:
    client = FakeClient(unreachable=frozenset({"a:1"}))
    sending = task(client, topic="t")
    batch = pa.RecordBatch.from_pydict({"body": [b"%d" % i for i in range(12)]})
    assert send_arrow_batch(sending, batch, {"body": "body"}, parse_sink_options({"nameServer": "h:1", "topic": "t"}))
    sending.close()
    assert {s.address for s in client.sent} == {"b:1"}
    assert sorted(b for s in client.sent for b in inner_bodies(s.body)) == sorted(b"%d" % i for i in range(12))


def test_a_write_task_sends_arrow_batches_a_batch_at_a_time_and_bad_ones_row_by_row(
    monkeypatch: pytest.MonkeyPatch, written: FakeClient
) -> None:
    client = written
    monkeypatch.setattr(vectorized_module, "MAX_ROWS_AT_ONCE", 7)
    options = parse_sink_options({"nameServer": "h:1", "topic": "t"})
    batches = [pa.RecordBatch.from_pydict({"body": [b"%d" % i for i in range(50)]}) for _ in range(3)]
    assert writer_module.write_task(options, {"body": "body"}, iter(batches)) == writer_module.WrittenRows(150, 0)
    assert sorted(b for s in client.sent for b in inner_bodies(s.body)) == sorted([b"%d" % i for i in range(50)] * 3)
    unique_ids = [m["UNIQ_KEY"] for s in client.sent for m in inner_properties(s.body)]
    assert len(set(unique_ids)) == 150
    bad = pa.RecordBatch.from_pydict({"body": [b"1", None]})
    with pytest.raises(RowError, match="a row of topic t has a null body"):
        writer_module.write_task(options, {"body": "body"}, iter([batches[0], bad]))


def test_spark_rows_of_a_4_0_stream_are_sent_a_chunk_at_a_time_and_bad_ones_row_by_row(written: FakeClient) -> None:
    from pyspark.sql import Row as SparkRow

    client = written
    options = parse_sink_options({"nameServer": "h:1"})
    rows = [SparkRow(Body=bytearray(b"%d" % i), topic="t", tags="a" if i % 2 else None) for i in range(20)]
    names = {"body": "Body", "topic": "topic", "tags": "tags"}
    assert writer_module.write_task(options, names, iter(rows)) == writer_module.WrittenRows(20, 0)
    assert sorted(b for s in client.sent for b in inner_bodies(s.body)) == sorted(b"%d" % i for i in range(20))
    assert {s.code for s in client.sent} == {RequestCode.SEND_BATCH_MESSAGE}
    with pytest.raises(RowError, match="a row has no topic"):
        writer_module.write_task(options, names, iter([*rows, SparkRow(Body=bytearray(b"x"), topic=None, tags=None)]))
