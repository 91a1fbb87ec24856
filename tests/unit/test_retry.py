"""Retries: only what the error says a retry can fix, within the time budget."""

from __future__ import annotations

import pytest

from rocketmq_spark.remoting.errors import ConnectionFailedError, ProtocolError
from rocketmq_spark.remoting.retry import DEFAULT_MAX_BACKOFF_S, Retry

NO_WAIT = Retry(sleep=lambda _: None)


def test_retriable_errors_are_retried_until_success() -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 4:
            raise ConnectionFailedError("refused")
        return "ok"

    assert NO_WAIT.call(flaky, "test") == "ok"
    assert len(calls) == 4


def test_other_errors_are_raised_at_once() -> None:
    calls = []

    def broken() -> None:
        calls.append(1)
        raise ProtocolError("bad frame")

    with pytest.raises(ProtocolError):
        NO_WAIT.call(broken, "test")
    assert len(calls) == 1


def test_a_zero_budget_means_one_attempt() -> None:
    calls = []

    def down() -> None:
        calls.append(1)
        raise ConnectionFailedError("refused")

    with pytest.raises(ConnectionFailedError):
        NO_WAIT.once().call(down, "test")
    assert len(calls) == 1


def test_the_budget_bounds_the_waiting() -> None:
    clock = [0.0]
    policy = Retry(budget_s=20, clock=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s))

    def down() -> None:
        raise ConnectionFailedError("refused")

    with pytest.raises(ConnectionFailedError):
        policy.call(down, "test")
    assert clock[0] <= 20
    assert clock[0] > 20 - DEFAULT_MAX_BACKOFF_S
