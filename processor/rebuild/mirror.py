"""A metadata log that follows the bucket: what a read replica without the metadata topic applies to
its cache after each look at the bucket. Pure.

The replica keeps one synthetic metadata partition. For each source partition it writes a claim
(carrying the partition's current topic id; a new one when that id changes), then each served
segment's COPY_SEGMENT_FINISHED record stamped with the claim's epoch; a segment no longer served
(its manifest deleted: retention or deletion ran in the source region) is deleted the way retention
deletes (DELETE_SEGMENT_STARTED, DELETE_SEGMENT_FINISHED, a tombstone). The
records go through the same fold as any follower's (the cache), so what the replica serves is what
the rebuilt metadata topic would serve.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from processor.kafka.partition import TopicPartition
from processor.metadata.codec import encode_value, record_key, segment_key
from processor.metadata.model import ClaimKind, PartitionClaim, RemoteLogSegmentMetadata, SegmentState
from processor.rebuild.resolve import REBUILD_WRITER, PartitionRebuild

Message = tuple[int, bytes, bytes | None]  # offset, key, value (None: a tombstone)


@dataclass
class MirrorState:
    """What the replica's log holds so far."""

    next_offset: int = 0
    claims: dict[TopicPartition, tuple[int, str | None]] = field(default_factory=dict)  # epoch, topic id
    served: dict[uuid.UUID, RemoteLogSegmentMetadata] = field(default_factory=dict)


def mirror_messages(
    state: MirrorState, plan: Mapping[TopicPartition, PartitionRebuild], now_ms: int
) -> list[Message]:
    """The messages that bring the replica's log from ``state`` to ``plan`` (and update ``state``):
    tombstones of segments no longer served first, then new claims, then new segments."""
    out: list[Message] = []

    def append(key: bytes, value: bytes | None) -> int:
        offset = state.next_offset
        out.append((offset, key, value))
        state.next_offset += 1
        return offset

    wanted = {s.segment_id.id: s for part in plan.values() for s in part.served}
    for sid, gone in sorted(state.served.items(), key=lambda item: str(item[0])):
        if sid not in wanted:  # deleted in the bucket: deleted here the way retention deletes
            for deleted_state in (SegmentState.DELETE_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_FINISHED):
                record = replace(gone, state=deleted_state, event_timestamp_ms=now_ms)
                append(record_key(record), encode_value(record))
            append(segment_key(gone.segment_id), None)
            del state.served[sid]
    for tp, part in sorted(plan.items()):
        if not part.served:
            continue
        held = state.claims.get(tp)
        if held is None or held[1] != part.topic_id:
            claim = PartitionClaim(
                tp, uuid.uuid4(), ClaimKind.ADMIN, REBUILD_WRITER, now_ms, topic_id=part.topic_id
            )
            state.claims[tp] = (append(record_key(claim), encode_value(claim)), part.topic_id)
        epoch = state.claims[tp][0]
        for segment in part.served:
            if segment.segment_id.id in state.served:
                continue
            stamped = replace(segment, writer_epoch=epoch)
            append(record_key(stamped), encode_value(stamped))
            state.served[segment.segment_id.id] = stamped
    return out
