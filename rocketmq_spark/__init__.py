"""Apache Spark source for Apache RocketMQ, speaking RocketMQ's remoting protocol in pure Python."""

from rocketmq_spark.source.datasource import RocketMQDataSource

__version__ = "0.1.0"
__all__ = ["RocketMQDataSource", "__version__"]
