from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.segment.entries_v1 import iter_entries
from processor.segment.records import KafkaRecord, TimestampType
from tests.support.segment_v1_writer import encode_entry

maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=20), maybe_bytes), max_size=6).map(tuple)
records = st.builds(
    KafkaRecord,
    offset=st.integers(0, 2**63 - 1),
    timestamp=st.integers(-1, 2**63 - 1),
    timestamp_type=st.sampled_from(list(TimestampType)),
    key=maybe_bytes,
    value=maybe_bytes,
    headers=headers,
)


@given(st.lists(records, max_size=20))
def test_entries_round_trip_exactly(recs: list[KafkaRecord]) -> None:
    payload = b"".join(encode_entry(r) for r in recs)
    assert list(iter_entries(payload)) == recs


def test_null_and_empty_stay_distinct() -> None:
    recs = [
        KafkaRecord(0, 5, TimestampType.CREATE_TIME, None, b""),
        KafkaRecord(1, 5, TimestampType.CREATE_TIME, b"", None),
        KafkaRecord(2, 5, TimestampType.LOG_APPEND_TIME, b"k", b"v", (("h", None), ("h", b""), ("h", b"x"))),
    ]
    decoded = list(iter_entries(b"".join(encode_entry(r) for r in recs)))
    assert decoded[0].key is None and decoded[0].value == b""
    assert decoded[1].key == b"" and decoded[1].value is None
    assert decoded[2].headers == (("h", None), ("h", b""), ("h", b"x"))


@given(records, st.data())
def test_truncation_is_detected(rec: KafkaRecord, data: st.DataObject) -> None:
    raw = encode_entry(rec)
    cut = data.draw(st.integers(1, len(raw) - 1))
    with pytest.raises(FormatError):
        list(iter_entries(raw[:cut]))


@given(st.binary(max_size=200))
def test_garbage_raises_only_format_errors(raw: bytes) -> None:
    with contextlib.suppress(FormatError):
        list(iter_entries(raw))
