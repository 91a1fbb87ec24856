"""The one-shot reads ``sparkjobs.py`` runs, each as a user's program would: ``stream`` (an
AvailableNow stream into parquet), ``batch`` (a batch read) and ``follow`` (a processing-time
stream until a stop file appears, then an AvailableNow run to the end), each on a Connect
client or a classic session; and ``session``, ``reader`` and ``where``, which ``drive``
(drivejobs.py) shares. Only the standard library and PySpark (and the package, to register it),
as sparkjobs.py: it is loaded by path from that file's folder in a virtualenv that holds the
built wheel.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path
from typing import Any

if __package__:
    from integration.constants import QUERY_TIMEOUT_S
    from integration.spark import local_spark
else:  # loaded by path: sparkjobs.py put this folder first on sys.path
    from constants import QUERY_TIMEOUT_S
    from spark import local_spark

# What ``follow`` writes: enough to check each message arrived once, and where it came from.
FOLLOW_COLUMNS = ("CAST(body AS STRING) AS body", "keys", "brokerName", "queueId", "queueOffset")
FOLLOW_POLL_S = 0.5


def session(args: argparse.Namespace, **conf: str) -> Any:
    """A Connect client of ``--remote``, or a classic local session (``--master``, ``conf``)."""
    if args.remote:
        from pyspark.sql import SparkSession

        return SparkSession.builder.remote(args.remote).getOrCreate()
    master = {"spark.master": args.master} if args.master else {}
    return local_spark("rocketmq-spark-job", short_lived=True, **conf, **master)


def reader(spark: Any, args: argparse.Namespace, streaming: bool) -> Any:
    if args.register:
        from rocketmq_spark import RocketMQDataSource

        spark.dataSource.register(RocketMQDataSource)
    read = spark.readStream if streaming else spark.read
    read = read.format("rocketmq")
    for key, value in args.options:
        read = read.option(key, value)
    return read.load()


def stream(args: argparse.Namespace) -> dict[str, Any]:
    """An AvailableNow stream into parquet; what Spark reported of it."""
    spark = session(args)
    query = (
        reader(spark, args, streaming=True)
        .selectExpr("keys", "brokerName", "queueId", "queueOffset")
        .writeStream.format("parquet")
        .option("path", args.sink)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    finished = query.awaitTermination(QUERY_TIMEOUT_S)
    if not finished:
        query.stop()
        raise TimeoutError(f"the stream did not finish in {QUERY_TIMEOUT_S}s")
    # Attributes, not keys: a Connect client's progress may leave the top-level row count out.
    progress = [p for p in query.recentProgress if p.numInputRows > 0]
    # What the sink holds, as Spark reads it (its log, not stray files).
    read_back = (
        {"keys": [row["keys"] for row in spark.read.parquet(args.sink).select("keys").collect()]}
        if args.read_back
        else {}
    )
    return {
        "rows": sum(p.numInputRows for p in progress),
        "batches": len(progress),
        "endOffset": progress[-1].sources[0].endOffset if progress else None,
        **read_back,
        **where(spark),
    }


def batch(args: argparse.Namespace) -> dict[str, Any]:
    """A batch read; the keys of every row, in no order."""
    spark = session(args)
    keys = [row["keys"] for row in reader(spark, args, streaming=False).select("keys").collect()]
    return {"keys": keys, **where(spark)}


def where(spark: Any) -> dict[str, Any]:
    """Which Spark ran the job, and where this interpreter finds the package (None: nowhere)."""
    spec = importlib.util.find_spec("rocketmq_spark")
    return {
        "spark": spark.version,
        "client": type(spark).__module__,
        "package": spec.origin if spec is not None else None,
    }


def follow(args: argparse.Namespace) -> dict[str, Any]:
    """A processing-time stream into parquet until the stop file appears, then an AvailableNow run
    from the same checkpoint: it reads up to what the topic holds then and stores the final
    offsets, which the processing-time query, stopped, leaves one batch behind."""
    spark = session(args)

    def start(**trigger: Any) -> Any:
        return (
            reader(spark, args, streaming=True)
            .selectExpr(*FOLLOW_COLUMNS)
            .writeStream.format("parquet")
            .option("path", args.sink)
            .option("checkpointLocation", args.checkpoint)
            .trigger(**trigger)
            .start()
        )

    query = start(processingTime=args.interval)
    while not Path(args.stop_file).exists():
        # A failed query raises here (its error is the job's answer); one that ended otherwise was
        # stopped by something other than this job.
        if query.awaitTermination(FOLLOW_POLL_S):
            raise RuntimeError("the query stopped before the stop file appeared")
    query.stop()
    drain = start(availableNow=True)
    began = time.monotonic()
    if not drain.awaitTermination(QUERY_TIMEOUT_S):
        drain.stop()
        raise TimeoutError(f"the AvailableNow run did not finish in {QUERY_TIMEOUT_S}s")
    return {
        "drained_rows": sum(p.numInputRows for p in drain.recentProgress),
        "drain_s": round(time.monotonic() - began, 1),
        **where(spark),
    }
