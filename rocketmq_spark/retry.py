"""Retrying calls that failed in a way a retry can fix, with capped exponential backoff.

Errors say themselves whether a retry can help (``RocketMQError.retriable``): a lost connection,
a timeout, a busy or restarting broker. Anything else is raised at once. Retries go on for up to
``RETRY_BUDGET_S``, about what a broker takes to restart and recover its store, so a query rides
out a restart; past it the last error is raised, so the query fails with the real cause.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from rocketmq_spark.errors import RocketMQError

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_BUDGET_S = 60.0
RETRY_FIRST_BACKOFF_S = 0.2
RETRY_MAX_BACKOFF_S = 5.0


def with_retries(call: Callable[[], T], what: str, budget_s: float = RETRY_BUDGET_S) -> T:
    """Run ``call``; on a retriable RocketMQError wait and try again until ``budget_s`` has passed.

    A budget of 0 means one attempt.
    """
    deadline = time.monotonic() + budget_s
    backoff = RETRY_FIRST_BACKOFF_S
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except RocketMQError as err:
            if not err.retriable or time.monotonic() + backoff > deadline:
                raise
            log.warning("%s failed (%s); attempt %d, next in %.1fs", what, err, attempt, backoff)
            time.sleep(backoff)
            backoff = min(backoff * 2, RETRY_MAX_BACKOFF_S)
