"""The deleter's storage side (:class:`~processor.lifecycle.segment_deleter.SegmentDeleter`):
deleting the objects of segments whose deletion is started and confirmed (a segment's own keys only,
manifests of all first, then the rest, in as few requests as the store allows; what is left is
counted, logged and recorded for retry), and forgetting a finished deletion (its tombstones) only
once its objects are shown gone."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence

from processor import metrics
from processor.errors import InvalidNameError, StorageError
from processor.lifecycle.deletion_evidence import DeletionEvidence
from processor.lifecycle.ports import FailedDeletions, Tombstones
from processor.lifecycle.rewrite_proof import PROOF_STORAGE_ERROR, proof_failed
from processor.metadata.deletion_proof import REFUSED_ACKNOWLEDGED
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.segment.object_keys import SegmentObjectKeys
from processor.storage.chunk_storage import ChunkStorage, NotDeletedError

log = logging.getLogger("processor.lifecycle.segment_deleter")  # the deleter's log, as before


class ObjectDeletion:
    """The storage step of a deleter; the deleter sets these in its constructor."""

    storage: ChunkStorage
    failed: FailedDeletions
    evidence: DeletionEvidence
    tombstones: Tombstones
    finished: dict[uuid.UUID, int]  # segment -> the event time of the FINISHED this deleter wrote

    def owned_objects(self, segment: RemoteLogSegmentMetadata) -> SegmentObjectKeys:
        return self.evidence.owned_objects(segment)

    def forget_manifests(self, segments: Iterable[RemoteLogSegmentMetadata]) -> None:
        """Delete the manifests of every segment about to be deleted, before any of them goes: a
        deletion that stops half way leaves objects a rebuild of the metadata never serves again
        (processor/rebuild/). A manifest that cannot be deleted now is deleted with its segment."""
        manifests: dict[uuid.UUID, tuple[str, ...]] = {}
        for segment in segments:
            try:
                manifests[segment.segment_id.id] = (self.owned_objects(segment).manifest,)
            except InvalidNameError as exc:
                log.warning("could not delete the manifest of %s yet: %s", segment.segment_id, exc)
        for sid, error in self._delete_keys(manifests).items():
            log.warning("could not delete the manifest of %s yet: %s", sid, error)

    def delete_objects(self, segment: RemoteLogSegmentMetadata) -> str | None:
        """Delete the segment's own objects; on a storage error (or keys that are not the segment's)
        count it, record the segment on the deletion topic and return the error."""
        return self.delete_objects_of([segment]).get(segment.segment_id.id)

    def delete_objects_of(
        self, segments: Sequence[RemoteLogSegmentMetadata], record: bool = True
    ) -> dict[uuid.UUID, str]:
        """Delete the own objects of several segments, whose deletion is started and confirmed: the
        manifests of all of them first (a deletion that stops half way leaves nothing a rebuild
        would serve again), then, of those whose manifest is gone, the data, index and key filter,
        each step in as few requests as the store allows (``delete_many``). Returns the segments
        that are not done, each with its error: counted, recorded on the deletion topic for retry
        (keys that are not the segment's own are such an error too; ``record`` False: a retry of
        the deletion topic's own entries, which stay there)."""
        errors: dict[uuid.UUID, str] = {}
        owned: dict[uuid.UUID, SegmentObjectKeys] = {}
        for segment in segments:
            try:
                owned[segment.segment_id.id] = self.owned_objects(segment)
            except InvalidNameError as exc:
                errors[segment.segment_id.id] = str(exc)
        errors.update(self._delete_keys({sid: (keys.manifest,) for sid, keys in owned.items()}))
        rest = {
            sid: (keys.data, keys.index, keys.key_filter) for sid, keys in owned.items() if sid not in errors
        }
        errors.update(self._delete_keys(rest))
        for segment in segments:
            error = errors.get(segment.segment_id.id)
            if error is not None:
                metrics.DELETE_FAILURES.inc()
                log.warning(
                    "could not delete the objects of %s (%s); queued for retry", segment.segment_id, error
                )
                if record:
                    self.failed.record_failed(segment)
        return errors

    def _delete_keys(self, keys_of: Mapping[uuid.UUID, Sequence[str]]) -> dict[uuid.UUID, str]:
        """Delete every key of ``keys_of`` (segment -> its keys) at once; the segments with a key
        left, each with that key's error. An error that does not name its keys leaves every
        segment of the call undone (their deletion is retried whole: deleting is idempotent)."""
        keys = [key for segment_keys in keys_of.values() for key in segment_keys]
        if not keys:
            return {}
        try:
            self.storage.delete_many(keys)
        except NotDeletedError as exc:
            return {
                sid: "; ".join(f"{k}: {exc.errors[k]}" for k in segment_keys if k in exc.errors)
                for sid, segment_keys in keys_of.items()
                if any(k in exc.errors for k in segment_keys)
            }
        except StorageError as exc:
            return dict.fromkeys(keys_of, str(exc))
        return {}

    def forget(self, segment: RemoteLogSegmentMetadata) -> bool:
        """Tombstone a segment whose DELETE_SEGMENT_FINISHED the owner's view shows, so compaction
        forgets its keys (the fold accepts a segment's tombstone only once its deletion finished).
        A deletion this deleter did not finish whose data or index is still in the bucket (a forged
        record), or whose objects the storage could not be asked about, is not forgotten: its keys
        and objects stay, reported; returns False then."""
        if self.finished.get(segment.segment_id.id) != segment.event_timestamp_ms:
            try:
                keys = self.owned_objects(segment)
                left = [key for key in (keys.data, keys.index) if self.storage.stat(key) is not None]
            except InvalidNameError:
                left = []  # names no object of its own: nothing of it can be in the bucket
            except StorageError as exc:  # no answer is no proof: forgotten at a later pass
                proof_failed(PROOF_STORAGE_ERROR, f"forgetting {segment.segment_id}", exc)
                return False
            if left:
                metrics.DELETIONS_REFUSED.labels(REFUSED_ACKNOWLEDGED).inc()
                log.error(
                    "not forgetting %s: the metadata says its deletion finished, but %s is still in the "
                    "bucket (a record this worker did not write); `processor rebuild-metadata` serves it "
                    "again if it was acknowledged",
                    segment.segment_id,
                    left[0],
                )
                return False
        self.tombstones.tombstone(segment)
        return True
