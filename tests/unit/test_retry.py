"""Retries: only what the error says a retry can fix, within the time budget."""

from __future__ import annotations

import pytest

from rocketmq_spark import retry
from rocketmq_spark.errors import ConnectionFailedError, ProtocolError


def test_retriable_errors_are_retried_until_success(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry.time, "sleep", lambda _: None)
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 4:
            raise ConnectionFailedError("refused")
        return "ok"

    assert retry.with_retries(flaky, "test") == "ok"
    assert len(calls) == 4


def test_other_errors_are_raised_at_once() -> None:
    calls = []

    def broken() -> None:
        calls.append(1)
        raise ProtocolError("bad frame")

    with pytest.raises(ProtocolError):
        retry.with_retries(broken, "test")
    assert len(calls) == 1


def test_a_zero_budget_means_one_attempt() -> None:
    calls = []

    def down() -> None:
        calls.append(1)
        raise ConnectionFailedError("refused")

    with pytest.raises(ConnectionFailedError):
        retry.with_retries(down, "test", budget_s=0)
    assert len(calls) == 1


def test_the_budget_bounds_the_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr(retry.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(retry.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))

    def down() -> None:
        raise ConnectionFailedError("refused")

    with pytest.raises(ConnectionFailedError):
        retry.with_retries(down, "test", budget_s=20)
    assert clock[0] <= 20
    assert clock[0] > 20 - retry.RETRY_MAX_BACKOFF_S
