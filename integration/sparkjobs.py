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
    python -I integration/sparkjobs.py follow --classic --master 'local[2,4]' --sink DIR \
        --checkpoint DIR --stop-file FILE -o nameServer=... -o topic=orders -o consumerGroup=g
    python -I integration/sparkjobs.py drive --classic --inbox DIR

Every job but ``serve`` prints one JSON line last: ``{"result": {...}}`` or, when Spark refused,
``{"error": {"type": ..., "message": ...}}``. ``drive`` answers each request in its inbox the
same way, in a file next to it (see ``drive``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__:
    from integration.constants import LOOPBACK, QUERY_TIMEOUT_S
    from integration.sinkjobs import SINK_OPS
    from integration.spark import local_spark
else:
    # Run by path: integration/spark.py (the local session the whole harness shares) and
    # integration/constants.py are found in this file's own folder, and nothing of the checkout
    # beyond them.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from constants import LOOPBACK, QUERY_TIMEOUT_S
    from sinkjobs import SINK_OPS
    from spark import local_spark

CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
SERVE_READY = "spark connect server ready"
SERVER_DRIVER_MEMORY = "1g"
# What ``follow`` writes: enough to check each message arrived once, and where it came from.
FOLLOW_COLUMNS = ("CAST(body AS STRING) AS body", "keys", "brokerName", "queueId", "queueOffset")
FOLLOW_POLL_S = 0.5
# ``drive``: how often it looks for the next request or a query's progress, how long it waits
# for a request before it takes its test run for gone, and how many progress reports a query
# keeps (Spark's default of 100 would drop a long stream's first batches from the record).
DRIVE_POLL_S = 0.2
DRIVE_IDLE_S = 900.0
DRIVE_PROGRESS_KEPT = "10000"
REQUEST_SUFFIX = ".request.json"
ANSWER_SUFFIX = ".answer.json"
END_OP = "end"


def serve(port: int) -> None:
    """A Connect server in a local Spark whose Python workers run this interpreter; until SIGTERM."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    spark = local_spark(
        f"rocketmq-spark-connect-{port}",
        short_lived=True,
        **{
            "spark.plugins": CONNECT_PLUGIN,
            "spark.connect.grpc.binding.address": LOOPBACK,
            "spark.connect.grpc.binding.port": str(port),
            "spark.driver.memory": SERVER_DRIVER_MEMORY,
        },
    )
    print(f"{SERVE_READY} on {LOOPBACK}:{port}, Spark {spark.version}", flush=True)
    try:
        stop.wait()
    finally:
        spark.stop()


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


class Driven:
    """What ``drive``'s requests act on: the session, and the streams started by name."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.queries: dict[str, Any] = {}

    def reader(self, options: dict[str, str], streaming: bool) -> Any:
        read = (self.spark.readStream if streaming else self.spark.read).format("rocketmq")
        for key, value in options.items():
            read = read.option(key, value)
        return read.load()

    def where(self) -> dict[str, Any]:
        return where(self.spark)

    def start(
        self,
        name: str,
        options: dict[str, str],
        sink: str,
        checkpoint: str,
        columns: list[str],
        trigger: dict[str, Any],
    ) -> dict[str, Any]:
        """Start a stream into parquet under ``name``; it runs until ``stop``."""
        if name in self.queries:
            raise ValueError(f"a query named {name} is running")
        self.queries[name] = (
            self.reader(options, streaming=True)
            .selectExpr(*columns)
            .writeStream.format("parquet")
            .option("path", sink)
            .option("checkpointLocation", checkpoint)
            .trigger(**trigger)
            .start()
        )
        return {}

    def wait(self, name: str, rows: int) -> dict[str, Any]:
        """Until the stream has reported a trigger and read ``rows`` rows in all; its progress."""
        query = self.queries[name]
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        while time.monotonic() < deadline:
            # Raises the query's error if it failed.
            if query.awaitTermination(DRIVE_POLL_S):
                raise RuntimeError(f"the query {name} ended before reading {rows} rows")
            progress = list(query.recentProgress)
            if progress and sum(p.numInputRows for p in progress) >= rows:
                return summary(progress)
        progress = list(query.recentProgress)
        raise TimeoutError(
            f"the query {name} did not read {rows} rows in {QUERY_TIMEOUT_S}s: it read "
            f"{sum(p.numInputRows for p in progress)}; status {query.status}; its triggers "
            f"{summary(progress)['triggers']}"
        )

    def stop(self, name: str) -> dict[str, Any]:
        """Stop the stream; every trigger it reported."""
        query = self.queries.pop(name)
        query.stop()
        return summary(list(query.recentProgress))

    def available_now(self, options: dict[str, str], sink: str, checkpoint: str, columns: list[str]) -> dict[str, Any]:
        """An AvailableNow run into parquet, to its end; every trigger it reported."""
        query = (
            self.reader(options, streaming=True)
            .selectExpr(*columns)
            .writeStream.format("parquet")
            .option("path", sink)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        if not query.awaitTermination(QUERY_TIMEOUT_S):
            query.stop()
            raise TimeoutError(f"the AvailableNow run did not finish in {QUERY_TIMEOUT_S}s")
        return summary(list(query.recentProgress))

    def batch(self, options: dict[str, str], columns: list[str]) -> dict[str, Any]:
        """A batch read; its rows, each a list of ``columns``, in no order."""
        return {"rows": [list(row) for row in self.reader(options, streaming=False).selectExpr(*columns).collect()]}

    def read(self, path: str, columns: list[str]) -> dict[str, Any]:
        """What a parquet sink holds, as Spark reads it (its log, not stray files)."""
        return {"rows": [list(row) for row in self.spark.read.parquet(path).selectExpr(*columns).collect()]}

    def close(self) -> None:
        for query in self.queries.values():
            query.stop()
        self.queries.clear()


def summary(progress: list[Any]) -> dict[str, Any]:
    """Each reported trigger's batch id, rows read and end offsets. The offsets come from the
    report's JSON: PySpark 4.0 and 4.1 give ``SourceProgress.endOffset`` as a Python repr."""
    return {
        "triggers": [
            {"batchId": p.batchId, "rows": p.numInputRows, "endOffset": json.loads(p.json)["sources"][0]["endOffset"]}
            for p in progress
        ]
    }


def drive(args: argparse.Namespace) -> dict[str, Any]:
    """A classic session that serves the requests a test writes into ``--inbox``, in order, until a
    ``end`` request: one Spark start for many scenarios, between which the test does its own
    steps (producing messages, reading the broker). Request ``n`` is ``<n>.request.json``,
    ``{"op": ..., "args": {...}}`` naming a method of ``Driven`` or a write of sinkjobs.py; its
    answer, ``<n>.answer.json``,
    is ``{"result": ...}`` or ``{"error": ...}``, each file written whole before it appears."""
    driven = Driven(session(args, **{"spark.sql.streaming.numRecentProgressUpdates": DRIVE_PROGRESS_KEPT}))
    inbox = Path(args.inbox)
    served = 0
    try:
        while True:
            request = next_request(inbox, served)
            if request["op"] == END_OP:
                break
            try:
                op, args = request["op"], request["args"]
                result = SINK_OPS[op](driven.spark, **args) if op in SINK_OPS else getattr(driven, op)(**args)
                answer: dict[str, Any] = {"result": result}
            except Exception as err:  # noqa: BLE001 - the test reads what Spark said
                answer = {"error": {"type": type(err).__name__, "message": str(err)}}
            write_whole(inbox / f"{served}{ANSWER_SUFFIX}", json.dumps(answer))
            served += 1
    finally:
        driven.close()
    return {"served": served, **driven.where()}


def next_request(inbox: Path, number: int) -> dict[str, Any]:
    path = inbox / f"{number}{REQUEST_SUFFIX}"
    deadline = time.monotonic() + DRIVE_IDLE_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no request {number} in {DRIVE_IDLE_S:.0f}s")
        time.sleep(DRIVE_POLL_S)
    request: dict[str, Any] = json.loads(path.read_text())
    return request


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` beside ``path`` and rename it there, so a reader never sees part of it."""
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    os.replace(part, path)


JOBS = {"stream": stream, "batch": batch, "follow": follow, "drive": drive}


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
        p.add_argument("--master", help="a classic session's master, e.g. local[2,4] (4 attempts per task)")
        p.add_argument(
            "-o",
            "--option",
            dest="options",
            type=option,
            action="append",
            default=[],
            help="a source option, key=value",
        )
        if name in ("stream", "follow"):
            p.add_argument("--sink", required=True)
            p.add_argument("--checkpoint", required=True)
        if name == "stream":
            p.add_argument("--read-back", action="store_true", help="answer with the keys the sink holds")
        if name == "follow":
            p.add_argument("--stop-file", required=True, help="stop following once this file exists")
            p.add_argument("--interval", default="0 seconds", help="the processing-time trigger's interval")
        if name == "drive":
            p.add_argument("--inbox", required=True, help="the folder the requests and answers go through")
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
