from __future__ import annotations

import uuid

from hypothesis import strategies as st

from processor.metadata.model import (
    PartitionDeleteState,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogStartOffset,
    RemotePartitionDeleteMetadata,
    SegmentState,
    TopicPartition,
)

topics = st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True).filter(lambda t: t not in {".", ".."})
longs = st.integers(0, 2**62)
segment_ids = st.builds(
    RemoteLogSegmentId,
    topic=topics,
    partition=st.integers(0, 2**31 - 1),
    id=st.uuids(),
    topic_id=st.one_of(st.none(), st.uuids().map(str)),
)


@st.composite
def segment_metadata(draw: st.DrawFn, state: SegmentState | None = None) -> RemoteLogSegmentMetadata:
    start = draw(longs)
    return RemoteLogSegmentMetadata(
        segment_id=draw(segment_ids),
        start_offset=start,
        end_offset=start + draw(st.integers(0, 2**40)),
        max_timestamp_ms=draw(st.integers(-1, 2**62)),
        event_timestamp_ms=draw(longs),
        writer_id=draw(st.text(min_size=1, max_size=20)),
        writer_epoch=draw(st.integers(0, 2**31 - 1)),
        segment_leader_epochs=tuple(
            draw(st.lists(st.tuples(st.integers(-1, 1000), longs), min_size=1, max_size=4))
        ),
        segment_size_in_bytes=draw(longs),
        state=state or draw(st.sampled_from(list(SegmentState))),
        data_object_key=draw(st.text(max_size=60)),
        index_object_key=draw(st.text(max_size=60)),
        segment_format_version=1,
        record_count=draw(longs),
        index_crc32=draw(st.integers(0, 2**32 - 1)),
        index_size_in_bytes=draw(longs),
        custom_metadata=draw(st.one_of(st.none(), st.binary(max_size=128))),
        txn_index_empty=draw(st.booleans()),
    )


updates = st.builds(
    RemoteLogSegmentMetadataUpdate,
    segment_id=segment_ids,
    event_timestamp_ms=longs,
    writer_id=st.text(max_size=10),
    writer_epoch=st.integers(0, 1000),
    state=st.sampled_from(list(SegmentState)),
    custom_metadata=st.one_of(st.none(), st.binary(max_size=10)),
)
partition_deletes = st.builds(
    RemotePartitionDeleteMetadata,
    topic_partition=st.builds(TopicPartition, topics, st.integers(0, 1000)),
    state=st.sampled_from(list(PartitionDeleteState)),
    event_timestamp_ms=longs,
    writer_id=st.text(max_size=10),
    topic_id=st.one_of(st.none(), st.just(str(uuid.UUID(int=1)))),
)
log_start_offsets = st.builds(
    RemoteLogStartOffset,
    topic_partition=st.builds(TopicPartition, topics, st.integers(0, 2**31 - 1)),
    start_offset=longs,
    event_timestamp_ms=longs,
    writer_id=st.text(max_size=10),
    writer_epoch=st.integers(0, 2**31 - 1),
    topic_id=st.one_of(st.none(), st.uuids().map(str)),
)
