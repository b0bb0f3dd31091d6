"""Restore progress records (RestoreProgress.avsc framing) and the history they form."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.errors import ConfigError, FormatError
from processor.restore.offset_map import OffsetMap, OffsetRun
from processor.restore.progress_log import ProgressHistoryError, committed_progress
from processor.restore.progress_record import (
    RestoreProgress,
    RestoreSource,
    decode_value,
    encode_value,
    parse_key,
    progress_key,
    progress_partition,
    validate_restore_id,
)
from processor.restore.transaction_view import resolve
from processor.segment.entries_v2 import split_batches
from tests.batch_samples import control_batch, make_batch

SOURCE = RestoreSource("bucket", "pre/fix", "orders", None, "orders-restored", "start", "end", "same")


def progress(
    sequence: int, start: int, end: int, runs: tuple[OffsetRun, ...] = (), partition: int = 0
) -> RestoreProgress:
    chunk = OffsetMap(partition, partition, start, end, runs)
    return RestoreProgress(
        "orders.orders-restored",
        SOURCE,
        partition,
        partition,
        sequence,
        end,
        chunk.records,
        10 * chunk.records,
        chunk,
        1_700_000_000_000,
    )


@st.composite
def records(draw: st.DrawFn) -> RestoreProgress:
    start = draw(st.integers(0, 2**40))
    length = draw(st.integers(0, 1000))
    runs = (OffsetRun(start, draw(st.integers(0, 2**40)), length),) if length else ()
    end = start + length + draw(st.integers(0, 3))
    source = RestoreSource(
        draw(st.text(max_size=20)),
        draw(st.text(max_size=20)),
        draw(st.from_regex(r"[a-z.\-_]{1,20}", fullmatch=True)),
        draw(st.none() | st.uuids().map(str)),
        draw(st.from_regex(r"[a-z.\-_]{1,20}", fullmatch=True)),
        draw(st.sampled_from(["start", "offset:5", "time:1700000000000"])),
        draw(st.sampled_from(["end", "offset:9", "time:1"])),
        draw(st.sampled_from(["same", "modulo"])),
    )
    p = draw(st.integers(0, 10_000))
    chunk = OffsetMap(p, draw(st.integers(0, 10_000)), start, end, runs)
    return RestoreProgress(
        draw(st.from_regex(r"[A-Za-z0-9._=\-]{1,40}", fullmatch=True)),
        source,
        p,
        chunk.target_partition,
        draw(st.integers(0, 2**62)),
        end,
        draw(st.integers(0, 2**62)),
        draw(st.integers(0, 2**62)),
        chunk,
        draw(st.integers(0, 2**62)),
    )


@given(records())
def test_round_trip(record: RestoreProgress) -> None:
    assert decode_value(encode_value(record)) == record


@settings(max_examples=80)
@given(records(), st.data())
def test_damage_is_a_format_error_or_another_record(record: RestoreProgress, data: st.DataObject) -> None:
    """Avro has no checksum (a flipped bit in a text or number field decodes to another value, as
    in the metadata topic's records); the offset map inside has its CRC. Damage never raises
    anything but FormatError, and never decodes to the original record."""
    raw = bytearray(encode_value(record))
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] ^= 1 << data.draw(st.integers(0, 7))
    try:
        decoded = decode_value(bytes(raw))
    except FormatError:
        return
    assert decoded != record


@given(st.binary(max_size=300))
def test_garbage_raises_format_error_only(raw: bytes) -> None:
    with contextlib.suppress(FormatError):
        decode_value(b"\x01\x00" + raw)


@given(records(), st.data())
def test_truncation_is_rejected(record: RestoreProgress, data: st.DataObject) -> None:
    raw = encode_value(record)
    with pytest.raises(FormatError):
        decode_value(raw[: data.draw(st.integers(0, len(raw) - 1))])


def test_framing_is_checked() -> None:
    raw = encode_value(progress(0, 0, 5, (OffsetRun(0, 0, 5),)))
    with pytest.raises(FormatError, match="framing version 2"):
        decode_value(b"\x02" + raw[1:])
    with pytest.raises(FormatError, match="record type 7"):
        decode_value(raw[:1] + b"\x07" + raw[2:])
    with pytest.raises(FormatError, match="trailing"):
        decode_value(raw + b"\x00")
    with pytest.raises(FormatError):
        decode_value(raw[:-3])
    with pytest.raises(FormatError):
        decode_value(None)


def test_keys() -> None:
    key = progress_key("orders.orders-restored", 3, 17)
    assert key == b"orders.orders-restored/3/000000000017"
    assert parse_key(key) == ("orders.orders-restored", 3, 17)
    assert parse_key(b"orders/3") is None
    assert parse_key(b"\xff\xfe") is None
    assert 0 <= progress_partition("x", 4) < 4
    with pytest.raises(ConfigError):
        validate_restore_id("a/b")


def _txn(offset: int, pid: int, records: list[RestoreProgress]) -> bytes:
    rows: list[tuple[int, bytes, bytes, list[tuple[str, bytes]]]] = [
        (1, progress_key(r.restore_id, r.source_partition, r.sequence), encode_value(r), []) for r in records
    ]
    return make_batch(offset, rows, producer_id=pid, transactional=True)


def test_history_keeps_committed_records_only() -> None:
    r0 = progress(0, 0, 5, (OffsetRun(0, 100, 5),))
    r1 = progress(1, 5, 9, (OffsetRun(5, 106, 4),))
    r1_again = progress(1, 5, 10, (OffsetRun(5, 106, 5),))  # the retry after the abort
    other = RestoreProgress("another", SOURCE, 0, 0, 0, 3, 0, 0, OffsetMap(0, 0, 0, 3), 1)
    raw = (
        _txn(0, 7, [r0])
        + control_batch(1, 7, commit=True)
        + _txn(2, 7, [r1])
        + _txn(3, 8, [other])  # another restore's open transaction: does not matter here
        + control_batch(4, 7, commit=False)
        + _txn(5, 7, [r1_again])
        + control_batch(6, 7, commit=True)
    )
    view = resolve(split_batches(raw))
    assert view.last_stable_offset == 3
    found = committed_progress(view.batches, "orders.orders-restored")
    assert list(found) == [0]
    assert found[0].latest == r1_again
    assert found[0].offset_map == OffsetMap(0, 0, 0, 10, (OffsetRun(0, 100, 5), OffsetRun(5, 106, 5)))


def test_a_broken_history_is_reported() -> None:
    r0 = progress(0, 0, 5)
    r2 = progress(2, 5, 9)
    raw = _txn(0, 7, [r0, r2]) + control_batch(2, 7, commit=True)
    with pytest.raises(ProgressHistoryError, match="sequences"):
        committed_progress(resolve(split_batches(raw)).batches, r0.restore_id)
    gap = progress(1, 6, 9)
    raw = _txn(0, 7, [r0, gap]) + control_batch(2, 7, commit=True)
    with pytest.raises(ProgressHistoryError, match="starts at 6"):
        committed_progress(resolve(split_batches(raw)).batches, r0.restore_id)
