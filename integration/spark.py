"""The local SparkSession the tests and the benchmark share.

Python workers must run this interpreter, the one the package is installed in, or Spark would
not find ``format("rocketmq")`` in them.

The tests' Spark JVMs live minutes and run small jobs, for which the JIT's optimizing compiler
(C2) costs more CPU than it saves: with the client compiler alone a session's start took about
half the JVM's CPU (7 s against 14), and the stream, batch and pushdown tests ran in 10% less
time (194 and 199 s against 216 and 218, two runs each). The benchmarks keep the JVM's default.
"""

from __future__ import annotations

import os
import sys
from typing import Any

LOCAL_CORES = 2
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": str(LOCAL_CORES),
    "spark.sql.session.timeZone": "UTC",
}
# What ``short_lived`` adds: compile with C1 alone.
SHORT_LIVED_CONF = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}


def local_spark(app_name: str, *, short_lived: bool = False, **conf: str) -> Any:
    """A ``local[2]`` session; ``conf`` adds or overrides Spark settings (keys with dots);
    ``short_lived`` for the tests' sessions (the module's docstring says why)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(f"local[{LOCAL_CORES}]").appName(app_name)
    for key, value in {**DEFAULT_CONF, **(SHORT_LIVED_CONF if short_lived else {}), **conf}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
