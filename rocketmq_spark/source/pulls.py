"""The pulls of one queue range: records of the spans asked for, and the one way they are sent.

A :class:`Pull` is only a record: the span ``[start, stop)`` and, once sent, its pending answer
or the error sending it met. Creating one sends nothing. :meth:`PullSender.submit` puts pulls on
the wire and is called only inside the client's ``pulls_together()``, so every pull a task makes
(a round's new spans, a short answer's rest, a retry) leaves in a batched write: one system call
per broker for all the pulls of a round, instead of one per pull.

Where a pull goes is decided when it is sent: the replica of the range's broker name that serves
reads now (``remoting.replicas``: the broker's suggestion, the master, else a slave). An address
that cannot be reached, that times out, or that refuses to serve reads (a 5.x slave without
``slaveReadEnable``) is passed over and the routes asked again, so a retry goes to the new master or
a slave; a range that no replica serves for ``retryBudgetMs`` fails naming the broker name and
every address tried.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from rocketmq_spark.remoting.client import PendingPull, PullResult, PullSpec, PullStatus, RocketMQClient
from rocketmq_spark.remoting.errors import (
    BrokerResponseError,
    ConnectionFailedError,
    NoReplicaError,
    QueueNotReadableError,
    RequestTimeoutError,
    RocketMQError,
)
from rocketmq_spark.remoting.replicas import Replicas, not_copied_yet, rejected
from rocketmq_spark.remoting.route import MASTER_BROKER_ID
from rocketmq_spark.source.partition import ReadRange, RocketMQPartition

log = logging.getLogger(__name__)

# Answers that hand out what they found and go on from their next begin offset, if it moves on.
MOVES_ON = (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG)


class Pull:
    """A pull of the span ``[start, stop)`` of a range. It knows its span and, once sent, its
    answer to come (``pending``) or why it could not be sent (``error``); nothing else, so the
    range decides what to do with it and the sender how it goes out."""

    __slots__ = ("start", "stop", "pending", "error", "address", "broker_id")

    def __init__(self, start: int, stop: int) -> None:
        self.start = start
        self.stop = stop
        self.pending: PendingPull | None = None
        self.error: RocketMQError | None = None
        self.address = ""  # the replica it was sent to, once sent
        self.broker_id = MASTER_BROKER_ID


class PullSender:
    """Sends the pulls of one range and reads their answers: it holds the client, the range and
    the query's retry policy. Answers are matched to requests, so the task's thread keeps several
    pulls on the wire and decodes while the broker works; it reads the answers itself."""

    def __init__(self, client: RocketMQClient, replicas: Replicas, part: RocketMQPartition, rng: ReadRange) -> None:
        self.client = client
        self.replicas = replicas
        self.part = part
        self.rng = rng
        self.spec = PullSpec(rng.queue, part.task.group, part.task.sub_expression, part.task.expression_type)
        self._replica: tuple[int, str] | None = None  # (broker id, address) pulls go to now
        self.tried: list[str] = []  # addresses that failed or refused while this range was read

    def submit(self, pulls: Iterable[Pull]) -> None:
        """Put each of ``pulls`` not sent yet on the wire. Called only inside the client's
        ``pulls_together()``, which sends them when it ends; an error sending one (no replica
        listed, a connection refused) is kept on it, to be met (and retried) when its answer is
        asked for."""
        client = self.client
        for pull in pulls:
            if pull.pending is not None or pull.error is not None:
                continue
            try:
                pull.broker_id, pull.address = self._replica or self._resolve()
                pull.pending = client.pull_async(pull.address, self.spec, pull.start, pull.stop - pull.start)
            except RocketMQError as err:
                pull.error = err
                self._failed(pull, err)

    def _resolve(self) -> tuple[int, str]:
        queue = self.rng.queue
        self._replica = self.replicas.read_replica(queue.topic, queue.broker_name, queue.queue_id)
        return self._replica

    def result(self, pull: Pull) -> PullResult:
        """The answer to a sent pull. If it failed in a way a retry can fix, the same span is
        pulled again under the query's retry policy, from whichever replica serves it by then;
        when the budget is spent, the error names the broker name and the addresses tried."""
        try:
            return self._answer(pull)
        except RocketMQError as err:
            if not err.retriable:
                raise
            # Debug only: many pulls meet the same outage, which the retry logs once.
            log.debug("pull of %s at %d failed (%s); pulling it again", self.rng.queue, pull.start, err)
        try:
            return self.part.task.retry.call(
                lambda: self._answer(self.sent_alone(pull.start, pull.stop)),
                f"pull of {self.rng.queue} at {pull.start}",
            )
        except RocketMQError as spent:
            if spent.retriable and (self.tried or isinstance(spent, NoReplicaError)):
                cause = None if isinstance(spent, NoReplicaError) else spent
                raise NoReplicaError(self.rng.queue.broker_name, sorted(set(self.tried)), cause) from spent
            raise

    def until_served(self, start: int, stop: int, wait_s: float) -> PullResult:
        """Pull a stalled span again, with the retry policy's backoff, until an answer moves on or
        ``wait_s`` is spent; the last answer either way."""

        def attempt() -> PullResult:
            result = self.result(self.sent_alone(start, stop))
            if stalled(start, result):
                raise _Stalled(result)
            return result

        try:
            return self.part.task.retry.within(wait_s).call(attempt, f"pull of {self.rng.queue} at {start}")
        except _Stalled as still:
            return still.result

    def sent_alone(self, start: int, stop: int) -> Pull:
        """A pull of the span in a batched write of its own: for a retry, which waits for it at once."""
        pull = Pull(start, stop)
        with self.client.pulls_together():
            self.submit((pull,))
        return pull

    def _answer(self, pull: Pull) -> PullResult:
        """The pull's answer; a queue the broker does not let anyone read now is waited for, and a
        replica that does not answer or refuses is passed over."""
        if pull.pending is None:
            assert pull.error is not None, "a pull was waited for before it was submitted"
            raise pull.error
        try:
            result = pull.pending.result()
        except BrokerResponseError as err:
            if QueueNotReadableError.refused(err):
                raise QueueNotReadableError(str(self.rng.queue), err) from err
            if not_copied_yet(err, pull.broker_id != MASTER_BROKER_ID):
                uncopied = _TopicNotCopied(pull, err)
                self._failed(pull, uncopied)
                raise uncopied from err
            self._failed(pull, err)
            raise
        except RocketMQError as err:
            self._failed(pull, err)
            raise
        if pull.broker_id != MASTER_BROKER_ID and _behind(pull.start, result):
            behind = _Behind(pull, describe(result))
            self._failed(pull, behind)
            raise behind
        self.tried.clear()  # this outage, if any, is over
        if result.suggested_broker_id != pull.broker_id:
            self._suggested(result.suggested_broker_id)
        return result

    def _failed(self, pull: Pull, error: RocketMQError) -> None:
        """A replica that cannot be reached or refuses is passed over, and the routes asked again;
        a busy broker (flow control) is asked again after the retry's pause, not passed over."""
        if not pull.address or not (isinstance(error, _PASSED_OVER_FOR) or rejected(error)):
            return
        self.tried.append(pull.address)
        as_slave = rejected(error) or isinstance(error, (_Behind, _TopicNotCopied))
        self.replicas.failed(pull.address, self.rng.queue.topic, as_slave=as_slave)
        if self._replica is not None and self._replica[1] == pull.address:
            self._replica = None

    def _suggested(self, broker_id: int) -> None:
        """Follow the broker's suggestion for the queue's next pull, as the Java client does: the
        next pull goes to that replica if the routes list it (the master while it is back)."""
        queue = self.rng.queue
        self.replicas.suggest(queue.topic, queue.broker_name, queue.queue_id, broker_id)
        self._replica = None


class _Behind(RocketMQError):
    """A slave's answer that does not serve a planned offset: it may not have copied it yet, and
    only a master's word decides that data is gone. The slave is passed over and the pull retried,
    on the master once it is back, or on the slave once it has caught up."""

    retriable = True

    def __init__(self, pull: Pull, detail: str) -> None:
        super().__init__(f"replica {pull.broker_id} at {pull.address} does not serve offset {pull.start} yet: {detail}")
        self.address = pull.address


class _TopicNotCopied(RocketMQError):
    """A slave that does not know the topic yet (``replicas.not_copied_yet``): it is passed over
    and the pull retried, as for one behind."""

    retriable = True

    def __init__(self, pull: Pull, error: RocketMQError) -> None:
        super().__init__(f"replica {pull.broker_id} at {pull.address} does not serve the topic yet: {error}")
        self.address = pull.address


# Failures after which a replica is passed over: it cannot be reached, does not answer, or is a
# slave behind the planned offsets or without the topic.
_PASSED_OVER_FOR = (ConnectionFailedError, RequestTimeoutError, _Behind, _TopicNotCopied)


def _behind(start: int, result: PullResult) -> bool:
    """Whether a slave's answer to a pull at ``start`` leaves the offset unserved."""
    return stalled(start, result) or result.status is PullStatus.OFFSET_ILLEGAL


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
    return (
        f"{result.status.value}{remark} with next begin offset {result.next_begin_offset}, the queue holding "
        f"[{result.min_offset}, {result.max_offset})"
    )
