"""The ``rocketmq`` sink: DataFrame rows sent to RocketMQ as messages, by batch writes and streams."""
