"""Lets Spark find the ``rocketmq`` source and sink with no register call.

Spark scans top-level modules whose names start with ``pyspark_`` for a ``DefaultSource``.
"""

from rocketmq_spark import RocketMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
