"""The Spark source: options, the offset model, planning, the driver's broker queries, the
stream and batch readers, and the executors' partition reader."""
