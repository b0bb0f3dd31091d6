"""What a deletion is proven by, read from the bucket: a segment's own objects, its manifest (acknowledged
data), and a rewrite's index read and checked against each segment it supersedes.

Every method that reads storage fails closed: an error while reading is no proof (counted in
``processor_deletion_proofs_failed_total{reason}`` and logged, :mod:`processor.lifecycle.rewrite_proof`),
and the deletion waits for the next pass. :class:`processor.lifecycle.segment_deleter.SegmentDeleter`
acts on these answers; nothing here publishes a record or deletes an object.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Set
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from processor import metrics
from processor.errors import (
    CorruptObjectError,
    InvalidNameError,
    InvalidRangeError,
    SegmentKeyError,
    StorageError,
)
from processor.lifecycle.rewrite_proof import (
    PROOF_STORAGE_ERROR,
    PROOF_UNREADABLE,
    NotProven,
    RewriteProofs,
    proof_failed,
)
from processor.metadata.deletion_proof import REFUSED_ACKNOWLEDGED, acknowledged
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.reader.segment_blocks import fetch_index
from processor.reader.segment_keys import NO_DECRYPTION, SegmentDecryption
from processor.segment.object_keys import ObjectKeyFactory, SegmentObjectKeys
from processor.storage.chunk_storage import ChunkStorage

log = logging.getLogger(__name__)

_S = SegmentState


# indexes read at once for the proofs of one round (small objects: their requests' latency bounds it)
PROOF_READS = 16


def _index_or_failure(reader: RewriteProofs, segment: RemoteLogSegmentMetadata) -> bool:
    """Have ``reader`` read ``segment``'s index now (whether it read); a failure is kept by the
    reader (it answers the proof that asks for the index with it) and reported there, not here."""
    try:
        reader.index(segment)
    except NotProven:
        return False  # remembered by the reader, raised again (and reported) by the proof needing it
    return True


@dataclass
class UnreadableRewrites:
    """Served rewrites that do not read back (:meth:`DeletionEvidence.unreadable_rewrites`):
    ``delete`` loses nothing (no objects, or what it names is FINISHED), ``unserve`` keeps the
    objects (what it names is gone; unserved segments beneath it hold its offsets)."""

    delete: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    unserve: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    unchecked: bool = False  # one could not be checked (a storage error): the next pass asks again


class DeletionEvidence:
    """Reads the bucket for a deletion's proof; see the module docstring."""

    def __init__(
        self, storage: ChunkStorage, keys: ObjectKeyFactory, decryption: SegmentDecryption = NO_DECRYPTION
    ) -> None:
        self.storage = storage
        self.keys = keys
        # opens the indexes of encrypted rewrites and their sources (their proofs are read); without
        # the key an encrypted rewrite proves nothing, and its sources are kept
        self.decryption = decryption

    def owned_objects(self, segment: RemoteLogSegmentMetadata) -> SegmentObjectKeys:
        """The segment's objects, if its record names objects that are its own (else InvalidNameError)."""
        sid = segment.segment_id
        return self.keys.owned_objects(
            sid.topic, sid.partition, sid.id, sid.topic_id, segment.data_object_key, segment.index_object_key
        )

    def has_objects(self, segment: RemoteLogSegmentMetadata) -> bool:
        try:
            keys = self.owned_objects(segment)
        except InvalidNameError:
            return False  # names objects that are not its own: nothing of it can be read
        return all(self.storage.stat(key) is not None for key in (keys.data, keys.index))

    def acknowledged_or_unknown(self, segment: RemoteLogSegmentMetadata) -> bool | None:
        """:meth:`acknowledged`, or None (counted, logged) when the storage could not say."""
        try:
            return self.acknowledged(segment)
        except StorageError as exc:
            proof_failed(PROOF_STORAGE_ERROR, f"the manifest of {segment.segment_id}", exc)
            return None

    def acknowledged(self, segment: RemoteLogSegmentMetadata) -> bool:
        """Whether ``segment`` (not served by the view a deletion was planned on) has a manifest:
        then it is acknowledged data, and it is refused, logged and counted instead of deleted."""
        if not acknowledged(self.storage, segment):
            return False
        metrics.DELETIONS_REFUSED.labels(REFUSED_ACKNOWLEDGED).inc()
        log.error(
            "not deleting %s (%s, %d..%d): the metadata does not serve it, but its manifest is in the "
            "bucket, so its copy was acknowledged; the metadata topic is behind the bucket (lost, "
            "compacted or another one): run `processor rebuild-metadata`",
            segment.segment_id,
            segment.state.value,
            segment.start_offset,
            segment.end_offset,
        )
        return True

    def proven_superseded(
        self, part: PartitionRemoteState, only: Set[uuid.UUID] | None = None
    ) -> frozenset[uuid.UUID]:
        """The segments an accepted rewrite supersedes (``part.rewrite_proofs``) that the rewrite is
        shown to hold: its index read and verified against its metadata, the source's too, and every
        block of the source covered (:mod:`processor.lifecycle.rewrite_proof`). The record alone
        proves nothing (it may be forged with the claim's epoch and writer id), nor do objects at
        its keys; a rewrite that cannot be read, or an error while reading, proves nothing either:
        the source is kept, counted, and asked again at the next pass. ``only``: just these."""
        proofs = part.rewrite_proofs()
        if only is not None:
            proofs = {sid: rewrite for sid, rewrite in proofs.items() if sid in only}
        if not proofs:
            return frozenset()
        reader = RewriteProofs(self.storage, self.keys, self.decryption)
        self._read_indexes(reader, proofs, part)
        proven = set()
        for sid, rewrite in proofs.items():
            source = part.segments[sid]
            try:
                reader.covers(rewrite, source, part.segments)
            except NotProven as exc:
                what = f"{source.segment_id}, superseded by {rewrite.segment_id}"
                proof_failed(exc.reason, what, exc.detail)
                continue
            proven.add(sid)
        return frozenset(proven)

    @staticmethod
    def _read_indexes(
        reader: RewriteProofs,
        proofs: Mapping[uuid.UUID, RemoteLogSegmentMetadata],
        part: PartitionRemoteState,
    ) -> None:
        """Read every index the proofs need into ``reader`` before they are checked: the rewrites'
        first, then the sources' ``PROOF_READS`` at a time (a merge of a thousand small segments
        proves each by its own index: a thousand GETs, whose latency, not bytes, is the cost). What
        fails to read is remembered by ``reader`` as such and reported by the proof that needs it."""
        rewrites = {rewrite.segment_id.id: rewrite for rewrite in proofs.values()}
        readable = {sid for sid, rewrite in rewrites.items() if _index_or_failure(reader, rewrite)}
        # a source whose rewrite does not read is proven nothing: its index is not asked for
        sources = [
            part.segments[sid]
            for sid, rewrite in proofs.items()
            if sid not in rewrites and rewrite.segment_id.id in readable
        ]
        if len(sources) < 2:
            return  # read where the proof needs it
        with ThreadPoolExecutor(min(PROOF_READS, len(sources)), thread_name_prefix="proof-read") as pool:
            for _ in pool.map(lambda source: _index_or_failure(reader, source), sources):
                pass  # each answer (an index, or why not) is kept by the reader

    def unreadable_rewrites(
        self, part: PartitionRemoteState, writer_epoch: int, every: bool
    ) -> UnreadableRewrites:
        """Served rewrites whose data or index object is not in the bucket: a rewrite's objects are
        uploaded before its FINISHED is published, so one without them was forged (with the claim's
        epoch and writer id) or lost its data. Those under this claim are checked on every pass, all
        of them when ``every`` (once per claim: the ones of earlier claims, an operator's merge).
        They are deleted: their objects are not there to lose.

        A rewrite whose objects are there but whose index does not verify against its metadata (junk
        or another segment's objects at its keys) is one too, when every segment it names is still
        FINISHED: deleting it then serves them again and loses nothing (the index is read only then).
        When what it names is gone but finished segments nothing serves hold every offset of it
        (:meth:`PartitionRemoteState.held_beneath`: a rewrite it named was deleted and forgotten),
        it is only unserved, its objects kept: those segments are served again, and its objects may
        still be the only copy of what it holds. A storage error, or an encrypted index whose key
        cannot be had, proves nothing: the rewrite stays, counted, and is checked again at the next
        pass."""
        out = UnreadableRewrites()
        beneath: Callable[[RemoteLogSegmentMetadata], bool] | None = None
        for rewrite in part.finished():
            if not rewrite.supersedes or not (every or rewrite.writer_epoch == writer_epoch):
                continue
            kept = sources_kept(rewrite, part)
            if not kept and beneath is None:
                beneath = part.held_beneath()
            try:
                present = self.has_objects(rewrite)
                held = kept or (beneath is not None and beneath(rewrite))
                corrupt = self.index_fault(rewrite) if present and held else None
            except StorageError as exc:
                proof_failed(PROOF_STORAGE_ERROR, f"checking served rewrite {rewrite.segment_id}", exc)
                out.unchecked = True
                continue
            if present and corrupt is None:
                continue
            delete = not present or kept
            log.error(
                "served rewrite %s (%d..%d) %s (a forged record, or its data was lost): %s",
                rewrite.segment_id,
                rewrite.start_offset,
                rewrite.end_offset,
                "has no objects in the bucket" if not present else f"does not read back ({corrupt})",
                "deleting it, which serves again what it superseded"
                if delete
                else "unserving it, its objects kept, which serves again the unserved segments beneath it",
            )
            (out.delete if delete else out.unserve).append(rewrite)
        return out

    def index_fault(self, rewrite: RemoteLogSegmentMetadata) -> str | None:
        """Why ``rewrite``'s index does not verify against its metadata (None: it verifies, or its
        key cannot be had: that proves nothing). Raises StorageError."""
        try:
            fetch_index(self.storage, self.keys, rewrite, cipher=self.decryption.cipher(rewrite))
        except (CorruptObjectError, InvalidRangeError) as exc:  # shorter than its metadata says: corrupt
            return str(exc)
        except SegmentKeyError as exc:
            proof_failed(PROOF_UNREADABLE, f"checking rewrite {rewrite.segment_id}", exc)
        return None


def sources_kept(rewrite: RemoteLogSegmentMetadata, part: PartitionRemoteState) -> bool:
    """Whether every segment ``rewrite`` names is still FINISHED in ``part``."""
    named = [part.segments.get(sid) for sid in rewrite.supersedes]
    return all(s is not None and s.state is _S.COPY_SEGMENT_FINISHED for s in named)
