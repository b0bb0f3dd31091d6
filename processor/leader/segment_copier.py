"""Copies one sealed segment to remote storage, following KIP-405's copy path, under a claim.

1. Publish COPY_SEGMENT_STARTED (a new segment UUID for every attempt), carrying the claim epoch the
   worker holds for the partition (:mod:`processor.metadata.fold_rules`), and confirm through the worker's
   follower that readers accepted it. Not accepted (another claim holds the partition), or not
   confirmed in time: upload nothing, stop (FencedWriterError).
2. Upload the data object, then the index object (conditional creates: never overwrite), then, with
   an erasure secret, the segment's key filter (``{data}-keys``, built from its plaintext blocks).
3. Publish COPY_SEGMENT_FINISHED and confirm it the same way.
4. Write the segment's manifest next to its objects (processor/metadata/manifest.py): only a segment
   the readers accepted gets one, so a rebuild from the bucket admits nothing a fenced writer left.

Before 1 and 3 the copier also checks the claim its follower shows for the partition: if it is not
the worker's own any more, it publishes nothing. The attempt is registered as *in flight* before
STARTED goes out, so the worker's own retention pass never takes it for a dangling copy.

Failures before FINISHED is published (an upload error, a revocation) delete what was uploaded and
publish DELETE_SEGMENT_STARTED and DELETE_SEGMENT_FINISHED for the attempt (best effort: what is left
is a dangling copy the owner's cleanup removes). Once FINISHED has been published the copier never
deletes an object itself: if the record was accepted, readers serve those objects; if it was not,
the attempt is a dangling copy of a claim that is not current, and the partition's owner removes it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace

from processor import metrics
from processor.crypto.keys import EncryptionContext, KeyProvider
from processor.errors import FencedWriterError, FormatError, ObjectExistsError, ProcessorError, StorageError
from processor.kafka.partition import TopicPartition
from processor.leader.ports import ClaimId, CurrentClaim
from processor.logs import segment_fields
from processor.metadata.deletion_proof import REFUSED_ACKNOWLEDGED, acknowledged
from processor.metadata.manifest import SegmentManifest, encode_manifest, manifest_key
from processor.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, SegmentState
from processor.metadata.sink import Confirm, MetadataSink
from processor.segment.blocks_v3 import encrypt_segment
from processor.segment.index_format import encode_index, index_crc
from processor.segment.index_sealing import seal_index
from processor.segment.key_filter import FilterSecret
from processor.segment.key_filter_builder import segment_key_filter, with_key_summaries
from processor.segment.object_keys import KEY_FILTER_SUFFIX, ObjectKeyFactory
from processor.segment.sealed_segment import SealedSegment
from processor.storage.chunk_storage import ChunkStorage

log = logging.getLogger(__name__)

MANIFEST_ATTEMPTS = 4

__all__ = ["CopyCancelledError", "FencedWriterError", "SegmentCopier"]


class CopyCancelledError(ProcessorError):
    """The partition was revoked while its segment was being copied; FINISHED was not published."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class SegmentCopier:
    def __init__(
        self,
        storage: ChunkStorage,
        sink: MetadataSink,
        keys: ObjectKeyFactory,
        writer_id: str,
        clock_ms: Callable[[], int] = _now_ms,
        topic_ids: Mapping[str, str] | None = None,
        current_claim: CurrentClaim | None = None,
        confirm: Confirm | None = None,
        claim_id: ClaimId | None = None,
        new_id: Callable[[], uuid.UUID] = uuid.uuid4,
        encryption: KeyProvider | None = None,
        key_filter_secret: FilterSecret | None = None,
    ) -> None:
        self.storage = storage
        self.sink = sink
        self.keys = keys
        self.writer_id = writer_id
        self.clock_ms = clock_ms
        # the broker's current topic ids (kept fresh by the worker on every assignment)
        self.topic_ids: Mapping[str, str] = topic_ids if topic_ids is not None else {}
        # the partition's current claim as the worker's follower shows it (None: unknown here)
        self.current_claim = current_claim
        # read-your-write: did the metadata topic's readers accept the record published at this
        # offset (the worker's own follower applies the same fold as every other reader)?
        self.confirm = confirm
        # the id of the claim a segment was written under, for its manifest (None: not recorded)
        self.claim_id = claim_id
        # a new segment UUID per attempt (a model test passes deterministic ones to replay a run)
        self.new_id = new_id
        # PROCESSOR_ENCRYPTION: each segment sealed under a fresh data key this provider wraps
        self.encryption = encryption
        # PROCESSOR_ERASURE_SECRET: each segment gets a key filter keyed with it (None: no filters)
        self.key_filter_secret = key_filter_secret
        self._in_flight: dict[TopicPartition, set[uuid.UUID]] = {}
        self._lock = threading.Lock()

    def in_flight(self, tp: TopicPartition) -> frozenset[uuid.UUID]:
        """The ids of the copies of ``tp`` in progress (the retention pass must leave them)."""
        with self._lock:
            return frozenset(self._in_flight.get(tp, ()))

    def _publish_accepted(self, record: RemoteLogSegmentMetadata) -> None:
        offset = self.sink.publish(record)
        outcome = True if self.confirm is None else self.confirm(record, offset)
        if outcome is not True:
            error = FencedWriterError(
                f"{record.state.value} of {record.segment_id} (claim epoch {record.writer_epoch}) was "
                f"{'not accepted' if outcome is False else 'not confirmed in time'} by the metadata "
                "topic's readers: another claim holds the partition"
            )
            error.rejected = outcome is False
            raise error

    def check_fence(self, tp: TopicPartition, writer_epoch: int) -> None:
        """Raise FencedWriterError if the partition's current claim is not ``writer_epoch``."""
        if self.current_claim is None:
            return
        current = self.current_claim(tp)
        if current != writer_epoch:
            raise FencedWriterError(
                f"{tp}: the current claim is {current}, not this worker's {writer_epoch}; stopping"
            )

    def build_metadata(
        self, tp: TopicPartition, segment: SealedSegment, writer_epoch: int
    ) -> tuple[RemoteLogSegmentMetadata, bytes]:
        """The attempt's STARTED metadata and its index object (as stored)."""
        metadata, index, _stored = self._prepare(tp, segment, writer_epoch)
        return metadata, index

    def _prepare(
        self,
        tp: TopicPartition,
        segment: SealedSegment,
        writer_epoch: int,
        supersedes: tuple[uuid.UUID, ...] = (),
    ) -> tuple[RemoteLogSegmentMetadata, bytes, SealedSegment]:
        """The attempt's STARTED metadata, its index object and its blocks, as stored: with
        encryption, blocks and index sealed under a fresh data key, wrapped in the custom metadata
        (and so in the manifest). The metadata's format version stays the blocks' own (2): the
        blocks say they are sealed (format 3), so an older reader refuses them by name."""
        topic_id = self.topic_ids.get(tp.topic)
        segment_id = RemoteLogSegmentId(tp.topic, tp.partition, self.new_id(), topic_id)
        keys = self.keys.segment(
            tp.topic, tp.partition, segment.start_offset, segment_id.id, writer_epoch, topic_id
        )
        format_version = segment.format_version
        if self.key_filter_secret is not None:  # from the blocks in the clear, before they are sealed
            segment = replace(segment, key_filter=self._key_filter(tp, segment, segment_id.id))
        data_key = None
        if self.encryption is not None:
            context = EncryptionContext(tp.topic, topic_id or "", tp.partition, str(segment_id.id))
            data_key = self.encryption.new_data_key(context)
            segment = encrypt_segment(segment, data_key.plaintext, segment_id.id)
        index = encode_index(
            topic=tp.topic,
            partition=tp.partition,
            segment_id=segment_id.id,
            start_offset=segment.start_offset,
            end_offset=segment.end_offset,
            record_count=segment.record_count,
            max_timestamp=segment.max_timestamp,
            data_object_length=segment.size_bytes,
            blocks=segment.block_infos,
        )
        metadata = RemoteLogSegmentMetadata(
            segment_id=segment_id,
            start_offset=segment.start_offset,
            end_offset=segment.end_offset,
            max_timestamp_ms=segment.max_timestamp,
            event_timestamp_ms=self.clock_ms(),
            writer_id=self.writer_id,
            writer_epoch=writer_epoch,
            segment_leader_epochs=tuple(segment.leader_epochs),
            segment_size_in_bytes=segment.size_bytes,
            state=SegmentState.COPY_SEGMENT_STARTED,
            data_object_key=keys.data,
            index_object_key=keys.index,
            segment_format_version=format_version,
            record_count=segment.record_count,
            index_crc32=index_crc(index),
            index_size_in_bytes=len(index),
            supersedes=supersedes,
        )
        if data_key is not None:
            index = seal_index(index, data_key.plaintext, segment_id.id)
            metadata = replace(
                metadata,
                index_size_in_bytes=len(index),
                custom_metadata=data_key.wrapped.encode(),
            )
        return metadata, index, segment

    def summarise_keys(self, segment: SealedSegment) -> SealedSegment:
        """``segment`` with its keys' summaries when this copier builds key filters: the copy
        scheduler calls it once a segment, before archive compression (each attempt then only
        seals them, and never decompresses the blocks). Unchanged otherwise, or when its records
        do not frame: the copy reads them again, and leaves the filter out saying why."""
        if self.key_filter_secret is None:
            return segment
        try:
            return with_key_summaries(segment)
        except FormatError:
            return segment

    def _key_filter(self, tp: TopicPartition, segment: SealedSegment, segment_id: uuid.UUID) -> bytes | None:
        """The segment's key filter, or None when its records do not frame: the segment is still
        archived as the broker served it (its batches passed their CRC checks), and an erasure
        reads a segment without a filter whole. A filter never blocks an offload."""
        assert self.key_filter_secret is not None
        try:
            return segment_key_filter(segment, self.key_filter_secret, segment_id)
        except FormatError as exc:
            metrics.KEY_FILTER_FAILURES.inc()
            log.warning(
                "%s: segment %s (offsets %d..%d) is copied without a key filter: %s",
                tp,
                segment_id,
                segment.start_offset,
                segment.end_offset,
                exc,
            )
            return None

    def copy(
        self,
        tp: TopicPartition,
        segment: SealedSegment,
        writer_epoch: int,
        still_leader: Callable[[], bool] = lambda: True,
        supersedes: tuple[uuid.UUID, ...] = (),
    ) -> RemoteLogSegmentMetadata:
        """One copy attempt. Returns the FINISHED metadata or raises (after cleaning up what may be
        cleaned up; see the module docstring). ``supersedes``: a rewrite's (processor/rewrite/), the
        served segments whose offsets the copy takes over once its FINISHED is accepted."""
        self.check_fence(tp, writer_epoch)
        started, index, segment = self._prepare(tp, segment, writer_epoch, supersedes)
        sid = started.segment_id.id
        with self._lock:
            self._in_flight.setdefault(tp, set()).add(sid)
        try:
            # A STARTED the readers did not accept: upload nothing (no orphan objects).
            self._publish_accepted(started)
            finished = self._upload(tp, started, segment, index, writer_epoch, still_leader)
            # From here on the objects may be served: deleted by this attempt only if the readers
            # definitely rejected its FINISHED (then nobody serves them; unknown: the owner cleans up)
            try:
                self._publish_accepted(finished)
            except FencedWriterError as exc:
                if exc.rejected:
                    self._delete_objects(finished)
                raise
            self.write_manifest(finished)
            log.info("segment copied", extra=segment_fields(finished))
            return finished
        finally:
            with self._lock:
                self._in_flight.get(tp, set()).discard(sid)

    def write_manifest(self, finished: RemoteLogSegmentMetadata) -> bool:
        """Write the segment's manifest (processor/metadata/manifest.py) once its FINISHED was
        accepted, so the bucket alone can rebuild the metadata. It never fails the copy (the segment
        is served): a manifest that cannot be written is logged and counted, and the partition's
        owner writes the missing ones once per claim (processor/lifecycle/retention_service.py)."""
        tp = finished.topic_partition
        claim = None if self.claim_id is None else self.claim_id(tp, finished.writer_epoch)
        body = encode_manifest(SegmentManifest(finished, claim))
        key = manifest_key(finished.data_object_key)
        for attempt in range(MANIFEST_ATTEMPTS):
            try:
                self.storage.create(key, [body])
                return True
            except ObjectExistsError:
                return True  # an earlier attempt's create went through
            except StorageError as exc:
                if not exc.retriable or attempt + 1 == MANIFEST_ATTEMPTS:
                    metrics.MANIFEST_WRITE_FAILURES.inc()
                    log.error(
                        "could not write the manifest of %s (%s); the owner writes it later",
                        finished.segment_id,
                        exc,
                    )
                    return False
                time.sleep(min(0.2 * 2**attempt, 5.0) * random.uniform(0.8, 1.2))
        return False

    def _upload(
        self,
        tp: TopicPartition,
        started: RemoteLogSegmentMetadata,
        segment: SealedSegment,
        index: bytes,
        writer_epoch: int,
        still_leader: Callable[[], bool],
    ) -> RemoteLogSegmentMetadata:
        """Upload the objects; on any failure delete them and record the attempt deleted, then raise."""
        try:
            self.storage.create(started.data_object_key, segment.blocks)
            if not still_leader():  # revoked during the data upload: do not go on
                raise CopyCancelledError(f"{tp} was revoked during the copy of {started.segment_id}")
            self.storage.create(started.index_object_key, [index])
            if segment.key_filter is not None:
                self.storage.create(started.data_object_key + KEY_FILTER_SUFFIX, [segment.key_filter])
            if not still_leader():
                raise CopyCancelledError(f"{tp} was revoked during the copy of {started.segment_id}")
            self.check_fence(tp, writer_epoch)
        except BaseException:
            self.delete_segment(started)
            raise
        return started.with_state(SegmentState.COPY_SEGMENT_FINISHED, self.clock_ms())

    def _delete_objects(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete the objects of an attempt whose FINISHED the readers rejected (best effort: what is
        left is found by the owner's sweep of unreferenced objects)."""
        try:
            sid = metadata.segment_id
            data, index = metadata.data_object_key, metadata.index_object_key
            keys = self.keys.owned_objects(sid.topic, sid.partition, sid.id, sid.topic_id, data, index)
            for key in keys.in_delete_order():
                self.storage.delete(key)
        except ProcessorError as exc:
            log.warning("could not delete the objects of rejected copy %s: %s", metadata.segment_id, exc)

    def delete_segment(self, metadata: RemoteLogSegmentMetadata, writer_epoch: int | None = None) -> bool:
        """Delete a segment's objects and record it (DELETE_SEGMENT_STARTED, then _FINISHED), the
        records stamped with this writer and ``writer_epoch`` (default: the record's own epoch).

        Used for failed attempts and for dangling copies found on assignment (never for a segment
        that is served). Only objects that are the segment's own are deleted
        (:meth:`ObjectKeyFactory.owned_objects`). Best effort: returns False if something failed;
        the segment then stays for the owner's next cleanup.
        """
        epoch = metadata.writer_epoch if writer_epoch is None else writer_epoch
        try:
            sid = metadata.segment_id
            keys = self.keys.owned_objects(
                sid.topic,
                sid.partition,
                sid.id,
                sid.topic_id,
                metadata.data_object_key,
                metadata.index_object_key,
            )
            if writer_epoch is not None and acknowledged(self.storage, metadata):
                # a dangling copy found on assignment that has a manifest: its FINISHED was accepted
                # once, so the view that calls it dangling is behind the bucket; never deleted here
                metrics.DELETIONS_REFUSED.labels(REFUSED_ACKNOWLEDGED).inc()
                log.error(
                    "not cleaning up %s: the metadata shows it %s, but its manifest is in the bucket "
                    "(an acknowledged copy); run `processor rebuild-metadata`",
                    sid,
                    metadata.state.value,
                )
                return True
            if metadata.state != SegmentState.DELETE_SEGMENT_STARTED:
                deleting = metadata.deleting(self.clock_ms(), self.writer_id, epoch)
                self.sink.publish(deleting)
            else:
                deleting = replace(metadata, writer_id=self.writer_id, writer_epoch=epoch)
            for key in keys.in_delete_order():
                self.storage.delete(key)
            deleted = deleting.with_state(SegmentState.DELETE_SEGMENT_FINISHED, self.clock_ms())
            self.sink.publish(deleted)
            log.info("segment deleted", extra=segment_fields(deleted))
            return True
        except ProcessorError as exc:
            log.warning(
                "could not clean up segment %s (%s); the owner's next cleanup retries it",
                metadata.segment_id,
                exc,
            )
            return False
