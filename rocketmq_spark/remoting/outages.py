"""One memory of the servers that fail: since when, which to ask last and until when, and whether
the failure was already told.

Three users share it, so that one failed request is remembered once and every user sees it:

- ``Retry`` logs an outage once, however many calls meet it, and its end once, with how long it
  lasted (``warn``, ``quiet``, ``answered``);
- ``Replicas`` passes an address over for a while after it failed or refused (``failed`` with a
  time to pass it over), and so does the sink's queue picker, which reads it from ``Replicas``;
- the driver's routes tell since when a registered broker has not answered (``down_since``), so
  that the query fails once none has answered for ``retryBudgetMs``.

A subject is a server's address, or an operation's name where a failure names no server. Times
are the caller's clock readings (monotonic seconds), so callers with a clock of their own (tests)
stay consistent; a process's ``Cluster`` and its retry policies share ``PROCESS_OUTAGES``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Outage:
    since: float  # the first failure of this outage
    pass_until: float | None = None  # asked last until then, while another replica is listed
    as_slave: bool = False  # it failed as a slave does (refused reads, behind, without the topic)
    warned_at: float | None = None  # when a warning said it fails, if one did


class Outages:
    """The servers failing now, as far as this process has seen. Safe to share between threads;
    an entry is only ever replaced or removed whole, so ``passed_over`` reads without the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failing: dict[str, _Outage] = {}

    def failed(self, subject: str, now: float, pass_over_until: float | None = None, as_slave: bool = False) -> None:
        """A request to ``subject`` failed at ``now``; with ``pass_over_until``, it is asked last
        until then (``as_slave``: what it said, it said as a slave)."""
        with self._lock:
            old = self._failing.get(subject)
            since = now if old is None else old.since
            warned_at = None if old is None else old.warned_at
            if pass_over_until is None and old is not None:
                pass_over_until, as_slave = old.pass_until, old.as_slave
            self._failing[subject] = _Outage(since, pass_over_until, as_slave, warned_at)

    def warn(self, subject: str, now: float) -> bool:
        """Note a failure of ``subject``; True if no warning has said yet that it fails."""
        with self._lock:
            old = self._failing.get(subject)
            if old is not None and old.warned_at is not None:
                return False
            base = _Outage(now) if old is None else old
            self._failing[subject] = _Outage(base.since, base.pass_until, base.as_slave, warned_at=now)
            return True

    def quiet(self, subject: str) -> None:
        """Calls gave up on ``subject`` (the error raised tells it): its next failure is told again."""
        with self._lock:
            old = self._failing.get(subject)
            if old is not None and old.warned_at is not None:
                self._failing[subject] = _Outage(old.since, old.pass_until, old.as_slave)

    def answered(self, subject: str, now: float) -> float | None:
        """``subject`` answered: it is asked like any other again. How long it had failed, if a
        warning had said so, counted from that warning (so its end is told too)."""
        with self._lock:
            old = self._failing.pop(subject, None)
        return None if old is None or old.warned_at is None else now - old.warned_at

    def down_since(self, subject: str) -> float | None:
        """Since when ``subject`` has failed, if it fails now."""
        entry = self._failing.get(subject)
        return None if entry is None else entry.since

    def passed_over(self, subject: str, now: float, as_master: bool = False) -> bool:
        """Whether ``subject`` is asked last now. ``as_master``: the routes list it as the master,
        so what it said as a slave no longer counts (a follower just elected is read at once)."""
        entry = self._failing.get(subject)
        if entry is None or entry.pass_until is None or entry.pass_until <= now:
            return False
        return not (as_master and entry.as_slave)

    def __reduce__(self) -> tuple[Callable[[], Outages], tuple[()]]:
        """What a process saw fail is its own: a policy sent to an executor (a pickled ``Retry``)
        arrives with that process's memory, not a copy of the driver's."""
        return _process_outages, ()


def _process_outages() -> Outages:
    return PROCESS_OUTAGES


# The memory of this process: its clusters' routes and its retry policies share it.
PROCESS_OUTAGES = Outages()
