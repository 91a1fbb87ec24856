"""Most writes' rows sent a whole Arrow batch at a time, without a Python step per row.

A write whose columns are only ``body``, ``topic``, ``tags`` and ``keys`` (no properties, ordering,
explicit queue or delivery time), batched (``batchMaxBytes`` above 0), sends each Arrow batch so:
its topics checked once per distinct value, each row's unique id taken from one run of the
producer's counter, its queue chosen by the round robin ``add`` follows (``QueuePicker.spread``),
the producer registered with each chosen broker once, and the batch records of every row encoded
by Arrow kernels (``records.outgoing_batch``), each queue's rows together and in their order. The
sends, retries and their answers are ``TaskProducer``'s, as for rows sent one by one; the bytes
are the same. Spark rows (a PySpark 4.0 stream) are made such batches first, a chunk at a time.

A batch with anything unusual (a null or empty body or topic, a body too large for a batch or a
send, properties past RocketMQ's bound) goes the row-by-row way, which sends it or names the
problem exactly as it always has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketmq_spark.model import MessageQueue
from rocketmq_spark.records.outgoing import MAX_PROPERTIES_BYTES
from rocketmq_spark.records.outgoing_batch import Records, encode_records, value_lengths
from rocketmq_spark.sink import columns as col
from rocketmq_spark.sink.messages import RowError, checked_topic
from rocketmq_spark.sink.options import SinkOptions
from rocketmq_spark.sink.producer import MAX_SEND_BODY_BYTES, TaskProducer

# The columns this way sends; a write with any other goes row by row.
VECTORIZED_COLUMNS = frozenset({col.BODY, col.TOPIC, col.TAGS, col.KEYS})
# The most rows sent at once (Spark's Arrow batches have 10,000 by default, but users may set
# more): their ids share a millisecond, so their counters, 16 bits, must not wrap within one run.
MAX_ROWS_AT_ONCE = 1 << 14


def vectorized(options: SinkOptions, names: Mapping[str, str]) -> bool:
    """Whether a write's batches can be sent a batch at a time."""
    return options.batch_max_bytes > 0 and set(names) <= VECTORIZED_COLUMNS


def columns_batch(values: Mapping[str, Sequence[object]]) -> pa.RecordBatch | None:
    """The values of a chunk of Spark rows (``spark_api.spark_rows_to_columns``) as an Arrow batch
    of the sink's column names, so that PySpark 4.0 streams are sent a batch at a time too; None
    when a value does not fit its column's type (the rows then go one by one, which says why)."""
    kinds = {col.BODY: pa.binary()}
    try:
        return pa.RecordBatch.from_pydict({c: pa.array(v, kinds.get(c, pa.string())) for c, v in values.items()})
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None


def slices(batch: pa.RecordBatch) -> list[pa.RecordBatch]:
    """An Arrow batch in parts of at most ``MAX_ROWS_AT_ONCE`` rows (views, not copies)."""
    return [batch.slice(start, MAX_ROWS_AT_ONCE) for start in range(0, max(batch.num_rows, 1), MAX_ROWS_AT_ONCE)]


class _RowByRow(Exception):
    """Raised inside this module where a batch cannot be sent whole: the row-by-row way sends it,
    and names the row at fault (``RowError``) if one is. Never leaves the module."""


def _column(batch: pa.RecordBatch, given: str | None, kind: pa.DataType) -> pa.Array | None:
    """A column by its name in the batch (case-insensitive), as ``kind`` (strings as bytes)."""
    if given is None:
        return None
    lookup = {name.lower(): index for index, name in enumerate(batch.schema.names)}
    array = batch.column(lookup[given.lower()])
    return array if array.type == kind else array.cast(kind)


def _topics(batch: pa.RecordBatch, names: Mapping[str, str], options: SinkOptions) -> tuple[list[str], np.ndarray]:
    """The batch's distinct topics and each row's index among them (``_RowByRow`` for a bad one)."""
    if options.topic is not None:
        return [options.topic], np.zeros(batch.num_rows, dtype=np.int64)
    column = _column(batch, names[col.TOPIC], pa.string())
    assert column is not None  # the columns were checked: a topic column or the option
    encoded = pc.dictionary_encode(column)
    if encoded.null_count:
        raise _RowByRow("a row has no topic")
    try:
        checked = [checked_topic(value, options.namespace) for value in encoded.dictionary.to_pylist()]
    except RowError as err:
        raise _RowByRow(str(err)) from err
    topics = sorted(set(checked))
    index = np.array([topics.index(topic) for topic in checked], dtype=np.int64)
    return topics, index[encoded.indices.to_numpy()]


def _records(task: TaskProducer, batch: pa.RecordBatch, names: Mapping[str, str], options: SinkOptions) -> Records:
    """Every row's batch record, in the batch's order (``_RowByRow`` where the row-by-row way must look)."""
    bodies = _column(batch, names[col.BODY], pa.binary())
    assert bodies is not None  # a body column is required
    lengths = value_lengths(bodies)
    if bodies.null_count or not lengths.min() or lengths.max() > MAX_SEND_BODY_BYTES:
        raise _RowByRow("a row has a null, empty or too large body")
    id_head, first = task.reserve_ids(batch.num_rows)
    records = encode_records(
        bodies,
        _column(batch, names.get(col.TAGS), pa.string()),
        _column(batch, names.get(col.KEYS), pa.string()),
        id_head=id_head,
        first_counter=first,
        namespace=options.namespace,
    )
    if records.properties_lengths.max() > MAX_PROPERTIES_BYTES or records.sizes.max() > options.batch_max_bytes:
        raise _RowByRow("a row's properties or record are too large for a batch")
    return records


def send_arrow_batch(task: TaskProducer, batch: pa.RecordBatch, names: Mapping[str, str], options: SinkOptions) -> bool:
    """Send an Arrow batch's rows a batch at a time; False (nothing sent) when they must go row by row."""
    if not batch.num_rows:
        return True
    try:
        topics, topic_of_row = _topics(batch, names, options)
        records = _records(task, batch, names, options)
    except (_RowByRow, pa.ArrowException):  # or a type Arrow cannot cast, an array too large
        return False
    every_queue: list[MessageQueue] = []
    queue_of_row = np.empty(batch.num_rows, dtype=np.int64)
    for number, topic in enumerate(topics):
        rows = topic_of_row == number
        queues, chosen = task.place(topic, int(np.count_nonzero(rows)))
        queue_of_row[rows] = chosen + len(every_queue)
        every_queue += queues
    order = np.argsort(queue_of_row, kind="stable")  # each queue's rows together, in their order
    grouped = records.take(order)
    offsets, data = grouped.offsets, grouped.data
    bounds = np.searchsorted(queue_of_row[order], np.arange(len(every_queue) + 1))
    for number, queue in enumerate(every_queue):
        start, end = int(bounds[number]), int(bounds[number + 1])
        if start < end:
            task.add_records(queue, data, offsets[start : end + 1])
    return True
