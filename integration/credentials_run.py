"""A Spark application that reads an ACL-protected topic and prints all a user gets to see of it.

test_acl.py runs it in a process of its own and searches everything that process and its Spark
workers write (stdout, stderr with Spark's own log, the source's logs at DEBUG) for the
credentials: a stream and a batch read with the right ones, each with its plan printed by
``explain`` and the stream's progress reports as JSON, then a stream and a batch read with a
wrong secret, each with its error. What it ran is printed as ``RESULT <json>`` lines.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from integration.constants import QUERY_TIMEOUT_S
from integration.spark import local_spark


def _reader(spark: Any, kind: str, options: dict[str, str]) -> Any:
    reader = spark.readStream if kind == "stream" else spark.read
    reader = reader.format("rocketmq")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _result(**fields: Any) -> None:
    print("RESULT " + json.dumps(fields), flush=True)


def run(args: argparse.Namespace) -> None:
    spark = local_spark("credentials-run", short_lived=True)
    options = {
        "nameServer": args.name_server,
        "topic": args.topic,
        "accessKey": args.access_key,
        "secretKey": args.secret_key,
        "pullTimeoutMs": "3000",
    }

    stream = _reader(
        spark, "stream", {**options, "consumerGroup": args.group, "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET"}
    )
    stream.explain(True)
    query = (
        stream.writeStream.format("noop")
        .option("checkpointLocation", f"{args.checkpoints}/good")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(QUERY_TIMEOUT_S)
    query.explain(True)  # the plan of its last micro-batch
    for progress in query.recentProgress:
        print(progress.json)
    print(query.lastProgress.json)
    _result(
        kind="stream", rows=sum(p["numInputRows"] for p in query.recentProgress), progress=len(query.recentProgress)
    )

    batch = _reader(spark, "batch", options)
    batch.explain(True)
    _result(kind="batch", rows=batch.count())

    wrong = {**options, "secretKey": args.wrong_secret}
    for kind in ("stream", "batch"):
        try:
            df = _reader(spark, kind, {**wrong, "consumerGroup": args.group})
            if kind == "stream":
                failing = (
                    df.writeStream.format("noop")
                    .option("checkpointLocation", f"{args.checkpoints}/wrong")
                    .trigger(availableNow=True)
                    .start()
                )
                failing.awaitTermination(QUERY_TIMEOUT_S)
            else:
                df.count()
            _result(kind=f"{kind} with a wrong secret", error=None)
        except Exception as error:  # noqa: BLE001 - the error is what is looked at
            print(error)
            _result(kind=f"{kind} with a wrong secret", error=str(error))
    spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("name-server", "topic", "group", "access-key", "secret-key", "wrong-secret", "checkpoints"):
        parser.add_argument(f"--{name}", required=True)
    run(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
