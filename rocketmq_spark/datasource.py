"""The ``rocketmq`` data source: what ``format("rocketmq")`` finds, for reading and for writing.

Reading is ``source``'s and writing ``sink``'s; this is where the two meet. Spark creates the data
source and may call ``schema()`` before it knows whether the query reads or writes (``load()``
does, and so does a stream's ``start()`` on a sink), so ``schema()`` checks the options by the
rules of the side they belong to: options only a write takes (``producerGroup``, ...) mean a
write; otherwise they must make a read, or at least a write (a write may name its topic in a
column, which a read cannot). ``reader``/``streamReader`` and ``writer``/``streamWriter`` then
check by their side's rules alone.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from rocketmq_spark.config.errors import ConfigurationError
from rocketmq_spark.sink.options import looks_like_a_write, parse_sink_options
from rocketmq_spark.sink.writer import batch_writer, stream_writer
from rocketmq_spark.source.datasource import batch_reader, check_read_options, stream_reader
from rocketmq_spark.source.schema import SCHEMA


class RocketMQDataSource(DataSource):
    """Apache RocketMQ as a Spark source and sink: streams and batch reads, with fixed columns of
    which a user-given schema may pick some, and streams and batch writes of a row per message."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> StructType:
        check_options(self.options)
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return batch_reader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return stream_reader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return batch_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return stream_writer(self.options, schema, overwrite)


def check_options(raw: Mapping[str, str]) -> None:
    """Options that can make neither a read nor a write fail here, with the error of the side
    they lean to: a write's when they name an option only a write takes, else a read's."""
    if looks_like_a_write(raw):
        parse_sink_options(raw)
        return
    try:
        check_read_options(raw)
    except ConfigurationError:
        try:
            parse_sink_options(raw)
        except ConfigurationError:
            pass
        else:
            return  # a write that names its topic in a column, or a read that reader() refuses
        raise
