"""Spark programs the integration tests run in processes of their own: a Spark Connect server,
and the reads a user's program would do, either as a Connect client or in classic PySpark.

A process of its own, because one Python process cannot hold a classic session (the tests' own
``spark`` fixture) and a Connect client at once, and because a Connect client is a program with
no JVM of its own. The file needs only the standard library and PySpark (and the package, to
register it): the wheel test runs it by path with ``python -I`` in a virtualenv that holds the
built wheel and its dependencies, so no checkout can stand in for the installed package.

    python -I integration/sparkjobs.py serve --port 17002
    python -I integration/sparkjobs.py stream --remote sc://127.0.0.1:17002 --sink DIR \\
        --checkpoint DIR -o nameServer=127.0.0.1:11876 -o topic=orders -o consumerGroup=g
    python -I integration/sparkjobs.py batch --classic -o nameServer=... -o topic=orders

Every job but ``serve`` prints one JSON line last: ``{"result": {...}}`` or, when Spark refused,
``{"error": {"type": ..., "message": ...}}``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__:
    from integration.spark import local_spark
else:
    # Run by path: integration/spark.py (the local session the whole harness shares) is found
    # in this file's own folder, and nothing of the checkout beyond it.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from spark import local_spark

CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
LOOPBACK = "127.0.0.1"
SERVE_READY = "spark connect server ready"
QUERY_TIMEOUT_S = 300
SERVER_DRIVER_MEMORY = "1g"


def serve(port: int) -> None:
    """A Connect server in a local Spark whose Python workers run this interpreter; until SIGTERM."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    spark = local_spark(f"rocketmq-spark-connect-{port}", **{
        "spark.plugins": CONNECT_PLUGIN,
        "spark.connect.grpc.binding.address": LOOPBACK,
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.memory": SERVER_DRIVER_MEMORY,
    })
    print(f"{SERVE_READY} on {LOOPBACK}:{port}, Spark {spark.version}", flush=True)
    try:
        stop.wait()
    finally:
        spark.stop()


def session(args: argparse.Namespace) -> Any:
    """A Connect client of ``--remote``, or a classic local session (``--master``)."""
    if args.remote:
        from pyspark.sql import SparkSession

        return SparkSession.builder.remote(args.remote).getOrCreate()
    return local_spark("rocketmq-spark-job")


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
    query = (reader(spark, args, streaming=True).selectExpr("keys", "brokerName", "queueId", "queueOffset")
             .writeStream.format("parquet").option("path", args.sink)
             .option("checkpointLocation", args.checkpoint).trigger(availableNow=True).start())
    finished = query.awaitTermination(QUERY_TIMEOUT_S)
    if not finished:
        query.stop()
        raise TimeoutError(f"the stream did not finish in {QUERY_TIMEOUT_S}s")
    # Attributes, not keys: a Connect client's progress may leave the top-level row count out.
    progress = [p for p in query.recentProgress if p.numInputRows > 0]
    return {
        "rows": sum(p.numInputRows for p in progress),
        "batches": len(progress),
        "endOffset": progress[-1].sources[0].endOffset if progress else None,
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
    return {"spark": spark.version, "client": type(spark).__module__,
            "package": spec.origin if spec is not None else None}


JOBS = {"stream": stream, "batch": batch}


def option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="sparkjobs.py", description=__doc__.split("\n\n")[0])
    sub = top.add_subparsers(dest="job", required=True)
    sub.add_parser("serve", help="run a Spark Connect server").add_argument("--port", type=int, required=True)
    for name, job in JOBS.items():
        p = sub.add_parser(name, help=job.__doc__)
        where_to = p.add_mutually_exclusive_group(required=True)
        where_to.add_argument("--remote", help="a Spark Connect URL, sc://host:port")
        where_to.add_argument("--classic", action="store_true", help="a classic local session")
        p.add_argument("--register", action="store_true", help="spark.dataSource.register(RocketMQDataSource)")
        p.add_argument("-o", "--option", dest="options", type=option, action="append", default=[],
                       help="a source option, key=value")
        if name == "stream":
            p.add_argument("--sink", required=True)
            p.add_argument("--checkpoint", required=True)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.job == "serve":
        serve(args.port)
        return 0
    try:
        result: dict[str, Any] = {"result": JOBS[args.job](args)}
    except Exception as err:  # noqa: BLE001 - the test reads what Spark said
        result = {"error": {"type": type(err).__name__, "message": str(err)}}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
