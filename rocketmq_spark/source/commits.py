"""The commit protocol, on the driver: storing the group's offsets on the brokers.

Storing is one request per queue once the group's offset tables exist on a broker; before that a
broker can lose one of two first commits handled at once, and refuses the offsets of a group it
has never seen. This module holds those rules and nothing else; which offsets to store and when is
the stream reader's decision (``stream_reader.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.remoting import calls
from rocketmq_spark.remoting.client import RocketMQClient
from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.errors import BrokerResponseError, RocketMQError
from rocketmq_spark.source.offsets import OffsetMap
from rocketmq_spark.source.option_model import SourceOptions

log = logging.getLogger(__name__)


@dataclass
class CommitResult:
    """What a commit stored, and why the rest was not."""

    stored: OffsetMap = field(default_factory=dict)
    failed: dict[MessageQueue, RocketMQError] = field(default_factory=dict)

    def add(self, later: CommitResult) -> None:
        """Take in a later round's outcome: a queue stored then is no longer failed."""
        self.stored.update(later.stored)
        self.failed = {q: err for q, err in self.failed.items() if q not in later.stored}
        self.failed.update(later.failed)


# Where each queue's offset goes and what it is: (broker or proxy address, offset).
Targets = Mapping[MessageQueue, tuple[str, int]]


class GroupCommits:
    """Stores offsets for the source's consumer group, over the routes the offset reader keeps."""

    def __init__(
        self,
        client: RocketMQClient,
        options: SourceOptions,
        routes: Callable[[], Mapping[MessageQueue, str]],
        on_failure: Callable[[], None],
    ) -> None:
        self.client = client
        self.options = options
        self._routes = routes  # the queues routable now, with their addresses
        self._on_failure = on_failure  # a store failed: the routes may be stale
        self._tables: set[tuple[str, str]] = set()  # (broker name, topic) holding the group's offsets

    def forget(self, brokers: Iterable[str]) -> None:
        """Brokers that may have lost the group's offset tables (back from a crash): their first
        commits go first again."""
        gone = set(brokers)
        self._tables = {table for table in self._tables if table[0] not in gone}

    def commit(self, offsets: Mapping[MessageQueue, int]) -> CommitResult:
        """Store each queue's next offset to read for the group: one round of requests once the
        group's offset tables exist on the brokers (see below for the rounds before that).

        One attempt each, and only on queues whose broker is routable now: what is left out is
        stored at a later trigger, which is better than holding up this one.

        A broker keeps the group's offsets of a topic in a table its first commit creates, and of
        two first commits handled at once one can be lost (the broker checks for the table, then
        puts a new one). So each topic's first commit on each broker goes with one queue (its
        opener), and the topic's other queues there follow in the round after it.
        """
        group = self.options.consumer_group
        assert group is not None
        routes = self._routes()
        targets = {q: (routes[q], offset) for q, offset in offsets.items() if q in routes}
        openers: dict[tuple[str, str], MessageQueue] = {}
        for queue in targets:
            if _table(queue) not in self._tables:
                openers.setdefault(_table(queue), queue)
        result = self._open_tables(group, targets, list(openers.values()))
        followers = [q for q in targets if openers.get(_table(q)) != q]
        result.add(self._store(group, targets, [q for q in followers if _table(q) in self._tables]))
        for queue in followers:
            if _table(queue) not in self._tables:  # its topic's first commit failed
                result.failed[queue] = result.failed[openers[_table(queue)]]
        return result

    def _open_tables(self, group: str, targets: Targets, openers: list[MessageQueue]) -> CommitResult:
        """The first commit of each topic on each broker, one queue each; a broker that refuses it
        because it does not know the group is introduced to the group, and asked again."""
        result = self._store(group, targets, openers)
        unknown = [q for q, err in result.failed.items() if _group_unknown(err)]
        if unknown:
            self._introduce(group, {q: targets[q] for q in unknown})
            result.add(self._store(group, targets, unknown))
        return result

    def _introduce(self, group: str, refused: Targets) -> None:
        """Make the group known to the brokers of the ``refused`` queues.

        A broker refuses offsets of a group it has never seen and creates the group on its first
        pull (``autoCreateSubscriptionGroup``): so one pull per broker, which reads nothing the
        query uses, and whose answers are awaited before the offsets are sent again. A pull that
        fails leaves its broker's queues to a later commit.
        """
        first_of_broker: dict[str, MessageQueue] = {}
        for queue in refused:  # by name: one proxy address serves every broker
            first_of_broker.setdefault(queue.broker_name, queue)
        pulls = [
            (
                refused[q][0],
                calls.pull(
                    calls.PullSpec(q, group, self.options.sub_expression, self.options.expression_type),
                    refused[q][1],
                    1,
                ),
            )
            for q in first_of_broker.values()
        ]
        for broker, outcome in zip(first_of_broker, self.client.call_many(pulls)):
            if isinstance(outcome, RocketMQError):
                log.info("could not introduce group %s to broker %s: %s", group, broker, outcome)

    def _store(self, group: str, targets: Targets, queues: list[MessageQueue]) -> CommitResult:
        """One round of offset updates; a stored one also means its table exists on the broker."""
        if not queues:
            return CommitResult()
        outcomes = self.client.call_many(
            [(targets[q][0], calls.update_consumer_offset(q, group, targets[q][1])) for q in queues]
        )
        result = CommitResult()
        for queue, outcome in zip(queues, outcomes):
            if isinstance(outcome, RocketMQError):
                result.failed[queue] = outcome
            else:
                result.stored[queue] = targets[queue][1]
                self._tables.add(_table(queue))
        if result.failed:
            self._on_failure()
        return result


def _table(queue: MessageQueue) -> tuple[str, str]:
    """Where the group's offsets of the queue are kept: per broker (by name, as one proxy address
    serves them all) and topic."""
    return queue.broker_name, queue.topic


def _group_unknown(error: RocketMQError) -> bool:
    return isinstance(error, BrokerResponseError) and error.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
