"""The first offset stored at or after a time, on brokers that answer only near it (4.x).

A 4.x broker's SEARCH_OFFSET_BY_TIMESTAMP ignores ``boundaryType``. It binary-searches one
consume-queue file for the time and answers an entry stored exactly then (not necessarily the
first of several), else the closer in time of the two entries around it, else the last entry when
every message is older. The offset wanted is close to that answer, on either side of it.

What is known of a queue's offset is a bracket ``(lo, hi]``: ``lo`` is a message stored before the
time (or one below the queue's first offset), ``hi`` one stored at or after it (or the queue's max
offset). Pulls read the store times around the broker's answer: first the answer and its two
neighbours in one pull, which settles the usual case; then one message at a time, stepping away
from the answer by doubling steps until the other side turns up, then halving the bracket. Each
round sends the pulls of every queue not yet settled together, so the rounds, not the queues, set
the time it takes. No I/O here: the caller sends each round (``PullRound``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import cast

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.records.walk import Message, walk
from rocketmq_spark.remoting.calls import PullResult, PullStatus
from rocketmq_spark.remoting.errors import ProtocolError

# The first pull starts this far before the broker's answer and reads this many messages: the
# answer and both neighbours, which is all it takes unless several messages share a store time.
FIRST_BEFORE = 1
FIRST_WINDOW = 3
# Later pulls read the one message they ask about.
LATER_WINDOW = 1
# Offsets are Java longs: a bracket can be stepped across and halved at most this often each.
OFFSET_BITS = 63
MAX_ROUNDS = 2 * OFFSET_BITS + 1
# The bracket's end before the first answer gives the queue's max offset.
_NO_END = 2**OFFSET_BITS - 1

_QUEUE_OFFSET = Message._fields.index("queue_offset")
_STORE_TIMESTAMP = Message._fields.index("store_timestamp")


@dataclass(frozen=True)
class Probe:
    """One pull of a search: ``max_messages`` messages from ``offset``."""

    offset: int
    max_messages: int


# Sends one pull per queue, all together, and returns each one's result.
PullRound = Callable[[Mapping[MessageQueue, Probe]], Mapping[MessageQueue, PullResult]]


def store_times(body: bytes) -> Iterator[tuple[int, int]]:
    """(queue offset, store time) of each message of a pull body."""
    for row in walk(body).rows:
        yield cast(int, row[_QUEUE_OFFSET]), cast(int, row[_STORE_TIMESTAMP])


@dataclass
class Bracket:
    """What the pulls so far tell of one queue's offset: it lies in ``(lo, hi]``.

    ``lo_seen``/``hi_seen``: that end came from a pull near the broker's answer, not from the
    queue's bounds alone; while only one end has, the next pull steps away from it.
    """

    timestamp_ms: int
    lo: int = -1
    hi: int = _NO_END
    lo_seen: bool = False
    hi_seen: bool = False
    step: int = 1

    @property
    def settled(self) -> bool:
        return self.hi - self.lo <= 1

    def learn(self, probe: Probe, result: PullResult) -> None:
        """Narrow the bracket by what one pull found."""
        self.lo = max(self.lo, result.min_offset - 1)
        self.hi = min(self.hi, result.max_offset)
        if result.status is PullStatus.FOUND:
            for offset, stored_at in store_times(result.body):
                self._saw(offset, stored_at >= self.timestamp_ms)
        elif result.status in (PullStatus.RETRY_IMMEDIATELY, PullStatus.NO_MATCHED_MSG):
            # Entries the broker can no longer read: the oldest ones, which it is removing.
            self._saw(probe.offset, False)
        elif probe.offset >= result.max_offset:  # caught up, or asked past the end
            self._saw(result.max_offset, True)
        else:  # asked before the first offset still stored
            self._saw(result.min_offset - 1, False)

    def _saw(self, offset: int, at_or_after: bool) -> None:
        # A store time out of order with what is known (a clock set back) leaves the bracket be.
        if at_or_after and offset <= self.hi:
            self.hi, self.hi_seen = offset, True
        elif not at_or_after and offset >= self.lo:
            self.lo, self.lo_seen = offset, True

    def next_probe(self) -> Probe:
        """The next pull: a doubling step away from the one end seen, else the middle."""
        if self.hi_seen and not self.lo_seen:
            offset = max(self.hi - self.step, self.lo + 1)
        elif self.lo_seen and not self.hi_seen:
            offset = min(self.lo + self.step, self.hi - 1)
        else:
            offset = (self.lo + self.hi) // 2
        self.step *= 2
        return Probe(offset, LATER_WINDOW)


def first_at_or_after(
    near: Mapping[MessageQueue, int], timestamp_ms: int, pull_round: PullRound
) -> dict[MessageQueue, int]:
    """Per queue, the first offset stored at or after the time (the max offset if none is),
    from the broker's answer ``near`` it."""
    brackets = {queue: Bracket(timestamp_ms) for queue in near}
    probes = {queue: Probe(max(0, answer - FIRST_BEFORE), FIRST_WINDOW) for queue, answer in near.items()}
    for _ in range(MAX_ROUNDS):
        if not probes:
            break
        results = pull_round(probes)
        for queue, probe in probes.items():
            brackets[queue].learn(probe, results[queue])
        probes = {queue: bracket.next_probe() for queue, bracket in brackets.items() if not bracket.settled}
    if not probes:
        return {queue: bracket.hi for queue, bracket in brackets.items()}
    unsettled = ", ".join(map(str, sorted(probes)))
    raise ProtocolError(
        f"store times of {unsettled} did not settle where the messages of {timestamp_ms} start: "
        "the pulls around the broker's answer returned other offsets than asked"
    )
