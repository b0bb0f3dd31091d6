"""The apply path's shortcuts decide what the long way decides: a record's fields after its state read
from a cache of earlier records' bytes, a writer's lineage kept when a record changes nothing in it,
a UUID's text without the UUID, and a batch's writes folded to the last one of each key."""

from __future__ import annotations

import dataclasses
import re
import uuid
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from processor.follower.cache_writes import RawMessage
from processor.follower.metadata_cache import MetadataCache
from processor.kafka.partition import TopicPartition
from processor.metadata import segment_metadata_decoder
from processor.metadata.codec import TYPE_SEGMENT, decode_body_with_fastavro, encode_value, record_key
from processor.metadata.fold import MetadataFold
from processor.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, SegmentState
from processor.metadata.validation import _key_problem, uuid_text
from tests.unit.metadata_samples import segment_metadata

FRAME = 2


def fast(value: bytes) -> RemoteLogSegmentMetadata | None:
    return segment_metadata_decoder.read_segment_metadata(value, FRAME)


@given(segment_metadata(), st.sampled_from(list(SegmentState)), st.integers(0, 2**40))
def test_a_record_whose_fields_after_its_state_were_read_before_decodes_as_fastavro_does(
    meta: RemoteLogSegmentMetadata, state: SegmentState, event_ms: int
) -> None:
    again = dataclasses.replace(meta, state=state, event_timestamp_ms=event_ms)
    for record in (meta, again, meta):  # the second and third read their tail from the cache
        raw = encode_value(record)
        assert fast(raw) == decode_body_with_fastavro(raw, TYPE_SEGMENT) == record


@given(segment_metadata(), st.integers(1, 40))
def test_a_cut_record_after_its_whole_tail_was_read_decodes_as_fastavro_does_or_is_left_to_it(
    meta: RemoteLogSegmentMetadata, cut: int
) -> None:
    raw = encode_value(meta)
    assert fast(raw) == meta  # its tail is cached now
    for changed in (raw[:-cut], raw + b"\x00" * cut):
        got = fast(changed)
        if got is not None:  # a cut that is an earlier schema's whole record
            assert got == decode_body_with_fastavro(changed, TYPE_SEGMENT)
    assert fast(raw + b"\x00") is None


@given(st.integers(0, 2**128 - 1))
def test_a_uuid_text_is_the_uuid_str(value: int) -> None:
    assert uuid_text(value) == str(uuid.UUID(int=value))


TP = TopicPartition("orders", 3)


def _segment(start: int, epoch: int, topic_id: str | None, state: SegmentState) -> RemoteLogSegmentMetadata:
    sid = RemoteLogSegmentId(TP.topic, TP.partition, uuid.UUID(int=start + 1), topic_id)
    folder = TP.topic if topic_id is None else f"{TP.topic}-{topic_id}"
    data = f"p/{folder}/{TP.partition}/{start:020d}-{sid.id}-e{epoch}.log"
    return RemoteLogSegmentMetadata(
        sid, start, start + 9, 1_000 + start, 7, "w", epoch, ((0, start),), 100, state, data, data + "-index",
        1, 10, 0, 10,
    )  # fmt: skip


def test_one_batch_with_every_write_of_a_segment_twice_leaves_what_one_record_a_batch_leaves(
    tmp_path: Path,
) -> None:
    """Copy records of segments in one batch and one at a time (the same keys written again and again
    within a batch), a writer epoch raised and a topic id adopted on the way: the same cache, and the
    same as the fold in memory."""
    tid = "0b2a3c4d-0000-4000-8000-000000000001"
    records = []
    for i, (epoch, topic_id) in enumerate(((1, None), (1, None), (2, None), (2, tid), (2, tid), (3, tid))):
        seg = _segment(i * 10, epoch, topic_id, SegmentState.COPY_SEGMENT_STARTED)
        records += [seg, dataclasses.replace(seg, state=SegmentState.COPY_SEGMENT_FINISHED)]
    records.append(_segment(0, 1, None, SegmentState.COPY_SEGMENT_STARTED))  # an older epoch: rejected
    messages = [RawMessage(0, o, record_key(r), encode_value(r)) for o, r in enumerate(records)]
    whole = MetadataCache(tmp_path / "whole")
    one_by_one = MetadataCache(tmp_path / "one")
    result = whole.apply_batch(messages)
    for message in messages:
        one_by_one.apply_batch([message])
    fold = MetadataFold()
    verdicts = [fold.apply_raw(m.offset, m.key, m.value) for m in messages]
    assert result.applied == sum(v.accepted for v in verdicts) == len(records) - 1
    assert result.skipped_positions[0][:2] == (0, len(records) - 1)
    for cache in (whole, one_by_one):
        assert list(cache.finished_segments(TP)) == fold.partition(TP).finished()
        assert cache.header(TP) == fold.memory.header(TP)
        assert cache.consumed_offsets() == {0: len(records)}
    assert _contents(whole) == _contents(one_by_one)
    whole.close()
    one_by_one.close()


def _contents(cache: MetadataCache) -> list[tuple[bytes, bytes]]:
    it = cache.consistent_iterator()
    it.seek_to_first()
    out = []
    while it.valid():
        out.append((it.key(), it.value()))
        it.next()
    return out


def _key_problem_as_written_first(
    data: str, index: str, topic: str, partition: int, topic_id: str | None, id_int: int, start: int
) -> bool:
    """The object key rule as it read before its folders were checked once a partition."""
    if not 0 < len(data) <= 1024 - 6 or index != data + "-index":
        return True
    parts = data.split("/")
    folder = topic if topic_id is None else f"{topic}-{topic_id}"
    m = re.fullmatch(r"(\d{20})-([0-9a-f-]{36})-e\d{1,20}\.log", parts[-1])
    return bool(
        len(parts) < 3
        or parts[-3] != folder
        or parts[-2] != str(partition)
        or m is None
        or int(m.group(1)) != start
        or m.group(2) != str(uuid.UUID(int=id_int))
        or any(p in {".", ".."} or not re.fullmatch(r"[A-Za-z0-9._=-]{1,255}", p) for p in parts[:-3])
    )


_parts = st.sampled_from(["", ".", "..", "a", "b=1", "a b", "orders", "orders-x", "3", "03", "x/y"])


@given(
    st.lists(_parts, max_size=4),
    st.sampled_from(["orders", "orders-x", "3", ""]),
    st.sampled_from(["3", "03", "4", ""]),
    st.sampled_from([None, "x"]),
    st.integers(0, 3),
    st.booleans(),
)
def test_the_object_key_rule_refuses_what_it_refused_before(
    prefix: list[str], folder: str, partition: str, topic_id: str | None, start: int, right_name: bool
) -> None:
    sid = uuid.UUID(int=77)
    name = f"{start:020d}-{sid}-e1.log" if right_name else f"{start:020d}-{uuid.UUID(int=78)}-e1.log"
    for data in ("/".join([*prefix, folder, partition, name]), name, f"{partition}/{name}"):
        expected = _key_problem_as_written_first(data, data + "-index", "orders", 3, topic_id, sid.int, 1)
        assert (
            _key_problem(data, data + "-index", "orders", 3, topic_id, sid.int, 1) is not None
        ) == expected
