"""A task's sends against a fake broker connection: batching per queue, compression, one send on
the wire per queue, retries on another broker or the same queue, stored-but-unflushed answers,
heartbeats, and the error after the retries."""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any

import pytest

from rocketmq_spark.records.outgoing import UniqueIds
from rocketmq_spark.records.properties import parse_properties
from rocketmq_spark.remoting.codes import MSG_FLAG_TRANSACTION_PREPARED, RequestCode, ResponseCode
from rocketmq_spark.remoting.errors import ConnectionFailedError
from rocketmq_spark.remoting.replicas import MIN_ROUTE_REFRESH_S, Replicas
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.remoting.route import BrokerData, TopicRoute
from rocketmq_spark.sink import producer as producer_module
from rocketmq_spark.sink import sender as sender_module
from rocketmq_spark.sink.decision_record import PROPERTY_ATTEMPT, HalfSpan
from rocketmq_spark.sink.halves import HalfLog, Transaction
from rocketmq_spark.sink.messages import Row, RowError
from rocketmq_spark.sink.options import PINNED_RETRY_PAUSE_S, SinkOptions, parse_sink_options, sink_retry
from rocketmq_spark.sink.placing import SendFailedError
from rocketmq_spark.sink.producer import TaskProducer
from rocketmq_spark.sink.queues import QueuePicker
from rocketmq_spark.sink.shared import HEARTBEAT_INTERVAL_S, WorkerProducer
from tests.fake_sends import VERSION_4, FakeClient, inner_bodies, route


def no_wait(options: SinkOptions, pauses: list[float] | None = None) -> Retry:
    """The task's retry policy, its pauses noted in ``pauses`` instead of waited."""
    noted: list[float] = [] if pauses is None else pauses
    return dataclasses.replace(sink_retry(options), sleep=noted.append)


def task(client: FakeClient, pauses: list[float] | None = None, **options: str) -> TaskProducer:
    parsed = parse_sink_options({"nameServer": "h:1", **options})
    shared = WorkerProducer(
        client, "g", "ip@x", UniqueIds(b"\x7f\x00\x00\x01", fixed=1), Replicas(lambda topic: route())
    )
    picker = QueuePicker(shared.replicas)
    picker._next = 0  # start at a/0, so that tests know the round-robin order
    return TaskProducer(parsed, shared, no_wait(parsed, pauses), picker)


def test_rows_of_one_queue_go_in_batches_up_to_batch_max_bytes() -> None:
    client = FakeClient()
    sending = task(client, batchMaxBytes="350")
    for i in range(10):
        sending.add(Row("t", f"m{i:02d}".encode() * 10, sharding_key="k"))
    sending.close()
    assert [s.code for s in client.sent] == [RequestCode.SEND_BATCH_MESSAGE] * 3 + [RequestCode.SEND_MESSAGE_V2]
    assert [len(inner_bodies(s.body)) for s in client.sent[:3]] == [
        3,
        3,
        3,
    ]  # 104 bytes a message: 22 + 30 + 52 of properties
    bodies = [b for s in client.sent[:3] for b in inner_bodies(s.body)] + [
        client.sent[3].body
    ]  # a batch of one goes alone
    assert bodies == [f"m{i:02d}".encode() * 10 for i in range(10)]
    assert sending.stored == 10 and client.heartbeats == [client.sent[0].address]


def test_zero_batch_bytes_and_delays_send_one_at_a_time_and_large_bodies_are_compressed() -> None:
    client = FakeClient()
    sending = task(client, batchMaxBytes="0", compressBodyOverBytes="100")
    sending.add(Row("t", b"z" * 100, delay_level=2))
    sending.add(Row("t", b"small"))
    sending.close()
    big, small = client.sent
    assert (big.code, big.fields["f"], zlib.decompress(big.body)) == (RequestCode.SEND_MESSAGE_V2, 0x301, b"z" * 100)
    assert (small.fields["f"], small.body) == (0, b"small")
    assert parse_properties(str(big.fields["i"]))["DELAY"] == "2"


def test_a_delayed_row_flushes_its_queue_s_batch_first_and_is_never_batched() -> None:
    client = FakeClient()
    sending = task(client)
    for body in (b"1", b"2"):
        sending.add(Row("t", body, broker_name="a", queue_id=0))
    sending.add(Row("t", b"3", broker_name="a", queue_id=0, delay_level=1))
    sending.add(Row("t", b"4", broker_name="a", queue_id=0))
    sending.close()
    assert [s.code for s in client.sent] == [
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_MESSAGE_V2,
    ]
    assert [inner_bodies(client.sent[0].body), client.sent[1].body, client.sent[2].body] == [[b"1", b"2"], b"3", b"4"]


def test_unordered_rows_that_fail_go_to_another_broker_with_the_same_ids() -> None:
    client = FakeClient({"a:1": [ResponseCode.SYSTEM_BUSY]})
    sending = task(client, batchMaxBytes="0")
    sending.add(Row("t", b"x"))
    sending.close()
    first, again = client.sent
    assert (first.address, again.address) == ("a:1", "b:1")
    assert parse_properties(str(first.fields["i"]))["UNIQ_KEY"] == parse_properties(str(again.fields["i"]))["UNIQ_KEY"]
    assert sending.stored == 1


def test_pinned_rows_are_retried_on_their_queue() -> None:
    lost = ConnectionFailedError("connection to a:1 lost", "a:1")
    client = FakeClient({"a:1": [lost, ResponseCode.SYSTEM_BUSY]})
    sending = task(client)
    sending.add(Row("t", b"x", broker_name="a", queue_id=1))
    sending.close()
    assert [(s.address, s.queue) for s in client.sent] == [("a:1", ("a", 1))] * 3


def test_the_error_after_the_retries_names_topic_queue_broker_and_answer() -> None:
    client = FakeClient({"a:1": [ResponseCode.SYSTEM_ERROR] * 5})
    sending = task(client, retries="1")
    sending.add(Row("t", b"x", broker_name="a", queue_id=1))
    with pytest.raises(SendFailedError) as failed:
        sending.close()
    assert str(failed.value).startswith("sending to topic t, queue a/1, failed after 2 attempt(s)")
    assert len(client.sent) == 2
    assert "broker a at a:1 answered: SYSTEM_ERROR (1)" in str(failed.value)


def test_only_a_send_tried_again_on_its_own_queue_pauses_and_each_pause_is_the_same() -> None:
    lost = ConnectionFailedError("connection to a:1 lost", "a:1")
    pauses: list[float] = []
    sending = task(FakeClient({"a:1": [lost, ResponseCode.SYSTEM_BUSY]}), pauses)
    sending.add(Row("t", b"x", broker_name="a", queue_id=1))
    sending.close()
    assert pauses == [PINNED_RETRY_PAUSE_S, PINNED_RETRY_PAUSE_S]
    elsewhere: list[float] = []
    sending = task(FakeClient({"a:1": [ResponseCode.SYSTEM_BUSY]}), elsewhere, batchMaxBytes="0")
    sending.add(Row("t", b"x"))
    sending.close()
    assert (elsewhere, sending.stored) == ([], 1)


def test_zero_retries_send_once() -> None:
    client = FakeClient({"a:1": [ResponseCode.SYSTEM_BUSY]})
    sending = task(client, retries="0", batchMaxBytes="0")
    sending.add(Row("t", b"x"))
    with pytest.raises(SendFailedError, match="after 1 attempt.*SYSTEM_BUSY"):
        sending.close()
    assert len(client.sent) == 1


def test_refusals_a_retry_cannot_fix_fail_at_once() -> None:
    client = FakeClient({"a:1": [ResponseCode.MESSAGE_ILLEGAL]})
    sending = task(client)
    sending.add(Row("t", b"x"))
    with pytest.raises(SendFailedError, match="after 1 attempt.*MESSAGE_ILLEGAL"):
        sending.close()
    assert len(client.sent) == 1


@pytest.mark.parametrize(
    "code", [ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE]
)
def test_stored_but_unflushed_answers_are_accepted_not_resent(code: int, caplog: pytest.LogCaptureFixture) -> None:
    client = FakeClient({"a:1": [code]})
    sending = task(client)
    sending.add(Row("t", b"x"))
    sending.close()
    assert (len(client.sent), sending.stored, sending.unflushed) == (1, 1, 1)
    assert "stored but" in caplog.text


def test_many_queues_have_sends_on_the_wire_together() -> None:
    client = FakeClient()
    sending = task(client, batchMaxBytes="0")
    for _ in range(4):
        sending.add(Row("t", b"x"))
    assert len(client.on_wire) == 4  # a/0, a/1, b/0, b/1, none waited for yet
    sending.close()
    assert not client.on_wire and sending.stored == 4


def test_a_timer_row_for_a_4_9_broker_fails_before_it_is_sent() -> None:
    client = FakeClient(version=VERSION_4)
    with pytest.raises(Exception, match="deliverTime, but its broker runs RocketMQ 4.9"):
        task(client).add(Row("t", b"x", deliver_ms=1))
    assert client.sent == []


def test_a_broker_that_cannot_be_registered_with_is_passed_over() -> None:
    client = FakeClient(unreachable=frozenset({"a:1"}))
    sending = task(client)
    sending.add(Row("t", b"x"))
    sending.close()
    assert [s.address for s in client.sent] == ["b:1"]


def test_a_body_larger_than_a_frame_is_refused_before_it_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(producer_module, "MAX_SEND_BODY_BYTES", 10)
    client = FakeClient()
    with pytest.raises(RowError, match="a row of topic t has a body of 11 bytes, more than a send can carry"):
        task(client).add(Row("t", b"x" * 11))
    assert client.sent == []


def test_the_window_bounds_the_sends_on_the_wire(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sender_module, "MAX_IN_FLIGHT", 2)
    client = FakeClient()
    sending = task(client, batchMaxBytes="0")
    for _ in range(8):
        sending.add(Row("t", b"x"))
    sending.close()
    assert (client.most_on_wire, sending.stored) == (2, 8)


def test_heartbeats_go_once_per_broker_and_again_after_the_interval() -> None:
    now = [0.0]
    client = FakeClient()
    shared = WorkerProducer(
        client,
        "g",
        "ip@x",
        UniqueIds(b"\x7f\x00\x00\x01", fixed=1),
        Replicas(lambda topic: route()),
        clock=lambda: now[0],
    )
    assert shared.register("a:1") and shared.register("a:1")
    assert client.heartbeats == ["a:1"]
    now[0] += HEARTBEAT_INTERVAL_S
    shared.register("a:1")
    assert client.heartbeats == ["a:1", "a:1"]
    assert not WorkerProducer(FakeClient(version=VERSION_4), "g", "ip@x", shared.ids, shared.replicas).register("b:1")


def test_a_pinned_row_waits_for_its_broker_to_take_heartbeats_again() -> None:
    client = FakeClient()
    calls = client.call
    refusals = [ConnectionFailedError("cannot connect to a:1", "a:1")]

    def refuse_once(address: str, call: Any, timeout: float | None = None) -> Any:
        if refusals:
            raise refusals.pop()
        return calls(address, call, timeout)

    client.call = refuse_once  # type: ignore[method-assign]
    sending = task(client)
    sending.add(Row("t", b"x", broker_name="a", queue_id=0))
    sending.close()
    assert [(s.address, s.queue) for s in client.sent] == [("a:1", ("a", 0))]


def test_a_pinned_send_that_failed_goes_to_the_master_the_routes_list_after_its_pause() -> None:
    """The routes are asked again at most once per second; the pause before a pinned send is
    tried again is that long, so the retry goes where the name server says then."""
    assert PINNED_RETRY_PAUSE_S >= MIN_ROUTE_REFRESH_S
    now = [0.0]
    moved = {"a": "a:1"}
    asked: list[float] = []

    def fetch(topic: str) -> TopicRoute:
        asked.append(now[0])
        listed = route()
        return dataclasses.replace(listed, brokers={**listed.brokers, "a": BrokerData("a", {0: moved["a"]})})

    def pause(seconds: float) -> None:
        moved["a"] = "a:2"  # a new master elected while the send waits
        now[0] += seconds

    lost = ConnectionFailedError("connection to a:1 lost", "a:1")
    client = FakeClient({"a:1": [lost]})
    parsed = parse_sink_options({"nameServer": "h:1"})
    clock = lambda: now[0]  # noqa: E731
    shared = WorkerProducer(client, "g", "ip@x", UniqueIds(b"\x7f\x00\x00\x01", fixed=1), Replicas(fetch, clock))
    sending = TaskProducer(
        parsed, shared, dataclasses.replace(sink_retry(parsed), sleep=pause), QueuePicker(shared.replicas, clock)
    )
    sending.add(Row("t", b"x", broker_name="a", queue_id=0))
    sending.close()
    assert [(s.address, s.queue) for s in client.sent] == [("a:1", ("a", 0)), ("a:2", ("a", 0))]
    assert asked == [0.0, PINNED_RETRY_PAUSE_S]


def half_task(client: FakeClient, halves: HalfLog) -> TaskProducer:
    parsed = parse_sink_options({"nameServer": "h:1", "deliveryGuarantee": "exactly-once", "producerGroup": "g"})
    shared = WorkerProducer(
        client, "g", "ip@x", UniqueIds(b"\x7f\x00\x00\x01", fixed=1), Replicas(lambda topic: route())
    )
    picker = QueuePicker(shared.replicas)
    picker._next = 0
    return TaskProducer(parsed, shared, no_wait(parsed), picker, halves=halves)


def test_halves_go_alone_flagged_prepared_with_the_attempts_mark_and_their_offsets_are_kept() -> None:
    client = FakeClient(many_per_queue=True)
    halves = HalfLog("g", Transaction("query-1", 7, "run-1"), attempt=42)
    sending = half_task(client, halves)
    for i in range(3):
        sending.add(Row("t", f"h{i}".encode(), tags="x"))
    sending.close()
    assert [s.code for s in client.sent] == [RequestCode.SEND_MESSAGE_V2] * 3  # never a batch
    for sent in client.sent:
        assert int(str(sent.fields["f"])) & MSG_FLAG_TRANSACTION_PREPARED
        properties = parse_properties(str(sent.fields["i"]))
        assert (properties["TRAN_MSG"], properties["PGROUP"], properties["TAGS"]) == ("true", "g", "x")
        assert properties[PROPERTY_ATTEMPT] == "query-1/7/run-1/42"
    sent = halves.sent
    assert [h.commit_log_offset for h in sent.halves()] == sent.half_offset == [0, 1, 2]  # the fake's offsets
    assert [(q.broker_name, q.queue_id) for q in sent.queues()] == [("a", 0), ("a", 1), ("b", 0)]
    assert sent.spans().spans == (HalfSpan("a", 0, 1, 2), HalfSpan("b", 2, 2, 1))


def test_unordered_halves_of_one_queue_travel_together_and_ordered_ones_one_at_a_time() -> None:
    client = FakeClient(many_per_queue=True)
    sending = half_task(client, HalfLog("g", Transaction("q", 1, "r"), attempt=1))
    for _ in range(8):
        sending.add(Row("t", b"x", broker_name="a", queue_id=0))  # an explicit queue: ordered
    assert client.most_on_one_queue == 1
    for _ in range(8):
        sending.add(Row("t", b"y"))
    sending.close()
    assert client.most_on_one_queue > 1 and sending.stored == 16
