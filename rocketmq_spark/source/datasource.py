"""The ``rocketmq`` data source: what ``spark.read/readStream.format("rocketmq")`` finds."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from rocketmq_spark.source.batch_reader import RocketMQBatchReader
from rocketmq_spark.remoting.errors import ConfigurationError
from rocketmq_spark.source.options import parse_options
from rocketmq_spark.source.schema import SCHEMA
from rocketmq_spark.source.stream_reader import RocketMQStreamReader


class RocketMQDataSource(DataSource):
    """Apache RocketMQ as a Spark source, for streams and batch reads, with a fixed schema."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        return RocketMQBatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema)
        return RocketMQStreamReader(parse_options(self.options, streaming=True))


def _check_schema(schema: StructType) -> None:
    if schema != SCHEMA:
        raise ConfigurationError(
            "schema", "the rocketmq source has a fixed schema",
            f"Do not call .schema(...) on the reader; the columns are: {SCHEMA.simpleString()}")
