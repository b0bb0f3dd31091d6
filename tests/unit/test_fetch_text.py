"""``processor fetch``'s default text output shows each record's key and value, one line a record:
text as a JSON string (tabs and newlines escaped, so a line stays one record), other bytes as a bytes
literal, long ones cut with the full size named."""

from __future__ import annotations

import pytest

from processor.commands.fetch import TEXT_VALUE_CHARS, TextSink
from processor.segment.records import KafkaRecord, TimestampType


def line(capsys: pytest.CaptureFixture[str], key: bytes | None, value: bytes | None) -> list[str]:
    TextSink().write([KafkaRecord(7, 1700000000000, TimestampType.CREATE_TIME, key, value, (("h", b"v"),))])
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    return out.rstrip("\n").split("\t")


def test_text_values_are_shown_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    fields = line(capsys, b"k4", '{"order": 4, "item": "w\u00e9dget"}\n\tend'.encode())
    assert fields == [
        "7",
        "1700000000000",
        'key="k4"',
        'value="{\\"order\\": 4, \\"item\\": \\"w\u00e9dget\\"}\\n\\tend"',
        "headers=1",
    ]


def test_null_and_binary_and_long_values(capsys: pytest.CaptureFixture[str]) -> None:
    assert line(capsys, None, None)[2:4] == ["key=null", "value=null"]
    assert line(capsys, b"\xff\x00", b"")[2:4] == ["key=b'\\xff\\x00'", 'value=""']
    long = ("x" * 1000).encode()
    assert line(capsys, None, long)[3] == f'value="{"x" * TEXT_VALUE_CHARS}"... (1000 bytes)'
    binary = b"\xff" * 1000
    assert line(capsys, None, binary)[3] == f"value={binary[:TEXT_VALUE_CHARS]!r}... (1000 bytes)"
