"""The local SparkSession the tests and the benchmark share.

Python workers must run this interpreter, the one the package is installed in, or Spark would
not find ``format("rocketmq")`` in them.

The tests' Spark JVMs live minutes and run small jobs, for which the JIT's optimizing compiler
(C2) costs more CPU than it saves: with the client compiler alone a session's start took about
half the JVM's CPU (7 s against 14), and the stream, batch and pushdown tests ran in 10% less
time (194 and 199 s against 216 and 218, two runs each). They also map a class-data archive
(integration/cds.py) that the first of them on this PySpark dumps once it ran a query: a session
then starts and runs a small query on about a quarter less CPU (17.5 CPU-s against 23, two runs
each). The benchmarks keep the JVM's defaults.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

if __package__:
    from integration.cds import dump, sharing
else:  # loaded by path: sparkjobs.py put this folder first on sys.path
    from cds import dump, sharing

LOCAL_CORES = 2
WARM_ROWS = 1000
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": str(LOCAL_CORES),
    "spark.sql.session.timeZone": "UTC",
}
# What ``short_lived`` adds to the driver JVM's options: compile with C1 alone.
SHORT_LIVED_FLAGS = ("-XX:TieredStopAtLevel=1",)
DRIVER_OPTIONS = "spark.driver.extraJavaOptions"
# The driver JVM's main class, which names its kind of archive.
DRIVER_MAIN = "org.apache.spark.deploy.SparkSubmit"


def local_spark(app_name: str, *, short_lived: bool = False, **conf: str) -> Any:
    """A ``local[2]`` session; ``conf`` adds or overrides Spark settings (keys with dots);
    ``short_lived`` for the tests' sessions (the module's docstring says why)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    to_dump = ""
    options = dict(DEFAULT_CONF)
    if short_lived:
        shared, to_dump = sharing(shutil.which("java"), spark_jars(), DRIVER_MAIN)
        options[DRIVER_OPTIONS] = " ".join([*SHORT_LIVED_FLAGS, *shared])
    builder = SparkSession.builder.master(f"local[{LOCAL_CORES}]").appName(app_name)
    for key, value in {**options, **conf}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if to_dump:
        # A query first, so that the archive holds the classes a query loads, not only a start's.
        session.range(WARM_ROWS).selectExpr(f"id % {LOCAL_CORES} AS k").groupBy("k").count().collect()
        driver = driver_pid()
        if driver is not None:
            dump(driver, Path(to_dump))
    return session


def driver_pid() -> int | None:
    """This process's driver JVM: the child PySpark started (spark-submit execs it)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if parent == os.getpid() and DRIVER_MAIN.encode() in command:
            return int(entry.name)
    return None


def spark_jars() -> str:
    """The installed PySpark's jars and version: what the driver JVM's classpath is made of."""
    import pyspark

    return f"{Path(pyspark.__file__).resolve().parent / 'jars'} {pyspark.__version__}"
