"""One writer per producer group at a time: the exactly-once sink's fence.

Two queries (or batch writes) of one ``producerGroup`` must not resolve halves at once: each
finishes the group's decisions an earlier run left, and two of them finishing one decision would
each commit the halves the other has not stored yet (every such half stored twice). So every step
that reads the group's records and resolves halves runs under a lock: the broker's lock on the
group's first record queue of the transaction topic (``Ledger.place``; ``remoting.locks``), held by
the query's id (a ``df.write``'s ``writeId``, or its run). A restarted query holds it again at once
(the same id); another one waits for it to lapse (a writer that stopped, or died, less than the
broker's lock lifetime ago) and is then refused with an error naming the group. A committer renews
the lock while it puts ENDs and stops if another took it (it paused for longer than the lifetime).
"""

from __future__ import annotations

import logging

from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.remoting.errors import RocketMQError
from rocketmq_spark.remoting.locks import LOCK_LIFETIME_S
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.sink.ledger import Ledger
from rocketmq_spark.sink.options import PRODUCER_GROUP

log = logging.getLogger(__name__)

# How long a writer waits for a lock another holds: one that stopped or died just now lets it
# lapse within the broker's lifetime; one that is still running renews it and keeps it.
LOCK_POLL_S = 2.0
LOCK_WAIT_S = LOCK_LIFETIME_S + 2 * LOCK_POLL_S + 1.0
# A committer renews its lock this often while it puts ENDs, well within the lifetime.
LOCK_RENEW_S = LOCK_LIFETIME_S / 6
HOLDER_PREFIX = "rocketmq-spark/"


class GroupInUseError(ConfigurationError):
    """Another query or batch write of the same producer group is writing exactly once."""

    def __init__(self, group: str, waited_s: float) -> None:
        super().__init__(
            PRODUCER_GROUP,
            f"producer group '{group}' is in use by another exactly-once query or write: its lock on the "
            f"group's transaction queue stayed taken for {waited_s:.0f} s (a writer that stops lets it go "
            f"{LOCK_LIFETIME_S:.0f} s after its last commit)",
            "Run one query or write per producerGroup at a time: stop the other one, or give this one a "
            "producerGroup of its own (a query keeps its group across restarts)",
        )


class LockLostError(RocketMQError):
    """The lock lapsed while this writer committed, and another writer took it: this one stops."""


class _LockTaken(RocketMQError):
    """Another holder has the lock: asked again while the wait lasts."""

    retriable = True


class Fence:
    """The lock of one writer (``holder``) on its producer group. ``policy``: how it waits for a
    lock another holds (its budget is the longest wait; tests give it their clock)."""

    def __init__(self, ledger: Ledger, holder: str, policy: Retry | None = None) -> None:
        self._ledger = ledger
        self.holder = HOLDER_PREFIX + holder
        self._policy = policy or Retry(budget_s=LOCK_WAIT_S, first_backoff_s=LOCK_POLL_S, max_backoff_s=LOCK_POLL_S)
        self._renewed: float | None = None

    @property
    def held(self) -> bool:
        return self._renewed is not None

    def take(self, wait_s: float = LOCK_WAIT_S) -> bool:
        """Take the lock, waiting up to ``wait_s`` for another holder's to lapse; raises
        ``GroupInUseError`` after that (``wait_s`` 0: one try, and whether it was taken)."""
        clock = self._policy.clock
        started = clock()
        attempts = self._policy.within(wait_s).start()
        while not self._ledger.lock(self.holder):
            if attempts.again(_LockTaken(self.holder)):
                if attempts.failed == 1:
                    log.warning(
                        "producer group %s is locked by another exactly-once writer; waiting up to %.0f s for it "
                        "to let go (one that stopped lets go %.0f s after its last commit)",
                        self._ledger.group,
                        wait_s,
                        LOCK_LIFETIME_S,
                    )
                attempts.pause()
            elif wait_s <= 0:
                return False
            else:
                raise GroupInUseError(self._ledger.group, clock() - started)
        self._renewed = clock()
        return True

    def renew(self) -> None:
        """Renew the lock if it is due: called between rounds of ENDs."""
        if self._renewed is None or self._policy.clock() - self._renewed < LOCK_RENEW_S:
            return
        if not self._ledger.lock(self.holder):
            self._renewed = None
            raise LockLostError(
                f"producer group {self._ledger.group}: this writer's lock lapsed while it committed (a pause of "
                f"over {LOCK_LIFETIME_S:.0f} s) and another writer holds it now; this commit stops, and what it "
                "decided is finished by the group's next start"
            )
        self._renewed = self._policy.clock()

    def release(self) -> None:
        """Let the lock go at once (a batch write's end), so that the next writer need not wait."""
        if self._renewed is None:
            return
        self._renewed = None
        try:
            self._ledger.unlock(self.holder)
        except RocketMQError as err:  # it lapses on its own
            log.info("could not let the lock of producer group %s go (%s)", self._ledger.group, err)
