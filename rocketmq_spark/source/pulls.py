"""The pulls of one queue range: records of the spans asked for, and the one way they are sent.

A :class:`Pull` is only a record: the span ``[start, stop)`` and, once sent, its pending answer
or the error sending it met. Creating one sends nothing. :meth:`PullSender.submit` puts pulls on
the wire and is called only inside the client's ``pulls_together()``, so every pull a task makes
(a round's new spans, a short answer's rest, a retry) leaves in a batched write: one system call
per broker for all the pulls of a round, instead of one per pull.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from rocketmq_spark.remoting.client import PendingPull, PullResult, PullStatus, RocketMQClient
from rocketmq_spark.remoting.errors import BrokerResponseError, QueueNotReadableError, RocketMQError
from rocketmq_spark.source.partition import ReadRange, RocketMQPartition

log = logging.getLogger(__name__)

# Answers that hand out what they found and go on from their next begin offset, if it moves on.
MOVES_ON = (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG)


class Pull:
    """A pull of the span ``[start, stop)`` of a range. It knows its span and, once sent, its
    answer to come (``pending``) or why it could not be sent (``error``); nothing else, so the
    range decides what to do with it and the sender how it goes out."""

    __slots__ = ("start", "stop", "pending", "error")

    def __init__(self, start: int, stop: int) -> None:
        self.start = start
        self.stop = stop
        self.pending: PendingPull | None = None
        self.error: RocketMQError | None = None


class PullSender:
    """Sends the pulls of one range and reads their answers: it holds the client, the range and
    the query's retry policy. Answers are matched to requests, so the task's thread keeps several
    pulls on the wire and decodes while the broker works; it reads the answers itself."""

    def __init__(self, client: RocketMQClient, part: RocketMQPartition, rng: ReadRange) -> None:
        self.client = client
        self.part = part
        self.rng = rng

    def submit(self, pulls: Iterable[Pull]) -> None:
        """Put each of ``pulls`` not sent yet on the wire. Called only inside the client's
        ``pulls_together()``, which sends them when it ends; an error sending one is kept on it,
        to be met (and retried) when its answer is asked for."""
        part, rng, client = self.part, self.rng, self.client
        for pull in pulls:
            if pull.pending is not None or pull.error is not None:
                continue
            try:
                pull.pending = client.pull_async(rng.address, rng.queue, pull.start, group=part.group,
                                                 max_messages=pull.stop - pull.start, subscription=part.sub_expression,
                                                 expression_type=part.expression_type)
            except RocketMQError as err:
                pull.error = err

    def result(self, pull: Pull) -> PullResult:
        """The answer to a sent pull. If it failed in a way a retry can fix, the same span is
        pulled again under the query's retry policy."""
        try:
            return self._answer(pull)
        except RocketMQError as err:
            if not err.retriable:
                raise
            # Debug only: many pulls meet the same outage, which the retry logs once.
            log.debug("pull of %s at %d failed (%s); pulling it again", self.rng.queue, pull.start, err)
        return self.part.retry.call(lambda: self._answer(self._sent_alone(pull.start, pull.stop)),
                                    f"pull of {self.rng.queue} at {pull.start}")

    def until_served(self, start: int, stop: int, wait_s: float) -> PullResult:
        """Pull a stalled span again, with the retry policy's backoff, until an answer moves on or
        ``wait_s`` is spent; the last answer either way."""

        def attempt() -> PullResult:
            result = self.result(self._sent_alone(start, stop))
            if stalled(start, result):
                raise _Stalled(result)
            return result

        try:
            return self.part.retry.within(wait_s).call(attempt, f"pull of {self.rng.queue} at {start}")
        except _Stalled as still:
            return still.result

    def _sent_alone(self, start: int, stop: int) -> Pull:
        """A pull of the span in a batched write of its own: for a retry, which waits for it at once."""
        pull = Pull(start, stop)
        with self.client.pulls_together():
            self.submit((pull,))
        return pull

    def _answer(self, pull: Pull) -> PullResult:
        """The pull's answer; a queue the broker does not let anyone read now is waited for."""
        if pull.pending is None:
            assert pull.error is not None, "a pull was waited for before it was submitted"
            raise pull.error
        try:
            return pull.pending.result()
        except BrokerResponseError as err:
            if QueueNotReadableError.refused(err):
                raise QueueNotReadableError(str(self.rng.queue), err) from err
            raise


class _Stalled(RocketMQError):
    """An answer that neither serves its offset nor says it is gone: worth pulling again."""

    retriable = True

    def __init__(self, result: PullResult) -> None:
        super().__init__(describe(result))
        self.result = result


def stalled(start: int, result: PullResult) -> bool:
    """Whether an answer to a pull at ``start`` leaves it where it is, with the data maybe there."""
    if result.status in MOVES_ON:
        return result.next_begin_offset <= start
    if result.status is PullStatus.RETRY_IMMEDIATELY:
        return result.min_offset <= start  # past the min offset, the data is gone: no use waiting
    return result.status is PullStatus.NO_NEW_MSG  # below the planned end: not (yet) in the index


def describe(result: PullResult) -> str:
    """An answer as error texts name it: status, remark and the queue's bounds."""
    remark = f" ({result.remark})" if result.remark else ""
    return (f"{result.status.value}{remark} with next begin offset {result.next_begin_offset}, the queue holding "
            f"[{result.min_offset}, {result.max_offset})")
