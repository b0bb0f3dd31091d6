"""Fencing of segment records by writer epoch and topic id, per source partition. Pure.

Both the leader's fold (:mod:`processor.metadata.remote_log_state`) and the follower cache apply
these rules, so a worker resuming from either sees the same history.

- Epoch: every segment record carries ``writer_epoch`` (the writer's consumer-group generation, or
  newer than any epoch seen for the partition when it took over). A record older than the newest
  epoch already seen for its partition is rejected, whatever its state: a zombie writer (paused past
  its session timeout) can neither start, finish nor delete anything once the new leader wrote.
- Topic id: the first id seen for a partition is adopted. A COPY_SEGMENT_STARTED or FINISHED of a
  *new* segment with a different id means the topic was deleted and re-created: the lineage switches
  to the new id and the old id is retired, together with segments written before ids were recorded
  (legacy, ``topic_id`` null). Later STARTED/FINISHED records of a retired id are rejected; deletes of
  old segments are accepted so they can still be cleaned up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from processor.errors import IllegalTransitionError
from processor.metadata.model import RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, SegmentState

STALE_EPOCH = "stale_epoch"
OLD_TOPIC_ID = "old_topic_id"


class RejectedRecordError(IllegalTransitionError):
    """A record the fold does not accept, with the reason it is counted under (``reason``: a stale
    epoch, a retired topic id, an overlap, an unmet condition, ... processor/metadata/fold_reasons.py)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Lineage:
    max_epoch: int = -1
    topic_id: str | None = None
    retired: frozenset[str] = field(default_factory=frozenset)
    legacy_retired: bool = False

    def admit(
        self,
        record: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate,
        current: RemoteLogSegmentMetadata | None,
    ) -> Lineage:
        """The lineage after accepting ``record`` (the segment's state before it is ``current``);
        raises RejectedRecordError when the record is fenced out. Changes nothing itself."""
        epoch = record.writer_epoch
        if epoch < self.max_epoch:
            raise RejectedRecordError(
                f"{record.state.value} of {record.segment_id} from writer epoch {epoch} "
                f"({record.writer_id}), older than epoch {self.max_epoch} already seen",
                STALE_EPOCH,
            )
        tid = record.segment_id.topic_id
        new_epoch = max(self.max_epoch, epoch)
        if tid is None or tid == self.topic_id:
            return Lineage(new_epoch, self.topic_id, self.retired, self.legacy_retired)
        copying = record.state in (SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED)
        if tid in self.retired:
            if copying:
                raise RejectedRecordError(
                    f"{record.state.value} of {record.segment_id} for topic id {tid}, which a "
                    f"re-created topic ({self.topic_id}) replaced",
                    OLD_TOPIC_ID,
                )
            return Lineage(new_epoch, self.topic_id, self.retired, self.legacy_retired)
        if self.topic_id is None:
            return Lineage(new_epoch, tid, self.retired, self.legacy_retired)
        if copying and current is None:  # a new segment of a new topic: the topic was re-created
            return Lineage(new_epoch, tid, self.retired | {self.topic_id}, True)
        if copying:
            raise RejectedRecordError(
                f"{record.state.value} of {record.segment_id} changes its topic id to {tid}", OLD_TOPIC_ID
            )
        return Lineage(new_epoch, self.topic_id, self.retired, self.legacy_retired)

    def serves(self, segment_topic_id: str | None, topic_id: str | None) -> bool:
        """Whether a segment with ``segment_topic_id`` belongs to the history of the topic whose
        current id is ``topic_id`` (None: unknown, every id counts)."""
        if topic_id is None:
            return segment_topic_id is None or segment_topic_id not in self.retired
        if segment_topic_id is None:
            return not self.legacy_retired and self.topic_id in (None, topic_id)
        return segment_topic_id == topic_id
