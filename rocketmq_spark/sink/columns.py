"""The columns a write takes, checked against the DataFrame's schema before anything is sent.

Columns are matched by name, case-insensitively, as Spark matches them. Any other column, a
column of the wrong type, neither a ``topic`` column nor the ``topic`` option, or one of
``brokerName`` and ``queueId`` without the other is an error naming the problem and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import (
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from rocketmq_spark.remoting.errors import RocketMQError

BODY = "body"
TOPIC = "topic"
TAGS = "tags"
KEYS = "keys"
PROPERTIES = "properties"
SHARDING_KEY = "shardingKey"
BROKER_NAME = "brokerName"
QUEUE_ID = "queueId"
DELIVER_TIME = "deliverTime"
DELAY_LEVEL = "delayLevel"

# Each column with the types it takes and how the error names them.
_STRING_ONLY = ((StringType,), "STRING")
_INT_ONLY = ((IntegerType, ShortType, ByteType), "INT")
ALLOWED: dict[str, tuple[tuple[type[DataType], ...], str]] = {
    BODY: ((BinaryType, StringType), "BINARY or STRING"),
    TOPIC: _STRING_ONLY,
    TAGS: _STRING_ONLY,
    KEYS: _STRING_ONLY,
    PROPERTIES: ((MapType,), "MAP<STRING,STRING>"),
    SHARDING_KEY: _STRING_ONLY,
    BROKER_NAME: _STRING_ONLY,
    QUEUE_ID: _INT_ONLY,
    DELIVER_TIME: ((TimestampType,), "TIMESTAMP"),
    DELAY_LEVEL: _INT_ONLY,
}


class ColumnError(RocketMQError, ValueError):
    """A DataFrame's columns cannot be written: the message names the column and the fix."""

    def __init__(self, column: str, problem: str, fix: str) -> None:
        self.column = column
        super().__init__(f"column '{column}': {problem}. {fix}")


@dataclass(frozen=True)
class SinkColumns:
    """Which columns a write has: each known column's name as the DataFrame spells it."""

    names: dict[str, str]

    def has(self, column: str) -> bool:
        return column in self.names


def _type_fits(column: str, data_type: DataType) -> bool:
    kinds, _ = ALLOWED[column]
    if not isinstance(data_type, kinds):
        return False
    if isinstance(data_type, MapType):
        return isinstance(data_type.keyType, StringType) and isinstance(data_type.valueType, StringType)
    return True


def check_columns(schema: StructType, topic_option: str | None) -> SinkColumns:
    """The columns of ``schema`` a write sends, or ColumnError for the first problem found."""
    canonical = {name.lower(): name for name in ALLOWED}
    names: dict[str, str] = {}
    for field in schema.fields:
        column = canonical.get(field.name.lower())
        if column is None:
            raise ColumnError(
                field.name,
                "is not a column the rocketmq sink writes",
                f"Select only the columns it takes: {', '.join(ALLOWED)} (a Kafka 'value' is 'body')",
            )
        if column in names:
            raise ColumnError(field.name, f"repeats column '{names[column]}'", "Keep one of them")
        if not _type_fits(column, field.dataType):
            raise ColumnError(
                field.name,
                f"is {field.dataType.simpleString()}, not {ALLOWED[column][1]}",
                f"Cast it, e.g. col('{field.name}').cast('{ALLOWED[column][1].split(' ')[0].lower()}')",
            )
        names[column] = field.name
    if BODY not in names:
        raise ColumnError(BODY, "is missing", "Give the message body as a BINARY or STRING column named body")
    if TOPIC not in names and topic_option is None:
        raise ColumnError(
            TOPIC, "is missing, and so is the topic option", "Add a topic column, or set the topic option"
        )
    if (BROKER_NAME in names) != (QUEUE_ID in names):
        missing = QUEUE_ID if BROKER_NAME in names else BROKER_NAME
        raise ColumnError(
            missing,
            f"is missing: an explicit queue takes both {BROKER_NAME} and {QUEUE_ID}",
            f"Add {missing}, or drop the other",
        )
    return SinkColumns(names)
