"""Retries: only what the error says a retry can fix, within the time budget."""

from __future__ import annotations

import logging

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


class FakeTime:
    """A clock that moves only when the retry sleeps or an attempt takes time."""

    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def policy(self, budget_s: float) -> Retry:
        return Retry(budget_s=budget_s, clock=lambda: self.now, sleep=self.sleep)


def test_within_shortens_the_budget_and_keeps_the_rest() -> None:
    long = Retry(budget_s=60, first_backoff_s=0.5)
    assert long.within(3) == Retry(budget_s=3, first_backoff_s=0.5)
    assert long.within(600).budget_s == 60


def test_the_start_policy_gives_up_within_its_budget_plus_one_attempt() -> None:
    """A refused connection answers at once; an unreachable host takes a connect timeout each time.
    Either way the short policy is over within its budget and the attempt running at its end."""
    for attempt_s in (0.0, 3.0):
        time = FakeTime()
        calls = []

        def down() -> None:
            calls.append(time.now)  # noqa: B023 - called within its round of the loop
            time.now += attempt_s  # noqa: B023
            raise ConnectionFailedError("cannot connect to 127.0.0.1:1: refused", "127.0.0.1:1")

        with pytest.raises(ConnectionFailedError):
            time.policy(3.0).call(down, "route of t")
        assert time.now <= 3.0 + attempt_s
        assert calls[-1] <= 3.0


def test_an_outage_is_logged_once_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    time = FakeTime()
    policy = time.policy(60.0)
    outcomes = iter([ConnectionFailedError("connection to b:1 lost", "b:1")] * 5 + [None])

    def restarting() -> str:
        outcome = next(outcomes)
        if outcome is not None:
            raise outcome
        return "ok"

    caplog.set_level(logging.DEBUG, logger="rocketmq_spark.remoting.retry")
    assert policy.call(restarting, "pull of t/b/0 at 5") == "ok"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "pull of t/b/0 at 5 failed (connection to b:1 lost); retrying for up to 60 s",
        "b:1 answers again, after 6.2 s",
    ]
    assert len([r for r in caplog.records if r.levelno == logging.DEBUG]) == 5


def test_calls_that_meet_the_same_outage_log_it_once(caplog: pytest.LogCaptureFixture) -> None:
    """Other calls to the same server while it is down (pulls of other queues, other tasks in the
    process) add no lines; its return is logged by the first call that sees it."""
    time = FakeTime()
    policy = time.policy(60.0)

    def pull() -> str:
        if time.now < 2.0:  # the server is back two seconds in
            raise ConnectionFailedError("cannot connect to b:1: refused", "b:1")
        return "ok"

    caplog.set_level(logging.WARNING, logger="rocketmq_spark.remoting.retry")
    failing = ConnectionFailedError("cannot connect to b:1: refused", "b:1")

    def first_fails_then_waits() -> str:
        raise failing

    # One call gives up (short budget) while the outage lasts, another rides it out.
    with pytest.raises(ConnectionFailedError):
        time.policy(0.5).call(first_fails_then_waits, "max offset of t/b/0")
    for queue in range(3):
        assert policy.call(pull, f"pull of t/b/{queue} at 0") == "ok"
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "max offset of t/b/0 failed (cannot connect to b:1: refused); retrying for up to 0.5 s",
        "pull of t/b/0 at 0 failed (cannot connect to b:1: refused); retrying for up to 60 s",
        "b:1 answers again, after 3.0 s",
    ]


def test_errors_without_a_server_are_logged_by_operation(caplog: pytest.LogCaptureFixture) -> None:
    time = FakeTime()
    caplog.set_level(logging.WARNING, logger="rocketmq_spark.remoting.retry")
    results = iter([ConnectionFailedError("lost"), "ok"])

    def flaky() -> object:
        result = next(results)
        if isinstance(result, Exception):
            raise result
        return result

    assert time.policy(10.0).call(flaky, "cluster info") == "ok"
    assert [r.getMessage() for r in caplog.records][-1] == "cluster info answers again, after 0.2 s"
