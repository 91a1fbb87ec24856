"""Retries: only what the error, or the use's own answers, say a retry can fix, within the time
budget and/or the count of attempts, pausing through the injected sleep."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.errors import BrokerResponseError, ConnectionFailedError, ProtocolError, RocketMQError
from rocketmq_spark.remoting.retry import DEFAULT_MAX_BACKOFF_S, NO_BUDGET, Retry

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


def always(error: RocketMQError, calls: list[float], time: FakeTime) -> Callable[[], None]:
    """A call that fails with ``error`` every time, noting when it was made."""

    def fail() -> None:
        calls.append(time.now)
        raise error

    return fail


LOST = ConnectionFailedError("connection to b:1 lost", "b:1")


def test_a_count_of_attempts_bounds_the_retries_without_a_budget() -> None:
    time, calls = FakeTime(), []
    policy = Retry(budget_s=NO_BUDGET, attempts=3, clock=lambda: time.now, sleep=time.sleep)
    with pytest.raises(ConnectionFailedError):
        policy.call(always(LOST, calls, time), "send")
    assert calls == pytest.approx([0.0, 0.2, 0.6])  # three attempts, after pauses of 0.2 and 0.4 s


def test_a_budget_bounds_the_retries_without_a_count() -> None:
    time, calls = FakeTime(), []
    with pytest.raises(ConnectionFailedError):
        time.policy(1.0).call(always(LOST, calls, time), "pull")
    assert calls == pytest.approx([0.0, 0.2, 0.6])  # a third pause (0.8 s) would end past the budget


@pytest.mark.parametrize(("budget_s", "attempts", "made"), [(1.0, 5, 3), (60.0, 2, 2), (NO_BUDGET, 1, 1)])
def test_with_both_whichever_is_spent_first_ends_the_retries(budget_s: float, attempts: int, made: int) -> None:
    time, calls = FakeTime(), []
    policy = Retry(budget_s=budget_s, attempts=attempts, clock=lambda: time.now, sleep=time.sleep)
    with pytest.raises(ConnectionFailedError):
        policy.call(always(LOST, calls, time), "send")
    assert len(calls) == made


def test_each_use_retries_its_own_answers_besides_what_errors_say_of_themselves() -> None:
    refused = BrokerResponseError(ResponseCode.SYSTEM_ERROR, "store is busy", address="b:1")
    busy = BrokerResponseError(ResponseCode.SYSTEM_BUSY, None, address="b:1")
    reading, writing = Retry(), Retry(answers=frozenset({ResponseCode.SYSTEM_ERROR}))
    assert not refused.retriable and busy.retriable
    assert [reading.retriable(e) for e in (refused, busy, LOST)] == [False, True, True]
    assert [writing.retriable(e) for e in (refused, busy, LOST)] == [True, True, True]
    assert not writing.retriable(ProtocolError("bad frame"))
    time, calls = FakeTime(), []
    with pytest.raises(BrokerResponseError):
        Retry(attempts=3, answers=writing.answers, clock=lambda: time.now, sleep=time.sleep).call(
            always(refused, calls, time), "send"
        )
    assert len(calls) == 3
    with pytest.raises(BrokerResponseError):
        Retry(attempts=3, clock=lambda: time.now, sleep=time.sleep).call(always(refused, calls, time), "send")
    assert len(calls) == 4  # one attempt more: the reading policy does not retry it


def test_the_pauses_asked_of_the_sleep_grow_to_the_longest_and_stay() -> None:
    pauses: list[float] = []
    policy = Retry(budget_s=NO_BUDGET, attempts=5, first_backoff_s=0.2, max_backoff_s=0.5, sleep=pauses.append)
    with pytest.raises(ConnectionFailedError):
        policy.call(always(LOST, [], FakeTime()), "send")
    assert pauses == [0.2, 0.4, 0.5, 0.5]


def test_a_loop_that_makes_its_attempts_itself_asks_the_policy() -> None:
    """A loop with many calls in flight takes one Attempts per operation: it tells each failure,
    and pauses only where it tries the same place again."""
    pauses: list[float] = []
    policy = Retry(budget_s=NO_BUDGET, attempts=3, first_backoff_s=1.0, max_backoff_s=1.0, sleep=pauses.append)
    attempts = policy.start()
    assert attempts.again(LOST) and attempts.failed == 1
    attempts.pause()
    assert attempts.again(LOST) and not attempts.again(LOST)  # the third failure was the last attempt
    assert (attempts.failed, pauses) == (3, [1.0])
    other = policy.start()  # another operation's count starts afresh
    assert not other.again(ProtocolError("bad frame")) and other.failed == 1


def test_an_attempts_budget_runs_from_its_start() -> None:
    time = FakeTime()
    attempts = time.policy(1.0).start()
    time.now = 0.7
    assert attempts.again(LOST)  # a pause of 0.2 s ends at 0.9 s, within the budget
    time.now = 0.9
    assert not attempts.again(LOST)


def test_the_outage_warning_names_the_count_when_attempts_bound_it(caplog: pytest.LogCaptureFixture) -> None:
    time, calls = FakeTime(), []
    caplog.set_level(logging.WARNING, logger="rocketmq_spark.remoting.retry")
    error = ConnectionFailedError("connection to c:1 lost", "c:1")
    policy = Retry(budget_s=NO_BUDGET, attempts=2, clock=lambda: time.now, sleep=time.sleep)
    with pytest.raises(ConnectionFailedError):
        policy.call(always(error, calls, time), "send to c")
    assert [r.getMessage() for r in caplog.records] == [
        "send to c failed (connection to c:1 lost); retrying up to 2 attempts in all"
    ]
    assert Retry(budget_s=3, attempts=2).limits() == "for up to 3 s and up to 2 attempts in all"


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"attempts": 0}, "at least one attempt, not 0"),
        ({"budget_s": -1.0}, "must be 0 or more"),
        ({"first_backoff_s": 2.0, "max_backoff_s": 1.0}, "longest pause at least its first"),
    ],
)
def test_a_policy_that_cannot_work_is_refused_naming_the_problem(fields: dict[str, float], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Retry(**fields)  # type: ignore[arg-type]
