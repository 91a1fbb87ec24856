"""Values the harness and several test modules share, each defined once, and the KEY=VALUE
argument parser of its command lines.

Only the standard library: ``sparkjobs.py`` and its jobs import this file by path too, in
virtualenvs that hold the built wheel and no checkout.
"""

from __future__ import annotations

import argparse
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOOPBACK = "127.0.0.1"

# ------------------------------------------------------------------ waiting

# How often a wait looks again: a server's console and ports, a file a process writes, a query's
# progress, a route or an offset.
POLL_S = 0.2
# How long a process asked to stop (SIGTERM) may take before it is killed.
STOP_TIMEOUT_S = 30.0
# How long a Spark process (a Connect server, a standalone master and its workers) may take to
# be ready: a JVM and its Python workers on a loaded machine, slower than a RocketMQ server.
SPARK_READY_TIMEOUT_S = 180.0
# How long one query of a test may run before the test fails.
QUERY_TIMEOUT_S = 300
# How long a group's stored offsets may take to reach the ends a test waits for.
STORED_TIMEOUT_S = 120.0
# How much of a failed process's output an error shows.
OUTPUT_TAIL_CHARS = 4000

# ------------------------------------------------------------------ what the tests send and read

# Waves of messages sent this far apart are stored apart: no store time is shared between two
# waves, so a time window, a search by time or a reset by time can fall between them.
WAVE_GAP_S = 2.0
# The trigger of the tests' running streams.
TRIGGER = "1 second"
FIRST = "CONSUME_FROM_FIRST_OFFSET"
TAGS = ("TagA", "TagB", "TagC")
# Messages a test's own pull asks for at once (the official consumer's default pullBatchSize).
PULL_BATCH = 32
# A time an hour away from every message a test sent.
ONE_HOUR_MS = 3_600_000
# The Java producer compresses bodies above 4 KiB (compressMsgBodyOverHowmuch).
COMPRESSIBLE_BODY_BYTES = 5_000
# Properties the official consumer adds after decoding (PullAPIWrapper.processPullResult).
CONSUMER_ADDED_PROPERTIES = ("MIN_OFFSET", "MAX_OFFSET")


def key_value(text: str) -> tuple[str, str]:
    """An argparse ``type`` for KEY=VALUE arguments (a source option, a broker setting)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value
