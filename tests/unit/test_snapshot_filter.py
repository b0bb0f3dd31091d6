"""A snapshot table filtered to some topics (a follower or CLI call that keeps only those) holds
exactly the keys whose source partition is of those topics: the seeks by topic and the look at each
``S`` value's leading topic give what reading every key's partition gives."""

from __future__ import annotations

import tempfile
import uuid
from dataclasses import replace
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st
from rocksdict import Options, Rdict

from processor.follower.cache_keys import U32, U64, tp_key
from processor.follower.snapshot_tables import OpenTable, _tp_of, _tp_part, filtered_table, segment_partition
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import encode_value
from processor.metadata.model import RemoteLogSegmentId
from tests.unit.test_rebuild_inventory import segment

# names that are prefixes of each other, and one past the one-byte length (63)
TOPICS = ["pay", "payments", "payments-eu", "o" * 64, "orders"]


def _segment_value(topic: str, partition: int) -> bytes:
    seg = segment(partition, 0, 9)
    return encode_value(replace(seg, segment_id=RemoteLogSegmentId(topic, partition, uuid.uuid4(), None)))


@settings(max_examples=30)
@example([("o" * 64, 0, "S"), ("pay", 0, "S")], {"o" * 64})  # a two-byte length; partition 0 ends in zeros
@given(
    st.lists(st.tuples(st.sampled_from(TOPICS), st.integers(0, 3), st.sampled_from("EHLOSX")), max_size=40),
    st.sets(st.sampled_from(TOPICS), min_size=1),
)
def test_the_filter_keeps_exactly_the_kept_topics_keys(
    keys: list[tuple[str, int, str]], kept: set[str]
) -> None:
    entries: dict[bytes, bytes] = {}
    for n, (topic, partition, prefix) in enumerate(keys):
        tp = TopicPartition(topic, partition)
        if prefix == "S":  # by segment id: the partition is in the value only
            entries[b"S" + uuid.uuid4().bytes] = _segment_value(topic, partition)
        elif prefix == "E":
            entries[b"E" + tp_key(tp)] = b"{}"
        else:
            entries[prefix.encode() + tp_key(tp) + U64.pack(n) + uuid.uuid4().bytes] = U32.pack(n)
    with tempfile.TemporaryDirectory() as tmp:
        db = Rdict(str(Path(tmp) / "db"), Options(raw_mode=True))
        for key, value in entries.items():
            db[key] = value
        try:
            out, count = filtered_table(
                OpenTable(db, Path(tmp) / "db"),
                Path(tmp) / "kept.sst",
                Options(raw_mode=True),
                frozenset(kept),
            )
            got: dict[bytes, bytes] = {}
            if out is not None:
                check = Rdict(str(Path(tmp) / "check"), Options(raw_mode=True))
                check.ingest_external_file([str(out)])
                got = {bytes(k): bytes(v) for k, v in check.items()}  # type: ignore[arg-type]
                check.close()
        finally:
            db.close()
    want = {
        k: v
        for k, v in entries.items()
        if (segment_partition(v) if k[:1] == b"S" else _tp_of(_tp_part(k))).topic in kept
    }
    assert got == want and count == len(want)
    assert out is not None or not want


def test_nothing_kept_writes_no_table(tmp_path: Path) -> None:
    db = Rdict(str(tmp_path / "db"), Options(raw_mode=True))
    db[b"S" + uuid.uuid4().bytes] = _segment_value("orders", 0)
    try:
        assert filtered_table(
            OpenTable(db, tmp_path / "db"), tmp_path / "k.sst", Options(raw_mode=True), frozenset({"pay"})
        ) == (
            None,
            0,
        )
    finally:
        db.close()
