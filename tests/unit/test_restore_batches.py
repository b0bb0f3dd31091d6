"""The batches a restore sends: archived batches restamped byte for byte where the target can take
them, the rest written anew; either way every record in range exactly once, in order, at base + i."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.restore.archive import Chunk
from processor.restore.batch_producer import BatchProducer
from processor.restore.produce import outgoing_batches
from processor.restore.txn_wire import ErrorKind, error_kind, error_name, stamp
from processor.segment.checksums import batch_crc_ok
from processor.segment.entries_v2 import batch_records, parse_batch_header
from tests.batch_samples import CODECS, control_batch, make_batch

Seen = tuple[int, int, object, object, object]  # offset, timestamp, key, value, headers
headers = st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=6)), max_size=2)
records = st.lists(
    st.tuples(
        st.integers(0, 2**41), st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=60), headers
    ),
    min_size=1,
    max_size=12,
)


def _view(
    batch: bytes | bytearray | memoryview,
) -> list[tuple[int, bytes | None, bytes | None, tuple[object, ...]]]:
    """What a consumer sees of a batch's records, offsets aside."""
    return [(r.timestamp, r.key, r.value, r.headers) for r in batch_records(batch)]


@given(
    records, st.sampled_from(sorted(CODECS)), st.integers(0, 2**40), st.integers(0, 2**40), st.integers(0, 99)
)
def test_stamping_keeps_the_records_and_makes_a_valid_transactional_batch(
    recs: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    codec: str,
    base: int,
    producer_id: int,
    sequence: int,
) -> None:
    source = make_batch(base, recs, codec, producer_id=7, leader_epoch=5)
    out = stamp(source, producer_id, 3, sequence)
    header = parse_batch_header(out)
    assert batch_crc_ok(out)
    assert (header.base_offset, header.leader_epoch, header.producer_id) == (0, -1, producer_id)
    assert header.is_transactional and header.codec == CODECS[codec]
    assert struct.unpack_from(">hi", out, 51) == (3, sequence)
    assert _view(out) == _view(source)
    assert bytes(out[61:]) == bytes(source[61:])  # the records themselves are untouched, compressed or not


@st.composite
def archived_batches(draw: st.DrawFn) -> tuple[list[bytes], list[Seen]]:
    """Consecutive archived batches (some compressed, compacted, LogAppendTime, or markers) and the
    records a consumer of the source sees: (offset, timestamp, key, value, headers)."""
    batches: list[bytes] = []
    seen: list[Seen] = []
    offset = draw(st.integers(0, 1000))
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.integers(0, 5)) == 0:
            batches.append(control_batch(offset, 9, commit=True))
            offset += 1
            continue
        recs = draw(records)
        gaps = draw(st.booleans())
        deltas = [i * 2 if gaps else i for i in range(len(recs))]
        append_time = draw(st.none() | st.integers(0, 2**41))
        codec = draw(st.sampled_from(sorted(CODECS)))
        batches.append(make_batch(offset, recs, codec, offset_deltas=deltas, log_append_time=append_time))
        for delta, (ts, key, value, hdrs) in zip(deltas, recs, strict=True):
            seen.append(
                (offset + delta, append_time if append_time is not None else ts, key, value, tuple(hdrs))
            )
        offset += deltas[-1] + 1
    return batches, seen


@settings(max_examples=300)
@given(archived_batches(), st.data())
def test_every_record_in_range_goes_out_once_in_order(
    archived: tuple[list[bytes], list[Seen]], data: st.DataObject
) -> None:
    batches, seen = archived
    first, last = batches[0], batches[-1]
    lowest = parse_batch_header(first).base_offset
    highest = parse_batch_header(last).last_offset + 1
    low = data.draw(st.integers(lowest, highest))
    high = data.draw(st.integers(low, highest + 1))
    max_bytes = data.draw(st.sampled_from([100, 300, 1 << 20]))
    chunk = Chunk([memoryview(b) for b in batches], [], low, high, high, sum(map(len, batches)))
    out = outgoing_batches(chunk, max_bytes)
    got: list[Seen] = []
    for o in out:
        header = parse_batch_header(o.batch)
        decoded = batch_records(o.batch)
        assert o.count == len(decoded) == header.record_count == header.last_offset_delta + 1
        # offsets a broker assigns from the base: base + 0..n-1, so sources map one to one
        assert [r.offset - header.base_offset for r in decoded] == list(range(o.count))
        assert not header.is_control
        if o.archived:
            assert header.attributes & 0x08 == 0 and len(o.batch) <= max_bytes
            assert isinstance(o.sources, range)
        elif o.count > 1:
            assert len(o.batch) <= max_bytes + 100  # the builder's estimate, a record's framing
        got += [
            (source, r.timestamp, r.key, r.value, r.headers)
            for source, r in zip(o.sources, decoded, strict=True)
        ]
    assert got == [r for r in seen if low <= r[0] < high]


def test_kafka_error_codes_are_told_apart() -> None:
    assert error_kind(0) is ErrorKind.NONE
    assert {error_kind(c) for c in (47, 52, 90)} == {ErrorKind.FENCED}  # another producer took over
    assert {error_kind(c) for c in (14, 15, 16)} == {ErrorKind.COORDINATOR}
    assert error_kind(51) is ErrorKind.BUSY  # the coordinator still ends the last transaction
    assert {error_kind(c) for c in (2, 10, 18, 87)} == {ErrorKind.REJECTED}  # sending again cannot help
    assert error_kind(6) is ErrorKind.FAILED  # NOT_LEADER_FOR_PARTITION: abort, redo from committed
    assert error_kind(12345) is ErrorKind.FAILED  # unknown: abort, never ignored
    assert (error_name(90), error_name(10), error_name(12345)) == (
        "PRODUCER_FENCED",
        "MessageSizeTooLargeError",
        "error 12345",
    )


def test_a_batch_that_cannot_be_stamped_fails_its_future_and_the_lane_goes_on() -> None:
    """No broker needed: stamping happens before any request. A truncated batch fails with its own
    error through flush(); the next transaction's batches are not stuck behind it."""
    producer = BatchProducer("127.0.0.1:9", "never-connects")  # never initialised: no connection
    try:
        producer.begin()
        producer._added.add(("t", 0))  # as if AddPartitionsToTxn had answered
        bad = producer.send("t", 0, b"\x00" * 10, 1)
        with pytest.raises(struct.error):
            producer.flush(10)
        assert isinstance(bad.exception(), struct.error)
    finally:
        producer.close()
