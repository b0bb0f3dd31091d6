"""The proof a deletion needs, in one place: what makes an archived object garbage.

An object is deleted only with positive proof, from the owner's own records, that nobody is owed
what it holds; absence from a view of the metadata (stale, partial, compacted, another metadata
topic) is never proof. The proofs, by path:

- **Retention** (a served COPY_SEGMENT_FINISHED past the user's limits): the owner's conditional
  DELETE_SEGMENT_STARTED, confirmed accepted by its follower (the fold accepts it only while the
  segment is still in the state the pass planned on).
- **A deletion in progress** (DELETE_SEGMENT_STARTED accepted): that record is the owner's word.
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
- **Objects no record names** (the sweep): only in the owner's own topic-id folder, only objects its
  own claim wrote (the writer epoch in their names), never a manifest nor an object whose segment
  has one (:func:`sweepable`).
"""

from __future__ import annotations

from typing import Any, Protocol

from processor.metadata.manifest import manifest_key
from processor.metadata.model import RemoteLogSegmentMetadata

# The reasons of processor_deletions_refused_total
REFUSED_ACKNOWLEDGED = "acknowledged"  # not served by the view, but its manifest is in the bucket
REFUSED_UNREFERENCED = "unreferenced_without_proof"  # swept objects of another claim or with a manifest


class ObjectStat(Protocol):
    def stat(self, key: str) -> Any: ...


def acknowledged(storage: ObjectStat, segment: RemoteLogSegmentMetadata) -> bool:
    """Whether the bucket holds ``segment``'s manifest: its copy was acknowledged once."""
    return storage.stat(manifest_key(segment.data_object_key)) is not None
