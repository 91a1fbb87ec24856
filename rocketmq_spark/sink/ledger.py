"""The exactly-once sink's records, kept on ``transactionTopic``: a batch's decision before its
first COMMIT, and a done record once every COMMIT was answered (``decisions.State``).

A record must be found by whoever looks for it later, in any process, whatever became of the
topic in between: queues added, brokers added, a broker down. So a group's records go to queue
``RECORD_QUEUE_ID`` (which every broker of the topic has, whatever its queue count) of the first
``COPIES`` writable brokers in the group's own order of them (``ranked``: each broker keeps its
place as others come and go), and a reader reads that queue on every broker the route lists and
takes the union. Within one queue records are in the order written. How far the group's records
on a broker are settled (every decision before it done) is stored as the group's consumer offset
on that queue, so a reader starts there; ``mqadmin consumerProgress`` shows it. Records are
ordinary messages, keyed ``group/query/batch`` for ``mqadmin queryMsgByKey``.
"""

from __future__ import annotations

import logging
import os
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.model import MS_PER_SECOND, MessageQueue
from rocketmq_spark.records.outgoing import UniqueIds, encode_properties, message_properties
from rocketmq_spark.remoting import calls
from rocketmq_spark.remoting.calls import Call
from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.errors import BrokerResponseError, NoReplicaError, RocketMQError, TopicNotFoundError
from rocketmq_spark.remoting.locks import lock_queues, unlock_queues
from rocketmq_spark.remoting.replicas import Replicas
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.remoting.route import TopicRoute
from rocketmq_spark.remoting.sending import SendStatus, send_message
from rocketmq_spark.sink.decision_record import SEPARATOR, Decision
from rocketmq_spark.sink.decisions import State
from rocketmq_spark.sink.options import TRANSACTION_TOPIC
from rocketmq_spark.sink.scans import scan
from rocketmq_spark.sink.shared import SendingClient

T = TypeVar("T")

log = logging.getLogger(__name__)

TAG_DECISION = "decision"
TAG_DONE = "done"
# The queue of each broker a group's records go to: queue 0 exists on every broker of a topic,
# whatever queue counts an operator gives it later.
RECORD_QUEUE_ID = 0
# How many brokers get a copy of each record: one lost or down, the other still answers.
COPIES = 2


class TransactionRecordError(ConfigurationError):
    """The transaction topic is missing or cannot be written: names it and the command that fixes it."""


def ranked(group: str, broker_names: Iterable[str]) -> list[str]:
    """The brokers in the group's order of them (rendezvous hashing): adding or losing one broker
    moves no other, so the group's first brokers stay first while the topic changes."""
    return sorted(broker_names, key=lambda name: (-zlib.crc32(f"{group}{SEPARATOR}{name}".encode()), name))


@dataclass
class Entries:
    """A group's records from where it settled on each broker: decisions and which of them are
    done, the union of every broker's copies."""

    decisions: dict[str, Decision] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    ends: dict[str, int] = field(default_factory=dict)  # per broker, the record queue's offset after the last read
    first: dict[str, dict[str, int]] = field(default_factory=dict)  # per broker, each key's first record's offset

    def keep_from(self, broker_name: str) -> int:
        """Where a later reader of the broker must start: at its oldest pending decision, else at
        the last batch's records (a replayed commit of it must find it done), else its end."""
        first = self.first.get(broker_name, {})
        pending = [first[d.key] for d in self.pending() if d.key in first]
        if pending:
            return min(pending)
        return max(first.values(), default=self.ends.get(broker_name, 0))

    def state(self, key: str) -> State:
        if key in self.done:
            return State.DONE
        return State.DECIDED if key in self.decisions else State.UNDECIDED

    def pending(self) -> list[Decision]:
        """Decisions recorded and not done, oldest first."""
        return [d for key, d in self.decisions.items() if key not in self.done]


class Ledger:
    """One producer group's records on the transaction topic."""

    def __init__(
        self, client: SendingClient, replicas: Replicas, retry: Retry, topic: str, group: str, timeout_s: float
    ) -> None:
        self._client, self._replicas, self._retry = client, replicas, retry
        self.topic, self.group = topic, group
        self._timeout_s = timeout_s
        self._ids = UniqueIds(os.urandom(4))

    def place(self) -> tuple[MessageQueue, str]:
        """The group's first writable record queue and its master's address: where its lock is
        taken; a topic that does not exist is a configuration error that says how to create it."""
        return self._writable()[0]

    def read(self, whole: bool = False) -> Entries:
        """The group's records on every broker of the topic, from where it settled there
        (``whole``: from the queue's first record, for a writeId written at any time before) to
        the queue's end."""
        entries = Entries()
        for name in ranked(self.group, self._route().brokers):
            self._retry.call(partial(self._read_broker, name, whole, entries), f"records of {self.group} on {name}")
        return entries

    def _read_broker(self, name: str, whole: bool, entries: Entries) -> None:
        """Add the group's records on broker ``name`` to ``entries``, read from its best replica
        (a broker whose master is down still answers from a slave). One attempt: a replica that
        fails is reported, so that the next attempt asks the routes again and reads another, or
        passes over a broker that left the route meanwhile (killed, its records' other copies
        are on the next brokers in the group's order) instead of asking a dead address again."""
        if name not in self._replicas.route(self.topic).brokers:
            log.info("broker %s left the route of %s: its records are read from their other copies", name, self.topic)
            return
        queue = MessageQueue(self.topic, name, RECORD_QUEUE_ID)
        _, address = self._replicas.read_replica(self.topic, name, RECORD_QUEUE_ID)
        once = self._retry.once()
        try:
            stored = None if whole else self._settled(queue, address, once)
            start = stored if stored is not None else self._call(address, calls.min_offset(queue), once)
            end = self._call(address, calls.max_offset(queue), once)
            messages = list(scan(self._client, address, queue, self.group, start, end, once))
        except RocketMQError as err:
            if err.retriable:
                self._replicas.failed(address, self.topic)
            raise
        entries.ends[name] = end
        first = entries.first.setdefault(name, {})
        prefix = self.group + SEPARATOR
        for message in messages:
            key = message.keys or ""
            if not key.startswith(prefix):
                continue  # another group's record on the same queue
            first.setdefault(key, message.queue_offset)
            if message.tags == TAG_DECISION:
                entries.decisions.setdefault(key, Decision.decode(message.body))
            elif message.tags == TAG_DONE:
                entries.done.add(key)

    def _settled(self, queue: MessageQueue, address: str, retry: Retry) -> int | None:
        try:
            return self._call(address, calls.query_consumer_offset(queue, self.group), retry).offset
        except BrokerResponseError as err:
            if err.code != ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                raise
            return None  # the group never settled anything on this broker

    def decide(self, decision: Decision) -> None:
        """Record the decision; returns once every copy's broker stored it (SEND_OK), a broker
        that failed meanwhile replaced by the next (``_write``)."""
        self._write(decision.key, TAG_DECISION, decision.encode())

    def done(self, key: str) -> None:
        self._write(key, TAG_DONE, key.encode())  # a broker refuses an empty body

    def settle(self, entries: Entries) -> None:
        """Store where the next reader of each broker starts (``Entries.keep_from``). Only saves
        the next reader work, so a broker without a master now, or whose master fails now, is
        not waited for: a later commit settles it."""
        route = self._route()
        for name, end in entries.ends.items():
            address = route.master_address(name)
            if address is None:
                continue
            try:
                self._settle(MessageQueue(self.topic, name, RECORD_QUEUE_ID), address, entries.keep_from(name), end)
            except RocketMQError as err:
                if not self._retry.retriable(err):
                    raise
                self._replicas.failed(address, self.topic)
                log.info("records of %s on %s not settled (%s): a later commit settles them", self.group, name, err)

    def _settle(self, queue: MessageQueue, address: str, keep_from: int, end: int) -> None:
        store = calls.update_consumer_offset(queue, self.group, keep_from)
        once = self._retry.once()
        try:
            self._call(address, store, once)
        except BrokerResponseError as err:
            if err.code != ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                raise
            # A broker creates a group on its first pull (autoCreateSubscriptionGroup), as the
            # source's commits introduce theirs.
            self._call(address, calls.pull(calls.PullSpec(queue, self.group), end, 1), once)
            self._call(address, store, once)

    def lock(self, holder: str) -> bool:
        """Take or renew the broker's lock on the group's first record queue for ``holder``:
        whether it holds it."""
        queue, address = self.place()
        return queue in self._call(address, lock_queues(self.group, holder, [queue]))

    def unlock(self, holder: str) -> None:
        queue, address = self.place()
        self._call(address, unlock_queues(self.group, holder, [queue]))

    def _route(self) -> TopicRoute:
        try:
            return self._retry.call(lambda: self._replicas.route(self.topic), f"route of {self.topic}")
        except TopicNotFoundError as err:
            raise TransactionRecordError(
                TRANSACTION_TOPIC,
                f"topic {self.topic} does not exist; exactly-once keeps its transaction records there ({err})",
                f"Create it: mqadmin updateTopic -n <nameServer> -c <cluster> -t {self.topic} -r 8 -w 8, "
                f"or set {TRANSACTION_TOPIC} to a topic that exists",
            ) from err

    def _writable(self, pass_over: bool = False) -> list[tuple[MessageQueue, str]]:
        """The record queues records go to, the group's first brokers with a master, with their
        masters' addresses; ``pass_over``: but a master that failed lately, which the route may
        still list, unless every one did (records are read on every broker, so any copy is
        found; the lock is not)."""
        route = self._route()
        writable = {q.broker_name for q in route.queue_datas if q.writable}
        places = [
            (MessageQueue(self.topic, name, RECORD_QUEUE_ID), address)
            for name in ranked(self.group, writable)
            if (address := route.master_address(name)) is not None
        ]
        if not places:
            raise NoReplicaError(self.topic, [])
        answering = [place for place in places if not (pass_over and self._replicas.passed_over(place[1]))]
        return (answering or places)[:COPIES]

    def _write(self, key: str, tag: str, body: bytes) -> None:
        """Send the record to each of its copies' brokers. A broker that fails is passed over and
        the copies placed again (a broker lost under a commit: its place goes to the next in the
        group's order, or the record stays on the others), within the retry budget; a copy sent
        twice reads as one."""
        properties = encode_properties(message_properties(tags=tag, keys=key, unique_id=self._ids.next()))
        stored: set[str] = set()
        # Not Retry.call: its outage memory would take another broker's answer for the failed one's.
        attempts = self._retry.start()
        while True:
            try:
                for queue, address in self._writable(pass_over=True):
                    if queue.broker_name not in stored:
                        self._send(queue, address, key, tag, body, properties)
                        stored.add(queue.broker_name)
                return
            except RocketMQError as err:
                if not attempts.again(err):
                    raise
                if attempts.failed == 1:
                    log.warning("the %s record of %s failed (%s); retrying %s", tag, key, err, self._retry.limits())
                attempts.pause()

    def _send(self, queue: MessageQueue, address: str, key: str, tag: str, body: bytes, properties: str) -> None:
        """One copy of a record, once; a master that fails is passed over for a while."""
        send = send_message(
            queue, body, group=self.group, properties=properties, sys_flag=0, born_ms=int(time.time() * MS_PER_SECOND)
        )
        try:
            result = self._client.call(address, send, self._timeout_s)
        except RocketMQError as err:
            if err.retriable:
                self._replicas.failed(address, self.topic)
            raise
        if result.status is not SendStatus.SEND_OK:
            raise TransactionRecordError(
                TRANSACTION_TOPIC,
                f"the {tag} record of {key} was stored on {queue.broker_name} as {result.status.value}, "
                "not flushed or replicated",
                "Check the broker's disk and its slaves; the next start finishes what this one left",
            )

    def _call(self, address: str, call: Call[T], retry: Retry | None = None) -> T:
        return (retry or self._retry).call(
            lambda: self._client.call(address, call, self._timeout_s), f"{call.code} on {self.topic}"
        )
