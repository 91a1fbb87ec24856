"""The bulk decoder (rocketmq_spark.records.columnar), the decoder that chooses it, and the batch builder.

The bulk path must give exactly what the per-record decoder gives, for every body it takes, and
must hand every body it does not take to that decoder; the batch builder must keep offset order,
trim to the range and keep exact tag matches only.
"""

from __future__ import annotations

import os
import zlib
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketmq_spark.records.columnar import decode_bulk, scan_records
from rocketmq_spark.records.columns import ArrowColumns, walk_columns
from rocketmq_spark.records.decoder import decode_pulls
from rocketmq_spark.records.properties import _entries
from rocketmq_spark.remoting import codes
from rocketmq_spark.remoting.errors import ProtocolError
from rocketmq_spark.source.rows import BatchBuilder, RowRange
from rocketmq_spark.source.schema import ARROW_SCHEMA
from tests.captured import body as captured_body
from tests.captured import case_names
from tests.records import (
    COMPRESSORS,
    IPV4_BORN,
    IPV4_STORE,
    PROPERTY_BYTES,
    as_python,
    inner_message,
    properties_block,
    record,
)

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")),
    deadline=timedelta(seconds=2),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
IPV6 = (bytes(15) + b"\x01", 10911)


def per_record(bodies: list[bytes]) -> dict[str, list[Any]]:
    """What the per-record decoder gives for the same pulls."""
    return as_python(ArrowColumns.concat([walk_columns(b) for b in bodies]))


def bulk(bodies: list[bytes]) -> dict[str, list[Any]]:
    starts = [scan_records(b) for b in bodies]
    assert all(s is not None for s in starts)
    return as_python(decode_bulk(bodies, starts))  # type: ignore[arg-type]


@st.composite
def taken_records(draw: st.DrawFn, offset: int) -> bytes:
    """A record the bulk path takes: magic V1, IPv4 hosts, plain or compressed body."""
    payload = draw(st.binary(max_size=40) | st.sampled_from([b"", b"x" * 12, b"y" * 13]))
    sys_flag = 0
    kind = draw(st.sampled_from(["plain", *COMPRESSORS]))
    if kind in COMPRESSORS:
        compression_type, compress = COMPRESSORS[kind]
        payload = compress(payload)
        sys_flag = codes.MSG_FLAG_COMPRESSED | compression_type << codes.MSG_COMPRESSION_TYPE_SHIFT
    properties = draw(
        PROPERTY_BYTES
        | st.dictionaries(
            st.text(min_size=1, max_size=8).filter(lambda t: "\x01" not in t and "\x02" not in t),
            st.text(min_size=1, max_size=8).filter(lambda t: "\x01" not in t and "\x02" not in t),
            max_size=4,
        ).map(properties_block)
        | st.just(b"UNIQ_KEY\x01first\x02TAGS\x01t\x02UNIQ_KEY\x01second\x02")
    )
    return record(
        body=payload,
        sys_flag=sys_flag,
        queue_offset=offset,
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        commit_log_offset=draw(st.integers(0, 2**63 - 1)),
        born_host=draw(st.sampled_from([IPV4_BORN, (bytes([10, 0, 0, 9]), 1)])),
        store_host=draw(st.sampled_from([IPV4_STORE, (bytes([192, 168, 1, 2]), 10921)])),
        reconsume_times=draw(st.integers(0, 16)),
        properties=properties,
    )


@st.composite
def taken_pulls(draw: st.DrawFn) -> list[bytes]:
    pulls = []
    offset = 0
    for _ in range(draw(st.integers(1, 3))):
        records = []
        for _ in range(draw(st.integers(1, 4))):
            records.append(draw(taken_records(offset)))
            offset += 1
        pulls.append(b"".join(records))
    return pulls


@FUZZ
@given(taken_pulls())
def test_bulk_gives_what_the_per_record_decoder_gives(pulls: list[bytes]) -> None:
    assert bulk(pulls) == per_record(pulls)


@FUZZ
@given(taken_pulls(), st.data())
def test_a_mutated_pull_decodes_the_same_or_raises_the_same(pulls: list[bytes], data: st.DataObject) -> None:
    mutated = bytearray(pulls[-1])
    for _ in range(data.draw(st.integers(1, 4))):
        mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    pulls[-1] = bytes(mutated)
    try:
        expected = per_record(pulls)
    except ProtocolError:
        expected = None
    if expected is None:
        with pytest.raises(ProtocolError):
            decode_pulls(pulls)
    else:
        assert as_python(decode_pulls(pulls)) == expected


def test_well_formed_properties_take_the_fast_split() -> None:
    """The common shape must not quietly go the slow way."""
    blocks = [properties_block({"TAGS": "TagA", "KEYS": "k1"}), b"", properties_block({"UNIQ_KEY": "u"})]
    joined = np.frombuffer(b"".join(blocks), np.uint8)
    offsets = np.cumsum([0, *map(len, blocks)])
    result = _entries(joined, offsets)
    assert result is not None
    lengths, first_entries = result
    assert lengths.tolist() == [4, 4, 4, 2, 8, 1]
    assert first_entries.tolist() == [0, 2, 2, 3]


@pytest.mark.parametrize(
    "block",
    [
        b"TAGS\x01a\x02\x01b\x02",  # empty name
        b"TAGS\x01\x02",  # empty value
        b"TAGS\x01a\x01b\x02",  # value holding \x01
        b"TAGS\x01a",  # no closing \x02
        b"\xff\x01x\x02",  # not UTF-8: Java replaces the bytes
    ],
)
def test_other_property_shapes_follow_java_rules(block: bytes) -> None:
    pulls = [record(properties=block, queue_offset=1) + record(properties=b"K\x01v\x02", queue_offset=2)]
    assert bulk(pulls) == per_record(pulls)


def test_a_later_duplicate_property_wins_but_a_message_keeps_its_own_id() -> None:
    """As a 4.9 or 5.3 broker stores a batch-sent message: its own properties, then the batch's."""
    pulls = [
        record(properties=b"UNIQ_KEY\x01own\x02TAGS\x01t\x02WAIT\x01false\x02UNIQ_KEY\x01batch\x02WAIT\x01true\x02")
    ]
    decoded = bulk(pulls)
    assert decoded["properties"] == [{"UNIQ_KEY": "own", "TAGS": "t", "WAIT": "true"}]
    assert decoded["msg_id"] == ["own"]
    assert decoded == per_record(pulls)


@pytest.mark.parametrize("case", case_names())
def test_captured_pulls_decode_the_same(case: str) -> None:
    pull = captured_body(case)
    starts = scan_records(pull)
    if starts is not None:
        assert as_python(decode_bulk([pull], [starts])) == per_record([pull])


@pytest.mark.parametrize(
    "pull",
    [
        record(magic=codes.MESSAGE_MAGIC_V2),
        record(born_host=IPV6),
        record(store_host=IPV6),
        record(body=inner_message(0, b"a", b""), sys_flag=codes.MSG_FLAG_INNER_BATCH | codes.MSG_FLAG_NEED_UNWRAP),
        record()[:-1],
        record() + b"\x00",
    ],
)
def test_scan_leaves_other_records_to_the_per_record_decoder(pull: bytes) -> None:
    assert scan_records(pull) is None


def test_scan_finds_each_record() -> None:
    first, second = record(body=b"a"), record(body=b"bb", queue_offset=43)
    assert scan_records(first + second) == [0, len(first)]
    assert scan_records(b"") == []


# --------------------------------------------------------------------------
# BatchBuilder
# --------------------------------------------------------------------------


def pull(offsets: range, tag: str = "TagA", **fields: Any) -> bytes:
    return b"".join(
        record(queue_offset=o, body=f"m{o}".encode(), properties=properties_block({"TAGS": tag}), **fields)
        for o in offsets
    )


def test_builder_trims_to_the_range_and_keeps_order_across_both_decoders() -> None:
    builder = BatchBuilder([RowRange("shown-topic", "broker-a", 3, start=5, end=14)], tags=None)
    builder.add_pull(0, pull(range(3, 8)), 5)  # starts below the range (an inner batch returned whole)
    builder.add_pull(0, pull(range(8, 10), magic=codes.MESSAGE_MAGIC_V2), 8)  # per-record path
    builder.add_pull(0, pull(range(10, 16)), 10)  # runs past the end
    assert builder.rows == 13
    batch = builder.flush()
    assert batch is not None and batch.schema == ARROW_SCHEMA
    assert batch.column("queueOffset").to_pylist() == list(range(5, 14))
    assert batch.column("body").to_pylist() == [f"m{o}".encode() for o in range(5, 14)]
    assert set(batch.column("topic").to_pylist()) == {"shown-topic"}
    assert set(batch.column("brokerName").to_pylist()) == {"broker-a"}
    assert set(batch.column("queueId").to_pylist()) == {3}
    assert batch.column("storeTimestamp").type == ARROW_SCHEMA.field("storeTimestamp").type
    assert batch.column("storeTimestamp")[0].as_py().timestamp() == 1_700_000_000.123
    assert builder.rows == 0 and builder.flush() is None


def test_builder_keeps_exact_tags_only() -> None:
    # "Aa" and "BB" have the same Java hash: the broker lets both through.
    builder = BatchBuilder([RowRange("t", "b", 0, start=0, end=100)], tags=frozenset({"Aa"}))
    builder.add_pull(0, pull(range(0, 2), tag="Aa") + pull(range(2, 4), tag="BB"), 0)
    builder.add_pull(0, record(queue_offset=4, properties=b""), 4)  # no tag at all
    batch = builder.flush()
    assert batch is not None
    assert batch.column("queueOffset").to_pylist() == [0, 1]
    assert batch.column("tags").to_pylist() == ["Aa", "Aa"]


def test_builder_with_nothing_kept_gives_no_batch() -> None:
    builder = BatchBuilder([RowRange("t", "b", 0, start=10, end=20)], tags=None)
    builder.add_pull(0, pull(range(0, 5)), 0)
    assert builder.flush() is None


def test_builder_counts_body_bytes_for_its_bound() -> None:
    builder = BatchBuilder([RowRange("t", "b", 0, start=0, end=10)], tags=None)
    data = pull(range(0, 3))
    builder.add_pull(0, data, 0)
    assert builder.body_bytes == len(data)


def test_builder_puts_the_rows_of_several_ranges_in_one_batch_each_trimmed_to_its_own() -> None:
    ranges = [RowRange("t", "broker-a", 0, start=2, end=5), RowRange("t", "broker-b", 7, start=0, end=3)]
    builder = BatchBuilder(ranges, tags=None)
    builder.add_pull(1, pull(range(0, 2)), 0)
    builder.add_pull(0, pull(range(0, 4)), 0)  # below its start
    builder.add_pull(1, pull(range(2, 6), magic=codes.MESSAGE_MAGIC_V2), 2)  # past its end, per-record path
    builder.add_pull(0, pull(range(4, 6)), 4)
    batch = builder.flush()
    assert batch is not None
    rows = list(
        zip(
            batch.column("brokerName").to_pylist(),
            batch.column("queueId").to_pylist(),
            batch.column("queueOffset").to_pylist(),
        )
    )
    assert rows == [
        ("broker-b", 7, 0),
        ("broker-b", 7, 1),
        ("broker-a", 0, 2),
        ("broker-a", 0, 3),
        ("broker-b", 7, 2),
        ("broker-a", 0, 4),
    ]


def test_bulk_bodies_are_decompressed() -> None:
    text = b"compress me " * 50
    compressed = record(
        body=zlib.compress(text),
        sys_flag=codes.MSG_FLAG_COMPRESSED | codes.COMPRESSION_ZLIB << codes.MSG_COMPRESSION_TYPE_SHIFT,
    )
    assert bulk([compressed])["body"] == [text]


def test_empty_input() -> None:
    assert len(decode_bulk([], [])) == 0
    assert isinstance(decode_bulk([b""], [[]]).body, pa.Array)
