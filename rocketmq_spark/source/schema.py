"""The source's row schema, in Spark's terms and as the Arrow schema of ``read()``'s batches.

The columns are fixed; a user-given schema (``.schema(...)``) may name any of them, in any order,
with their types, and then only those are produced: a query that needs few columns skips the
decoding of the rest.

Spark checks every batch a Python source yields against the Arrow form of the Spark schema:
timestamps in microseconds with the UTC zone, maps with a non-null key. PySpark's own converter
is internal and changed its arguments between 4.1 and 4.2, so the Arrow schema is built here from
the Spark one, type by type (a unit test holds it equal to PySpark's on every line).
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from rocketmq_spark.config.errors import ConfigurationError

_STRING = StringType()
_INT = IntegerType()

SCHEMA = StructType(
    [
        StructField("topic", _STRING),
        StructField("brokerName", _STRING),
        StructField("queueId", _INT),
        StructField("queueOffset", LongType()),
        StructField("msgId", _STRING),
        StructField("offsetMsgId", _STRING),
        StructField("tags", _STRING),
        StructField("keys", _STRING),
        StructField("body", BinaryType()),
        StructField("properties", MapType(_STRING, _STRING)),
        StructField("bornTimestamp", TimestampType()),
        StructField("storeTimestamp", TimestampType()),
        StructField("bornHost", _STRING),
        StructField("storeHost", _STRING),
        StructField("reconsumeTimes", _INT),
        StructField("flag", _INT),
    ]
)

_ARROW_TYPES: dict[type, pa.DataType] = {
    StringType: pa.string(),
    IntegerType: pa.int32(),
    LongType: pa.int64(),
    BinaryType: pa.binary(),
    TimestampType: pa.timestamp("us", tz="UTC"),
}


def arrow_type(spark_type: DataType) -> pa.DataType:
    """The Arrow type Spark expects for one of the schema's types."""
    if isinstance(spark_type, MapType):
        return pa.map_(arrow_type(spark_type.keyType), arrow_type(spark_type.valueType))
    return _ARROW_TYPES[type(spark_type)]


def arrow_schema(schema: StructType) -> pa.Schema:
    return pa.schema([pa.field(f.name, arrow_type(f.dataType), f.nullable) for f in schema.fields])


ARROW_SCHEMA = arrow_schema(SCHEMA)

# The name ``ConfigurationError`` reports for a schema the source cannot produce.
SCHEMA_OPTION = "schema"
COLUMNS = tuple(SCHEMA.names)
_ALLOWED = {field.name: field for field in SCHEMA.fields}


def checked_columns(schema: StructType) -> tuple[str, ...]:
    """The columns a user-given schema asks for, in its order; any column that is not one of the
    source's with its type (and nullable: tags, keys and more can be null) fails, naming them all."""
    problems = []
    seen: set[str] = set()
    for field in schema.fields:
        allowed = _ALLOWED.get(field.name)
        if allowed is None:
            problems.append(f"'{field.name}' is not a column of the source")
        elif field.name in seen:
            problems.append(f"'{field.name}' is named twice")
        elif field.dataType != allowed.dataType:
            problems.append(f"'{field.name}' is {allowed.dataType.simpleString()}, not {field.dataType.simpleString()}")
        elif not field.nullable:
            problems.append(f"'{field.name}' must be nullable")
        seen.add(field.name)
    if not schema.fields:
        problems.append("it names no column")
    if problems:
        raise ConfigurationError(
            SCHEMA_OPTION,
            f"the schema given with .schema(...) cannot be read: {'; '.join(problems)}",
            f"Name any of these columns, in any order, with these types: {SCHEMA.simpleString()}; "
            "or give no schema for all of them",
        )
    return tuple(field.name for field in schema.fields)
