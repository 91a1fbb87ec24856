"""How a decided batch's COMMITs are retried (``Committer._commit``): never blindly, as a second
COMMIT of a half stores it again. After a failure a retry can fix, the committer waits until a
broker that is still alive can no longer put a failed END, looks up which halves are stored (twice,
the settle time apart, where the first finds some missing: a broker that stalled puts what it held
once it answers), and COMMITs only the others; what a retry cannot fix, or a lock another writer took, fails at once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pytest

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting.errors import ConnectionFailedError, RocketMQError
from rocketmq_spark.remoting.outages import Outages
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.remoting.transactions import Half, Resolution
from rocketmq_spark.sink.commit import END_SETTLE_S, CommitFailedError, Committer, Pending
from rocketmq_spark.sink.decision_record import Decision
from rocketmq_spark.sink.fence import LockLostError

QUEUE = MessageQueue("orders", "broker-a", 0)
DEAD = "10.0.0.1:10911"
BUDGET_S = 60.0


def pending(count: int) -> list[Pending]:
    return [(Half("broker-a", "orders", 1000 + i, i, f"id-{i}"), QUEUE, False) for i in range(count)]


class Brokers:
    """Stands in for the committer's ENDs and its lookup: ENDs fail while ``failing`` holds an
    error, else store their halves; the lookup answers the decided halves not stored."""

    def __init__(self, decided: list[Pending]) -> None:
        self.decided = decided
        self.stored: dict[str, int] = {}  # unique key -> times stored
        self.failing: list[RocketMQError] = []
        self.lookups: list[float] = []  # when each lookup ran
        self.half_reads = 0  # how often the half queues were read back
        self.failed_addresses: list[str] = []

    def end(self, halves: Iterable[Pending], resolution: Resolution) -> None:
        halves = list(halves)
        assert resolution is Resolution.COMMIT
        if self.failing:
            error = self.failing.pop(0)
            for half, _, _ in halves[: len(halves) // 2]:  # some got through before the failure
                self.stored[half.msg_id] = self.stored.get(half.msg_id, 0) + 1
            raise CommitFailedError("ENDs failed", [error], error.retriable)
        for half, _, _ in halves:
            self.stored[half.msg_id] = self.stored.get(half.msg_id, 0) + 1


class Replicas:
    def __init__(self, brokers: Brokers) -> None:
        self.brokers = brokers

    def failed(self, address: str, topic: str | None = None, as_slave: bool = False) -> None:
        self.brokers.failed_addresses.append(address)


def committer(brokers: Brokers, now: list[float]) -> Committer:
    """A committer whose ENDs and lookup are ``brokers``'s, on a clock the test moves."""

    def sleep(seconds: float) -> None:
        now[0] += seconds

    made = Committer.__new__(Committer)
    made.retry = Retry(budget_s=BUDGET_S, sleep=sleep, clock=lambda: now[0], outages=Outages())
    made.replicas = Replicas(brokers)  # type: ignore[assignment]

    def decided(decision: Decision) -> dict[str, Pending]:
        brokers.half_reads += 1
        return {p[0].msg_id: p for p in brokers.decided}

    def unstored(
        decision: Decision, halves: dict[str, Pending], since: Mapping[MessageQueue, int]
    ) -> tuple[list[Pending], dict[MessageQueue, int]]:
        brokers.lookups.append(now[0])
        return [p for key, p in halves.items() if key not in brokers.stored], since

    def end(halves: Sequence[Pending], resolution: Resolution) -> None:
        brokers.end(halves, resolution)

    made._decided = decided  # type: ignore[method-assign]
    made._unstored = unstored  # type: ignore[method-assign]
    made._end = end  # type: ignore[method-assign]
    return made


DECISION = Decision("g", "q", 0, (), {QUEUE: 0})


def test_failed_commits_are_retried_through_the_lookup_after_the_settle_time_each_half_once() -> None:
    halves = pending(10)
    brokers = Brokers(halves)
    brokers.failing = [ConnectionFailedError("connection refused", DEAD)] * 2
    now = [0.0]
    committer(brokers, now)._commit(DECISION, halves)
    assert brokers.stored == {f"id-{i}": 1 for i in range(10)}, "every half stored, none twice"
    assert len(brokers.lookups) == 4, "each retry looked up what was stored first, twice"
    assert brokers.lookups[0] >= END_SETTLE_S, "the lookup ran before a live broker could still put a failed END"
    for proof, decisive in (brokers.lookups[0:2], brokers.lookups[2:4]):
        assert decisive - proof >= END_SETTLE_S, "a lookup decided before a stalled broker's COMMITs were put"
    assert brokers.lookups[2] - brokers.lookups[1] >= END_SETTLE_S
    assert brokers.failed_addresses == [DEAD, DEAD], "the failed master is reported, so the routes are asked again"
    assert brokers.half_reads == 1, "the half queues were read back again for each retry"


def test_a_failure_no_retry_fixes_is_raised_at_once() -> None:
    halves = pending(4)
    brokers = Brokers(halves)
    refused = RocketMQError("refused")
    brokers.failing = [refused]
    now = [0.0]
    with pytest.raises(CommitFailedError):
        committer(brokers, now)._commit(DECISION, halves)
    assert brokers.lookups == [] and now[0] == 0.0


def test_a_lock_another_writer_took_stops_the_commit_at_once() -> None:
    halves = pending(4)
    brokers = Brokers(halves)
    now = [0.0]
    made = committer(brokers, now)

    def lost(halves: Sequence[Pending], resolution: Resolution) -> None:
        raise LockLostError("another writer holds the lock")

    made._end = lost  # type: ignore[method-assign]
    with pytest.raises(LockLostError):
        made._commit(DECISION, halves)
    assert brokers.lookups == []


def test_commits_that_keep_failing_fail_within_the_budget_with_the_decision_standing() -> None:
    halves = pending(6)
    brokers = Brokers(halves)
    brokers.failing = [ConnectionFailedError("connection refused", DEAD)] * 1000
    now = [0.0]
    with pytest.raises(CommitFailedError) as raised:
        committer(brokers, now)._commit(DECISION, halves)
    assert isinstance(raised.value.failures[0], ConnectionFailedError)
    assert now[0] <= BUDGET_S + END_SETTLE_S, "past the budget and the last attempt's lookup (its settle time)"
    assert all(count == 1 for count in brokers.stored.values()), "a half stored twice while retrying"


def test_a_finish_with_no_halves_of_its_own_starts_with_the_lookup() -> None:
    halves = pending(3)
    brokers = Brokers(halves)
    brokers.stored["id-0"] = 1  # an earlier run stored it
    now = [0.0]
    committer(brokers, now)._commit(DECISION, None)
    assert brokers.stored == {"id-0": 1, "id-1": 1, "id-2": 1}
    assert brokers.lookups == [0.0, END_SETTLE_S], "the lookup that decided came the settle time after the first"


def test_a_stalled_brokers_commits_put_after_the_first_lookup_are_not_committed_again() -> None:
    """A broker that stalled puts the COMMITs it had received once it runs again: after the first
    lookup it answered, which missed them."""
    halves = pending(4)
    brokers = Brokers(halves)
    now = [0.0]
    made = committer(brokers, now)
    lookup = made._unstored

    def stalled_then_puts(
        decision: Decision, found: dict[str, Pending], since: Mapping[MessageQueue, int]
    ) -> tuple[list[Pending], dict[MessageQueue, int]]:
        left = lookup(decision, found, since)
        for half, _, _ in halves[:2]:  # the COMMITs it held, put right after it answered
            brokers.stored.setdefault(half.msg_id, 1)
        return left

    made._unstored = stalled_then_puts  # type: ignore[method-assign]
    made._commit(DECISION, None)
    assert brokers.stored == {f"id-{i}": 1 for i in range(4)}, "a half stored twice"


def test_a_first_lookup_that_finds_every_half_stored_needs_no_second() -> None:
    halves = pending(3)
    brokers = Brokers(halves)
    brokers.stored = {f"id-{i}": 1 for i in range(3)}
    now = [0.0]
    committer(brokers, now)._commit(DECISION, None)
    assert brokers.lookups == [0.0] and now[0] == 0.0


def test_the_second_lookup_reads_only_what_was_stored_since_the_first_of_the_halves_left() -> None:
    halves = pending(3)
    brokers = Brokers(halves)
    brokers.stored["id-0"] = 1
    now = [0.0]
    made = committer(brokers, now)
    asked: list[tuple[list[str], dict[MessageQueue, int]]] = []

    def lookup(
        decision: Decision, found: dict[str, Pending], since: Mapping[MessageQueue, int]
    ) -> tuple[list[Pending], dict[MessageQueue, int]]:
        asked.append((sorted(found), since))
        return [p for key, p in found.items() if key not in brokers.stored], {q: 100 for q in since}

    made._unstored = lookup  # type: ignore[method-assign]
    made._commit(DECISION, None)
    assert asked == [(["id-0", "id-1", "id-2"], DECISION.positions), (["id-1", "id-2"], {QUEUE: 100})]
    assert brokers.stored == {"id-0": 1, "id-1": 1, "id-2": 1}
