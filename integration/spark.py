"""The local SparkSession the tests and the benchmark share.

Python workers must run this interpreter, the one the package is installed in, or Spark would
not find ``format("rocketmq")`` in them.
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


def local_spark(app_name: str, **conf: str) -> Any:
    """A ``local[2]`` session; ``conf`` adds or overrides Spark settings (keys with dots)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(f"local[{LOCAL_CORES}]").appName(app_name)
    for key, value in {**DEFAULT_CONF, **conf}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
