"""Helpers the tests share (fixtures themselves live in conftest.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from integration.cluster import Cluster, ClusterConfig, run_tool, tool_command
from integration.constants import POLL_S, QUERY_TIMEOUT_S, REPO, STORED_TIMEOUT_S
from integration.versions import DEFAULT_VERSION, release, selected_version
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.client import RocketMQClient
from rocketmq_spark.remoting.errors import error_for_response
from rocketmq_spark.source.group import is_source_client

T = TypeVar("T")

# consumerProgress rows: topic, broker, queue id, broker offset, consumer offset, diff, ...
PROGRESS_ROW = re.compile(r"^(\S+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(-?\d+)\s")
# consumerConnection prints its members under this header, up to a blank line.
CONNECTIONS_HEADER = "#ClientId"
# mqadmin sees a commit or a member leave within a few triggers; allow for a loaded machine.
SETTLE_S = 120
SETTLE_POLL_S = 1.0
# How long a push consumer may take to start and register with the brokers on a loaded machine.
PUSH_START_TIMEOUT_S = 120
# Where a client connects: the name server (then the brokers) and, on 5.x, once more the proxy's
# remoting port (4.9 has no proxy). conftest's ``endpoint`` fixture runs a test on each.
THROUGH_BROKERS, THROUGH_PROXY = "brokers", "proxy"
ENDPOINTS = (THROUGH_BROKERS, THROUGH_PROXY) if release(selected_version()).has_proxy else (THROUGH_BROKERS,)
# Loaded by every Python process of a Spark application run with ``logging_env`` (driver, Spark's
# workers): the source logs at DEBUG to a file the test reads, so nothing it logs escapes it.
SITE_CUSTOMIZE = """
import logging
handler = logging.FileHandler({path!r})
handler.setFormatter(logging.Formatter("%(process)d %(name)s %(levelname)s %(message)s"))
logger = logging.getLogger("rocketmq_spark")
logger.setLevel(logging.DEBUG)
logger.addHandler(handler)
"""


class ClusterHandle:
    """What a test needs to know of the cluster, whether this run started it or not."""

    def __init__(
        self, namesrv_addr: str, proxy_addr: str | None, cluster: Cluster | None, version: str = DEFAULT_VERSION
    ) -> None:
        self.namesrv_addr = namesrv_addr
        self.proxy_addr = proxy_addr
        self.cluster = cluster
        self.version = version
        # The Java tool connects with TLS where the servers ask for it.
        self.tls = cluster is not None and cluster.config.tls_clients

    @property
    def major(self) -> int:
        """4 or 5: what a test needs to know of the release to expect its behaviour."""
        return release(self.version).major

    def endpoint(self, through: str) -> str:
        """The address a client is given for ``through`` (one of ENDPOINTS)."""
        if through == THROUGH_PROXY:
            assert self.proxy_addr, "the proxy cases need ROCKETMQ_PROXY (or a cluster this run starts)"
            return self.proxy_addr
        return self.namesrv_addr

    def tool(self, command: str, *args: str, **kwargs: Any) -> list[dict[str, Any]]:
        """Run the Java test tool (official RocketMQ client) and return its JSON lines."""
        return run_tool(self.namesrv_addr, command, *args, tls=self.tls, **kwargs)

    @property
    def started(self) -> Cluster:
        """The cluster, for what needs one this run started: mqadmin, or a server to stop."""
        if self.cluster is None:
            raise RuntimeError("this needs a cluster started by this run, not ROCKETMQ_NAMESRV's")
        return self.cluster

    def mqadmin(self, *args: str) -> str:
        return self.started.mqadmin(*args)


@contextmanager
def own_cluster(config: ClusterConfig) -> Iterator[ClusterHandle]:
    """A cluster apart from the shared one (its ports apart from every other cluster's), so that
    what its tests do to servers disturbs no other test; killed at the end, as nobody opens its
    stores again."""
    cluster = Cluster(config).start()
    try:
        proxy = cluster.config.proxy_addr if cluster.config.proxy else None
        yield ClusterHandle(cluster.namesrv_addr, proxy, cluster, cluster.version)
    finally:
        cluster.stop(at_once=True)


class Early(Generic[T]):
    """A module's fixture whose preparation mostly waits (a broker's file cleanup, which starts a
    minute after the broker does), entered in a thread of its own as the session starts, so the
    wait passes beside other modules' tests; ``result`` waits for it, ``close`` leaves it (the
    module's own fixture, as the module ends; the session's end, if not before). Modules register theirs in ``EARLY`` when they are imported; conftest starts
    those whose module has tests selected."""

    def __init__(self, manager: AbstractContextManager[T]) -> None:
        self._manager = manager
        self._value: T | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._enter, name="early-fixture", daemon=True)
        self._thread.start()

    def _enter(self) -> None:
        try:
            self._value = self._manager.__enter__()
        except Exception as err:  # noqa: BLE001 - raised where the module's tests ask for it
            self._error = err

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value

    def close(self) -> None:
        """Leave the fixture (once: its module does when it ends, the session again at its end)."""
        self._thread.join()
        if self._error is None and not self._closed:
            self._closed = True
            self._manager.__exit__(None, None, None)


# Module name -> the context manager a module's early fixture enters, given a directory of its own.
EARLY: dict[str, Callable[[Path], AbstractContextManager[Any]]] = {}


def stored_offsets(rocketmq: ClusterHandle, topic: str, group: str) -> dict[tuple[str, int], int | None]:
    """The group's stored offset per (broker, queue), as the official client reads it (None: none)."""
    return {
        (row["broker"], row["queueId"]): row["consumerOffset"]
        for row in rocketmq.tool("offsets", "--topic", topic, "--group", group)
    }


def max_offsets(rocketmq: ClusterHandle, topic: str) -> dict[tuple[str, int], int]:
    return {
        (row["broker"], row["queueId"]): row["maxOffset"]
        for row in rocketmq.tool("offsets", "--topic", topic, "--group", "offsets-probe")
    }


def offsets_and_ends(
    rocketmq: ClusterHandle, topic: str, group: str
) -> tuple[dict[tuple[str, int], int | None], dict[tuple[str, int], int]]:
    """``stored_offsets`` and ``max_offsets`` read together, in one run of the tool."""
    rows = rocketmq.tool("offsets", "--topic", topic, "--group", group)
    return (
        {(row["broker"], row["queueId"]): row["consumerOffset"] for row in rows},
        {(row["broker"], row["queueId"]): row["maxOffset"] for row in rows},
    )


def spark_offsets(nested: str | dict[str, Any], topic: str) -> dict[tuple[str, int], int]:
    """A stream's offsets for one topic (progress reports give them as JSON text), keyed like
    ``stored_offsets``."""
    if isinstance(nested, str):
        nested = json.loads(nested)
    return {(broker, int(q)): offset for broker, queues in nested[topic].items() for q, offset in queues.items()}


def create_topic(
    rocketmq: ClusterHandle, topic: str, queues: int = 4, brokers: str | Sequence[str] | None = None, *extra: str
) -> None:
    """Create the topic with the official admin client, on the named brokers (default: every one)."""
    args = ["--topic", topic, "--queues", str(queues)]
    if brokers:
        args += ["--brokers", brokers if isinstance(brokers, str) else ",".join(brokers)]
    rocketmq.tool("create-topic", *args, *extra)


def produce(
    rocketmq: ClusterHandle, topic: str, count: int, *args: str, broker: str | None = None, queue: int | None = None
) -> list[dict[str, Any]]:
    """Send ``count`` messages with the official producer, to one queue when ``broker`` and
    ``queue`` are given; one dict per message sent (none with ``--quiet``)."""
    target = [] if broker is None else ["--broker", broker, "--queue", str(queue)]
    return rocketmq.tool("produce", "--topic", topic, "--count", str(count), *target, *args)


def create_topic_on_broker(
    client: RocketMQClient, address: str, topic: str, queues: int, broker_name: str, attributes: str = ""
) -> None:
    """Create a topic with a plain UPDATE_AND_CREATE_TOPIC request, as admin tools send it, with
    ``attributes`` as mqadmin's ``-a`` takes them (e.g. ``+message.type=TRANSACTION``)."""
    fields: dict[str, object] = {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": codes.PERM_READ | codes.PERM_WRITE,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
        "bname": broker_name,
    }
    if attributes:
        fields["attributes"] = attributes
    response = client.invoke(address, codes.RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
    if response.code != codes.ResponseCode.SUCCESS:
        raise error_for_response(
            response.code, response.remark, request_code=codes.RequestCode.UPDATE_AND_CREATE_TOPIC, address=address
        )


def position(message: dict[str, Any]) -> tuple[str, int, int]:
    """Where the Java tool says a message sits: (broker, queue, queue offset)."""
    return message["broker"], message["queueId"], message["queueOffset"]


def store_times(rocketmq: ClusterHandle, topic: str, count: int) -> dict[tuple[str, int, int], int]:
    """Store time (epoch ms) of every message by ``position``, as the official consumer reads it."""
    return {
        position(m): m["storeTimestamp"]
        for m in rocketmq.tool("consume", "--topic", topic, "--count", str(count), "--print")
    }


def stream(
    spark: Any, rocketmq: ClusterHandle, topic: str, group: str, *, endpoint: str | None = None, **options: str
) -> Any:
    """A stream of the topic; ``endpoint`` replaces the name server (a 5.x proxy's remoting port)."""
    reader = (
        spark.readStream.format("rocketmq")
        .option("nameServer", endpoint or rocketmq.namesrv_addr)
        .option("topic", topic)
        .option("consumerGroup", group)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def run_available_now(df: Any, checkpoint: Path, on_batch: Callable[[Any, int], None] | None = None) -> Any:
    """Run a query with Trigger.AvailableNow into foreachBatch; return the finished query."""

    def sink(batch: Any, batch_id: int) -> None:
        if on_batch is not None:
            on_batch(batch, batch_id)

    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "query did not finish"
    return query


def collect_available_now(df: Any, checkpoint: Path) -> list[Any]:
    rows: list[Any] = []
    run_available_now(df, checkpoint, lambda batch, _: rows.extend(batch.collect()))
    return rows


def batch_read(spark: Any, rocketmq: ClusterHandle, topic: str, *, endpoint: str | None = None, **options: str) -> Any:
    """A batch read of the topic; ``endpoint`` replaces the name server as in ``stream``."""
    reader = (
        spark.read.format("rocketmq").option("nameServer", endpoint or rocketmq.namesrv_addr).option("topic", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def wait_rows(query: Any, count: int, timeout_s: float = QUERY_TIMEOUT_S) -> None:
    """Wait until the query has read ``count`` rows in all (the sink is read only afterwards)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert query.exception() is None, query.exception()
        if sum(p["numInputRows"] for p in query.recentProgress) >= count:
            return
        time.sleep(POLL_S)
    raise AssertionError(f"fewer than {count} rows reached the sink in {timeout_s:.0f}s")


def first_offsets(rows: list[Any]) -> dict[tuple[str, int], int]:
    """The first offset read from each queue."""
    firsts: dict[tuple[str, int], int] = {}
    for row in rows:
        key = (row.brokerName, row.queueId)
        firsts[key] = min(firsts.get(key, row.queueOffset), row.queueOffset)
    return firsts


def eventually(check: Callable[[], Any], what: str, timeout_s: float = SETTLE_S) -> Any:
    """The first truthy value of ``check()``, polled until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, what
        time.sleep(SETTLE_POLL_S)


def consumer_progress(rocketmq: ClusterHandle, group: str, topic: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(broker offset, consumer offset) per queue of the topic, as the release's own ``mqadmin
    consumerProgress -g`` prints them. It finds the group's brokers through the group's retry
    topic, which exists once a member of the group (the stream) has sent a heartbeat."""
    progress = {}
    for line in rocketmq.mqadmin("consumerProgress", "-g", group).splitlines():
        match = PROGRESS_ROW.match(line)
        if match and match.group(1) == topic:
            progress[(match.group(2), int(match.group(3)))] = (int(match.group(4)), int(match.group(5)))
    return progress


def consumer_connections(rocketmq: ClusterHandle, group: str) -> list[str]:
    """The client ids ``mqadmin consumerConnection -g`` lists (none when it finds no member)."""
    lines = rocketmq.started.mqadmin("consumerConnection", "-g", group, check=False).splitlines()
    starts = [k for k, line in enumerate(lines) if line.startswith(CONNECTIONS_HEADER)]
    if not starts:
        return []
    ids = []
    for line in lines[starts[0] + 1 :]:
        if not line.strip():
            break
        ids.append(line.split()[0])
    return ids


def source_members(rocketmq: ClusterHandle, group: str) -> list[str]:
    """The members of the group that are queries of this source."""
    return [c for c in consumer_connections(rocketmq, group) if is_source_client(c)]


@dataclass
class PushConsumer:
    """A Java push consumer online in a group (the tool's ``push-consume``) and what it printed."""

    process: subprocess.Popen[str]
    client_id: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)

    def allocations(self, topic: str) -> list[dict[str, Any]]:
        """Each rebalance of the topic: the members it counted and the queues it took."""
        return [e for e in list(self.events) if e.get("event") == "allocate" and e["topic"] == topic]

    def messages(self) -> list[dict[str, Any]]:
        """Each message delivered so far (with ``--print``), as the consume command prints one."""
        return [e for e in list(self.events) if "event" not in e]


@contextmanager
def push_consumer(rocketmq: ClusterHandle, topic: str, group: str, seconds: int, *extra: str) -> Iterator[PushConsumer]:
    """A push consumer of the topic in the group, registered with every broker of the topic when
    this yields; stopped on leaving the block if its time has not run out yet. ``extra``: the
    command's options, e.g. ``--print --from-first`` for a consumer tailing the topic."""
    cmd = tool_command(
        rocketmq.namesrv_addr, "push-consume", "--topic", topic, "--group", group, "--seconds", str(seconds), *extra
    )
    consumer = PushConsumer(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    started = threading.Event()

    def read() -> None:
        assert consumer.process.stdout is not None
        for line in consumer.process.stdout:
            if line.startswith("{"):
                event = json.loads(line)
                consumer.events.append(event)
                if event.get("event") == "started":
                    consumer.client_id = event["clientId"]
                    started.set()
        started.set()  # it ended: the wait below finds no client id

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert started.wait(PUSH_START_TIMEOUT_S) and consumer.client_id, "the push consumer did not start"
        yield consumer
    finally:
        consumer.process.terminate()
        consumer.process.wait(PUSH_START_TIMEOUT_S)
        reader.join(PUSH_START_TIMEOUT_S)


def spark_job_with_source_log(
    job: str, options: dict[str, str], workdir: Path, *args: str
) -> tuple[dict[str, Any], str]:
    """Run ``integration/sparkjobs.py <job> --classic`` in a process of its own whose Python
    processes all log the source's lines to a file; its result line and that log."""
    env, log = logging_env(workdir)
    flags = [part for key, value in options.items() for part in ("-o", f"{key}={value}")]
    run = subprocess.run(
        [sys.executable, "-m", "integration.sparkjobs", job, "--classic", *flags, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=QUERY_TIMEOUT_S,
        check=False,
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    assert run.returncode == 0 and lines, run.stderr[-5000:]
    return json.loads(lines[-1]), log.read_text() if log.exists() else ""


def logging_env(directory: Path) -> tuple[dict[str, str], Path]:
    """The environment of a Spark application whose every Python process logs the source's lines
    to a file, and that file (each line: pid, logger, level, message)."""
    site = directory / "site"
    site.mkdir(parents=True, exist_ok=True)
    source_log = directory / "source.log"
    (site / "sitecustomize.py").write_text(SITE_CUSTOMIZE.format(path=str(source_log)))
    path = os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path}, source_log


# A queue as the Java tool and the progress reports name it: (broker name, queue id).
Queue = tuple[str, int]


def wait_stored_at_max(handle: ClusterHandle, topic: str, group: str, ends: Mapping[Queue, int]) -> None:
    """Until the group's stored offset of every queue, on its master, is the queue's max offset
    there, which is where the producer's messages end (the official client reads both)."""
    deadline = time.monotonic() + STORED_TIMEOUT_S
    while True:
        stored, maxima = offsets_and_ends(handle, topic, group)
        if stored == ends and maxima == ends:
            return
        assert time.monotonic() < deadline, (
            f"stored offsets {sorted(stored.items())} and max offsets {sorted(maxima.items())} are not the "
            f"ends sent {sorted(ends.items())}"
        )
        time.sleep(POLL_S)
