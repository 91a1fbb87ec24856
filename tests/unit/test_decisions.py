"""The exactly-once decision table: every state x every event, and every crash point of every
plan, run against a model of the brokers that stores a half again on each COMMIT (as RocketMQ
does), so a plan that commits a half twice shows as a duplicate row."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

from rocketmq_spark.sink.decisions import Event, Plan, State, Step, decide

ROWS = ("row-0", "row-1", "row-2")
BATCH = 7


class Crash(Exception):
    """The driver died before the next action."""


@dataclass
class Brokers:
    """What the brokers hold of one batch: its record, the halves of each run, the rows stored."""

    state: State = State.UNDECIDED
    decided_run: str | None = None
    halves: dict[str, tuple[str, ...]] = field(default_factory=dict)  # run -> the rows it sent as halves
    stored: list[str] = field(default_factory=list)  # every COMMIT stores its row, twice if twice
    rolled_back: set[tuple[str, str]] = field(default_factory=set)


class Driver:
    """Runs plans action by action (a record, an END), dying before action number ``crash_at``."""

    def __init__(self, brokers: Brokers, crash_at: int | None = None) -> None:
        self.brokers = brokers
        self.crash_at = crash_at
        self.actions = 0

    def act(self) -> None:
        if self.crash_at is not None and self.actions == self.crash_at:
            raise Crash
        self.actions += 1

    def run(self, plan: Plan, run: str) -> None:
        b = self.brokers
        for step in plan.steps:
            if step is Step.RECORD_DECISION:
                self.act()
                b.state, b.decided_run = State.DECIDED, run
            elif step is Step.COMMIT_OWN:
                for row in b.halves[run]:
                    self.act()
                    b.stored.append(row)
            elif step is Step.FINISH:
                assert b.decided_run is not None
                seen = set(b.stored)  # looked up in the target queues from the recorded positions
                for row in b.halves[b.decided_run]:
                    if row not in seen:
                        self.act()
                        b.stored.append(row)
            elif step is Step.RECORD_DONE:
                self.act()
                b.state = State.DONE
            elif step is Step.ROLLBACK_OWN:
                for row in b.halves[run]:
                    self.act()
                    b.rolled_back.add((run, row))


def event(brokers: Brokers, what: Event, run: str, crash_at: int | None = None) -> bool:
    """``what`` for ``run``; whether it ran to its end (False: the driver died on the way)."""
    plan = decide(brokers.state, what, own_decided=brokers.decided_run == run)
    try:
        Driver(brokers, crash_at).run(plan, run)
    except Crash:
        return False
    return True


def send(brokers: Brokers, run: str, rows: tuple[str, ...] = ROWS) -> None:
    brokers.halves[run] = rows


def actions_of(what: Event, brokers: Brokers, run: str) -> int:
    """How many actions ``what`` takes from this state, counted on a copy."""
    copy = Brokers(brokers.state, brokers.decided_run, dict(brokers.halves), list(brokers.stored))
    driver = Driver(copy)
    driver.run(decide(copy.state, what, own_decided=copy.decided_run == run), run)
    return driver.actions


def assert_once(brokers: Brokers) -> None:
    assert Counter(brokers.stored) == Counter(ROWS), f"stored {brokers.stored}"


def restart(brokers: Brokers, run: str) -> None:
    """A restarted query: recovery, then Spark runs the batch again (new halves) and commits it."""
    assert event(brokers, Event.RECOVER, run)
    send(brokers, run)
    assert event(brokers, Event.COMMIT, run)


@pytest.mark.parametrize("crash_at", range(actions_of(Event.COMMIT, Brokers(halves={"r1": ROWS}), "r1") + 1))
def test_a_crash_anywhere_in_a_commit_then_a_restart_stores_each_row_once(crash_at: int) -> None:
    brokers = Brokers()
    send(brokers, "r1")
    finished = event(brokers, Event.COMMIT, "r1", crash_at)
    assert finished == (crash_at == actions_of(Event.COMMIT, Brokers(halves={"r1": ROWS}), "r1"))
    # Before the decision nothing is visible; once it is recorded, the rest follows.
    if brokers.state is State.UNDECIDED:
        assert brokers.stored == []
    restart(brokers, "r2")
    assert_once(brokers)
    assert brokers.state is State.DONE


@pytest.mark.parametrize("first_crash", range(1, 5))
@pytest.mark.parametrize("second_crash", range(0, 6))
def test_two_crashes_in_a_row_still_store_each_row_once(first_crash: int, second_crash: int) -> None:
    brokers = Brokers()
    send(brokers, "r1")
    event(brokers, Event.COMMIT, "r1", first_crash)
    # The next start dies too, in its recovery or in the replayed batch's commit.
    send(brokers, "r2")
    if event(brokers, Event.RECOVER, "r2", second_crash):
        event(brokers, Event.COMMIT, "r2", second_crash)
    restart(brokers, "r3")
    assert_once(brokers)


def test_spark_calling_commit_again_after_the_batch_was_committed_stores_nothing_twice() -> None:
    brokers = Brokers()
    send(brokers, "r1")
    assert event(brokers, Event.COMMIT, "r1")
    # The driver died after the sink's commit, before Spark's commit log: the batch runs again.
    send(brokers, "r2")
    assert event(brokers, Event.COMMIT, "r2")
    assert_once(brokers)
    assert brokers.rolled_back == {("r2", row) for row in ROWS}


def test_an_abort_after_the_decision_leaves_it_to_the_next_start() -> None:
    brokers = Brokers()
    send(brokers, "r1")
    assert not event(brokers, Event.COMMIT, "r1", crash_at=2)  # the decision and one COMMIT
    assert event(brokers, Event.ABORT, "r1")  # Spark aborts in the same run: the decision stands
    assert brokers.stored == ["row-0"] and brokers.rolled_back == set()
    restart(brokers, "r2")
    assert_once(brokers)


def test_a_failed_batch_is_never_seen_and_its_rerun_is_seen_once() -> None:
    brokers = Brokers()
    send(brokers, "r1", ROWS[:2])  # a task failed after others sent
    assert event(brokers, Event.ABORT, "r1")
    assert brokers.stored == []
    restart(brokers, "r2")
    assert_once(brokers)


def test_a_zombie_attempts_halves_are_never_committed() -> None:
    brokers = Brokers()
    # The decision names the winning attempts' halves only; a zombie's are another "run" of rows.
    send(brokers, "zombie", ("row-0", "row-1"))
    send(brokers, "r1")
    assert event(brokers, Event.COMMIT, "r1")
    assert event(brokers, Event.RECOVER, "r1")
    assert_once(brokers)


@pytest.mark.parametrize("state", list(State))
def test_a_check_back_is_answered_rollback_in_every_state(state: State) -> None:
    for own in (False, True):
        plan = decide(state, Event.CHECK, own)
        assert plan.steps == (Step.ANSWER_ROLLBACK,)
        assert not plan.does(Step.COMMIT_OWN) and not plan.does(Step.FINISH)


def test_a_write_id_already_committed_writes_nothing() -> None:
    assert decide(State.DONE, Event.START_WRITE).steps == (Step.SKIP_WRITE,)
    assert decide(State.UNDECIDED, Event.START_WRITE).steps == ()
    decided = decide(State.DECIDED, Event.START_WRITE)
    assert decided.steps == (Step.FINISH, Step.RECORD_DONE, Step.SKIP_WRITE)


@pytest.mark.parametrize("state", list(State))
@pytest.mark.parametrize("what", list(Event))
@pytest.mark.parametrize("own", [False, True])
def test_every_state_and_event_has_a_plan_that_never_commits_undecided_halves(
    state: State, what: Event, own: bool
) -> None:
    plan = decide(state, what, own)
    assert plan.says
    # Only a decision made by this very plan lets it commit this run's halves as they are.
    if plan.does(Step.COMMIT_OWN):
        assert plan.steps.index(Step.RECORD_DECISION) < plan.steps.index(Step.COMMIT_OWN)
    # The done record follows every COMMIT it vouches for.
    if plan.does(Step.RECORD_DONE):
        assert plan.steps[-1] is Step.RECORD_DONE or plan.steps.index(Step.RECORD_DONE) > max(
            plan.steps.index(s) for s in (Step.COMMIT_OWN, Step.FINISH) if plan.does(s)
        )
    # This run's halves are never both committed and rolled back.
    assert not (plan.does(Step.COMMIT_OWN) and plan.does(Step.ROLLBACK_OWN))
    # The steps come in the order Step lists them.
    order = list(Step)
    assert list(plan.steps) == sorted(plan.steps, key=order.index)
