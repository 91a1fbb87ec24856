"""Apache Spark source for Apache RocketMQ, speaking RocketMQ's remoting protocol in pure Python.

``RocketMQDataSource`` is loaded on first use, so that the remoting client and the decoders can be
imported without loading PySpark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rocketmq_spark.source.datasource import RocketMQDataSource

__version__ = "0.1.0"
__all__ = ["RocketMQDataSource", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "RocketMQDataSource":
        from rocketmq_spark.source.datasource import RocketMQDataSource

        return RocketMQDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
