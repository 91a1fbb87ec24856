"""The decision record: spans of the half queue per task attempt and broker, read back as written,
small for a batch of a million rows, and refused clearly when it cannot be read or sent."""

from __future__ import annotations

import pytest

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.errors import ProtocolError
from rocketmq_spark.remoting.transactions import Half
from rocketmq_spark.sink.decision_record import (
    MAX_RECORD_BYTES,
    Decision,
    HalfSpan,
    TaskHalves,
    attempt_mark,
    record_key,
)

QUERY = "0c1f6a52-2b3e-4bd5-9d55-0f7d3a2c9b10"
RUN = "5a0e4f10-77c1-4f4b-8f7e-3f1f6d2f0a11"


def half(broker: str, offset: int) -> Half:
    return Half(broker, "orders", 1000 + offset, offset, f"ID{broker}{offset}")


def test_a_tasks_halves_become_one_span_per_broker() -> None:
    halves = [half("broker-a", 7), half("broker-b", 3), half("broker-a", 2), half("broker-a", 40)]
    task = TaskHalves.of(attempt_mark(QUERY, 4, RUN, 11), halves)
    assert task.spans == (HalfSpan("broker-a", 2, 40, 3), HalfSpan("broker-b", 3, 3, 1))
    assert task.mark == f"{QUERY}/4/{RUN}/11"


def test_a_decision_reads_back_as_written() -> None:
    tasks = (
        TaskHalves.of(attempt_mark(QUERY, 4, RUN, 0), [half("broker-a", 1), half("broker-b", 9)]),
        TaskHalves.of(attempt_mark(QUERY, 4, RUN, 3), [half("broker-a", 2)]),
    )
    positions = {MessageQueue("orders", "broker-b", 1): 50, MessageQueue("orders", "broker-a", 0): 12}
    decision = Decision("pipeline-7", QUERY, 4, tasks, positions)
    back = Decision.decode(decision.encode())
    assert back == decision
    assert back.count == 3
    assert back.key == record_key("pipeline-7", QUERY, 4) == f"pipeline-7/{QUERY}/4"


def test_a_million_rows_on_two_hundred_tasks_stay_a_small_record() -> None:
    brokers = ("broker-a", "broker-b")
    tasks = tuple(
        TaskHalves(
            attempt_mark(QUERY, 9, RUN, task),
            tuple(HalfSpan(b, task * 5000, task * 5000 + 9999, 2500) for b in brokers),
        )
        for task in range(200)
    )
    positions = {MessageQueue("orders", b, q): 10**9 for b in brokers for q in range(8)}
    decision = Decision("pipeline-7", QUERY, 9, tasks, positions)
    assert decision.count == 1_000_000
    assert len(decision.encode()) < 64 * 1024


def test_a_record_too_large_for_a_message_says_how_to_make_it_smaller() -> None:
    tasks = tuple(
        TaskHalves(attempt_mark(QUERY, 1, RUN, task), (HalfSpan("broker-a", 0, 1, 2),)) for task in range(50_000)
    )
    with pytest.raises(ValueError, match=rf"more than a message may \({MAX_RECORD_BYTES}\).*coalesce"):
        Decision("g", QUERY, 1, tasks, {}).encode()


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"v": 99, "group": "g"}', b'{"v": 1, "group": "g", "query": "q", "batch": 1, "tasks": [{}]}'],
)
def test_a_record_this_sink_cannot_read_is_a_protocol_error_that_shows_it(body: bytes) -> None:
    with pytest.raises(ProtocolError, match="a decision record this sink cannot read"):
        Decision.decode(body)
