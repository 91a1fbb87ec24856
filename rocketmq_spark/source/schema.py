"""The source's fixed row schema, in Spark's terms and as the Arrow schema of ``read()``'s batches.

Spark checks every batch a Python source yields against ``to_arrow_schema(schema, "UTC")``, so
the Arrow schema is derived from the Spark one by that same function rather than written twice.
"""

from __future__ import annotations

from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType, IntegerType, LongType, MapType, StringType, StructField, StructType, TimestampType,
)

_STRING = StringType()
_INT = IntegerType()

SCHEMA = StructType([
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
])

ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")
