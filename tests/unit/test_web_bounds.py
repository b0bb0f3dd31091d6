"""The read API's answers are bounded and its numbers checked: pages, byte caps, 400 never 500."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import ConfigError
from processor.follower.remote_log_metadata_manager import RemoteLogMetadataManager
from processor.kafka.partition import TopicPartition
from processor.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, SegmentState
from processor.web import handlers
from tests.unit.metadata_samples import segment_metadata


def _segment(tp: TopicPartition, start: int, sid: uuid.UUID, template: RemoteLogSegmentMetadata) -> Any:
    return dataclasses.replace(
        template,
        segment_id=RemoteLogSegmentId(tp.topic, tp.partition, sid),
        start_offset=start,
        end_offset=start + 9,
        state=SegmentState.COPY_SEGMENT_FINISHED,
    )


class FakeCache:
    """The two listing calls /segments makes, over a fixed set of segments."""

    def __init__(self, segments: list[RemoteLogSegmentMetadata]) -> None:
        self.segments = segments

    def topic_partitions(self) -> list[TopicPartition]:
        return sorted({s.segment_id.topic_partition for s in self.segments})

    def listed_segments(self, tp: TopicPartition, from_offset: int = 0) -> Iterator[RemoteLogSegmentMetadata]:
        for s in self.segments:
            if s.segment_id.topic_partition == tp and s.end_offset >= from_offset:
                yield s


class FakeReader:
    """A reader that records what it was asked and never fails on a valid request."""

    def __init__(self, cache: FakeCache | None = None) -> None:
        self.lookup = RemoteLogMetadataManager(cache) if cache is not None else None  # type: ignore[arg-type]
        self.calls: list[tuple[Any, ...]] = []

    def read_from_offset(
        self, tp: TopicPartition, offset: int, max_records: int, max_bytes: int
    ) -> list[Any]:
        self.calls.append(("offset", tp, offset, max_records, max_bytes))
        return []

    def read_from_timestamp(self, tp: TopicPartition, ts: int, max_records: int, max_bytes: int) -> list[Any]:
        self.calls.append(("timestamp", tp, ts, max_records, max_bytes))
        return []


@given(template=segment_metadata(), limit=st.integers(1, 7))
def test_segment_pages_list_every_segment_once_in_order(
    template: RemoteLogSegmentMetadata, limit: int
) -> None:
    # Ids out of step with offsets; two attempts at offset 10 in each partition.
    ids = iter(uuid.UUID(int=(i * 7919) % 101 + 1) for i in range(1, 200))
    segments = [
        _segment(TopicPartition("t", p), start, next(ids), template)
        for p in (0, 1, 3)
        for start in (0, 10, 10, 20)
    ]
    segments += [_segment(TopicPartition("other", 0), 0, next(ids), template)]
    reader = FakeReader(FakeCache(segments))
    seen: list[tuple[int, int, str]] = []
    after: str | None = None
    for _ in range(100):
        query = {"topic": "t", "limit": str(limit), **({"after": after} if after else {})}
        reply = handlers.segments(reader, query)  # type: ignore[arg-type]
        assert reply.status == 200 and isinstance(reply.body, dict)
        assert len(reply.body["segments"]) <= limit
        seen += [(s["partition"], s["start_offset"], s["id"]) for s in reply.body["segments"]]
        after = reply.body["next"]
        if after is None:
            break
    expected = sorted(
        (s.segment_id.partition, s.start_offset, str(s.segment_id.id))
        for s in segments
        if s.segment_id.topic == "t"
    )
    assert sorted(seen) == expected and len(set(seen)) == len(seen) == len(expected)


def test_fetch_passes_the_byte_cap_and_defaults() -> None:
    reader = FakeReader()
    reply = handlers.fetch(reader, {"topic": "t", "partition": "2", "offset": "5", "max_bytes": "1000"})  # type: ignore[arg-type]
    assert reply.status == 200
    assert reader.calls == [("offset", TopicPartition("t", 2), 5, handlers.DEFAULT_FETCH_RECORDS, 1000)]
    handlers.fetch(reader, {"topic": "t", "partition": "0", "timestamp": "7"})  # type: ignore[arg-type]
    assert reader.calls[-1][-1] == handlers.DEFAULT_FETCH_BYTES


# Hypothesis over every query parameter: values from the whole range of what a client could send.
numbers = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(
        ["", "-0", "00", "1_000", " 1", "1e3", "0x10", "٣", "NaN", "9" * 40, str(2**31), str(2**63)]
    ),
    st.text(max_size=30),
)
queries = st.dictionaries(
    st.sampled_from(
        ["topic", "partition", "offset", "timestamp", "max_records", "max_bytes", "limit", "after"]
    ),
    numbers,
).map(lambda q: {"topic": "t", **q} if "topic" not in q else q)


@given(query=queries)
def test_fetch_never_answers_500(query: dict[str, str]) -> None:
    reader = FakeReader()
    reply = handlers.fetch(reader, query)  # type: ignore[arg-type]
    assert reply.status in (200, 400), (query, reply)
    if reply.status == 200:
        _kind, tp, position, max_records, max_bytes = reader.calls[0]
        assert 0 <= tp.partition <= handlers.INT32_MAX and 0 <= position <= handlers.INT64_MAX
        assert 1 <= max_records <= handlers.MAX_FETCH_RECORDS and 1 <= max_bytes <= handlers.MAX_FETCH_BYTES
    else:
        assert not reader.calls and isinstance(reply.body, dict) and reply.body["error"]


@given(query=queries)
def test_segments_never_answers_500(query: dict[str, str]) -> None:
    reader = FakeReader(FakeCache([]))
    reply = handlers.segments(reader, query)  # type: ignore[arg-type]
    assert reply.status in (200, 400), (query, reply)


# --- closed by default --------------------------------------------------------------------------


def test_read_api_is_closed_by_default_off_loopback() -> None:
    with pytest.raises(
        ConfigError, match=r"PROCESSOR_WEB_TOKEN.*PROCESSOR_WEB_HOST=127\.0\.0\.1.*PROCESSOR_WEB_AUTH=none"
    ):
        handlers.read_api_token("0.0.0.0", None, "token")
    with pytest.raises(ConfigError):
        handlers.read_api_token("10.1.2.3", None, "token")
    assert handlers.read_api_token("0.0.0.0", "t0k", "token") == "t0k"
    assert handlers.read_api_token("0.0.0.0", None, "none") is None
    assert handlers.read_api_token("0.0.0.0", "t0k", "none") is None  # none means open, on purpose
    for host in ("127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"):
        assert handlers.read_api_token(host, None, "token") is None, host
    assert handlers.read_api_token("127.0.0.1", "t0k", "token") == "t0k"
