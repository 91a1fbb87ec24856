"""The exactly-once sink's fence (``sink/fence.py``) against a model of a broker's queue lock
(RocketMQ's ``RebalanceLockManager``: renewed by its holder, refused to others until it has not
been renewed for its lifetime), on a clock only the test and the fence's pauses move."""

from __future__ import annotations

import pytest

from rocketmq_spark.remoting.locks import LOCK_LIFETIME_S
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.sink.fence import (
    HOLDER_PREFIX,
    LOCK_POLL_S,
    LOCK_RENEW_S,
    LOCK_WAIT_S,
    Fence,
    GroupInUseError,
    LockLostError,
)
from tests.support import ManualClock

GROUP = "orders-eo"


class BrokerLock:
    """One queue's lock as a broker keeps it."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.group = GROUP
        self.holder: str | None = None
        self.renewed = 0.0
        self.asked = 0

    def lock(self, holder: str) -> bool:
        self.asked += 1
        lapsed = self.clock() - self.renewed > LOCK_LIFETIME_S
        if self.holder in (None, holder) or lapsed:
            self.holder, self.renewed = holder, self.clock()
            return True
        return False

    def unlock(self, holder: str) -> None:
        if self.holder == holder:
            self.holder = None


def fence(lock: BrokerLock, clock: ManualClock, holder: str) -> Fence:
    policy = Retry(
        budget_s=LOCK_WAIT_S, first_backoff_s=LOCK_POLL_S, max_backoff_s=LOCK_POLL_S, sleep=clock.sleep, clock=clock
    )
    return Fence(lock, holder, policy)  # type: ignore[arg-type]


def test_a_restarted_writer_holds_its_lock_again_at_once_and_another_is_refused_naming_the_group() -> None:
    clock = ManualClock()
    lock = BrokerLock(clock)
    assert fence(lock, clock, "query-a").take()
    clock.now += 1.0
    assert fence(lock, clock, "query-a").take(0), "the same query, restarted: its own lock"
    other = fence(lock, clock, "query-b")
    assert not other.take(0)
    started = clock()
    with pytest.raises(GroupInUseError, match=f"producer group '{GROUP}' is in use") as caught:
        other.take(LOCK_LIFETIME_S / 2)  # the holder renews it meanwhile: it stays taken
    assert clock() - started >= LOCK_LIFETIME_S / 2
    assert caught.value.option == "producerGroup"
    assert lock.holder == HOLDER_PREFIX + "query-a"


def test_a_writer_that_stopped_lets_the_next_one_in_once_its_lock_lapses() -> None:
    clock = ManualClock()
    lock = BrokerLock(clock)
    assert fence(lock, clock, "query-a").take()
    nxt = fence(lock, clock, "query-b")
    assert nxt.take(LOCK_WAIT_S), "a holder that renews no more lets go within the wait"
    assert LOCK_LIFETIME_S <= clock() <= LOCK_WAIT_S
    assert nxt.held


def test_a_batch_write_lets_go_at_its_end_and_the_next_one_need_not_wait() -> None:
    clock = ManualClock()
    lock = BrokerLock(clock)
    done = fence(lock, clock, "write-1")
    assert done.take()
    done.release()
    done.release()  # once is enough; a second does nothing
    assert not done.held
    assert fence(lock, clock, "write-2").take(0)


def test_a_committer_renews_only_when_due_and_stops_once_another_took_its_lock() -> None:
    clock = ManualClock()
    lock = BrokerLock(clock)
    committer = fence(lock, clock, "query-a")
    assert committer.take()
    asked = lock.asked
    clock.now += LOCK_RENEW_S / 2
    committer.renew()
    assert lock.asked == asked, "a lock renewed just now is not asked again"
    clock.now += LOCK_RENEW_S
    committer.renew()
    assert lock.asked == asked + 1 and lock.renewed == clock()
    clock.now += LOCK_LIFETIME_S + 1  # a pause longer than the lifetime: another writer takes it
    assert fence(lock, clock, "query-b").take(0)
    with pytest.raises(LockLostError, match=GROUP):
        committer.renew()
    assert not committer.held
