"""RocketMQ's remoting protocol: constants, frames (no I/O), connections, typed calls, errors, retries.

Nothing here knows Spark or message records; the pull call returns the raw body for
``rocketmq_spark.records`` to decode.
"""
