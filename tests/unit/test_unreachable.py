"""Name servers that do not answer, on loopback: each way of not answering (a closed port, a host
that never accepts, a server that never replies, a TLS handshake that fails) is named in the error
with its address, and a query's start gives up within a few request timeouts.

The integration tests run a Spark query against the same kinds of servers; these pin the texts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from rocketmq_spark.model import ClientConfig, MessageQueue
from rocketmq_spark.remoting import calls
from rocketmq_spark.remoting.client import RocketMQClient
from rocketmq_spark.remoting.errors import NameServersUnavailableError, RequestTimeoutError, TransportError
from rocketmq_spark.source.offset_reader import OffsetReader
from rocketmq_spark.source.option_model import ReadKind
from rocketmq_spark.source.options import parse_options
from tests.listeners import Listener, closed_port

TIMEOUT_S = 0.5
TIMEOUT_MS = str(int(TIMEOUT_S * 1000))
# Scheduling slack on a busy machine, on top of the timeouts the code waits for.
SLACK_S = 1.0


@pytest.fixture
def listen() -> Iterator[Callable[..., Listener]]:
    """Listeners made by a test, closed after it."""
    made: list[Listener] = []

    def make(kind: str, code: int = 0, remark: str = "") -> Listener:
        made.append(Listener(kind, code, remark))
        return made[-1]

    yield make
    for listener in made:
        listener.close()


def test_the_error_names_every_name_server_and_what_it_did(listen: Callable[..., Listener]) -> None:
    refused, silent, full = closed_port(), listen("silent").address, listen("full").address
    client = RocketMQClient(ClientConfig((refused, silent, full), request_timeout=TIMEOUT_S))
    began = time.monotonic()
    with client, pytest.raises(NameServersUnavailableError) as caught:
        client.topic_route("orders")
    # One pass over the list: the silent one costs a request timeout, the full one a connect.
    assert time.monotonic() - began < 2 * TIMEOUT_S + SLACK_S
    message = str(caught.value)
    assert message.startswith("no name server answered (")
    assert f"cannot connect to {refused}: [Errno 111] Connection refused" in message
    assert f"no answer from {silent} within {TIMEOUT_S:.1f}s to GET_ROUTEINFO_BY_TOPIC (105)" in message
    assert f"cannot connect to {full}: timed out" in message
    assert "Check the nameServer option" in message
    assert caught.value.retriable
    assert caught.value.address == f"{refused};{silent};{full}"


def test_a_failed_tls_handshake_is_named(listen: Callable[..., Listener]) -> None:
    plain = listen("plain").address
    with RocketMQClient(ClientConfig((plain,), request_timeout=TIMEOUT_S, tls=True)) as client:
        with pytest.raises(
            NameServersUnavailableError,
            match=rf"TLS handshake with {plain} failed \(\[SSL.*may not accept TLS.*leave tls unset",
        ):
            client.topic_route("orders")


def test_a_connect_waits_at_most_the_connect_timeout() -> None:
    assert ClientConfig(("h:1",), request_timeout=30.0).connect_timeout == 3.0
    assert ClientConfig(("h:1",), request_timeout=0.5).connect_timeout == 0.5


@pytest.mark.parametrize("kind", ["refused", "silent", "full"])
def test_a_query_start_gives_up_within_a_few_request_timeouts(listen: Callable[..., Listener], kind: str) -> None:
    address = closed_port() if kind == "refused" else listen(kind).address
    options = parse_options(
        {"nameServer": address, "topic": "orders", "consumerGroup": "g", "pullTimeoutMs": TIMEOUT_MS},
        kind=ReadKind.STREAM,
    )
    reader = OffsetReader(options)
    assert reader.retry == options.start_retry
    began = time.monotonic()
    with pytest.raises(NameServersUnavailableError, match=address):
        reader.queues()
    assert time.monotonic() - began < 2 * TIMEOUT_S + SLACK_S


def test_a_running_query_retries_for_its_budget() -> None:
    options = parse_options(
        {
            "nameServer": "127.0.0.1:1",
            "topic": "orders",
            "consumerGroup": "g",
            "pullTimeoutMs": "3000",
            "retryBudgetMs": "120000",
        },
        kind=ReadKind.STREAM,
    )
    reader = OffsetReader(options)
    assert (reader.retry.budget_s, options.retry.budget_s) == (3.0, 120.0)
    reader.running()
    assert reader.retry == options.retry


def test_a_server_that_leaves_a_call_unanswered_fails_the_rest_of_its_calls_at_once(
    listen: Callable[..., Listener],
) -> None:
    """A stalled broker (a long GC pause, a hung host) costs one request timeout for a batch of
    calls, not one for each window of them."""
    silent = listen("silent").address
    calls_sent, window = 12, 2
    with RocketMQClient(ClientConfig((silent,), request_timeout=TIMEOUT_S)) as client:
        began = time.monotonic()
        outcomes = client.call_many(
            [(silent, calls.max_offset(MessageQueue("orders", "b", i))) for i in range(calls_sent)], window
        )
        took = time.monotonic() - began
    assert len(outcomes) == calls_sent
    assert isinstance(outcomes[0], RequestTimeoutError)
    assert all(isinstance(o, TransportError) and o.address == silent for o in outcomes), outcomes
    assert took < TIMEOUT_S + SLACK_S, f"{took:.1f} s: a timeout for each window of calls"
