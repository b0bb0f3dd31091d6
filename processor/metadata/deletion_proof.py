"""The proof a deletion needs, in one place: what makes an archived object garbage.

An object is deleted only with positive proof, from the owner's own records, that nobody is owed
what it holds; absence from a view of the metadata (stale, partial, compacted, another metadata
topic) is never proof. The proofs, by path:

- **Retention** (a served COPY_SEGMENT_FINISHED past the user's limits): the owner's conditional
  DELETE_SEGMENT_STARTED, confirmed accepted by its follower (the fold accepts it only while the
  segment is still in the state the pass planned on).
- **A deletion in progress** (DELETE_SEGMENT_STARTED accepted): finished only by the process that
  started it, below a remote log start offset it published, or once the segment's data or index is
  gone; any other is undone (processor/lifecycle/segment_deleter.py ``prove_deletion``).
- **A segment a rewrite superseded** (a merge, an erasure): only once the rewrite's index was read,
  verified against its metadata, and shown to cover every block of the segment's own verified index
  (processor/lifecycle/rewrite_proof.py), whoever deletes it (the merge or erasure itself, the
  holder's pass, a new owner). The rewrite's record alone, or objects at its keys, prove nothing.
- **Fail closed**: a proof that cannot be read (a storage error on a HEAD or GET, an index that does
  not verify, a key that cannot be had) proves nothing; the deletion waits for the next pass,
  counted (``processor_deletion_proofs_failed_total{reason}``).
- **A copy that can never finish** (COPY_SEGMENT_STARTED of an older claim, or of this claim and not
  in flight), **an orphan** (a rejected copy record of a segment nobody accepted): only if the
  segment has no manifest. A manifest is written only after the segment's COPY_SEGMENT_FINISHED was
  accepted, so a manifest proves the data was acknowledged once; a view that does not serve it is
  behind the bucket (a lost or compacted metadata topic), and deleting would lose acknowledged data.
  Such a segment is left alone and reported (``processor_deletions_refused_total{reason}``): run
  ``processor rebuild-metadata``.
- **A finished segment that is not served** (a retired topic id, a copy superseded before claims
  existed) is never deleted by a worker: its history may be what a disaster recovery restores from.
  ``processor delete-topic --topic-id`` deletes a retired history by name.
- **Objects no record names** (the sweep, :func:`plan_sweep`): only in the partition's folder of its
  current topic id, never a manifest nor an object whose segment has one; a worker deletes only
  objects its own claim wrote (the writer epoch in their names), older than ten minutes; an operator
  (``processor sweep``) those of any writer, older than a long grace. Age is judged by the storage's
  own clock alone (a probe object's time), never against the machine's. A worker also deletes only
  objects the storage wrote after it first saw its claim: the epoch in a name is no proof on its own
  once the metadata partition lost its tail and handed the epoch out again. The listing is taken
  before the metadata is read: an upload's COPY_SEGMENT_STARTED is published before its first byte,
  so every object in the listing of a copy that could still finish is named by a record the view
  holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from processor.metadata.manifest import manifest_key
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.segment.object_keys import KEY_FILTER_SUFFIX, MANIFEST_SUFFIX, ObjectKeyFactory

# The reasons of processor_deletions_refused_total
REFUSED_ACKNOWLEDGED = "acknowledged"  # not served by the view, but its manifest is in the bucket
REFUSED_UNREFERENCED = "unreferenced_without_proof"  # swept objects of another claim or with a manifest


class ObjectStat(Protocol):
    def stat(self, key: str) -> Any: ...


def acknowledged(storage: ObjectStat, segment: RemoteLogSegmentMetadata) -> bool:
    """Whether the bucket holds ``segment``'s manifest: its copy was acknowledged once."""
    return storage.stat(manifest_key(segment.data_object_key)) is not None


class ListedObject(Protocol):
    @property
    def key(self) -> str: ...

    @property
    def modified_ms(self) -> int | None: ...


@dataclass
class SweepPlan:
    delete: list[str] = field(default_factory=list)  # unreferenced, and proven garbage
    kept: list[str] = field(default_factory=list)  # unreferenced, without proof that they are garbage


def plan_sweep(
    listed: Iterable[ListedObject],
    part: PartitionRemoteState,
    keys: ObjectKeyFactory,
    now_ms: int,
    min_age_ms: int,
    in_flight: frozenset[uuid.UUID] = frozenset(),
    writer_epoch: int | None = None,
    written_since_ms: int | None = None,
) -> SweepPlan:
    """Which of a partition folder's ``listed`` objects no record of ``part`` names may go: objects of
    this project's layout, not a manifest, whose segment has no manifest in the listing, not of a
    copy in flight, older than ``min_age_ms`` at ``now_ms`` (by the storage's timestamps) and, when
    ``writer_epoch`` is given, written under that claim (the epoch in the name) and, when
    ``written_since_ms`` is given, written at or after it by the storage's clock (an epoch can be
    handed out again when the metadata partition loses its tail: the name alone is no proof).
    Unreferenced objects that fail any of the proofs are ``kept``; objects too young to judge are in
    neither list. Pure."""
    listed = list(listed)
    referenced = {
        k
        for s in part.segments.values()
        for k in (
            s.data_object_key,
            s.index_object_key,
            manifest_key(s.data_object_key),
            s.data_object_key + KEY_FILTER_SUFFIX,
        )
    }
    manifests = {o.key[: -len(MANIFEST_SUFFIX)] for o in listed if o.key.endswith(MANIFEST_SUFFIX)}
    plan = SweepPlan()
    for obj in listed:
        if obj.key in referenced or not keys.is_project_key(obj.key):
            continue
        name = keys.segment_name(obj.key)
        if name is None:
            continue
        sid, epoch, data_key = name
        if sid in in_flight or obj.modified_ms is None or now_ms - obj.modified_ms < min_age_ms:
            continue
        acknowledged_once = obj.key.endswith(MANIFEST_SUFFIX) or data_key in manifests
        earlier = written_since_ms is not None and obj.modified_ms < written_since_ms
        if acknowledged_once or earlier or (writer_epoch is not None and epoch != writer_epoch):
            plan.kept.append(obj.key)
        else:
            plan.delete.append(obj.key)
    return plan
