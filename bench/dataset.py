"""The benchmark's cluster and data set: RocketMQ's settings, the topics, producing the messages
with the official Java producer, and what the source's planner makes of a whole topic."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from common import log
from integration.cluster import DEFAULT_BROKER_PORTS, DEFAULT_NAMESRV_PORT, STATE_FILE_NAME, Cluster, ClusterConfig

QUEUES_PER_BROKER = 4
BROKERS = 2
BODY_SIZE = 1024
PRODUCE_BATCH = 256  # messages per send while loading the data set (256 KiB)
BROKER_DEFAULT_MAX_TRANSFER = 32  # maxTransferCountOnMessageInMemory
# Room for the bodies of the larger pulls: maxTransferBytesOnMessageInMemory is this many bodies
# per message of a pull.
TRANSFER_BYTES_PER_MESSAGE = 2 * BODY_SIZE
TOOL_TIMEOUT_S = 1800.0
# Consume queues trail the commit log by a moment after the producer returns.
DISPATCH_TIMEOUT_S = 60.0
DISPATCH_POLL_S = 0.5


def source_options(namesrv: str, topic: str, pull_batch_size: int) -> dict[str, str]:
    """The options every read of the benchmark gives the source."""
    return {"nameServer": namesrv, "topic": topic, "pullBatchSize": str(pull_batch_size)}


def plan_partitions(namesrv: str, topic: str, pull_batch_size: int) -> list[Any]:
    """The partitions ``spark.read`` of the whole topic gets, planned in this process."""
    from rocketmq_spark.source.batch_reader import RocketMQBatchReader
    from rocketmq_spark.source.option_model import ReadKind
    from rocketmq_spark.source.options import parse_options

    options = parse_options(source_options(namesrv, topic, pull_batch_size), kind=ReadKind.BATCH)
    return list(RocketMQBatchReader(options).partitions())


def planned_rows(parts: list[Any]) -> int:
    """Messages the ranges of planned partitions hold (a partition holds ranges [start, end))."""
    return sum(r.end - r.start for part in parts for r in part.ranges)


def planned_messages(namesrv: str, topic: str, pull_batch_size: int) -> tuple[int, int]:
    """Messages and queues the planner gives a read of the whole topic."""
    parts = plan_partitions(namesrv, topic, pull_batch_size)
    return planned_rows(parts), len({r.queue for part in parts for r in part.ranges})


def wait_planned(namesrv: str, topic: str, pull_batch_size: int, expected: int) -> None:
    """Wait until the planner sees every produced message."""
    deadline = time.monotonic() + DISPATCH_TIMEOUT_S
    while True:
        total, _ = planned_messages(namesrv, topic, pull_batch_size)
        if total >= expected:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic} holds {total} messages, expected {expected}")
        time.sleep(DISPATCH_POLL_S)


def server_pids(cluster: Cluster) -> list[int]:
    return [server.pid for server in cluster.servers]


def create_topic(cluster: Cluster, topic: str) -> None:
    cluster.tool("create-topic", "--topic", topic, "--queues", str(QUEUES_PER_BROKER))


def produce_data(cluster: Cluster, topic: str, count: int) -> float:
    """Send ``count`` random 1 KiB bodies with the Java producer; the seconds it took (with JVM start)."""
    started = time.perf_counter()
    cluster.tool(
        "produce",
        "--topic",
        topic,
        "--count",
        str(count),
        "--body-size",
        str(BODY_SIZE),
        "--random-body",
        "--batch",
        str(PRODUCE_BATCH),
        "--quiet",
        timeout=TOOL_TIMEOUT_S,
    )
    return time.perf_counter() - started


def add_cluster_arguments(parser: argparse.ArgumentParser, workdir: Path, results: Path) -> None:
    """The options every benchmark that starts its own cluster takes: its ports, its work
    directory and where its results go."""
    parser.add_argument("--namesrv-port", type=int, default=DEFAULT_NAMESRV_PORT)
    parser.add_argument(
        "--broker-ports",
        default=",".join(map(str, DEFAULT_BROKER_PORTS)),
        help="listen ports of broker-a,broker-b (each also binds port-2 and port+1)",
    )
    parser.add_argument("--workdir", type=Path, default=workdir, help="the benchmark cluster's own work directory")
    parser.add_argument("--output", type=Path, default=results)


def read_broker_ports(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--broker-ports`` as a tuple of one port per broker; anything else is a usage error."""
    args.broker_ports = tuple(int(port) for port in args.broker_ports.split(","))
    if len(args.broker_ports) != len(DEFAULT_BROKER_PORTS):
        parser.error("--broker-ports wants two ports: broker-a,broker-b")


def cluster_config(args: argparse.Namespace) -> ClusterConfig:
    """Two brokers on the given ports; pulls above the brokers' default cap get room to be served."""
    extra: dict[str, str] = {}
    max_transfer = None
    if args.pull_batch_size > BROKER_DEFAULT_MAX_TRANSFER:
        # The brokers cap a pull at 32 messages and 256 KiB unless told otherwise.
        max_transfer = args.pull_batch_size
        extra["maxTransferBytesOnMessageInMemory"] = str(args.pull_batch_size * TRANSFER_BYTES_PER_MESSAGE)
    return ClusterConfig(
        workdir=args.workdir,
        brokers=BROKERS,
        namesrv_port=args.namesrv_port,
        broker_ports=args.broker_ports,
        max_transfer_count_in_memory=max_transfer,
        extra_broker_settings=extra,
    )


def stop_leftover(workdir: Path) -> None:
    """Stop the cluster an interrupted run left recorded in ``workdir``."""
    if (workdir / STATE_FILE_NAME).exists():
        log(f"stopping the cluster a previous run left in {workdir}")
        Cluster.load(workdir).stop()
