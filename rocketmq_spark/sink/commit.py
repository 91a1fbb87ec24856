"""The exactly-once sink's one authority over its halves: the driver's commit and abort, and the
recovery that finishes what an earlier run decided, each running a plan of ``decisions``.

ENDs are two-way, so a COMMIT is known done when its answer comes, and they name each half by
its original offsets (``fromTransactionCheck``, so that 5.1.1+ brokers take it at any age). Those
of rows that keep an order (a sharding key, an explicit queue) go one at a time per queue, as
the queue offset is given when the COMMIT is put; the others go many at once.

``FINISH`` trusts no memory: it reads the decided halves back from the half queue by the
decision's spans (each picked by its attempt's mark, a resent half's copy dropped by unique key),
reads the target queues from the recorded positions for which of them are stored, and commits
the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from rocketmq_spark.model import MS_PER_SECOND, MessageQueue
from rocketmq_spark.remoting import calls
from rocketmq_spark.remoting.cluster import shared_cluster
from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.errors import NoReplicaError, RocketMQError
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.remoting.transactions import Half, Resolution, commit_log_offset, end_transaction
from rocketmq_spark.sink.crash_points import Point, reached
from rocketmq_spark.sink.decision_record import PROPERTY_ATTEMPT, Decision, record_key
from rocketmq_spark.sink.decisions import Event, Plan, State, Step, decide
from rocketmq_spark.sink.fence import LOCK_WAIT_S, Fence
from rocketmq_spark.sink.halves import SentHalves, Transaction
from rocketmq_spark.sink.ledger import Entries, Ledger
from rocketmq_spark.sink.options import SinkOptions
from rocketmq_spark.sink.scans import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, scan

log = logging.getLogger(__name__)

# Where a broker keeps halves until they are resolved (``TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC``), one queue.
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
HALF_QUEUE_ID = 0
# ENDs one call_many keeps unanswered: a broker takes them into a pool of its own (the proxy,
# whose window is smaller, is refused for exactly-once). Measured on a 2-core machine, 30,000
# COMMITs from one process: 64 -> 3,600 a second, 256 -> 4,700 to 5,600, 1,024 -> 3,500.
END_WINDOW = 256
# A 4.9 broker registers its half topic only when its transaction check first runs (every
# transactionCheckInterval, 60 s by default), not when it stores the first half: until then a pull
# of the half queue is answered TOPIC_NOT_EXIST, and a recovery that soon after the broker's start
# waits this long for it.
HALF_TOPIC_WAIT_S = 90.0

# One half to resolve: the half, its target queue, and whether that queue keeps order.
Pending = tuple[Half, MessageQueue, bool]


# After an END failed, how long a broker that is still alive may yet put it: the request may wait
# in its END queue until its fast-failure drops it (``waitTimeMillsInTransactionQueue``, 3 s by
# default) and then wait for the store (``syncFlushTimeout``, 5 s by default). The lookup that
# decides what to COMMIT again runs only after this, so it sees every END that was put.
END_SETTLE_S = 3.0 + 5.0


class CommitFailedError(RocketMQError):
    """Some COMMITs of a decided batch failed: the decision stands, and a retry or the next start
    finishes it. Retriable when every failure was (a lost master, a busy broker)."""

    def __init__(self, message: str, failures: Sequence[RocketMQError], retriable: bool) -> None:
        super().__init__(message)
        self.failures = list(failures)
        self.retriable = retriable


class Committer:
    """Runs the plans of one producer group's batches on the driver."""

    def __init__(
        self, options: SinkOptions, holder: str, retry: Retry | None = None, lock_wait_s: float = LOCK_WAIT_S
    ) -> None:
        """``holder``: the writer's id (a query's id, a batch write's ``writeId`` or run), which
        holds the group's lock (``fence``) across the writer's restarts; ``lock_wait_s``: how long
        a commit waits for another holder's lock to lapse before it is refused."""
        assert options.exactly_once is not None
        cluster = shared_cluster(options.client)
        self.client, self.replicas = cluster.client, cluster.replicas
        self.group = options.producer_group
        self.retry = retry or Retry()
        self.timeout_s = options.send_timeout_ms / MS_PER_SECOND
        self.ledger = Ledger(
            self.client, self.replicas, self.retry, options.exactly_once.transaction_topic, self.group, self.timeout_s
        )
        self.fence = Fence(self.ledger, holder)
        self.lock_wait_s = lock_wait_s

    def recover(self, whole: bool = False) -> Entries:
        """Finish every batch an earlier run decided and did not finish; the records after
        (``whole``: all the group's records the topic holds, not only those since it settled)."""
        self.fence.take(self.lock_wait_s)
        entries = self.ledger.read(whole)
        for decision in entries.pending():
            self._run(decide(State.DECIDED, Event.RECOVER), decision.key, (), entries, None)
        if entries.pending():
            entries = self.ledger.read(whole)
        self.ledger.settle(entries)
        return entries

    def commit(self, transaction: Transaction, sent: Sequence[SentHalves]) -> Plan:
        """Spark's commit of ``transaction``'s batch, whose tasks stored ``sent``."""
        return self._event(Event.COMMIT, transaction, sent)

    def abort(self, transaction: Transaction, sent: Sequence[SentHalves]) -> Plan:
        return self._event(Event.ABORT, transaction, sent)

    def _event(self, event: Event, transaction: Transaction, sent: Sequence[SentHalves]) -> Plan:
        key = record_key(self.group, transaction.query, transaction.batch)
        if not self.fence.take(0 if event is Event.ABORT else self.lock_wait_s):
            # An abort does not wait: this run's halves no decision names are rolled back, and
            # anything else is left to whoever holds the lock, or the group's next start.
            entries = self.ledger.read()
            state = entries.state(key)
            plan = decide(state, event) if state is State.UNDECIDED else Plan((), "left to the group's next start")
            log.warning(
                "batch %s %s without the group's lock (another writer holds it): %s", key, event.value, plan.says
            )
            self._run(plan, key, sent, entries, transaction)
            return plan
        entries = self.ledger.read()
        for decision in entries.pending():  # an earlier batch an earlier run left
            if decision.key != key:
                self._run(decide(State.DECIDED, Event.RECOVER), decision.key, (), entries, None)
        decided = entries.decisions.get(key)
        own = decided is not None and all(transaction.run in task.mark.split("/") for task in decided.tasks)
        plan = decide(entries.state(key), event, own)
        log.info("batch %s %s: %s", key, event.value, plan.says)
        self._run(plan, key, sent, entries, transaction)
        if plan.does(Step.RECORD_DONE):
            self.ledger.settle(self.ledger.read())
        return plan

    def release(self) -> None:
        """Let the group's lock go: a batch write is over."""
        self.fence.release()

    def _run(
        self, plan: Plan, key: str, sent: Sequence[SentHalves], entries: Entries, transaction: Transaction | None
    ) -> None:
        own = [(h, q, p) for s in sent for h, q, p in zip(s.halves(), s.queues(), s.pinned)]
        for step in plan.steps:
            if step is Step.RECORD_DECISION:
                assert transaction is not None
                decision = self._decision(transaction, sent)
                self.ledger.decide(decision)
                entries.decisions[key] = decision
                reached(Point.DECIDED)
            elif step is Step.COMMIT_OWN:
                self._commit(entries.decisions[key], own)
            elif step is Step.FINISH:
                self._commit(entries.decisions[key], None)
            elif step is Step.RECORD_DONE:
                self.ledger.done(key)
                entries.done.add(key)
                reached(Point.DONE)
            elif step is Step.ROLLBACK_OWN:
                try:
                    self._end(own, Resolution.ROLLBACK)
                except RocketMQError as err:  # never visible anyway: the broker sets them aside
                    log.warning("rolling back %d half(s) of %s failed (%s); they stay invisible", len(own), key, err)

    def _commit(self, decision: Decision, own: Sequence[Pending] | None) -> None:
        """COMMIT a recorded decision's halves: ``own`` (this run's, as its tasks sent them), else
        those the lookup finds not stored. What fails in a way a retry can fix (a master lost to a
        failover or a restart, a busy broker) is tried again within the retry budget, never blindly:
        once a broker that is still alive can no longer put a failed END, the lookup says which
        halves are stored, and only the others are sent again."""
        policy = replace(
            self.retry,
            first_backoff_s=max(self.retry.first_backoff_s, END_SETTLE_S),
            max_backoff_s=max(self.retry.max_backoff_s, END_SETTLE_S),
        )
        attempts = policy.start()
        pending = own
        decided: dict[str, Pending] | None = None  # read once: a half queue's halves do not change
        while True:
            try:
                if pending is None:
                    if decided is None:
                        decided = self._decided(decision)
                    pending = self._settled_unstored(decision, decided)
                self._end(pending, Resolution.COMMIT)
            except RocketMQError as err:
                if not attempts.again(err):  # a lock another writer took is not retried either
                    raise
                failures = err.failures if isinstance(err, CommitFailedError) else [err]
                for address in {f.address for f in failures if f.address is not None}:
                    self.replicas.failed(address)  # ask the routes again: a new master may serve it
                log.log(
                    logging.WARNING if attempts.failed == 1 else logging.INFO,  # one warning an outage
                    "batch %s: the commit failed (%s); looking up which halves are stored in %.0f s and "
                    "committing the others, %s",
                    decision.key,
                    err,
                    attempts.pause_s,
                    policy.limits(),
                )
                attempts.pause()
                pending = None
            else:
                if attempts.failed:
                    log.warning("batch %s: committed after %d failed attempt(s)", decision.key, attempts.failed)
                return

    def _decision(self, transaction: Transaction, sent: Sequence[SentHalves]) -> Decision:
        """The decision of this run's halves, with where each target queue ends now: every COMMIT
        of it is put at or after that."""
        queues = sorted({q for s in sent for q in s.places}, key=lambda q: (q.topic, q.broker_name, q.queue_id))
        positions = {q: self._max_offset(q) for q in queues}
        tasks = tuple(s.spans() for s in sent if len(s))
        return Decision(self.group, transaction.query, transaction.batch, tasks, positions)

    def _master(self, topic: str, broker_name: str) -> str:
        address = self.retry.call(lambda: self.replicas.master(topic, broker_name), f"master of {broker_name}")
        if address is None:
            raise NoReplicaError(broker_name, [])
        return address

    def _max_offset(self, queue: MessageQueue) -> int:
        address = self._master(queue.topic, queue.broker_name)
        return self.retry.call(lambda: self.client.call(address, calls.max_offset(queue)), f"max offset of {queue}")

    def _end(self, halves: Iterable[Pending], resolution: Resolution) -> None:
        """Resolve each half once: those of ordered queues one at a time per queue, in order; the
        others together. Every answer is awaited; any failure is raised after the rest settled."""
        rounds: list[list[Half]] = [[]]
        per_queue: dict[MessageQueue, int] = {}
        for half, queue, pinned in halves:
            if not pinned:
                rounds[0].append(half)
                continue
            index = per_queue.get(queue, 0)
            per_queue[queue] = index + 1
            while len(rounds) <= index:
                rounds.append([])
            rounds[index].append(half)
        failures: list[RocketMQError] = []
        masters: dict[tuple[str, str], str] = {}  # asked once per broker, not once per half
        for batch in rounds:
            self.fence.renew()
            for h in batch:
                if (h.topic, h.broker_name) not in masters:
                    masters[(h.topic, h.broker_name)] = self._master(h.topic, h.broker_name)
            addressed = [
                (masters[(h.topic, h.broker_name)], end_transaction(h, self.group, resolution, from_check=True))
                for h in batch
            ]
            failures += [o for o in self.client.call_many(addressed, window=END_WINDOW) if isinstance(o, RocketMQError)]
            if failures:
                break  # an ordered queue's next COMMIT waits for the one before it
        if failures:
            raise CommitFailedError(
                f"{len(failures)} END_TRANSACTION ({resolution.name}) request(s) failed, first: {failures[0]}; "
                "the decision is recorded, and the next start (or Spark's retry) finishes it",
                failures,
                all(self.retry.retriable(f) for f in failures),
            ) from failures[0]

    def _decided(self, decision: Decision) -> dict[str, Pending]:
        """The decision's halves read back from the half queues by its spans, by unique key, in
        half-queue order."""
        halves: dict[str, Pending] = {}
        topic = next(iter(decision.positions)).topic if decision.positions else None
        half_retry = replace(
            self.retry,
            budget_s=max(self.retry.budget_s, HALF_TOPIC_WAIT_S),
            answers=self.retry.answers | {ResponseCode.TOPIC_NOT_EXIST},
        )
        for task in decision.tasks:
            for span in task.spans:
                assert topic is not None
                address = self._master(topic, span.broker_name)
                half_queue = MessageQueue(HALF_TOPIC, span.broker_name, HALF_QUEUE_ID)
                found = 0
                for m in scan(self.client, address, half_queue, self.group, span.first, span.last + 1, half_retry):
                    unique = m.unique_key
                    if m.properties.get(PROPERTY_ATTEMPT) != task.mark or unique is None or unique in halves:
                        continue
                    real = MessageQueue(
                        m.properties[PROPERTY_REAL_TOPIC], span.broker_name, int(m.properties[PROPERTY_REAL_QUEUE_ID])
                    )
                    half = Half(
                        span.broker_name, real.topic, commit_log_offset(m.offset_msg_id), m.queue_offset, unique
                    )
                    halves[unique] = (half, real, True)
                    found += 1
                if found != span.count:
                    raise CommitFailedError(
                        f"the half queue of {span.broker_name} holds {found} of the {span.count} halves of {task.mark} "
                        f"between {span.first} and {span.last}: were its files deleted (fileReservedTime)?",
                        [],
                        retriable=False,
                    )
        return halves

    def _settled_unstored(self, decision: Decision, halves: dict[str, Pending]) -> list[Pending]:
        """The decided ``halves`` not stored, by a lookup every broker answered ``END_SETTLE_S``
        after it answered an earlier one. A broker that stalled (a long GC pause, a hung host)
        puts the COMMITs it had received when it runs again, beside the lookup's own requests: a
        lookup it answered then could miss them, and COMMITting those halves again would store
        them twice. Once it answered, what it still holds is put within the settle time. A first
        lookup that finds every half stored needs no second: a stored half stays stored."""
        left, ends = self._unstored(decision, halves, decision.positions)
        if left:
            self.retry.sleep(END_SETTLE_S)  # then only what was stored since the first is read
            left, _ = self._unstored(decision, {p[0].msg_id: p for p in left}, ends)
        return left

    def _unstored(
        self, decision: Decision, halves: dict[str, Pending], since: Mapping[MessageQueue, int]
    ) -> tuple[list[Pending], dict[MessageQueue, int]]:
        """The ``halves`` not stored in their target queues between ``since`` and where each queue
        ends now, in half-queue order; and those ends."""
        marks = {task.mark for task in decision.tasks}
        stored: set[str] = set()
        ends: dict[MessageQueue, int] = {}
        for queue, position in since.items():
            address = self._master(queue.topic, queue.broker_name)
            ends[queue] = self._max_offset(queue)
            for m in scan(self.client, address, queue, self.group, position, ends[queue], self.retry):
                if m.properties.get(PROPERTY_ATTEMPT) in marks and m.unique_key is not None:
                    stored.add(m.unique_key)
        left = [pending for unique, pending in halves.items() if unique not in stored]
        log.info("batch %s: %d of %d decided half(s) not stored yet", decision.key, len(left), len(halves))
        return left, ends
