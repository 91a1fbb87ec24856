"""Retrying calls that failed in a way a retry can fix, with capped exponential backoff.

Errors say themselves whether a retry can help (``RocketMQError.retriable``): a lost connection,
a timeout, a busy or restarting broker. Anything else is raised at once. A :class:`Retry` is a
value handed to whoever makes calls, as redis-py does: it says how long to keep trying and how
to wait, so tests and callers with less time choose their own without touching module state.

A query holds two: a short one for its start, where a failure almost always means a wrong
address, port or network path and waiting helps nobody, and a long one (``retryBudgetMs``) once
it runs, where the likely cause is a broker restarting.

Retries are logged by state, not by attempt: the first failure of a server in this process is
one warning, its recovery one more line, and the attempts in between are debug messages. A
broker restart under a task with many pulls on the wire is then two lines, not dozens.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from rocketmq_spark.remoting.errors import RocketMQError

log = logging.getLogger(__name__)

T = TypeVar("T")

# About what a broker takes to restart and recover its store, so a query rides out a restart;
# past it the last error is raised, so the query fails with the real cause.
DEFAULT_BUDGET_S = 60.0
DEFAULT_FIRST_BACKOFF_S = 0.2
DEFAULT_MAX_BACKOFF_S = 5.0
BACKOFF_FACTOR = 2


class _Outages:
    """The servers this process is retrying now, so each outage is logged once however many calls
    meet it, and its end once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: dict[str, float] = {}

    def failed(self, subject: str, now: float) -> bool:
        """Note that calls to ``subject`` fail; True if that is news."""
        with self._lock:
            if subject in self._since:
                return False
            self._since[subject] = now
            return True

    def ended(self, subject: str, now: float) -> float | None:
        """Note that ``subject`` answers (or is given up on); how long it failed, if it was failing."""
        with self._lock:
            since = self._since.pop(subject, None)
        return None if since is None else now - since


_outages = _Outages()


def _subject(error: RocketMQError, what: str) -> str:
    """What a failure is logged under: the server it concerns, else the operation."""
    return error.address or what


@dataclass(frozen=True)
class Retry:
    """How long to retry retriable failures, and how to wait in between."""

    budget_s: float = DEFAULT_BUDGET_S
    first_backoff_s: float = DEFAULT_FIRST_BACKOFF_S
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_S
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)
    clock: Callable[[], float] = field(default=time.monotonic, compare=False, repr=False)

    def once(self) -> Retry:
        """The same policy with no retries: one attempt."""
        return replace(self, budget_s=0.0)

    def within(self, budget_s: float) -> Retry:
        """The same policy, retrying for at most ``budget_s``."""
        return replace(self, budget_s=min(self.budget_s, budget_s))

    def call(self, call: Callable[[], T], what: str) -> T:
        """Run ``call``; on a retriable RocketMQError wait and try again until the budget is spent.

        A failure that cannot be retried, or the last one, is raised as it is, so the caller sees
        the server's own answer.
        """
        deadline = self.clock() + self.budget_s
        backoff = self.first_backoff_s
        attempt = 0
        subject: str | None = None  # set once an attempt failed and a retry follows
        while True:
            attempt += 1
            try:
                result = call()
            except RocketMQError as err:
                if not err.retriable or self.clock() + backoff > deadline:
                    if subject is not None:
                        _outages.ended(subject, self.clock())  # the raised error tells the rest
                    raise
                if subject is None:
                    subject = _subject(err, what)
                    if _outages.failed(subject, self.clock()):
                        log.warning("%s failed (%s); retrying for up to %g s", what, err, self.budget_s)
                log.debug("%s failed (%s); attempt %d, next in %.1f s", what, err, attempt, backoff)
                self.sleep(backoff)
                backoff = min(backoff * BACKOFF_FACTOR, self.max_backoff_s)
            else:
                if subject is not None:
                    down_s = _outages.ended(subject, self.clock())
                    if down_s is not None:  # a warning too, so the console shows the outage ended
                        log.warning("%s answers again, after %.1f s", subject, down_s)
                return result
