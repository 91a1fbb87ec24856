"""Throughput of the PULL-body decoders on realistic records, on one core.

Builds N uncompressed V1 records (1 KiB bodies, IPv4 hosts, TAGS/KEYS/UNIQ_KEY
properties), groups them into PULL-sized bodies of 32 records and reports the
median of several timed runs of each decode API:

  bulk (reader)    what a Spark task runs: scan each pull as it arrives, decode the
                   pulls of one Arrow batch (8192 messages) together into Arrow columns
  bulk, narrow     the same for a query whose schema names queueOffset and
                   storeTimestamp only: properties, hosts, ids and bodies are skipped
  per-record       what a task runs for records the bulk path does not take: each pull
                   walked record by record, the pulls of one Arrow batch built together
  decode_messages  the per-record decoder, one Message tuple per message

    python bench/bench_decode.py [--messages N] [--body-size B] [--runs R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from rocketmq_spark.records.columns import from_walked
from rocketmq_spark.records.decoder import PullDecoder, decode_pulls
from rocketmq_spark.records.walk import Walked, decode_messages, walk
from rocketmq_spark.remoting import codes
from rocketmq_spark.source.partition_reader import ARROW_BATCH_ROWS

PULL_BATCH = 32
TOPIC = b"BenchTopic"
BORN_HOST = bytes([10, 0, 0, 7]) + struct.pack(">i", 53412)
STORE_HOST = bytes([10, 0, 0, 1]) + struct.pack(">i", 10911)
# totalSize, magic, bodyCRC, queueId, flag, queueOffset, commitLogOffset, sysFlag,
# bornTimestamp, bornHost, storeTimestamp, storeHost, reconsumeTimes,
# preparedTransactionOffset, bodyLen.
_PREFIX = struct.Struct(">iIiiiqqiq8sq8siqi")
_TOPIC_LENGTH = struct.Struct(">B")  # magic V1
_PROPERTIES_LENGTH = struct.Struct(">h")


def build_record(queue_offset: int, body: bytes) -> bytes:
    """One commitlog record as a 5.x broker stores it."""
    properties = (
        f"TAGS\x01TagA\x02KEYS\x01order-{queue_offset}\x02UNIQ_KEY\x017F0000010001{queue_offset:020X}\x02"
    ).encode()
    size = _PREFIX.size + len(body) + _TOPIC_LENGTH.size + len(TOPIC) + _PROPERTIES_LENGTH.size + len(properties)
    commit_log_offset = queue_offset * size
    prefix = _PREFIX.pack(
        size,
        codes.MESSAGE_MAGIC_V1,
        0,
        queue_offset % 8,
        0,
        queue_offset,
        commit_log_offset,
        0,
        1_700_000_000_000 + queue_offset,
        BORN_HOST,
        1_700_000_000_005 + queue_offset,
        STORE_HOST,
        0,
        0,
        len(body),
    )
    return b"".join(
        (
            prefix,
            body,
            _TOPIC_LENGTH.pack(len(TOPIC)),
            TOPIC,
            _PROPERTIES_LENGTH.pack(len(properties)),
            properties,
        )
    )


def build_bodies(messages: int, body_size: int) -> list[bytes]:
    payload = bytes(range(256)) * (body_size // 256) + bytes(body_size % 256)
    records = [build_record(offset, payload) for offset in range(messages)]
    return [b"".join(records[i : i + PULL_BATCH]) for i in range(0, messages, PULL_BATCH)]


def time_api(decode: Callable[[list[bytes]], object], groups: list[list[bytes]], runs: int) -> tuple[float, float]:
    """Median wall seconds and median CPU seconds of this process (all its threads) per run."""
    walls = []
    cpus = []
    for _ in range(runs):
        start = time.perf_counter()
        cpu_start = time.process_time()
        for group in groups:
            decode(group)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu_start)
    return statistics.median(walls), statistics.median(cpus)


def bulk(pulls: list[bytes]) -> object:
    """The reader's path: scan on arrival, then one bulk decode per Arrow batch."""
    return decode_pulls(pulls)


# What ``.schema("queueOffset BIGINT, storeTimestamp TIMESTAMP")`` has the reader decode.
NARROW = frozenset({"queue_offset", "store_timestamp"})


def bulk_narrow(pulls: list[bytes]) -> object:
    """The reader's path for a narrow schema."""
    decoder = PullDecoder(wanted=NARROW)
    for pull in pulls:
        decoder.add(pull)
    return decoder.decode().columns


def per_record(pulls: list[bytes]) -> object:
    """The reader's path for records the bulk decoder does not take."""
    return from_walked(Walked.join([walk(pull) for pull in pulls]))


def each(decode: Callable[[bytes], object]) -> Callable[[list[bytes]], object]:
    return lambda pulls: [decode(pull) for pull in pulls]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    bodies = build_bodies(args.messages, args.body_size)
    total_bytes = sum(map(len, bodies))
    decoded = sum(len(decode_messages(body)) for body in bodies)
    if decoded != args.messages:
        raise SystemExit(f"decoded {decoded} messages, expected {args.messages}")
    print(
        f"{args.messages} records, {args.body_size}-byte bodies, {len(bodies)} PULL bodies "
        f"of {PULL_BATCH}, {total_bytes / 1e6:.1f} MB, median of {args.runs} runs"
    )
    per_batch = max(1, ARROW_BATCH_ROWS // PULL_BATCH)
    groups = [bodies[i : i + per_batch] for i in range(0, len(bodies), per_batch)]
    if len(bulk(groups[0])) != min(args.messages, per_batch * PULL_BATCH):  # type: ignore[arg-type]
        raise SystemExit("the bulk decoder lost messages")
    apis = (
        ("bulk (reader)", bulk),
        ("bulk, narrow", bulk_narrow),
        ("per-record", per_record),
        ("decode_messages", each(decode_messages)),
    )
    for name, decode in apis:
        seconds, cpu_seconds = time_api(decode, groups, args.runs)
        # CPU/wall near 1.0: the work ran on one core (no library spread it over threads).
        print(
            f"{name:16s} {args.messages / seconds:12,.0f} messages/s "
            f"{total_bytes / seconds / 1e6:10,.1f} MB/s   CPU/wall {cpu_seconds / seconds:4.2f}"
        )


if __name__ == "__main__":
    main()
