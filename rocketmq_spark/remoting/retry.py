"""Retrying calls that failed in a way a retry can fix, with capped exponential backoff.

Errors say themselves whether a retry can help (``RocketMQError.retriable``): a lost connection,
a timeout, a busy or restarting broker. Anything else is raised at once. A :class:`Retry` is a
value handed to whoever makes calls, as redis-py does: it says how long to keep trying and how
to wait, so tests and callers with less time choose their own without touching module state.
"""

from __future__ import annotations

import logging
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

    def call(self, call: Callable[[], T], what: str) -> T:
        """Run ``call``; on a retriable RocketMQError wait and try again until the budget is spent."""
        deadline = self.clock() + self.budget_s
        backoff = self.first_backoff_s
        attempt = 0
        while True:
            attempt += 1
            try:
                return call()
            except RocketMQError as err:
                if not err.retriable or self.clock() + backoff > deadline:
                    raise
                log.warning("%s failed (%s); attempt %d, next in %.1fs", what, err, attempt, backoff)
                self.sleep(backoff)
                backoff = min(backoff * BACKOFF_FACTOR, self.max_backoff_s)
