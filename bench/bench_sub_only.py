"""What a reader granted only ``Sub`` pays on a big topic, beside one granted ``Sub`` and ``Get``.

ACL 2.0 wants ``Get`` on a topic for its max and min offsets; without it the source measures each
queue with a one-message pull at its last known end (``source/pull_measure.py``). This starts its
own one-broker RocketMQ with authentication and authorization on (under integration/work/bench-acl),
a topic of ``--queues`` queues with ``--messages-per-queue`` messages each, and three users made with
mqadmin (``GRANTS``): ``Sub`` and ``Get`` on the topic and group, ``Get`` on the topic only, and
``Sub`` alone. For each it
times a stream's first trigger (initialOffset and latestOffset of a fresh group) and its idle
triggers (``latestOffset`` with nothing new), with the driver's requests counted. Prints a table.

    python bench/bench_sub_only.py [--queues 1024] [--messages-per-queue 2] [--idle-calls 20]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from integration.cluster import ACL_PASSWORD, ACL_USER, CLUSTER_NAME, Cluster, ClusterConfig  # noqa: E402
from integration.cluster_config import shifted  # noqa: E402

T = TypeVar("T")
WORKDIR = ROOT / "integration" / "work" / "bench-acl"
NAMESRV_PORT = shifted(25876)
BROKER_PORT = shifted(26911)
MS_PER_S = 1000.0
FILL_BATCH = 64
# Who reads: (label, actions on the topic, actions on the group).
GRANTS = (
    ("Sub,Get on both", "Sub,Get", "Sub,Get"),
    ("Sub,Get on the topic, Sub on the group", "Sub,Get", "Sub"),
    ("Sub only on both", "Sub", "Sub"),
)
# Between idle triggers, as a stream's processing-time trigger paces them.
TRIGGER_S = 0.3


def _timed(action: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    value = action()
    return value, (time.perf_counter() - started) * MS_PER_S


def make_user(cluster: Cluster, actions: dict[str, str]) -> tuple[str, str]:
    """A user allowed each resource's actions (``{"Topic:t": "Sub,Get"}``) and nothing else."""
    user, password = f"bench-{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex[:12]}"
    cluster.mqadmin("createUser", "-c", CLUSTER_NAME, "-u", user, "-p", password)
    for resource, allowed in actions.items():
        cluster.mqadmin(
            "createAcl", "-c", CLUSTER_NAME, "-s", f"User:{user}", "-r", resource, "-a", allowed, "-d", "Allow"
        )
    return user, password


def measure(namesrv: str, topic: str, group: str, keys: tuple[str, str], idle_calls: int) -> dict[str, float]:
    """A fresh group's first trigger and its idle triggers, as the driver runs them."""
    from rocketmq_spark.source.offset_reader import OffsetReader
    from rocketmq_spark.source.option_model import ReadKind
    from rocketmq_spark.source.options import parse_options
    from rocketmq_spark.source.spark_api import ReadAllAvailable
    from rocketmq_spark.source.stream_reader import RocketMQStreamReader

    options = parse_options(
        {
            "nameServer": namesrv,
            "topic": topic,
            "consumerGroup": group,
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "accessKey": keys[0],
            "secretKey": keys[1],
        },
        kind=ReadKind.STREAM,
    )
    reader = OffsetReader(options)
    stream = RocketMQStreamReader(options, open_offsets=lambda _: reader)
    everything = ReadAllAvailable()
    try:
        before = reader.client.requests_sent
        start, start_ms = _timed(stream.initialOffset)
        end, first_ms = _timed(lambda: stream.latestOffset(start, everything))
        first_requests = reader.client.requests_sent - before
        walls = []
        before = reader.client.requests_sent
        for _ in range(idle_calls):
            _, wall = _timed(lambda: stream.latestOffset(end, everything))
            walls.append(wall)
            time.sleep(TRIGGER_S)
        return {
            "initial_ms": start_ms,
            "first_trigger_ms": first_ms,
            "first_requests": first_requests,
            "idle_median_ms": statistics.median(walls),
            "idle_max_ms": max(walls),
            "idle_requests": (reader.client.requests_sent - before) / idle_calls,
        }
    finally:
        stream.stop()


def parse_args(argv: Iterable[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=1024, help="queues of the topic")
    parser.add_argument("--messages-per-queue", type=int, default=2, help="messages in every queue")
    parser.add_argument("--idle-calls", type=int, default=20, help="idle triggers timed per user")
    return parser.parse_args(list(argv) if argv is not None else None)


def main(argv: Iterable[str] | None = None) -> int:
    args = parse_args(argv)
    shutil.rmtree(WORKDIR, ignore_errors=True)
    config = ClusterConfig(
        workdir=WORKDIR,
        brokers=1,
        acl=True,
        namesrv_port=NAMESRV_PORT,
        broker_ports=(BROKER_PORT,),
        timer_messages=False,
    )
    if not config.release.authorizes:
        raise SystemExit(f"RocketMQ {config.version}'s brokers cannot authorize here; use 5.3.3")
    cluster = Cluster(config).start()
    try:
        run = uuid.uuid4().hex[:8]
        topic = f"bench-acl-{run}"
        admin = ("--access-key", ACL_USER, "--secret-key", ACL_PASSWORD)
        cluster.tool("create-topic", "--topic", topic, "--queues", str(args.queues), *admin)
        count = args.queues * args.messages_per_queue
        cluster.tool("produce", "--topic", topic, "--count", str(count), "--batch", str(FILL_BATCH), "--quiet", *admin)
        rows = []
        for label, topic_actions, group_actions in GRANTS:
            group = f"bench-acl-group-{uuid.uuid4().hex[:8]}"
            keys = make_user(cluster, {f"Topic:{topic}": topic_actions, f"Group:{group}": group_actions})
            rows.append((label, measure(config.namesrv_addr, topic, group, keys, args.idle_calls)))
    finally:
        cluster.stop(at_once=True)
    print(f"RocketMQ {config.version}, one broker, a topic of {args.queues} queues, {args.idle_calls} idle triggers")
    header = (
        "user",
        "initialOffset ms",
        "first trigger ms",
        "its requests",
        "idle median ms",
        "idle max ms",
        "requests/idle",
    )
    print(" | ".join(header))
    for label, m in rows:
        print(
            f"{label} | {m['initial_ms']:.0f} | {m['first_trigger_ms']:.0f} | {m['first_requests']:.0f} | "
            f"{m['idle_median_ms']:.1f} | {m['idle_max_ms']:.1f} | {m['idle_requests']:.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
