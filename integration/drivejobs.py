"""``drive``, the job ``sparkjobs.py`` runs for the tests of each PySpark line: one classic
session that serves, in order, the requests a test writes into a folder, so that one Spark start
serves many scenarios. A request names a method of ``Driven`` (streams started and stopped by
name, AvailableNow runs, batch reads, a parquet sink read back) or a write of sinkjobs.py; its
answer is written whole beside it. Only the standard library and PySpark, as sparkjobs.py: it
is loaded by path from that file's folder in a virtualenv that holds the built wheel.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

if __package__:
    from integration.constants import QUERY_TIMEOUT_S
    from integration.readjobs import session, where
    from integration.sinkjobs import SINK_OPS
else:  # loaded by path: sparkjobs.py put this folder first on sys.path
    from constants import QUERY_TIMEOUT_S
    from readjobs import session, where
    from sinkjobs import SINK_OPS

# How often ``drive`` looks for the next request or a query's progress, how long it waits for a
# request before it takes its test run for gone, and how many progress reports a query keeps
# (Spark's default of 100 would drop a long stream's first batches from the record).
DRIVE_POLL_S = 0.2
DRIVE_IDLE_S = 900.0
DRIVE_PROGRESS_KEPT = "10000"
# The files a request and its answer go through: ``<n>.request.json``, ``<n>.answer.json``.
REQUEST_SUFFIX = ".request.json"
ANSWER_SUFFIX = ".answer.json"
END_OP = "end"


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
