"""A partition's remote state as the leader, retention and the CLI use it. Pure.

Everything here is *derived* from :mod:`processor.metadata.fold`, the one fold every reader applies:
which records were accepted, which finished segments are served, the remote log start offset and the
partition's current claim. On top of it this module answers the owner's questions: where to resume
(the highest offset copied), what to clean up (copies and deletes a crashed or fenced writer left,
finished segments no longer served, rejected records' objects), and, in
:mod:`processor.metadata.restatements`, what to re-publish so compaction cannot drop an accepted
state.
"""

from __future__ import annotations

import bisect
import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from processor.errors import IllegalTransitionError
from processor.kafka.partition import TopicPartition
from processor.metadata.fencing import Lineage, RejectedRecordError
from processor.metadata.fold import MetadataFold
from processor.metadata.fold_state import PartitionHeader
from processor.metadata.memory_store import PartitionView
from processor.metadata.model import (
    MetadataRecord,
    PartitionDeleteState,
    RemoteLogSegmentMetadata,
    SegmentState,
)
from processor.metadata.restatements import Restatements

_S = SegmentState


@dataclass
class PartitionRemoteState(Restatements):
    """A snapshot of one partition's state in the fold, with the owner's questions on top."""

    segments: dict[uuid.UUID, RemoteLogSegmentMetadata] = field(default_factory=dict)
    served: set[uuid.UUID] = field(default_factory=set)
    header: PartitionHeader = field(default_factory=PartitionHeader)
    shadowed: set[bytes] = field(default_factory=set)
    orphans: dict[uuid.UUID, RemoteLogSegmentMetadata] = field(default_factory=dict)
    # Set by a leader about to resume: the topic id the broker reports now (None: unknown).
    current_topic_id: str | None = None

    @classmethod
    def of(cls, view: PartitionView) -> PartitionRemoteState:
        return cls(dict(view.segments), set(view.served), view.header, set(view.shadowed), dict(view.orphans))

    @property
    def lineage(self) -> Lineage:
        return self.header.lineage

    @property
    def log_start_offset(self) -> int:
        return self.header.log_start_offset

    @property
    def delete_state(self) -> PartitionDeleteState | None:
        return self.header.delete_state

    @property
    def current_epoch(self) -> int | None:
        """The epoch of the partition's current claim (None: nobody holds it)."""
        return self.header.current_epoch

    @property
    def max_epoch(self) -> int:
        """The newest writer epoch of records written before claims existed."""
        return self.header.lineage.max_epoch

    def accepted_state(self, segment: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata | None:
        """The fold's accepted state of ``segment`` (None: it does not know it)."""
        return self.segments.get(segment.segment_id.id)

    def _topic_id(self) -> str | None:
        return self.current_topic_id if self.current_topic_id is not None else self.lineage.topic_id

    def in_lineage(self, seg: RemoteLogSegmentMetadata) -> bool:
        return self.lineage.serves(seg.segment_id.topic_id, self._topic_id())

    def finished(self) -> list[RemoteLogSegmentMetadata]:
        """The finished segments served for the partition (of the current topic id), by start offset."""
        return sorted(
            (self.segments[x] for x in self.served if self.in_lineage(self.segments[x])),
            key=lambda s: s.start_offset,
        )

    def superseded(self) -> list[RemoteLogSegmentMetadata]:
        """Finished segments of the current topic id that are not served (replaced before claims
        existed by an overlapping newer epoch)."""
        served = {s.segment_id.id for s in self.finished()}
        return [
            s
            for s in self.segments.values()
            if s.state is _S.COPY_SEGMENT_FINISHED and self.in_lineage(s) and s.segment_id.id not in served
        ]

    def held_beneath(self) -> Callable[[RemoteLogSegmentMetadata], bool]:
        """Whether finished segments nothing serves, wholly inside a served segment's offsets,
        cover every offset of it at or above the remote log start offset: unserved, it would leave no
        offset unserved (they are served again as :meth:`stranded`). A rewrite whose sources are
        gone can have such segments beneath it when a rewrite it named (whose sources they are) was
        deleted and forgotten. One sort of the unserved finished segments, then a search a call (the
        list is empty but for garbage waiting for its proof)."""
        hidden = sorted(self.superseded(), key=lambda s: (s.start_offset, s.end_offset))
        starts = [s.start_offset for s in hidden]
        floor = self.log_start_offset

        def covered(segment: RemoteLogSegmentMetadata) -> bool:
            need = max(segment.start_offset, floor)
            for s in hidden[bisect.bisect_left(starts, segment.start_offset) :]:
                if need > segment.end_offset or s.start_offset > need:
                    break
                if s.end_offset <= segment.end_offset and s.segment_id.id != segment.segment_id.id:
                    need = max(need, s.end_offset + 1)
            return need > segment.end_offset

        return covered

    def rewrite_proofs(self) -> dict[uuid.UUID, RemoteLogSegmentMetadata]:
        """Known segments (any state) that an accepted rewrite (a merge, an erase) supersedes,
        directly or through a rewrite it superseded in turn (a merge of a merge whose sources were
        not deleted yet), and that are not served, each with the rewrite that holds its offsets now.
        A rewrite counts while readers serve it; never one being deleted (by retention, or by a
        forged delete its holder means to undo: serving it again can fail, a forged rewrite over the
        same offsets say, and its sources would then hold the only copy), nor a copy that did not
        finish. Only segments wholly inside the rewrite's offsets count (the fold unserved exactly
        those). The record alone is no proof (it may be forged with the claim's epoch and writer id):
        the deleter reads the rewrite's index and checks it covers the source's records
        (:meth:`~processor.lifecycle.segment_deleter.SegmentDeleter.proven_superseded`)."""
        served = {s.segment_id.id for s in self.finished()}
        out: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        for rewrite in self.segments.values():
            if not rewrite.supersedes or rewrite.segment_id.id not in served:
                continue
            todo = list(rewrite.supersedes)
            while todo:
                sid = todo.pop()
                s = self.segments.get(sid)
                if (
                    s is None
                    or sid in out
                    or sid in served
                    or not self.in_lineage(s)
                    or s.start_offset < rewrite.start_offset
                    or s.end_offset > rewrite.end_offset
                ):
                    continue
                out[sid] = rewrite
                todo.extend(s.supersedes)
        return out

    def rewrite_superseded(self) -> frozenset[uuid.UUID]:
        """The ids :meth:`rewrite_proofs` names."""
        return frozenset(self.rewrite_proofs())

    def named_by_deleting_rewrites(self) -> frozenset[uuid.UUID]:
        """Segments named by a rewrite whose deletion started from COPY_SEGMENT_FINISHED and did not
        finish (retention, or a forged delete its holder will undo by serving the rewrite again, which
        takes these over once more): they are served meanwhile, and no new merge may take them."""
        return frozenset(
            sid
            for r in self.segments.values()
            if r.supersedes
            and r.state is _S.DELETE_SEGMENT_STARTED
            and r.replaces_state is _S.COPY_SEGMENT_FINISHED
            for sid in r.supersedes
        )

    def rewritten(self) -> list[RemoteLogSegmentMetadata]:
        """Finished segments a served rewrite superseded: no longer served, to be deleted by the owner."""
        ids = self.rewrite_superseded()
        return sorted(
            (self.segments[i] for i in ids if self.segments[i].state is _S.COPY_SEGMENT_FINISHED),
            key=lambda s: (s.start_offset, str(s.segment_id.id)),
        )

    def highest_finished_offset(self) -> int | None:
        """The highest offset copied, or deliberately deleted below the remote log start offset:
        after retention deleted every segment, a resuming leader continues at the start offset
        instead of copying the deleted history again."""
        # a deletion of a served segment counts as copied: retention moves the start offset past its
        # segments first, and one the owner cannot prove it started is undone (a forged record)
        done = [
            *self.finished(),
            *(
                s
                for s in self.segments.values()
                if s.state is _S.DELETE_SEGMENT_STARTED
                and s.replaces_state is _S.COPY_SEGMENT_FINISHED
                and self.in_lineage(s)
            ),
        ]
        highest = max(s.end_offset for s in done) if done else None
        if self.log_start_offset > 0 and (highest is None or highest < self.log_start_offset - 1):
            return self.log_start_offset - 1
        return highest

    def dangling(self, in_flight: frozenset[uuid.UUID] = frozenset()) -> list[RemoteLogSegmentMetadata]:
        """Segments to clean up: copies that started and can never finish (another claim's, or this
        claim's that are not in flight) and deletes that started and never finished. Before claims
        existed: every copy started and not finished. Finished segments that are not served
        (:meth:`superseded`, a retired topic id's) are not among them: a worker never deletes
        those (processor/metadata/deletion_proof.py)."""
        epoch = self.current_epoch
        out = [
            s
            for s in self.segments.values()
            if s.state is _S.DELETE_SEGMENT_STARTED
            or (
                s.state is _S.COPY_SEGMENT_STARTED
                and (epoch is None or s.writer_epoch != epoch or s.segment_id.id not in in_flight)
            )
        ]
        out.sort(key=lambda s: (s.start_offset, str(s.segment_id.id)))
        return out


@dataclass
class RemoteLogState:
    """The fold over a set of partitions, in memory (tests, the CLI, a leader without a follower)."""

    fold: MetadataFold = field(default_factory=MetadataFold)

    def apply(self, record: MetadataRecord) -> int:
        """Apply ``record`` as the next message; returns the offset it got (a claim's epoch). Raises
        RejectedRecordError or IllegalTransitionError (with the fold's reason) when the fold rejects it."""
        offset = self.fold._next_offset
        verdict = self.fold.append(record)
        if not verdict.accepted:
            if verdict.reason == "illegal":
                raise IllegalTransitionError(verdict.detail)
            raise RejectedRecordError(verdict.detail, verdict.reason or "rejected")
        return offset

    def apply_message(self, offset: int, key: bytes | None, value: bytes | None) -> str | None:
        """Apply one message of the topic at ``offset``; returns the rejection reason or None."""
        verdict = self.fold.apply_raw(offset, key, value)
        return None if verdict.accepted else verdict.reason

    @property
    def partitions(self) -> dict[TopicPartition, PartitionRemoteState]:
        """Every partition's state (snapshots)."""
        return {tp: PartitionRemoteState.of(view) for tp, view in self.fold.partitions.items()}

    def partition(self, tp: TopicPartition) -> PartitionRemoteState:
        return PartitionRemoteState.of(self.fold.partition(tp))


def coverage_gaps_and_overlaps(segments: list[RemoteLogSegmentMetadata]) -> list[str]:
    """Problems in a partition's finished coverage: each segment must start at the previous end + 1."""
    problems: list[str] = []
    ordered = sorted(segments, key=lambda s: s.start_offset)
    for prev, cur in itertools.pairwise(ordered):
        if cur.start_offset <= prev.end_offset:
            problems.append(
                f"overlap: {prev.segment_id} ends at {prev.end_offset}, "
                f"{cur.segment_id} starts at {cur.start_offset}"
            )
        elif cur.start_offset != prev.end_offset + 1:
            problems.append(f"gap: {prev.end_offset + 1}..{cur.start_offset - 1} not covered")
    return problems


def stamped(
    segments: list[RemoteLogSegmentMetadata], epoch: int, writer_id: str
) -> list[RemoteLogSegmentMetadata]:
    """``segments`` as records of the writer holding claim ``epoch`` (cleanup and repairs)."""
    return [replace(s, writer_epoch=epoch, writer_id=writer_id) for s in segments]
