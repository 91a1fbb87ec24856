"""Retrying calls that failed in a way a retry can fix, with capped exponential backoff.

Errors say themselves whether a retry can help (``RocketMQError.retriable``): a lost connection,
a timeout, a busy or restarting broker. Anything else is raised at once. The default budget
(about half a minute of waiting) lets a query ride out a broker restart; past it, the last error
is raised so the query fails with the real cause.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from rocketmq_spark.errors import RocketMQError

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_ATTEMPTS = 10
RETRY_FIRST_BACKOFF_S = 0.2
RETRY_MAX_BACKOFF_S = 5.0


def with_retries(call: Callable[[], T], what: str, attempts: int = RETRY_ATTEMPTS) -> T:
    """Run ``call``; on a retriable RocketMQError wait and try again, up to ``attempts`` times."""
    backoff = RETRY_FIRST_BACKOFF_S
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except RocketMQError as err:
            if not err.retriable or attempt == attempts:
                raise
            log.warning("%s failed (%s); retry %d of %d in %.1fs", what, err, attempt, attempts - 1, backoff)
            time.sleep(backoff)
            backoff = min(backoff * 2, RETRY_MAX_BACKOFF_S)
    raise AssertionError("unreachable")
