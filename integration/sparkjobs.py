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
same way, in a file next to it. This file is the entry point and the Connect server (``serve``);
the one-shot reads are in readjobs.py, ``drive`` in drivejobs.py, the sink's writes it serves
in sinkjobs.py.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__:
    from integration.constants import LOOPBACK, key_value
    from integration.drivejobs import drive
    from integration.readjobs import batch, follow, stream
    from integration.spark import local_spark
else:
    # Run by path: the jobs (readjobs.py, drivejobs.py, sinkjobs.py), integration/spark.py (the
    # local session the whole harness shares) and integration/constants.py are found in this
    # file's own folder, and nothing of the checkout beyond them.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from constants import LOOPBACK, key_value
    from drivejobs import drive
    from readjobs import batch, follow, stream
    from spark import local_spark

CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
SERVE_READY = "spark connect server ready"
SERVER_DRIVER_MEMORY = "1g"


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


JOBS = {"stream": stream, "batch": batch, "follow": follow, "drive": drive}


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
            type=key_value,
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
