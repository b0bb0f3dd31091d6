"""The world of the ownership model (tests/unit/test_ownership_model.py): the bucket, the metadata
partition with its live fold and a cleaner, and the deletion topic. Only what the real parts talk
to; the rules and invariants live in the model."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import Message as KafkaMessage

from processor.errors import InvalidRangeError, ObjectNotFoundError, StorageError
from processor.kafka.partition import TopicPartition
from processor.metadata.authentication import DOMAIN_METADATA, KeyRing, MetadataAuth
from processor.metadata.codec import delete_key, encode_value, record_key, segment_key
from processor.metadata.fold import MetadataFold
from processor.metadata.fold_reasons import CONDITION
from processor.metadata.model import MetadataRecord, PartitionClaim, RemoteLogSegmentMetadata
from processor.storage.chunk_storage import Buffer, ChunkInfo, ChunkStorage

# MODEL_TRACE=1 prints, in the run hypothesis reports, every step, message appended (with its
# verdict) and object deleted: how to read a failing run the model found
TRACE = os.environ.get("MODEL_TRACE") == "1"


_final = [False]  # the last answer on the test's thread (the stepped copier runs in a thread of its own)


def tracing() -> bool:
    if not TRACE:
        return False
    from hypothesis.control import current_build_context
    from hypothesis.errors import InvalidArgument

    with contextlib.suppress(InvalidArgument):
        _final[0] = current_build_context().is_final
    return _final[0]


class Bucket:
    """The objects the model's owners upload; deletes of missing objects succeed (S3's rule)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.written: dict[str, int] = {}  # when each object was written, by the storage's clock
        self.now = 1_000_000  # the storage's clock: its own, whatever the workers' clocks say
        self.failing = False  # deletes fail (S3 down): the deleter queues them for retry
        self.manifests_fail = False  # manifest writes fail: a copy is acknowledged without one
        # HEADs and reads of segments' data and index objects fail (a 503 after the client's
        # retries): what a deletion's proof asks of the bucket
        self.proofs_fail = False

    def create(self, key: str, parts: Sequence[Buffer]) -> ChunkInfo:
        if self.manifests_fail and key.endswith("-manifest"):
            raise StorageError(f"injected: cannot write {key}", retriable=False)
        self.objects[key] = b"".join(bytes(p) for p in parts)
        self.now += 1
        self.written[key] = self.now
        return ChunkInfo(key, len(self.objects[key]), self.now)

    def _asked(self, key: str) -> None:
        if self.proofs_fail and (key.endswith(".log") or key.endswith("-index")):
            raise StorageError(f"injected: cannot ask for {key}")

    def stat(self, key: str) -> ChunkInfo | None:
        self._asked(key)
        return ChunkInfo(key, len(self.objects[key]), self.written[key]) if key in self.objects else None

    def read(self, key: str, offset: int, length: int) -> bytes:
        self._asked(key)
        if key not in self.objects:
            raise ObjectNotFoundError(key)
        data = self.objects[key]
        if offset < 0 or length < 0 or offset + length > len(data):
            raise InvalidRangeError(key, f"{offset}+{length} outside {len(data)} bytes")
        return data[offset : offset + length]

    def read_all(self, key: str) -> bytes:
        if key not in self.objects:
            raise ObjectNotFoundError(key)
        return self.objects[key]

    def list(self, prefix: str) -> list[ChunkInfo]:
        return [
            ChunkInfo(k, len(v), self.written[k])
            for k, v in sorted(self.objects.items())
            if k.startswith(prefix)
        ]

    def delete(self, key: str) -> None:
        if self.failing:
            raise StorageError(f"injected: cannot delete {key}")
        if tracing() and key in self.objects:
            print(f"  deleted {key}")
        self.objects.pop(key, None)

    # several at once, as the contract's default does it: one delete each, the keys that failed named
    delete_many = ChunkStorage.delete_many


@dataclass
class Message:
    offset: int
    key: bytes
    value: bytes | None


# The deployment's authenticator key and one a forger made up under the same key id.
AUTH = MetadataAuth("require", KeyRing({"k-model": (0, b"\x11" * 32)}))
FORGER = MetadataAuth("require", KeyRing({"k-model": (0, b"\x66" * 32)}))
SIGNATURES = ("good", "none", "wrong")


def screened(key: bytes, value: bytes | None, signature: str, require: bool) -> bytes | None:
    """What every reader folds of a message signed ``signature`` ("good": by a writer of the
    deployment, "none": unsigned, "wrong": with a key not the deployment's): the real screen
    (processor/metadata/authentication.py) over a real Kafka message; ``require`` off, it folds
    every one (the screen's sign mode)."""
    signer = {"good": AUTH, "wrong": FORGER}.get(signature)
    headers = None if signer is None else signer.headers(DOMAIN_METADATA, key, value)
    msg = KafkaMessage(topic="meta", partition=0, offset=0, key=key, value=value, headers=headers)
    auth = AUTH if require else MetadataAuth("sign", AUTH.ring)
    return auth.screen(DOMAIN_METADATA, msg)


class Topic:
    """One metadata partition: appended messages, a fold that read them live, the verdicts, and
    what the ownership rules forbid (checked by the model's invariants). ``require``: readers
    refuse what does not verify (PROCESSOR_METADATA_AUTH=require); the log keeps each message as
    every reader folds it (the screen is a pure function of the message)."""

    def __init__(
        self, partitions: tuple[TopicPartition, ...], writers: tuple[str, ...], require: bool = False
    ) -> None:
        self.partitions, self.writers = partitions, writers  # the model's, and its workers' ids
        self.require = require
        self.log: list[Message] = []
        self.next_offset = 0
        self.live = MetadataFold()
        self.accepted: dict[int, bool] = {}
        self.foreign_accepted: list[str] = []  # accepted records of a writer not holding the claim
        self.self_fenced: list[str] = []  # a claim holder's own record rejected
        # the offset of the latest forged record the readers accepted, by partition: a holder's
        # record written from a view read before it may lose to it (the fold's condition at work)
        self.forged_accepted_at: dict[TopicPartition, int] = {}
        # what each accepted rewrite named, kept after the fold forgets the rewrite (its deletion
        # finished and its keys were tombstoned): a rewrite over it still holds those offsets
        self.named: dict[uuid.UUID, tuple[uuid.UUID, ...]] = {}

    def append(self, key: bytes, value: bytes | None, forged: bool = False, signature: str = "good") -> int:
        """Append a message; ``forged``: a hostile record carrying a claim holder's epoch and writer
        id (not the holder's own: its rejection fences no one); ``signature``: see :func:`screened`."""
        if signature != "good":
            value = screened(key, value, signature, self.require)
        offset = self.next_offset
        self.next_offset += 1
        self.log.append(Message(offset, key, value))
        claims = {tp: self.live.partition(tp).header.claim for tp in self.partitions}
        verdict = self.live.apply_raw(offset, key, value)
        self.accepted[offset] = verdict.accepted
        if tracing():
            shown = "tombstone" if value is None else repr(verdict.record or value[:16])
            print(f"  @{offset} {key.decode(errors='replace')} {verdict.accepted} {verdict.reason} {shown}")
        record = verdict.record
        if forged and verdict.accepted and record is not None:
            self.forged_accepted_at[record.topic_partition] = offset
        if verdict.accepted and isinstance(record, RemoteLogSegmentMetadata) and record.supersedes:
            self.named[record.segment_id.id] = record.supersedes
        if record is None or isinstance(record, PartitionClaim):
            return offset
        claim = claims.get(record.topic_partition)
        if claim is None:
            return offset
        writer = getattr(record, "writer_id", "")
        if verdict.accepted and writer != claim.writer_id and writer in self.writers:
            self.foreign_accepted.append(f"{writer}'s record at {offset} under {claim.writer_id}'s claim")
        if (
            not verdict.accepted
            and not forged
            and verdict.reason != CONDITION
            and writer in self.writers
            and getattr(record, "writer_epoch", None) == claim.epoch
            # not raced by a forged record accepted under this claim: no view read before that can
            # know it, and the holder's record losing to it is the condition doing its work (the
            # holder's next pass, on a view that shows it, deletes the forgery and repairs)
            and self.forged_accepted_at.get(record.topic_partition, -1) < claim.epoch
        ):
            self.self_fenced.append(
                f"{writer}'s own record at {offset} rejected: {verdict.reason} {verdict.detail}"
            )
        return offset

    def publish(self, record: MetadataRecord, forged: bool = False, signature: str = "good") -> int:
        return self.append(record_key(record), encode_value(record), forged, signature)

    def tombstone(self, segment: RemoteLogSegmentMetadata) -> int:
        self.append(segment_key(segment.segment_id), None)
        return self.append(delete_key(segment.segment_id), None)

    def confirm(self, record: MetadataRecord, offset: int) -> bool:
        return self.accepted.get(offset, False)

    def fresh_fold(self) -> MetadataFold:
        fold = MetadataFold()
        for m in self.log:
            fold.apply_raw(m.offset, m.key, m.value)
        return fold

    def compact(self, point: int) -> None:
        """Kafka's cleaner up to ``point``: of the messages below it, only the latest of each key
        survives, and tombstones go (as after ``delete.retention.ms``)."""
        latest: dict[bytes, int] = {}
        for m in self.log:
            if m.offset < point:
                latest[m.key] = m.offset
        self.log = [
            m for m in self.log if m.offset >= point or (latest[m.key] == m.offset and m.value is not None)
        ]


class FailedDeletions:
    """The deletion topic: failed deletions wait here; the next pass requeues them anyway."""

    def __init__(self) -> None:
        self.pending: set[uuid.UUID] = set()

    def record_failed(self, segment: RemoteLogSegmentMetadata) -> None:
        self.pending.add(segment.segment_id.id)

    def resolve(self, segment: RemoteLogSegmentMetadata) -> None:
        self.pending.discard(segment.segment_id.id)
