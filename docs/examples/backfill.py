"""Backfill a time window of a RocketMQ topic into parquet, with spark-submit.

    spark-submit backfill.py --name-server 127.0.0.1:9876 --topic orders \
        --start 2025-01-01T00:00:00Z --end 2025-01-02T00:00:00Z --out /data/orders/2025-01-01

The window is [start, end) by each message's store time. The read stores no offsets on the
broker, so it does not disturb any consumer group. Needs the package on the driver and the
executors: on a cluster, a virtualenv packed with venv-pack and shipped with --archives (the
cluster recipe in docs/operations.md). --py-files cannot ship it: its dependencies lz4 and
zstandard are C extensions, which Python does not import from a zip file.
"""

from __future__ import annotations

import argparse
from datetime import datetime

from pyspark.sql import SparkSession


def epoch_ms(text: str) -> str:
    """An ISO-8601 time as the epoch milliseconds the source's timestamp options take."""
    return str(int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name-server", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--start", required=True, help="ISO-8601 time, inclusive")
    parser.add_argument("--end", required=True, help="ISO-8601 time, exclusive")
    parser.add_argument("--out", required=True)
    parser.add_argument("--tags", default="*", help="tag expression, e.g. 'paid || refunded'")
    parser.add_argument("--min-partitions", default="8")
    args = parser.parse_args()

    spark = SparkSession.builder.appName(f"rocketmq-backfill-{args.topic}").getOrCreate()
    df = (
        spark.read.format("rocketmq")
        .option("nameServer", args.name_server)
        .option("topic", args.topic)
        .option("subExpression", args.tags)
        .option("startingTimestamp", epoch_ms(args.start))
        .option("endingTimestamp", epoch_ms(args.end))
        .option("minPartitions", args.min_partitions)
        .load()
    )
    df.write.mode("overwrite").parquet(args.out)
    print(f"wrote {spark.read.parquet(args.out).count()} messages to {args.out}")
    spark.stop()


if __name__ == "__main__":
    main()
