"""The writers of ``deliveryGuarantee=exactly-once``: tasks send every row as a half message, and
only the driver's commit makes a batch visible (``commit.Committer``), whatever failed on the way.

Spark runs ``commit`` and ``abort`` in a fresh process on a fresh copy of the writer, and the
tasks' ``write`` gets no batch id: each task reads its query and batch from Spark's local
properties, and the writer made at the query's (or write's) start carries the run's id, so a
restarted driver's halves are told from those of the run before it.

Refused before anything is sent: a 5.x proxy endpoint (its remoting port answers
END_TRANSACTION and commits nothing), ``delayLevel`` and ``deliverTime`` columns (a transactional
message takes no delay: RocketMQ's Java producer clears it), a transaction topic that does not exist.
Warned of: masters that replicate asynchronously to their slaves. A refusal by the ACL asks for
every action exactly once needs on its resource (``transaction_grants``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from rocketmq_spark.config.cluster import NAME_SERVER
from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.remoting import calls
from rocketmq_spark.remoting.cluster import shared_cluster
from rocketmq_spark.remoting.errors import RocketMQError
from rocketmq_spark.sink import columns as col
from rocketmq_spark.sink.commit import Committer
from rocketmq_spark.sink.decision_record import record_key
from rocketmq_spark.sink.decisions import Event, Plan, Step, decide
from rocketmq_spark.sink.halves import HalfLog, SentHalves, Transaction
from rocketmq_spark.sink.options import DELIVERY_GUARANTEE, EXACTLY_ONCE, SinkOptions
from rocketmq_spark.sink.spark_api import StreamWriterBase
from rocketmq_spark.sink.task import WrittenRows, write_task
from rocketmq_spark.sink.transaction_grants import granted_as_exactly_once

log = logging.getLogger(__name__)

# Columns a half cannot carry: RocketMQ's Java producer clears the delay level of a message it sends
# in a transaction, and what a broker does with a delayed half is not measured.
UNDELAYABLE = (col.DELAY_LEVEL, col.DELIVER_TIME)
# The broker settings that say how a master replicates (``BrokerRole``, ``MessageStoreConfig``).
BROKER_ROLE = "brokerRole"
ASYNC_MASTER = "ASYNC_MASTER"
DLEDGER, CONTROLLER, ALL_ACK_IN_SYNC = "enableDLegerCommitLog", "enableControllerMode", "allAckInSyncStateSet"


def refuse_what_cannot_be_exactly_once(options: SinkOptions, names: Mapping[str, str]) -> None:
    """The checks made on the driver before any task sends; asynchronous replication is warned of
    (it loses only what a failover catches uncopied, as at-least-once writes and every producer do)."""
    for column in UNDELAYABLE:
        if column in names:
            raise ConfigurationError(
                DELIVERY_GUARANTEE,
                f"{EXACTLY_ONCE} cannot send column {names[column]}: a transactional message takes no delay "
                "(RocketMQ's Java producer clears it too)",
                f"Drop the {names[column]} column, or write at-least-once",
            )
    if shared_cluster(options.client).client.live_brokers() is None:
        raise ConfigurationError(
            NAME_SERVER,
            f"{EXACTLY_ONCE} needs the name servers and brokers: the address given is a 5.x proxy, whose remoting "
            "port answers END_TRANSACTION without committing",
            "Give the name server addresses (nameServer=host:9876)",
        )
    lossy = async_replicated(options)
    if lossy:
        log.warning(
            "%s on brokers %s, whose masters replicate asynchronously (brokerRole=ASYNC_MASTER): a failover there "
            "may lose halves they acknowledged, and with them rows of a batch decided to commit. For exactly once "
            "through a failover, run SYNC_MASTER, DLedger, or controller mode with allAckInSyncStateSet=true",
            EXACTLY_ONCE,
            ", ".join(lossy),
        )


def async_replicated(options: SinkOptions) -> list[str]:
    """Broker names of the topic (and of the transaction topic) whose master copies to its slaves
    after acknowledging (``brokerRole=ASYNC_MASTER``, neither DLedger nor controller mode): a
    failover there may lose acknowledged halves, and with them rows of a decided batch. A broker
    that does not say (an ACL that denies its config) is not named."""
    assert options.exactly_once is not None
    cluster = shared_cluster(options.client)
    found: set[str] = set()
    for topic in {t for t in (options.topic, options.exactly_once.transaction_topic) if t}:
        try:
            route = cluster.replicas.route(topic)
        except RocketMQError:
            continue  # an unknown topic is refused elsewhere, with its own words
        for name, broker in route.brokers.items():
            if name in found or broker.master_address is None or len(broker.addresses) < 2:
                continue
            try:
                config = cluster.client.call(broker.master_address, calls.broker_config())
            except RocketMQError as err:
                log.debug("could not read %s's config (%s)", name, err)
                continue
            dledger = config.get(DLEDGER) == "true"
            in_sync = config.get(CONTROLLER) == "true" and config.get(ALL_ACK_IN_SYNC) == "true"
            if config.get(BROKER_ROLE) == ASYNC_MASTER and not (dledger or in_sync):
                found.add(name)
    return sorted(found)


def _sent(messages: Sequence[WriterCommitMessage | None]) -> list[SentHalves]:
    return [m.halves for m in messages if isinstance(m, WrittenRows) and m.halves is not None]


def _attempt() -> int:
    context = TaskContext.get()
    return context.taskAttemptId() if context is not None else 0


class ExactlyOnceStreamWriter(StreamWriterBase):
    """``writeStream`` exactly once: a micro-batch becomes visible when Spark commits it."""

    @granted_as_exactly_once()
    def __init__(self, options: SinkOptions, names: dict[str, str]) -> None:
        refuse_what_cannot_be_exactly_once(options, names)
        self.options = options
        self.names = names
        self.run = uuid.uuid4().hex
        # What an earlier run left is finished by this query's first commit, under the group's
        # lock, which its query id holds: Spark tells the writer that id only through the tasks.
        # Its transaction topic is checked now, before any task sends.
        Committer(options, self.run).ledger.place()

    @granted_as_exactly_once()
    def write(self, iterator: Iterator[Any]) -> WrittenRows:
        transaction = Transaction.of_task(self.run, None)
        halves = HalfLog(self.options.producer_group, transaction, _attempt())
        return write_task(self.options, self.names, iterator, halves)

    @granted_as_exactly_once()
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sent = _sent(messages)
        if not sent:
            return
        plan = Committer(self.options, sent[0].transaction.query).commit(sent[0].transaction, sent)
        log.info("micro-batch %d: %s (%d row(s))", batchId, plan.says, sum(len(s) for s in sent))

    @granted_as_exactly_once()
    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sent = _sent(messages)
        if sent:
            plan = Committer(self.options, sent[0].transaction.query).abort(sent[0].transaction, sent)
            log.warning("micro-batch %d aborted: %s", batchId, plan.says)


class ExactlyOnceBatchWriter(DataSourceArrowWriter):
    """``df.write`` exactly once: all of the job's rows become visible, or none. With a
    ``writeId``, a write that finds the same id committed writes nothing and says so."""

    @granted_as_exactly_once()
    def __init__(self, options: SinkOptions, names: dict[str, str]) -> None:
        refuse_what_cannot_be_exactly_once(options, names)
        assert options.exactly_once is not None
        self.options = options
        self.names = names
        self.run = uuid.uuid4().hex
        self.write_id = options.exactly_once.write_id or self.run
        committer = Committer(options, self.write_id)
        entries = committer.recover(whole=options.exactly_once.write_id is not None)
        committer.release()  # the tasks may run for longer than the lock lives: taken again to commit
        plan = decide(entries.state(record_key(options.producer_group, self.write_id, 0)), Event.START_WRITE)
        self.skip = plan.does(Step.SKIP_WRITE)
        if self.skip:
            log.warning("write %s of producer group %s: %s", self.write_id, options.producer_group, plan.says)

    @granted_as_exactly_once()
    def write(self, iterator: Iterator[Any]) -> WrittenRows:
        if self.skip:
            return WrittenRows(0, 0)
        transaction = Transaction.of_task(self.run, self.write_id)
        halves = HalfLog(self.options.producer_group, transaction, _attempt())
        return write_task(self.options, self.names, iterator, halves)

    @granted_as_exactly_once()
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = _sent(messages)
        if sent:
            plan = self._resolve(Committer.commit, sent)
            log.info("write %s: %s (%d row(s))", self.write_id, plan.says, sum(len(s) for s in sent))

    @granted_as_exactly_once()
    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = _sent(messages)
        if sent:
            plan = self._resolve(Committer.abort, sent)
            log.warning("write %s aborted: %s", self.write_id, plan.says)

    def _resolve(
        self, event: Callable[[Committer, Transaction, Sequence[SentHalves]], Plan], sent: list[SentHalves]
    ) -> Plan:
        """Commit or abort the write, then let the group's lock go: the write is over."""
        committer = Committer(self.options, self.write_id)
        try:
            return event(committer, sent[0].transaction, sent)
        finally:
            committer.release()
