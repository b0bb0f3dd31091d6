"""Sizes and durations with units, in the parser and through the configuration."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.config import Settings, load_settings
from processor.errors import ConfigError
from processor.units import format_duration_ms, format_size, parse_duration_ms, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1048576", 1048576),
        ("64MiB", 64 * 1024 * 1024),
        ("64mib", 64 * 1024 * 1024),
        ("10MB", 10_000_000),
        ("512k", 512_000),
        ("1.5GiB", 3 * 512 * 1024 * 1024),
        (" 2 KiB ", 2048),
    ],
)
def test_sizes(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("500", 500), ("250ms", 250), ("60s", 60_000), ("5m", 300_000), ("2h", 7_200_000), ("7d", 604_800_000)],
)
def test_durations(text: str, expected: int) -> None:
    assert parse_duration_ms(text) == expected


@pytest.mark.parametrize("text", ["lots", "64XB", "-5", "1.5", "MiB", ""])
def test_bad_sizes_say_what_is_wrong(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


@given(st.integers(min_value=0, max_value=1 << 50))
def test_size_format_round_trips(n: int) -> None:
    assert parse_size(format_size(n)) == n


@given(st.integers(min_value=0, max_value=1 << 45))
def test_duration_format_round_trips(n: int) -> None:
    assert parse_duration_ms(format_duration_ms(n)) == n


def test_settings_accept_units_for_every_bytes_and_ms_field() -> None:
    s = load_settings(
        {
            "PROCESSOR_SEGMENT_BYTES": "8MiB",
            "PROCESSOR_BUFFER_BYTES": "1GiB",
            "PROCESSOR_SEGMENT_MS": "90s",
            "PROCESSOR_COPY_RETRY_BACKOFF_MAX_MS": "1m",
        }
    )
    assert (s.segment_bytes, s.buffer_bytes) == (8 * 1024 * 1024, 1024**3)
    assert (s.segment_ms, s.copy_retry_backoff_max_ms) == (90_000, 60_000)
    # every size/duration field takes units, including fields other branches add later
    for name, field in Settings.model_fields.items():
        default = field.default
        if name.endswith("_bytes"):
            text = format_size(default)
            assert not text.isdigit()
            assert getattr(load_settings({f"PROCESSOR_{name.upper()}": text}), name) == default
        if name.endswith("_ms"):
            text = format_duration_ms(default) if default % 1000 == 0 else f"{default}ms"
            assert getattr(load_settings({f"PROCESSOR_{name.upper()}": text}), name) == default


def test_bad_unit_names_the_variable() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings({"PROCESSOR_SEGMENT_MS": "5 fortnights"})
    assert "PROCESSOR_SEGMENT_MS" in str(err.value)
    assert "fortnights" in str(err.value)


def test_small_segment_alone_adapts_the_block_size() -> None:
    s = load_settings({"PROCESSOR_SEGMENT_BYTES": "262144"})
    assert s.segment_bytes == 262144
    assert s.block_bytes <= s.segment_bytes


def test_large_segment_alone_adapts_the_buffer() -> None:
    s = load_settings({"PROCESSOR_SEGMENT_BYTES": "1GiB"})
    assert s.buffer_bytes >= s.segment_bytes


def test_explicit_conflicts_still_fail() -> None:
    with pytest.raises(ConfigError, match="PROCESSOR_BLOCK_BYTES"):
        load_settings({"PROCESSOR_SEGMENT_BYTES": "262144", "PROCESSOR_BLOCK_BYTES": "1MiB"})
