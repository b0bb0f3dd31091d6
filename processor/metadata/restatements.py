"""What a partition's owner states again, and in which order, so that a reader of the compacted
metadata topic serves what live readers do. Pure: questions on top of the fold's view of one
partition, asked by the owner's passes (:mod:`processor.lifecycle.retention_service`) and its
deleter.

Compaction keeps a key's last record only, so a state re-published moves, for a reader of the
compacted topic, to where it is published now. The owner re-publishes an accepted state that a
rejected record shadows (:meth:`Restatements.repairs`), a claim's states once its key is hit, and
the segments a deletion it states again gave back; the order keeps every record judged against
what it was judged against live: deletions first, then finished segments a served rewrite holds
(each after the ones it names), then the served segments over them
(:meth:`Restatements.in_restatement_order`). Deleted segments are forgotten (tombstoned) in an
order that never leaves a rewrite's sources without the rewrite
(:meth:`Restatements.deletion_finished`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from processor.metadata.codec import CLAIM_KEY_PART, LOG_START_OFFSET_KEY_SUFFIX, delete_key, segment_key
from processor.metadata.model import DELETE_STATES, RemoteLogSegmentMetadata, SegmentState

if TYPE_CHECKING:
    from processor.metadata.fencing import Lineage
    from processor.metadata.fold_state import PartitionHeader

_S = SegmentState


class Restatements:
    """The restatement questions of
    :class:`~processor.metadata.remote_log_state.PartitionRemoteState`, which provides the view
    they read (declared here for the type checker)."""

    segments: dict[uuid.UUID, RemoteLogSegmentMetadata]
    served: set[uuid.UUID]
    header: PartitionHeader
    shadowed: set[bytes]

    if TYPE_CHECKING:

        @property
        def lineage(self) -> Lineage: ...

        @property
        def log_start_offset(self) -> int: ...

        @property
        def current_epoch(self) -> int | None: ...

        def finished(self) -> list[RemoteLogSegmentMetadata]: ...

        def rewrite_proofs(self) -> dict[uuid.UUID, RemoteLogSegmentMetadata]: ...

        def in_lineage(self, seg: RemoteLogSegmentMetadata) -> bool: ...

    def restorable(
        self, seg: RemoteLogSegmentMetadata, restored: Sequence[RemoteLogSegmentMetadata] = ()
    ) -> bool:
        """Whether ``seg``, stated FINISHED again, would be served: no served segment overlaps it
        that it does not name (the fold refuses such a FINISHED as an overlap). ``restored``: the
        segments stated FINISHED again since this view, served now in place of those they name (a
        merge served again over its sources, so the rewrite of the merge can be too)."""
        named = set(seg.supersedes)
        served = [  # what readers serve now: a restored rewrite took over what it names within it
            o
            for o in self.finished()
            if not any(
                o.segment_id.id in r.supersedes
                and r.start_offset <= o.start_offset
                and o.end_offset <= r.end_offset
                for r in restored
            )
        ]
        return not any(
            o.start_offset <= seg.end_offset
            and seg.start_offset <= o.end_offset
            and o.segment_id.id != seg.segment_id.id
            and o.segment_id.id not in named
            for o in (*served, *restored)
        )

    def served_over(self, seg: RemoteLogSegmentMetadata) -> list[RemoteLogSegmentMetadata]:
        """The segments readers serve (of any topic id) over ``seg``'s offsets that do not name it."""
        return sorted(
            (
                o
                for o in (self.segments[x] for x in self.served)
                if o.start_offset <= seg.end_offset
                and seg.start_offset <= o.end_offset
                and o.segment_id.id != seg.segment_id.id
                and seg.segment_id.id not in o.supersedes
            ),
            key=lambda o: o.start_offset,
        )

    def given_back_marked(self, rewrite: RemoteLogSegmentMetadata) -> list[RemoteLogSegmentMetadata]:
        """The segments the deletion of served ``rewrite`` gives back (as the fold does: finished,
        within its offsets, nothing else served over them) whose copy key is marked shadowed (a
        reader without their claim refused them): re-published right after the deletion."""
        if rewrite.segment_id.id not in self.served:
            return []
        out: list[RemoteLogSegmentMetadata] = []
        for sid in rewrite.supersedes:
            s = self.segments.get(sid)
            if (
                s is not None
                and s.state is _S.COPY_SEGMENT_FINISHED
                and segment_key(s.segment_id) in self.shadowed
                and self.lineage.serves(s.segment_id.topic_id, self.lineage.topic_id)
                and rewrite.start_offset <= s.start_offset
                and s.end_offset <= rewrite.end_offset
                and all(o.segment_id.id == rewrite.segment_id.id for o in self.served_over(s))
                and not any(a.start_offset <= s.end_offset and s.start_offset <= a.end_offset for a in out)
            ):
                out.append(s)
        return out

    def deletion_finished(self) -> list[RemoteLogSegmentMetadata]:
        """Segments whose DELETE_SEGMENT_FINISHED the fold accepted: the owner tombstones their keys
        in this order (and none after a segment it names that it could not tombstone). A rewrite
        waits while a segment it names is known and not forgotten with it (a merge's source its
        proof could not delete yet, under an erasure's rewrite of the merge), and comes after the
        ones it names: a reader of the topic compacted past the rewrite's tombstone but not its
        source's would serve the source (with the erased records) and refuse the rewrite over it,
        which names only the merge. The waiting ones are found to a fixed point: a handful of
        deletions a pass, between tombstones."""
        done = {sid for sid, s in self.segments.items() if s.state is _S.DELETE_SEGMENT_FINISHED}
        waiting = True
        while waiting:
            waiting = False
            for sid in list(done):
                if any(x in self.segments and x not in done for x in self.segments[sid].supersedes):
                    done.discard(sid)
                    waiting = True
        ordered = sorted(
            (self.segments[x] for x in done), key=lambda s: (s.start_offset, str(s.segment_id.id))
        )
        return self._sources_first(ordered)

    def held_by(self, rewrite: RemoteLogSegmentMetadata) -> list[RemoteLogSegmentMetadata]:
        """The finished segments served ``rewrite`` holds (:meth:`rewrite_proofs`), each after the
        ones it names: stated again before ``rewrite`` is, a reader of the compacted topic judges
        them where the rewrite over them is not served yet, as live readers did."""
        if rewrite.segment_id.id not in self.served or not rewrite.supersedes:
            return []
        rid = rewrite.segment_id.id
        return self._sources_first(
            [
                self.segments[sid]
                for sid, holder in self.rewrite_proofs().items()
                if holder.segment_id.id == rid and self.segments[sid].state is _S.COPY_SEGMENT_FINISHED
            ]
        )

    def repairs(self) -> list[RemoteLogSegmentMetadata]:
        """Segments whose state a rejected record shadows: the owner re-publishes them under its own
        epoch, so compaction can never leave the rejected record as the key's only one. A served
        segment's copy key, and a deleted segment's delete key (a zombie's late DELETE_SEGMENT_FINISHED
        there: the owner's tombstones, written later, would not neutralise it for a cleaner point
        between the two, which keeps the rejected record and the copy's FINISHED, and so serves the
        segment again). A copy key shadowed while the segment is being deleted needs nothing: the
        delete key decides it is not served. A finished segment a served rewrite holds too (a
        merge under an erasure's rewrite of it): a reader of the compacted topic without its record
        would judge the rewrite over it against the segments it holds in turn, and refuse it. Stated
        again in :meth:`in_restatement_order`."""
        if not self.shadowed:
            return []
        holding = {segment_key(s.segment_id): s for s in self.finished()}
        holding.update(
            (segment_key(s.segment_id), s)
            for s in (self.segments[x] for x in self.rewrite_proofs())
            if s.state is _S.COPY_SEGMENT_FINISHED
        )
        holding.update(
            (delete_key(s.segment_id), s) for s in self.segments.values() if s.state in DELETE_STATES
        )
        return [holding[k] for k in sorted(self.shadowed) if k in holding]

    def in_restatement_order(self, states: list[RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentMetadata]:
        """``states`` to be stated again, deletions first, then the finished segments a served
        rewrite holds (each after the ones it names), then the served segments, then every served
        segment overlapping one of those deletions or held segments (added when not among
        ``states``). A deletion stated again moves, for a reader of the compacted topic, behind the
        records that came after it: a served segment over its offsets (a merge of what a deleted
        rewrite held) would be judged while the deleted one is still served, and refused; stated
        again after the deletion, it is judged again there. A held segment stated again is judged
        before the rewrites over it for the same reason: they name it."""
        deleted = [s for s in states if s.state in DELETE_STATES]
        held = self._sources_first(
            [s for s in states if s.state is _S.COPY_SEGMENT_FINISHED and s.segment_id.id not in self.served]
        )
        if not deleted and not held:
            return states
        under = [*deleted, *held]
        served = sorted((self.segments[x] for x in self.served), key=lambda s: s.start_offset)
        over = [  # what readers serve (the history a re-created topic's first copy retires too)
            s
            for s in served
            if any(d.start_offset <= s.end_offset and s.start_offset <= d.end_offset for d in under)
        ]
        return [*under, *(s for s in states if s not in under and s not in over), *over]

    @staticmethod
    def _sources_first(held: list[RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentMetadata]:
        """``held`` with every segment after the ones it names (a rewrite after its sources): a
        reader of the compacted topic accepts a rewrite over the segments it names only once it
        knows them."""
        by_id = {s.segment_id.id: s for s in held}
        out: list[RemoteLogSegmentMetadata] = []
        placed: set[uuid.UUID] = set()

        def place(s: RemoteLogSegmentMetadata, path: frozenset[uuid.UUID]) -> None:
            sid = s.segment_id.id
            if sid in placed or sid in path:
                return
            for named in s.supersedes:
                if named in by_id:
                    place(by_id[named], path | {sid})
            placed.add(sid)
            out.append(s)

        for s in held:
            place(s, frozenset())
        return out

    def refused_copies(self, epoch: int) -> list[RemoteLogSegmentMetadata]:
        """Copies of an earlier claim than ``epoch`` that never finished, whose copy key a rejected
        record shadows (a FINISHED refused because it overlapped a served segment, say). A reader of
        the compacted topic judges that record without what it was judged against once the cleaner
        passes a record that shadowed that (and the repair comes after it): it may accept it. The
        holder deletes them before it repairs anything: no claim can finish them any more."""
        return [
            s
            for s in self.segments.values()
            if s.state is _S.COPY_SEGMENT_STARTED
            and s.writer_epoch < epoch
            and segment_key(s.segment_id) in self.shadowed
        ]

    def stranded(self) -> list[RemoteLogSegmentMetadata]:
        """Finished segments of the claimed partition's history that nothing serves and nothing
        holds: no served segment overlaps them and no served rewrite names them, directly or through
        a rewrite it named. A rewrite is left so when the rewrites over it were deleted inner first
        (a holder deleting a forged rewrite from a view that did not show the forged rewrite over it
        yet: deleting the outer one then gives back a deleted one). Its objects are there and its
        offsets unserved: the holder states it again (a repair), which serves it. Only the outermost
        of nested ones, and none that overlaps one before it; none below the remote log start."""
        if not self.header.claimed:
            return []  # before claims, a newer epoch's overlapping copy replaced older ones for good
        served = self.finished()
        held = {s.segment_id.id for s in served} | set(self.rewrite_proofs())
        candidates = [
            s
            for s in self.segments.values()
            if s.state is _S.COPY_SEGMENT_FINISHED
            and s.segment_id.id not in held
            and self.in_lineage(s)
            and s.end_offset >= self.log_start_offset
            and not any(o.start_offset <= s.end_offset and s.start_offset <= o.end_offset for o in served)
        ]
        inner: set[uuid.UUID] = set()
        todo = [sid for c in candidates for sid in c.supersedes]
        while todo:
            sid = todo.pop()
            if sid not in inner:
                inner.add(sid)
                named = self.segments.get(sid)
                todo.extend(() if named is None else named.supersedes)
        out: list[RemoteLogSegmentMetadata] = []
        for s in sorted(candidates, key=lambda c: (c.start_offset, -c.end_offset, str(c.segment_id.id))):
            if s.segment_id.id not in inner and (not out or out[-1].end_offset < s.start_offset):
                out.append(s)
        return out

    def claim_records(self) -> list[RemoteLogSegmentMetadata]:
        """The states the current claim wrote that a reader needs its claim for: its served segments
        and the deletions it recorded (re-published when the claim is stated again)."""
        epoch = self.current_epoch
        return [
            s
            for s in (*self.finished(), *(x for x in self.segments.values() if x.state in DELETE_STATES))
            if s.writer_epoch == epoch
        ]

    def claim_shadowed(self) -> bool:
        """Whether a tombstone (or an undecodable value) was filed under the current claim's key: its
        holder states the claim again, then re-publishes what it wrote under it (:meth:`repairs`)."""
        claim = self.header.claim
        if claim is None:
            return False
        suffix = f"/{CLAIM_KEY_PART}/{claim.claim_id}".encode()
        return any(k.endswith(suffix) for k in self.shadowed)

    def log_start_shadowed(self) -> bool:
        """Whether a rejected record shadows the accepted remote log start offset (re-publish it)."""
        suffix = b"/" + LOG_START_OFFSET_KEY_SUFFIX.encode()
        return self.log_start_offset > 0 and any(k.endswith(suffix) for k in self.shadowed)
