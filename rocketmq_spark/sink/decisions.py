"""What the exactly-once sink does with one batch's halves, for every event in every state: pure,
no I/O, tested alone (tests/unit/test_decisions.py), as Spark's Kafka source leaves its offset
ranges to a calculator.

A batch is one micro-batch of a query (``query`` is the checkpointed query id) or one ``df.write``.
Its state is what the brokers' records say of it, never what a process remembers, because Spark
runs ``commit`` and ``abort`` in fresh processes and a driver may die between any two steps:

- ``UNDECIDED``: no decision recorded. None of its halves may ever become visible: nobody commits
  a half that no decision names (check-backs, which name copies of halves, are answered ROLLBACK).
- ``DECIDED``: the decision is recorded (which run's halves, per task and broker, and where each
  target queue ended before the first COMMIT); some of those halves may be stored already.
- ``DONE``: every decided half was committed once; a later COMMIT would store it again.

The steps of a plan run in the order of ``Step``; a crash after any of them leaves a state from
which the next event (a replayed ``commit``, or the ``RECOVER`` of the next start) ends with each
decided half stored once and no other half visible. ``FINISH`` tells which decided halves are
stored by looking their unique keys up in the target queues from the recorded positions, so it
is right after any crash, including one in the middle of the ENDs; ``COMMIT_OWN`` is the fast path
of a decision made just now, with nothing stored yet.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class State(enum.Enum):
    """What the brokers' records say of one batch."""

    UNDECIDED = "undecided"
    DECIDED = "decided"
    DONE = "done"


class Event(enum.Enum):
    """What happens to a batch."""

    COMMIT = "commit"  # Spark's commit: every task of this run succeeded
    ABORT = "abort"  # Spark's abort: a task failed, or the commit raised
    CHECK = "check"  # a broker's check-back on a copy of one of the batch's halves
    RECOVER = "recover"  # a start of the query (or a write of the group) finds the batch
    START_WRITE = "start-write"  # a df.write with a writeId, before any task sends


class Step(enum.Enum):
    """What a plan does, in this order."""

    RECORD_DECISION = "record the decision"  # this run's halves and the target queues' positions
    COMMIT_OWN = "commit this run's halves"  # all of them, each once: nothing of them is stored yet
    FINISH = "commit the decided halves not stored yet"  # looked up from the recorded positions
    RECORD_DONE = "record the batch done"  # after every COMMIT was answered
    ROLLBACK_OWN = "roll back this run's halves"  # halves no decision names: never visible
    ANSWER_ROLLBACK = "answer the check ROLLBACK"  # retires the copy only; the original stays
    SKIP_WRITE = "write nothing: this writeId was committed"


@dataclass(frozen=True)
class Plan:
    """The steps for one event, and the line the log says about it."""

    steps: tuple[Step, ...]
    says: str

    def does(self, step: Step) -> bool:
        return step in self.steps


def decide(state: State, event: Event, own_decided: bool = False) -> Plan:
    """The plan for ``event`` on a batch in ``state``.

    ``own_decided``: the recorded decision names this run's halves (the commit raised after the
    decision, and Spark aborts in the same run); otherwise a recorded decision is an earlier
    run's, and this run's halves (a replayed batch's) must never be seen.
    """
    if event is Event.CHECK:
        # In every state: a check names a copy, which must never be committed; committing the
        # original (by its own offsets) is the decision's, and a rolled-back copy does not stop it.
        return Plan((Step.ANSWER_ROLLBACK,), "a check-back names a copy of a half: answered ROLLBACK")
    if state is State.UNDECIDED:
        return _undecided(event)
    if state is State.DECIDED:
        return _decided(event, own_decided)
    return _done(event, own_decided)


def _undecided(event: Event) -> Plan:
    if event is Event.COMMIT:
        return Plan(
            (Step.RECORD_DECISION, Step.COMMIT_OWN, Step.RECORD_DONE),
            "every task succeeded: the decision is recorded, then each half committed once",
        )
    if event is Event.ABORT:
        return Plan((Step.ROLLBACK_OWN,), "the batch failed before any decision: its halves are rolled back")
    # RECOVER or START_WRITE: an earlier run sent halves and never decided; they stay invisible
    # (unanswered checks set them aside), and the batch runs again with new ones.
    return Plan((), "no decision was recorded: nothing of the earlier run is visible, and nothing is to do")


def _decided(event: Event, own_decided: bool) -> Plan:
    if event is Event.ABORT:
        if own_decided:
            # The decision stands (Spark calls abort when commit raised): the next start finishes it.
            return Plan((), "the commit failed after its decision was recorded: the next start finishes it")
        return Plan((Step.ROLLBACK_OWN,), "an earlier run's decision stands; this run's halves are rolled back")
    finish = (Step.FINISH, Step.RECORD_DONE)
    if event is Event.START_WRITE:
        return Plan(
            (*finish, Step.SKIP_WRITE),
            "this writeId was decided by an earlier write: it is finished, nothing new is written",
        )
    if event is Event.COMMIT and not own_decided:
        return Plan(
            (*finish, Step.ROLLBACK_OWN),
            "the batch was decided by an earlier run: its halves are finished, this run's rolled back",
        )
    return Plan(finish, "a recorded decision was not finished: the halves not stored yet are committed")


def _done(event: Event, own_decided: bool) -> Plan:
    if event is Event.START_WRITE:
        return Plan((Step.SKIP_WRITE,), "this writeId was committed by an earlier write: nothing is written")
    if event in (Event.COMMIT, Event.ABORT) and not own_decided:
        return Plan(
            (Step.ROLLBACK_OWN,), "the batch was committed by an earlier run: this run's halves are rolled back"
        )
    return Plan((), "the batch is committed: nothing to do")
