"""The exactly-once sink's records, kept on ``transactionTopic``: a batch's decision before its
first COMMIT, and a done record once every COMMIT was answered (``decisions.State``).

A producer group's records all go to one queue of the topic (chosen by the group's name), so
whoever reads them back, in any process, reads them in the order they were written. How far the
group's records are settled (every decision before it done) is stored as the group's consumer
offset on that queue, so a reader starts there, not at the queue's beginning; ``mqadmin
consumerProgress`` shows it. Records are ordinary messages, keyed ``group/query/batch`` for
``mqadmin queryMsgByKey``.
"""

from __future__ import annotations

import os
import time
import zlib
from dataclasses import dataclass, field
from typing import TypeVar

from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.model import MS_PER_SECOND, MessageQueue
from rocketmq_spark.records.outgoing import UniqueIds, encode_properties, message_properties
from rocketmq_spark.remoting import calls
from rocketmq_spark.remoting.calls import Call
from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.errors import BrokerResponseError, NoReplicaError, TopicNotFoundError
from rocketmq_spark.remoting.locks import lock_queues, unlock_queues
from rocketmq_spark.remoting.replicas import Replicas
from rocketmq_spark.remoting.retry import Retry
from rocketmq_spark.remoting.sending import SendStatus, send_message
from rocketmq_spark.sink.decision_record import SEPARATOR, Decision
from rocketmq_spark.sink.decisions import State
from rocketmq_spark.sink.options import TRANSACTION_TOPIC
from rocketmq_spark.sink.scans import scan
from rocketmq_spark.sink.shared import SendingClient

T = TypeVar("T")

TAG_DECISION = "decision"
TAG_DONE = "done"


class TransactionRecordError(ConfigurationError):
    """The transaction topic is missing or cannot be written: names it and the command that fixes it."""


@dataclass
class Entries:
    """A group's records from its settled position on: decisions and which of them are done."""

    decisions: dict[str, Decision] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    end: int = 0  # the queue's offset after the last record read
    first: dict[str, int] = field(default_factory=dict)  # each key's first record's offset

    @property
    def keep_from(self) -> int:
        """Where a later reader must start: at the oldest pending decision, else at the last
        batch's records (a replayed commit of it must find it done), else the end."""
        pending = [self.first[d.key] for d in self.pending() if d.key in self.first]
        if pending:
            return min(pending)
        return max(self.first.values(), default=self.end)

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
        """The group's queue of the topic and its master's address; a topic that does not exist
        is a configuration error that says how to create it."""
        try:
            route = self._retry.call(lambda: self._replicas.route(self.topic), f"route of {self.topic}")
        except TopicNotFoundError as err:
            raise TransactionRecordError(
                TRANSACTION_TOPIC,
                f"topic {self.topic} does not exist; exactly-once keeps its transaction records there ({err})",
                f"Create it: mqadmin updateTopic -n <nameServer> -c <cluster> -t {self.topic} -r 8 -w 8, "
                f"or set {TRANSACTION_TOPIC} to a topic that exists",
            ) from err
        queues = sorted(route.publish_queues(), key=lambda q: (q.broker_name, q.queue_id))
        if not queues:
            raise NoReplicaError(self.topic, [])
        queue = queues[zlib.crc32(self.group.encode()) % len(queues)]
        address = route.master_address(queue.broker_name)
        if address is None:
            raise NoReplicaError(queue.broker_name, [])
        return queue, address

    def read(self, whole: bool = False) -> Entries:
        """The group's records from its settled position (``whole``: from the queue's first
        record, for a writeId written at any time before) to the queue's end."""
        queue, address = self.place()
        stored = None if whole else self._settled(queue, address)
        start = stored if stored is not None else self._call(address, calls.min_offset(queue))
        end = self._call(address, calls.max_offset(queue))
        entries = Entries(end=end)
        prefix = self.group + SEPARATOR
        for message in scan(self._client, address, queue, self.group, start, end, self._retry):
            key = message.keys or ""
            if not key.startswith(prefix):
                continue  # another group's record on the same queue
            entries.first.setdefault(key, message.queue_offset)
            if message.tags == TAG_DECISION:
                entries.decisions.setdefault(key, Decision.decode(message.body))
            elif message.tags == TAG_DONE:
                entries.done.add(key)
        return entries

    def _settled(self, queue: MessageQueue, address: str) -> int | None:
        try:
            return self._call(address, calls.query_consumer_offset(queue, self.group)).offset
        except BrokerResponseError as err:
            if err.code != ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                raise
            return None  # the group never settled anything on this broker

    def decide(self, decision: Decision) -> None:
        """Record the decision; returns once its broker stored it (SEND_OK)."""
        self._write(decision.key, TAG_DECISION, decision.encode())

    def done(self, key: str) -> None:
        self._write(key, TAG_DONE, key.encode())  # a broker refuses an empty body

    def settle(self, entries: Entries) -> None:
        """Store where the next reader starts (``Entries.keep_from``)."""
        queue, address = self.place()
        store = calls.update_consumer_offset(queue, self.group, entries.keep_from)
        try:
            self._call(address, store)
        except BrokerResponseError as err:
            if err.code != ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                raise
            # A broker creates a group on its first pull (autoCreateSubscriptionGroup), as the
            # source's commits introduce theirs.
            self._call(address, calls.pull(calls.PullSpec(queue, self.group), entries.end, 1))
            self._call(address, store)

    def lock(self, holder: str) -> bool:
        """Take or renew the broker's lock on the group's queue for ``holder``: whether it holds it."""
        queue, address = self.place()
        return queue in self._call(address, lock_queues(self.group, holder, [queue]))

    def unlock(self, holder: str) -> None:
        queue, address = self.place()
        self._call(address, unlock_queues(self.group, holder, [queue]))

    def _write(self, key: str, tag: str, body: bytes) -> None:
        queue, address = self.place()
        properties = encode_properties(message_properties(tags=tag, keys=key, unique_id=self._ids.next()))
        send = send_message(
            queue, body, group=self.group, properties=properties, sys_flag=0, born_ms=int(time.time() * MS_PER_SECOND)
        )
        result = self._call(address, send)
        if result.status is not SendStatus.SEND_OK:
            raise TransactionRecordError(
                TRANSACTION_TOPIC,
                f"the {tag} record of {key} was stored as {result.status.value}, not flushed or replicated",
                "Check the broker's disk and its slaves; the next start finishes what this one left",
            )

    def _call(self, address: str, call: Call[T]) -> T:
        return self._retry.call(
            lambda: self._client.call(address, call, self._timeout_s), f"{call.code} on {self.topic}"
        )
