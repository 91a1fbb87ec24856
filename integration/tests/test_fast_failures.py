"""A query whose name servers cannot be reached fails in seconds, through Spark, with an error that
names each address and what it answered; a running query still rides out a broker restart
(test_faults.py, under make faults).

The name servers here are loopback ports of the test's own: a closed port (refused), a listener
whose backlog is full (connects time out, as to a host that drops packets) and one that accepts
and never answers. No RocketMQ is needed, so no cluster is started. TLS to a plain port and plain
to a TLS-only port are in test_tls.py, next to the TLS-only cluster they need.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.failfast import FAIL_FAST_LIMIT_S, FAIL_FAST_TIMEOUT_MS, Overhead, fail_query
from rocketmq_spark.model import MS_PER_SECOND
from tests.listeners import Listener, closed_port

pytestmark = pytest.mark.integration

# What each kind of name server answers, as the error says it.
ANSWERS = {
    "refused": "Connection refused",
    "full": "timed out",
    "silent": f"within {FAIL_FAST_TIMEOUT_MS / MS_PER_SECOND:.1f}s to GET_ROUTEINFO_BY_TOPIC",
}


@pytest.fixture
def name_server() -> Iterator[Callable[[str], str]]:
    """The address of a name server of the given kind, alive until the test ends."""
    listeners: list[Listener] = []

    def make(kind: str) -> str:
        if kind == "refused":
            return closed_port()
        listeners.append(Listener(kind))
        return listeners[-1].address

    yield make
    for listener in listeners:
        listener.close()


def _options(addresses: list[str]) -> dict[str, str]:
    return {
        "nameServer": ";".join(addresses),
        "topic": "orders",
        "consumerGroup": "fast-failures",
        "pullTimeoutMs": str(FAIL_FAST_TIMEOUT_MS),
    }


@pytest.mark.parametrize("kind", sorted(ANSWERS))
def test_a_stream_start_fails_fast_naming_the_name_server(
    spark: Any, overhead: Overhead, name_server: Callable[[str], str], kind: str, tmp_path: Path
) -> None:
    address = name_server(kind)
    extra_s, error = fail_query("stream", spark, _options([address]), tmp_path, overhead, f"{kind} name server")
    assert "no name server answered" in error and address in error and ANSWERS[kind] in error, error
    assert "UnboundLocalError" not in error
    assert extra_s < FAIL_FAST_LIMIT_S, f"{extra_s:.1f} s"


@pytest.mark.parametrize("kind", sorted(ANSWERS))
def test_a_batch_read_fails_fast_naming_the_name_server(
    spark: Any, overhead: Overhead, name_server: Callable[[str], str], kind: str, tmp_path: Path
) -> None:
    address = name_server(kind)
    extra_s, error = fail_query("batch", spark, _options([address]), tmp_path, overhead, f"{kind} name server")
    assert "no name server answered" in error and address in error and ANSWERS[kind] in error, error
    assert extra_s < FAIL_FAST_LIMIT_S, f"{extra_s:.1f} s"


def test_every_name_server_of_the_list_is_named_with_its_answer(
    spark: Any, overhead: Overhead, name_server: Callable[[str], str], tmp_path: Path
) -> None:
    addresses = [name_server(kind) for kind in ("refused", "silent")]
    extra_s, error = fail_query(
        "stream", spark, _options(addresses), tmp_path, overhead, "refused and silent name servers"
    )
    assert f"cannot connect to {addresses[0]}: [Errno 111] Connection refused" in error, error
    assert f"no answer from {addresses[1]} within 3.0s to GET_ROUTEINFO_BY_TOPIC" in error, error
    assert extra_s < FAIL_FAST_LIMIT_S, f"{extra_s:.1f} s"
