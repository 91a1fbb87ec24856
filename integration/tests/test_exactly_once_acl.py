"""``deliveryGuarantee=exactly-once`` as a least-privilege user: the grants docs/security.md lists
for it ("Exactly-once writes"), run against conftest's ``acl_cluster`` of the release under test
(ACL 2.0 on 5.x, 4.9's plain ACL on ``ROCKETMQ_VERSION=4.9.7``).

Its topics are created by the cluster's administrator, as an operator creates them; users as
test_least_privilege makes them (``make_user``), here with the actions each resource needs:

* a writer holding exactly those grants writes once with a ``writeId``: RocketMQ's Java consumer,
  as the administrator, finds every row once; the same write run again finds it done in its
  records and writes nothing; a ``writeStream`` query as that user publishes each row once over
  several batches and a restart on its checkpoint;
* each grant taken away in turn (a user made without it) fails the write in seconds with an
  error naming the resource and the action, and leaves nothing visible in the target. 4.9's
  plain ACL checks neither the min and max offsets nor the lock: there a user without ``Get``
  writes as the full one does;
* a write whose driver died after its decision, with a third of its COMMITs put, is finished by
  its rerun, which reads the decided halves back from the half queue and the target from the
  recorded positions: that takes ``Sub`` on the target and on ``RMQ_SYS_TRANS_HALF_TOPIC`` too,
  each of them taken away fails the rerun naming it, and the target keeps the third.
"""

from __future__ import annotations

import base64
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from integration.cluster import ACL_PASSWORD, ACL_USER, CLUSTER_NAME, Cluster
from integration.failfast import Overhead
from integration.tests.test_least_privilege import credentials, make_user, plain_account, plain_acl
from rocketmq_spark.model import Credentials
from rocketmq_spark.remoting.transactions import Resolution
from rocketmq_spark.sink.commit import HALF_TOPIC, Committer
from rocketmq_spark.sink.decision_record import record_key
from rocketmq_spark.sink.decisions import Event, Plan, State, decide
from rocketmq_spark.sink.halves import WRITE_BATCH, HalfLog, Transaction
from rocketmq_spark.sink.ledger import Entries
from rocketmq_spark.sink.options import parse_sink_options
from rocketmq_spark.sink.task import write_task

pytestmark = pytest.mark.integration

QUEUES = 2
ROWS = 24
PARTITIONS = 2
# The COMMITs a driver put before it died, of the decided write's ROWS.
COMMITTED_BEFORE_DEATH = ROWS // 3
WRITE_ID = "nightly-acl"
# The stream's batches per run (maxMessagesPerTrigger spreads ROWS over them), and its wait.
STREAM_BATCHES = 3
STREAM_TIMEOUT_S = 180.0
# A refused write ends before this, counted past what Spark alone takes to fail a batch read:
# the refusal is not retried, whichever of the driver's steps or the tasks meet it.
REFUSED_WITHIN_S = 20.0

# The resources an exactly-once write touches, by their part in it.
TARGET, LEDGER, GROUP, HALF = "target", "ledger", "group", "half"
# What each needs (ACL 2.0's actions; the request 5.3.3 refuses first without it). The target:
# halves and their COMMITs (END_TRANSACTION) are sends (Pub: the tasks' SEND_MESSAGE_V2); the
# decision records where each target queue ends (Get: GET_MAX_OFFSET, at the commit). The
# transaction topic: the group's lock on its queue 0 (Sub: LOCK_BATCH_MQ, as the write starts),
# whose records are read back by pulls from its min offset (Get: GET_MIN_OFFSET, as the write
# starts), and the decision and done records sent there (Pub: SEND_MESSAGE_V2, at the commit).
# The producer group: the lock, the pulls and the stored offsets name it (Sub: LOCK_BATCH_MQ).
NEEDS: dict[str, tuple[str, ...]] = {TARGET: ("Pub", "Get"), LEDGER: ("Pub", "Sub", "Get"), GROUP: ("Sub",)}
# What finishing a decided write takes besides: the decided halves are pulled back from the half
# queue (queue 0 of RMQ_SYS_TRANS_HALF_TOPIC, Sub) and the target queues from the positions the
# decision recorded, for which of them are stored already (Sub).
RECOVERY_NEEDS: dict[str, tuple[str, ...]] = {**NEEDS, TARGET: ("Pub", "Sub", "Get"), HALF: ("Sub",)}
# 4.9's plain ACL has PUB and SUB only, and checks no min or max offset: Get grants nothing there.
PLAIN_PERMS: dict[str, str] = {"Pub": "PUB", "Sub": "SUB"}


@dataclass(frozen=True)
class Write:
    """One exactly-once write's topics and group on the ACL cluster, made by its administrator."""

    cluster: Cluster
    target: str
    ledger: str
    group: str

    @classmethod
    def make(cls, cluster: Cluster, role: str) -> Write:
        run = f"{role}-{uuid.uuid4().hex[:8]}"
        write = cls(cluster, f"eo-acl-{run}", f"eo-acl-ledger-{run}", f"eo-acl-group-{run}")
        for topic in (write.target, write.ledger):
            write.admin("create-topic", "--topic", topic, "--queues", str(QUEUES))
        return write

    def resource(self, part: str) -> str:
        return {
            TARGET: f"Topic:{self.target}",
            LEDGER: f"Topic:{self.ledger}",
            GROUP: f"Group:{self.group}",
            HALF: f"Topic:{HALF_TOPIC}",
        }[part]

    def admin(self, command: str, *args: str) -> list[dict[str, Any]]:
        """The Java tool as the cluster's super user."""
        return self.cluster.tool(command, *args, "--access-key", ACL_USER, "--secret-key", ACL_PASSWORD)

    def stored(self) -> int:
        """How many messages the target's queues hold: committed rows only (halves wait elsewhere)."""
        return sum(row["maxOffset"] for row in self.admin("offsets", "--topic", self.target, "--group", "any"))

    def bodies(self) -> list[str]:
        """Every message body of the target, as RocketMQ's Java consumer reads it."""
        count = self.stored()
        if count == 0:
            return []
        messages = self.admin("consume", "--topic", self.target, "--count", str(count), "--print")
        return sorted(base64.b64decode(m["body"]).decode() for m in messages)

    def grant(
        self, role: str, needs: Mapping[str, tuple[str, ...]] = NEEDS, without: tuple[str, str] | None = None
    ) -> Credentials:
        """A user holding what ``needs`` lists on this write's resources, but the one action
        ``without`` names (part, action)."""
        granted = {
            self.resource(part): tuple(a for a in actions if (part, a) != without) for part, actions in needs.items()
        }
        return make_writer(self.cluster, role, {r: a for r, a in granted.items() if a})

    def options(self, user: Credentials) -> dict[str, str]:
        return {
            "nameServer": self.cluster.namesrv_addr,
            "accessKey": user.access_key,
            "secretKey": user.secret_key,
            "topic": self.target,
            "deliveryGuarantee": "exactly-once",
            "producerGroup": self.group,
            "transactionTopic": self.ledger,
        }

    def run(self, spark: Any, user: Credentials) -> None:
        rows = spark.range(ROWS).selectExpr("cast(concat('row-', id) as binary) as body").repartition(PARTITIONS)
        rows.write.format("rocketmq").options(**self.options(user)).option("writeId", WRITE_ID).mode("append").save()

    def die_after_deciding(self, user: Credentials) -> None:
        """The write's rows sent as halves and decided, and a third of them committed: what a
        driver killed in the middle of its COMMITs leaves. Run without Spark: a task's sends and
        the driver's steps, as ``user``, against the real broker."""
        options = parse_sink_options(self.options(user))
        transaction = Transaction(WRITE_ID, WRITE_BATCH, uuid.uuid4().hex)
        bodies = pa.array([f"row-{i}".encode() for i in range(ROWS)])
        halves = HalfLog(self.group, transaction, attempt=1)
        written = write_task(options, {"body": "body"}, iter([pa.record_batch({"body": bodies})]), halves)
        assert written.halves is not None and len(written.halves) == ROWS
        committer = Committer(options, transaction.query)
        plan = decide(State.UNDECIDED, Event.COMMIT)
        key = record_key(self.group, transaction.query, transaction.batch)
        committer._run(Plan(plan.steps[:1], plan.says), key, [written.halves], Entries(), transaction)
        own = list(zip(written.halves.halves(), written.halves.queues(), written.halves.pinned))
        committer._end(own[:COMMITTED_BEFORE_DEATH], Resolution.COMMIT)
        committer.release()
        assert self.stored() == COMMITTED_BEFORE_DEATH


def make_writer(cluster: Cluster, role: str, grants: Mapping[str, tuple[str, ...]]) -> Credentials:
    """A user allowed each resource's actions ("Topic:t" -> ("Pub", "Get")) and nothing else: on
    5.x ``make_user`` with the first resource, then one ``createAcl`` per other; on 4.9 one
    plain_acl.yml account whose entries carry what its PUB and SUB grant of those actions."""
    if plain_acl(cluster):
        user = credentials(role)
        perms = {r: "|".join(PLAIN_PERMS[a] for a in actions if a in PLAIN_PERMS) for r, actions in grants.items()}
        plain_account(cluster, user, {r: p for r, p in perms.items() if p})
        return user
    (first, actions), *others = grants.items()
    user = make_user(cluster, role, ",".join(actions), first)
    for resource, more in others:
        cluster.mqadmin(
            "createAcl",
            "-c",
            CLUSTER_NAME,
            "-s",
            f"User:{user.access_key}",
            "-r",
            resource,
            "-a",
            ",".join(more),
            "-d",
            "Allow",
        )
    return user


def test_a_writer_with_the_listed_grants_writes_once_and_its_rerun_writes_nothing(
    spark: Any, acl_cluster: Cluster
) -> None:
    """NEEDS is enough for a write and its rerun: no grant beyond it is asked for."""
    write = Write.make(acl_cluster, "full")
    user = write.grant("eo-writer")
    write.run(spark, user)
    expected = sorted(f"row-{i}" for i in range(ROWS))
    assert write.bodies() == expected
    # The job run again with the same writeId (a driver that died after the commit): it reads its
    # records back (pulls, Sub), finds the write done and writes nothing.
    write.run(spark, user)
    assert write.bodies() == expected


def test_the_rerun_of_a_write_that_died_after_deciding_finishes_it_once(spark: Any, acl_cluster: Cluster) -> None:
    """RECOVERY_NEEDS is enough to finish a decided write: no grant on the half topic but Sub."""
    write = Write.make(acl_cluster, "recovered")
    user = write.grant("eo-recovering", RECOVERY_NEEDS)
    write.die_after_deciding(user)
    write.run(spark, user)  # finishes the decided write, then finds it done and sends nothing
    assert write.bodies() == sorted(f"row-{i}" for i in range(ROWS))


def test_a_stream_as_a_writer_with_the_listed_grants_publishes_each_row_once_across_a_restart(
    spark: Any, acl_cluster: Cluster, tmp_path: Path
) -> None:
    """NEEDS is enough for writeStream too: a query's batches, keyed by its checkpointed id, each
    decided and finished as this user, and a restart on its checkpoint that first reads the
    query's records back. The source reads as the administrator: only the sink's grants are
    under test."""
    write = Write.make(acl_cluster, "stream")
    origin = f"{write.target}-origin"
    write.admin("create-topic", "--topic", origin, "--queues", str(QUEUES))
    user = write.grant("eo-streamer")
    checkpoint = tmp_path / "checkpoint"

    def wave(first: int) -> None:
        """ROWS rows into the origin and a run of the query over what it has not read yet."""
        write.admin("produce", "--topic", origin, "--count", str(ROWS), "--body", f"wave{first}-{{i}}")
        source = {
            "nameServer": acl_cluster.namesrv_addr,
            "accessKey": ACL_USER,
            "secretKey": ACL_PASSWORD,
            "topic": origin,
            "consumerGroup": f"{write.group}-reader",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "maxMessagesPerTrigger": str(ROWS // STREAM_BATCHES),
        }
        query = (
            spark.readStream.format("rocketmq")
            .options(**source)
            .load()
            .select("body")
            .writeStream.format("rocketmq")
            .options(**write.options(user))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(STREAM_TIMEOUT_S), "the stream did not finish"
        finally:
            query.stop()
        assert query.exception() is None, query.exception()
        assert len(query.recentProgress) >= STREAM_BATCHES, "the rows were not spread over several batches"

    wave(0)
    wave(1)  # the same query restarted on its checkpoint
    expected = sorted(f"wave{w}-{i}" for w in (0, 1) for i in range(ROWS))
    assert write.bodies() == expected


# Each (part, action) the write cannot do without on ACL 2.0.
DENIALS = sorted((part, action) for part, actions in NEEDS.items() for action in actions)


def refusal(error: str) -> str:
    """The line of Spark's error that carries the broker's refusal (the rest is tracebacks)."""
    return next((line for line in error.splitlines() if "permission" in line), error)


def assert_names_missing(write: Write, error: str, part: str, action: str) -> None:
    """The refusal as the release words it, and the resource and action the error adds to it."""
    kind, name = write.resource(part).split(":", 1)
    # The actions the refused request accepts, any one of them ("Sub or Update" for a consumer offset).
    needs = re.search(rf"needs ((?:\w+ or )*\w+) on {kind}:{re.escape(name)}\b", error)
    assert needs is not None and action in needs[1].split(" or "), error
    # The grant line asks for all that exactly once needs there (it replaces what the user holds).
    granted = RECOVERY_NEEDS[part]
    if plain_acl(write.cluster):
        perms = "|".join(PLAIN_PERMS[a] for a in granted if a in PLAIN_PERMS)
        assert f"No default permission for {kind.lower()}:{name}" in error, error
        assert f"add '{name}={perms}' to its {kind.lower()}Perms in plain_acl.yml" in error, error
    else:
        assert f"has no permission to access {kind}:{name}" in error, error
        assert f"-r {kind}:{name} -a {','.join(granted)} -d Allow" in error, error


@pytest.mark.parametrize(("part", "action"), DENIALS, ids=[f"{p}-without-{a}" for p, a in DENIALS])
def test_a_missing_grant_fails_the_write_in_seconds_naming_it(
    spark: Any, acl_cluster: Cluster, overhead: Overhead, part: str, action: str
) -> None:
    """Every action of NEEDS is needed: without it the write stops at the first request it refuses."""
    write = Write.make(acl_cluster, f"no-{part}-{action.lower()}")
    user = write.grant(f"eo-no-{part}-{action.lower()}", without=(part, action))
    if action not in PLAIN_PERMS and plain_acl(acl_cluster):
        # Not a skip: 4.9 checks no min or max offset, so the same user writes as the full one does.
        write.run(spark, user)
        assert write.bodies() == sorted(f"row-{i}" for i in range(ROWS))
        return
    spark_s = overhead.batch_s()
    began = time.monotonic()
    with pytest.raises(Exception) as caught:  # Spark wraps the sink's error in its own
        write.run(spark, user)
    elapsed = time.monotonic() - began
    error = str(caught.value)
    print(f"{part} without {action}: failed after {elapsed:.1f} s (Spark alone {spark_s:.1f} s):\n{refusal(error)}")
    assert_names_missing(write, error, part, action)
    assert user.access_key not in error
    assert elapsed - spark_s < REFUSED_WITHIN_S, f"{elapsed - spark_s:.1f} s"
    assert write.stored() == 0, "a refused exactly-once write left rows visible"


# What only finishing a decided write takes, beyond NEEDS.
RECOVERY_DENIALS = [(TARGET, "Sub"), (HALF, "Sub")]


@pytest.mark.parametrize(("part", "action"), RECOVERY_DENIALS, ids=[f"{p}-without-{a}" for p, a in RECOVERY_DENIALS])
def test_a_missing_grant_fails_the_rerun_of_a_decided_write_naming_it(
    spark: Any, acl_cluster: Cluster, overhead: Overhead, part: str, action: str
) -> None:
    """The rerun stops at the first pull it is refused; the decision stays for a rerun with the grant."""
    write = Write.make(acl_cluster, f"unrecovered-{part}")
    user = write.grant(f"eo-no-{part}-{action.lower()}", RECOVERY_NEEDS, without=(part, action))
    write.die_after_deciding(user)
    spark_s = overhead.batch_s()
    began = time.monotonic()
    with pytest.raises(Exception) as caught:
        write.run(spark, user)
    elapsed = time.monotonic() - began
    error = str(caught.value)
    print(
        f"a rerun without {action} on {part}: failed after {elapsed:.1f} s (Spark alone {spark_s:.1f} s):\n{refusal(error)}"
    )
    assert_names_missing(write, error, part, action)
    assert user.access_key not in error
    assert elapsed - spark_s < REFUSED_WITHIN_S, f"{elapsed - spark_s:.1f} s"
    assert write.stored() == COMMITTED_BEFORE_DEATH, "a refused rerun committed rows"
