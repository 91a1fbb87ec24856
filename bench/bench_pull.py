"""Raw pull throughput of the remoting client against a running RocketMQ.

Produces N messages (1 KiB bodies by default) with the official Java producer to a topic of
eight queues (four on each of broker-a and broker-b), then times reading every queue from offset
0 to its end with this project's client: pulls only, pulls + ``decode_messages``, pulls +
``walk_columns``, for each pull batch size. Reports messages/s and MB/s (payload bytes and
bytes on the wire), the median of several runs.

    python bench/bench_pull.py [--namesrv 127.0.0.1:9876] [--messages 200000] [--batch 32 256]
                               [--topic EXISTING]  # reuse a topic an earlier run filled

A broker returns at most ``maxTransferCountOnMessageInMemory`` messages per pull (32 unless the
cluster was started with ``--max-transfer-count``); the report shows the batch the broker
actually delivered next to the one asked for.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from integration.cluster import run_tool
from rocketmq_spark.model import ClientConfig, MessageQueue
from rocketmq_spark.records.columns import walk_columns
from rocketmq_spark.records.walk import decode_messages
from rocketmq_spark.remoting import calls
from rocketmq_spark.remoting.client import PullSpec, PullStatus, RocketMQClient

QUEUES_PER_BROKER = 4
BROKERS = ("broker-a", "broker-b")
# The producer sends this many messages per request, so filling the topic takes seconds, not
# minutes; the broker still stores one record per message.
PRODUCE_BATCH = 64
PRODUCE_TIMEOUT_S = 1_800.0
MB = 1e6


@dataclass
class Run:
    seconds: float
    messages: int
    wire_bytes: int
    pulls: int


def produce(namesrv: str, topic: str, messages: int, body_size: int) -> None:
    run_tool(
        namesrv, "create-topic", "--topic", topic, "--queues", str(QUEUES_PER_BROKER), "--brokers", ",".join(BROKERS)
    )
    run_tool(
        namesrv,
        "produce",
        "--topic",
        topic,
        "--count",
        str(messages),
        "--body-size",
        str(body_size),
        "--batch",
        str(PRODUCE_BATCH),
        "--quiet",
        timeout=PRODUCE_TIMEOUT_S,
    )


def read_all(
    client: RocketMQClient,
    targets: list[tuple[str, MessageQueue, int]],
    batch: int,
    decode: Callable[[bytes], object] | None,
) -> Run:
    """Pull every queue from 0 to its max offset, one pull after another, on one connection per broker."""
    group = f"bench-{uuid.uuid4().hex[:8]}"
    messages = wire = pulls = 0
    start = time.perf_counter()
    for address, queue, end in targets:
        offset = 0
        while offset < end:
            result = client.pull_async(address, PullSpec(queue, group), offset, batch).result()
            if result.status is not PullStatus.FOUND:
                raise RuntimeError(f"{queue} at {offset}: {result.status}")
            pulls += 1
            wire += len(result.body)
            if decode is not None:
                decode(result.body)
            messages += result.next_begin_offset - offset
            offset = result.next_begin_offset
    seconds = time.perf_counter() - start
    return Run(seconds, messages, wire, pulls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namesrv", default="127.0.0.1:9876")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--batch", type=int, nargs="+", default=[32, 256], help="maxMsgNums per pull")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--topic", help="an existing topic (from an earlier run) to read instead of producing")
    args = parser.parse_args()

    topic = args.topic or f"bench-pull-{uuid.uuid4().hex[:8]}"
    if not args.topic:
        started = time.perf_counter()
        produce(args.namesrv, topic, args.messages, args.body_size)
        print(f"produced {args.messages} x {args.body_size} B to {topic} in {time.perf_counter() - started:.1f}s")

    with RocketMQClient(ClientConfig((args.namesrv,))) as client:
        route = client.topic_route(topic)
        targets = []
        for queue in route.readable_queues():
            address = route.master_address(queue.broker_name)
            if address is None:
                raise SystemExit(f"no master for {queue.broker_name}")
            targets.append((address, queue, client.call(address, calls.max_offset(queue))))
        total = sum(end for _, _, end in targets)
        payload_bytes = total * args.body_size
        print(f"{total} messages in {len(targets)} queues, median of {args.runs} runs, one thread")
        modes: dict[str, Callable[[bytes], object] | None] = {
            "pull only": None,
            "+decode_messages": decode_messages,
            "+walk_columns": walk_columns,
        }
        read_all(client, targets, max(args.batch), None)  # warm the page cache and the connections
        for batch in args.batch:
            for name, decode in modes.items():
                runs = [read_all(client, targets, batch, decode) for _ in range(args.runs)]
                run = sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]
                seconds = statistics.median(r.seconds for r in runs)
                if run.messages != total:
                    raise SystemExit(f"read {run.messages} messages, expected {total}")
                print(
                    f"batch {batch:4d} (delivered {run.messages / run.pulls:5.1f}/pull) {name:17s}"
                    f"{total / seconds:12,.0f} msg/s {payload_bytes / seconds / MB:8,.1f} MB/s payload"
                    f"{run.wire_bytes / seconds / MB:8,.1f} MB/s wire"
                )


if __name__ == "__main__":
    main()
