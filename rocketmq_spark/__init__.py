"""Apache Spark source for Apache RocketMQ, speaking RocketMQ's remoting protocol in pure Python."""

__version__ = "0.1.0"
