"""Apache Spark source and sink for Apache RocketMQ, speaking RocketMQ's remoting protocol in pure Python.

The package does not install PySpark (platforms bring their own Spark, and pip would put PyPI's
over it), so importing it first checks that a PySpark with Python streaming data sources (4.0 or
later) is there, and says in one sentence what to do if not. ``RocketMQDataSource`` is loaded on
first use, so that the remoting client and the decoders load without the Spark side.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rocketmq_spark.datasource import RocketMQDataSource

__version__ = "0.1.0"
__all__ = ["RocketMQDataSource", "__version__"]

MIN_PYSPARK = (4, 0)
_GET_PYSPARK = (
    "run it where Spark 4 brings PySpark (Databricks Runtime 17.3 LTS or later, any Spark 4.x), "
    'or install PyPI\'s with: pip install "rocketmq-spark[spark]"'
)


def pyspark_problem(version: str | None) -> str | None:
    """The sentence to fail with for this PySpark version (None: not installed), or None if it will do."""
    if version is None:
        return f"rocketmq-spark needs PySpark 4.0 or later and found no PySpark: {_GET_PYSPARK}"
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None or (int(found[1]), int(found[2])) < MIN_PYSPARK:
        return (
            f"rocketmq-spark needs PySpark 4.0 or later (the first with Python streaming data sources) and "
            f"found PySpark {version}: {_GET_PYSPARK}"
        )
    return None


def _installed_pyspark() -> str | None:
    try:
        import pyspark
    except ModuleNotFoundError as err:
        if err.name != "pyspark":
            raise
        return None
    return str(getattr(pyspark, "__version__", "unknown"))


_problem = pyspark_problem(_installed_pyspark())
if _problem is not None:
    raise ImportError(_problem)


def __getattr__(name: str) -> Any:
    if name == "RocketMQDataSource":
        from rocketmq_spark.datasource import RocketMQDataSource

        return RocketMQDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
