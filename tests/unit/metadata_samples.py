from __future__ import annotations

import uuid

from hypothesis import strategies as st

from processor.kafka.partition import TopicPartition
from processor.metadata.model import (
    ClaimKind,
    PartitionClaim,
    PartitionDeleteState,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogStartOffset,
    RemotePartitionDeleteMetadata,
    SegmentState,
)
from processor.segment.object_keys import ObjectKeyFactory

topics = st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True).filter(lambda t: t not in {".", ".."})
longs = st.integers(0, 2**62)
segment_ids = st.builds(
    RemoteLogSegmentId,
    topic=topics,
    partition=st.integers(0, 2**31 - 1),
    id=st.uuids(),
    topic_id=st.one_of(st.none(), st.uuids().map(str)),
)


prefixes = st.sampled_from(["", "archive", "a/b-1"])


@st.composite
def segment_metadata(draw: st.DrawFn, state: SegmentState | None = None) -> RemoteLogSegmentMetadata:
    """Valid records: within the bounds of processor/metadata/validation.py, object keys in the
    project's layout (any prefix)."""
    start = draw(st.integers(0, 2**61))
    end = start + draw(st.integers(0, 2**40))
    sid = draw(segment_ids)
    keys = ObjectKeyFactory(draw(prefixes)).segment(
        sid.topic, sid.partition, start, sid.id, draw(st.integers(0, 2**40)), sid.topic_id
    )
    state = state or draw(st.sampled_from(list(SegmentState)))
    replaces = None
    if state is SegmentState.DELETE_SEGMENT_STARTED:  # a conditional delete, or one of earlier versions
        replaces = draw(
            st.sampled_from([None, SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED])
        )
    return RemoteLogSegmentMetadata(
        segment_id=sid,
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=draw(st.integers(-1, 2**62)),
        event_timestamp_ms=draw(longs),
        writer_id=draw(st.text(min_size=1, max_size=20)),
        writer_epoch=draw(st.integers(-1, 2**62)),
        segment_leader_epochs=tuple(
            draw(st.lists(st.tuples(st.integers(-1, 1000), longs), min_size=1, max_size=4))
        ),
        segment_size_in_bytes=draw(longs),
        state=state,
        data_object_key=keys.data,
        index_object_key=keys.index,
        segment_format_version=draw(st.sampled_from([1, 2])),
        record_count=draw(st.integers(0, end - start + 1)),
        index_crc32=draw(st.integers(0, 2**32 - 1)),
        index_size_in_bytes=draw(longs),
        custom_metadata=draw(st.one_of(st.none(), st.binary(max_size=128))),
        txn_index_empty=draw(st.booleans()),
        replaces_state=replaces,
        supersedes=tuple(
            draw(st.lists(st.uuids(), max_size=3, unique=True).filter(lambda ids: sid.id not in ids))
        ),
    )


updates = st.builds(
    RemoteLogSegmentMetadataUpdate,
    segment_id=segment_ids,
    event_timestamp_ms=longs,
    writer_id=st.text(max_size=10),
    writer_epoch=st.integers(-1, 2**62),
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
    writer_epoch=st.integers(-1, 2**62),
)
claims = st.builds(
    PartitionClaim,
    topic_partition=st.builds(TopicPartition, topics, st.integers(0, 2**31 - 1)),
    claim_id=st.uuids(),
    kind=st.sampled_from([ClaimKind.LEAD, ClaimKind.ADMIN]),
    writer_id=st.text(max_size=10),
    event_timestamp_ms=longs,
    topic_id=st.one_of(st.none(), st.uuids().map(str)),
) | st.builds(
    PartitionClaim,
    topic_partition=st.builds(TopicPartition, topics, st.integers(0, 2**31 - 1)),
    claim_id=st.uuids(),
    kind=st.just(ClaimKind.RELEASE),
    writer_id=st.text(max_size=10),
    event_timestamp_ms=longs,
    released_epoch=st.integers(0, 2**62),
)
log_start_offsets = st.builds(
    RemoteLogStartOffset,
    topic_partition=st.builds(TopicPartition, topics, st.integers(0, 2**31 - 1)),
    start_offset=longs,
    event_timestamp_ms=longs,
    writer_id=st.text(max_size=10),
    writer_epoch=st.integers(-1, 2**62),
    topic_id=st.one_of(st.none(), st.uuids().map(str)),
)
