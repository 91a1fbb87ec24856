"""Retrying what failed in a way a retry can fix: one model for reading and writing.

A :class:`Retry` is a value handed to whoever retries, as redis-py hands one to its client. It
holds the whole policy: how long to keep trying (a time budget) and/or how many attempts to make,
the pauses in between (capped exponential backoff), which failures are worth another attempt, and
the clock and sleep it uses, so tests and callers with less time choose their own without
touching module state.

Which failures: errors say themselves whether a retry can help (``RocketMQError.retriable``: a
lost connection, a timeout, a busy or restarting broker); a use may add broker answers of its
own (``answers``), as the sink adds the Java producer's ``retryResponseCodes``.

Two ways to use one: :meth:`Retry.call` runs a callable until it succeeds or the policy gives up.
A loop that cannot hand over a callable (a window of sends in flight that retries one failed send
while others travel) takes :meth:`Retry.start`, an :class:`Attempts` per operation, and asks it
after each failure whether another attempt may follow and to pause before it.

A query holds two: a short one for its start, where a failure almost always means a wrong
address, port or network path and waiting helps nobody, and a long one (``retryBudgetMs``) once
it runs, where the likely cause is a broker restarting.

Retries are logged by state, not by attempt: the first failure of a server in this process is
one warning, its recovery one more line, and the attempts in between are debug messages (the
state is the process's memory of failing servers, ``outages.PROCESS_OUTAGES``, which its routes
share). A broker restart under a task with many pulls on the wire is then two lines, not dozens.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from rocketmq_spark.remoting.errors import AuthenticationError, BrokerResponseError, RocketMQError
from rocketmq_spark.remoting.outages import PROCESS_OUTAGES, Outages

log = logging.getLogger(__name__)

T = TypeVar("T")

# About what a broker takes to restart and recover its store, so a query rides out a restart;
# past it the last error is raised, so the query fails with the real cause.
DEFAULT_BUDGET_S = 60.0
DEFAULT_FIRST_BACKOFF_S = 0.2
DEFAULT_MAX_BACKOFF_S = 5.0
BACKOFF_FACTOR = 2
# A budget that never runs out: the policy is bounded by its count of attempts alone.
NO_BUDGET = math.inf


def _subject(error: RocketMQError, what: str) -> str:
    """What a failure is logged under: the server it concerns, else the operation."""
    return error.address or what


@dataclass(frozen=True)
class Retry:
    """How long and how often to retry which failures, and how to wait in between.

    ``budget_s`` bounds the time from the first attempt to the end of the last pause
    (``NO_BUDGET`` for none); ``attempts`` bounds the attempts in all (None for none): whichever
    is spent first ends the retries. ``answers`` are broker answers retried besides the errors
    that say a retry can fix them.
    """

    budget_s: float = DEFAULT_BUDGET_S
    first_backoff_s: float = DEFAULT_FIRST_BACKOFF_S
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_S
    attempts: int | None = None
    answers: frozenset[int] = frozenset()
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)
    clock: Callable[[], float] = field(default=time.monotonic, compare=False, repr=False)
    outages: Outages = field(default=PROCESS_OUTAGES, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.attempts is not None and self.attempts < 1:
            raise ValueError(f"a retry policy needs at least one attempt, not {self.attempts}: pass 1 or more")
        if self.budget_s < 0 or self.first_backoff_s < 0 or self.max_backoff_s < self.first_backoff_s:
            raise ValueError(
                f"a retry policy's budget and pauses must be 0 or more and its longest pause at least its first "
                f"(budget {self.budget_s} s, pauses {self.first_backoff_s} to {self.max_backoff_s} s)"
            )

    def once(self) -> Retry:
        """The same policy with no retries: one attempt."""
        return replace(self, budget_s=0.0)

    def within(self, budget_s: float) -> Retry:
        """The same policy, retrying for at most ``budget_s``."""
        return replace(self, budget_s=min(self.budget_s, budget_s))

    def retriable(self, error: RocketMQError) -> bool:
        """Whether this use tries again after ``error``: the error says a retry can fix it, or it
        is one of the broker answers this use retries, unless it refuses the user (a missing grant
        or a bad signature, which no other attempt changes)."""
        if isinstance(error, AuthenticationError) and error.refuses_user:
            return False
        return error.retriable or (isinstance(error, BrokerResponseError) and error.code in self.answers)

    def start(self) -> Attempts:
        """The attempts of one operation, for a loop that makes them itself; the budget runs from now."""
        return Attempts(self)

    def limits(self) -> str:
        """The policy's bounds in words, for a log line."""
        bounds = [] if self.budget_s == NO_BUDGET else [f"for up to {self.budget_s:g} s"]
        if self.attempts is not None:
            bounds.append(f"up to {self.attempts} attempts in all")
        return " and ".join(bounds) or "without end"

    def call(self, call: Callable[[], T], what: str) -> T:
        """Run ``call``; on a failure this policy retries, wait and try again until it gives up.

        A failure that cannot be retried, or the last one, is raised as it is, so the caller sees
        the server's own answer.
        """
        attempts = self.start()
        subject: str | None = None  # set once an attempt failed and a retry follows
        while True:
            try:
                result = call()
            except RocketMQError as err:
                if not attempts.again(err):
                    if subject is not None:
                        self.outages.quiet(subject)  # the raised error tells the rest
                    raise
                if subject is None:
                    subject = _subject(err, what)
                    if self.outages.warn(subject, self.clock()):
                        log.warning("%s failed (%s); retrying %s", what, err, self.limits())
                log.debug("%s failed (%s); attempt %d, next in %.1f s", what, err, attempts.failed, attempts.pause_s)
                attempts.pause()
            else:
                if subject is not None:
                    down_s = self.outages.answered(subject, self.clock())
                    if down_s is not None:  # a warning too, so the console shows the outage ended
                        log.warning("%s answers again, after %.1f s", subject, down_s)
                return result


class Attempts:
    """One operation's attempts under a :class:`Retry`: the loop tells it each failure and asks
    whether another attempt may follow, and pauses through it, so the policy stays in the value."""

    def __init__(self, policy: Retry) -> None:
        self.policy = policy
        self.failed = 0  # attempts that failed so far
        self.pause_s = policy.first_backoff_s  # the pause before the next attempt
        self._deadline = policy.clock() + policy.budget_s

    def again(self, error: RocketMQError) -> bool:
        """Note a failed attempt; whether another may follow: the policy retries this failure, an
        attempt is left, and the pause before it ends within the budget."""
        self.failed += 1
        policy = self.policy
        if not policy.retriable(error):
            return False
        if policy.attempts is not None and self.failed >= policy.attempts:
            return False
        return policy.clock() + self.pause_s <= self._deadline

    def pause(self) -> None:
        """Wait before the next attempt; each pause is longer, up to the policy's longest."""
        self.policy.sleep(self.pause_s)
        self.pause_s = min(self.pause_s * BACKOFF_FACTOR, self.policy.max_backoff_s)
