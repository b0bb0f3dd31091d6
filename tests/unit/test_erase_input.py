"""``processor erase``'s input and audit trail, without servers: keys are checked in one place with
errors that name the key or the line, and the audit trail names keys only by keyed hashes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from processor.commands.erase import MAX_KEY_BYTES, read_keys
from processor.errors import ConfigError
from processor.kafka.partition import TopicPartition
from processor.rewrite.erase_audit import audit_object_key, audit_record, key_digest
from processor.rewrite.erase_runner import EraseReport


def test_keys_from_the_command_line_and_a_file_in_each_encoding(tmp_path: Path) -> None:
    f = tmp_path / "keys.txt"
    f.write_text("alice\n\nbob\nalice\n")
    assert read_keys(["carol", "bob"], f, "utf-8") == [b"carol", b"bob", b"alice"]
    f.write_text("00ff\n616263\n")
    assert read_keys([], f, "hex") == [b"\x00\xff", b"abc"]
    assert read_keys(["AAE="], None, "base64") == [b"\x00\x01"]


@pytest.mark.parametrize(
    ("keys", "content", "encoding", "message"),
    [
        ([], None, "utf-8", "no key to erase"),
        ([""], None, "utf-8", "an empty key"),
        (["zz"], None, "hex", "--key 'zz': not hex"),
        (["***"], None, "base64", "not base64"),
        ([], "0a\n0g\n", "hex", "line 2: not hex"),
        ([], b"\xff\xfe", "utf-8", "not UTF-8 at byte 0"),
        (["x" * (MAX_KEY_BYTES + 1)], None, "utf-8", "longer than any Kafka key"),
    ],
)
def test_bad_keys_are_refused_naming_what_is_wrong(
    tmp_path: Path, keys: list[str], content: str | bytes | None, encoding: str, message: str
) -> None:
    path = None
    if content is not None:
        path = tmp_path / "keys"
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ConfigError, match=message):
        read_keys(keys, path, encoding)


def test_a_missing_key_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--key-file .*missing"):
        read_keys([], tmp_path / "missing", "utf-8")


def test_the_audit_trail_names_keys_by_keyed_hashes_only() -> None:
    secret_a, secret_b = b"a" * 32, b"b" * 32
    keys = [b"alice@example.com", b"bob"]
    report = EraseReport(TopicPartition("orders", 3), segments=5, scanned=2, rewritten=1, records_removed=7)
    body = audit_record(
        stage="finished",
        erasure_id="e1",
        topic="orders",
        keys=keys,
        audit_key=secret_a,
        started_ms=1,
        finished_ms=2,
        reports=[report],
    )
    assert b"alice" not in body and b"bob" not in body
    record = json.loads(body)
    assert record["keys"] == sorted(key_digest(k, secret_a) for k in keys)
    assert key_digest(b"bob", secret_a) != key_digest(b"bob", secret_b)  # keyed: no guessing without it
    assert record["records_removed"] == 7 and record["complete"] is True
    assert record["partitions"] == [
        {
            "partition": 3,
            "segments": 5,
            "skipped_by_filter": 0,
            "scanned": 2,
            "rewritten": 1,
            "records_removed": 7,
            "failed": 0,
        }
    ]
    key = audit_object_key("pre", "orders", 1, "e1", "finished")
    assert key == "pre/erasures=audit/orders/0000000000001-e1-finished.json"
