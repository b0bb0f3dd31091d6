"""The metadata fold's claim rules: what a claim, a release or a restated claim changes, the check of
every other record's writer epoch against the current claim, and the keys a lost claim leaves for
its holder to re-publish. The rules as a whole are in :mod:`processor.metadata.fold_rules`. Pure."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace

from processor.kafka.partition import TopicPartition
from processor.metadata.codec import CLAIM_KEY_PART, delete_key, log_start_offset_key, segment_key
from processor.metadata.fencing import OLD_TOPIC_ID, STALE_EPOCH, Lineage, RejectedRecordError
from processor.metadata.fold_reasons import NO_CLAIM, UNSERVABLE
from processor.metadata.fold_state import Change, Claim, FoldStore, PartitionHeader
from processor.metadata.model import (
    DELETE_STATES,
    ClaimKind,
    MetadataRecord,
    PartitionClaim,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogStartOffset,
    RemotePartitionDeleteMetadata,
    SegmentState,
)


def _claim_lineage(lineage: Lineage, topic_id: str | None) -> Lineage:
    """The lineage after a claim made when the broker reported ``topic_id``. A claim under another
    id than the partition's changes nothing yet: the new id is the claim's own (``Claim.topic_id``),
    and the first copy of a new segment under it switches the lineage (:func:`copy_lineage`). One
    claim with a made-up id (forged: its writer needs no broker) hides nothing; the owner's next
    claim, with the broker's id, simply holds the partition again."""
    if topic_id is None or lineage.topic_id is not None:
        return lineage
    return replace(lineage, topic_id=topic_id)


def copy_lineage(
    header: PartitionHeader,
    record: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate,
    current: RemoteLogSegmentMetadata | None,
) -> Lineage:
    """The lineage after a record of a claimed partition (its epoch already checked). A copy under
    another topic id than the partition's is rejected (``old_topic_id``) unless it is the first copy
    of a new segment under a claim made with that id (not a retired one): then the topic was deleted
    and re-created, a new history begins (the old id is retired, its segments stop being served).
    A segment whose deletion started counts as new here: a segment served again after a deletion
    its holder did not start is stated FINISHED again, and once the cleaner removed its first copy
    records, that statement is the only one a reader of the compacted topic sees of its copy, after
    the deletion (what any reader accepts the same way for a segment it never saw: the deletion of
    an unknown segment is accepted as a snapshot). Deletes of any id are accepted (a retired
    history is still cleaned up)."""
    lineage = header.lineage
    tid = record.segment_id.topic_id
    copying = record.state in (SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED)
    claim = header.claim
    named = claim.topic_id if claim is not None else None
    if (
        copying
        and named not in (None, lineage.topic_id)
        and tid != named
        and (tid is None or tid != lineage.topic_id)
    ):
        # the holder claimed under a new id (a re-created topic): what it copies is the new topic's;
        # until its first copy switches the history, the one still served may be stated again (its
        # holder's repairs: a reader of the compacted topic may know them only from those)
        raise RejectedRecordError(
            f"{record.state.value} of {record.segment_id} for topic id {tid}, but the current claim "
            f"names topic id {named} (the partition's is {lineage.topic_id})",
            UNSERVABLE if tid is None else OLD_TOPIC_ID,
        )
    if tid is None or tid == lineage.topic_id:
        return lineage
    if lineage.topic_id is None:
        return replace(lineage, topic_id=tid)
    if not copying:
        return lineage
    new = current is None or current.state is SegmentState.DELETE_SEGMENT_STARTED
    if new and named == tid and tid not in lineage.retired:
        return Lineage(lineage.max_epoch, tid, lineage.retired | {lineage.topic_id}, True)
    raise RejectedRecordError(
        f"{record.state.value} of {record.segment_id} for topic id {tid}, but the partition's is "
        f"{lineage.topic_id}",
        OLD_TOPIC_ID,
    )


def switch_unserves(
    store: FoldStore, tp: TopicPartition, before: Lineage, after: Lineage
) -> list[RemoteLogSegmentMetadata]:
    if after.topic_id == before.topic_id or before.topic_id is None:
        return []
    return [s for s in store.served(tp) if not after.serves(s.segment_id.topic_id, after.topic_id)]


def check_epoch(header: PartitionHeader, epoch: int, record: MetadataRecord) -> None:
    claim = header.claim
    if claim is not None and epoch == claim.epoch:
        writer = getattr(record, "writer_id", claim.writer_id)
        if writer == claim.writer_id:
            return
        # the claim's epoch, another writer: a version without claims whose epoch (its consumer
        # group's generation) happens to equal the claim's offset, or a forgery
        raise RejectedRecordError(
            f"{_describe(record)} from writer {writer!r} with the epoch of claim {claim.epoch}, which "
            f"{claim.writer_id!r} holds",
            STALE_EPOCH,
        )
    what = _describe(record)
    if claim is None:
        raise RejectedRecordError(f"{what} (writer epoch {epoch}) while nobody holds a claim", NO_CLAIM)
    raise RejectedRecordError(
        f"{what} from writer epoch {epoch}, but the current claim is {claim.epoch} ({claim.writer_id})",
        STALE_EPOCH,
    )


def _describe(record: MetadataRecord) -> str:
    if isinstance(record, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate):
        return f"{record.state.value} of {record.segment_id}"
    if isinstance(record, RemoteLogStartOffset):
        return f"remote log start offset {record.start_offset} of {record.topic_partition}"
    if isinstance(record, RemotePartitionDeleteMetadata):
        return f"{record.state.value} of partition {record.topic_partition}"
    return f"{record.kind.value} claim of {record.topic_partition}"


def claim_key_of(tp: TopicPartition, claim_id: uuid.UUID) -> bytes:
    return f"{tp.topic}/{tp.partition}/{CLAIM_KEY_PART}/{claim_id}".encode()


def claim_records(
    store: FoldStore, tp: TopicPartition, header: PartitionHeader, pick: Callable[[int], bool]
) -> list[tuple[bytes, bool]]:
    """The keys holding an accepted state of ``tp`` whose record's epoch ``pick`` selects (served
    segments' copy keys, deleting segments' delete keys, the remote log start offset's key), to be
    marked shadowed: the owner re-publishes each under its claim
    (:meth:`~processor.metadata.restatements.Restatements.repairs`). Finished segments
    a rewrite holds are marked too (a reader without their claim refused them): the owner states
    them again before the rewrites over them, and again once given back (the rewrite deleted)."""
    keys = [(segment_key(s.segment_id), True) for s in store.served(tp) if pick(s.writer_epoch)]
    keys += [
        (delete_key(s.segment_id) if s.state in DELETE_STATES else segment_key(s.segment_id), True)
        for s in store.unserved(tp)
        if pick(s.writer_epoch)
    ]
    if header.log_start_offset > 0:
        keys.append((log_start_offset_key(tp), True))
    return keys


def _claim_ends(store: FoldStore, tp: TopicPartition, header: PartitionHeader) -> list[tuple[bytes, bool]]:
    """The current claim is released: if a tombstone or an undecodable value was filed under its key,
    a reader of the compacted topic will not have it, and would reject every record of the claim
    that is still its key's latest. Those keys are marked for the next holder to re-publish (the
    claim's key stays shadowed until the next claim)."""
    claim = header.claim
    if claim is None or not store.is_shadowed(tp, claim_key_of(tp, claim.claim_id)):
        return []
    return claim_records(store, tp, header, lambda epoch: epoch == claim.epoch)


def _claims_lost(store: FoldStore, tp: TopicPartition, header: PartitionHeader) -> list[tuple[bytes, bool]]:
    """A new claim: from here on every reader, with or without the claim records a tombstone or an
    undecodable value took, agrees on who holds the partition. The keys those claims held are no
    longer anyone's to repair; every state written before is marked for the new holder to re-publish
    under its own claim (a reader of the compacted topic may have judged it without its claim)."""
    head = f"{tp.topic}/{tp.partition}/{CLAIM_KEY_PART}/".encode()
    lost = [k for k in store.shadowed_keys(tp) if k.startswith(head)]
    if not lost:
        return []
    return [*((k, False) for k in lost), *claim_records(store, tp, header, lambda epoch: True)]


def decide_claim(store: FoldStore, offset: int, claim: PartitionClaim) -> Change:
    tp = claim.topic_partition
    header = store.header(tp)
    if claim.kind is ClaimKind.RELEASE:
        if header.claim is None or header.claim.epoch != claim.released_epoch:
            raise RejectedRecordError(
                f"release of claim {claim.released_epoch}, but the current claim is {header.current_epoch}",
                STALE_EPOCH,
            )
        return Change(
            header=replace(header, claimed=True, claim=None), shadows=tuple(_claim_ends(store, tp, header))
        )
    epoch = offset
    restated = claim.restates_epoch
    if restated >= 0:
        held = header.claim
        if held is not None and held.epoch == restated:
            if (held.claim_id, held.writer_id, held.kind) != (claim.claim_id, claim.writer_id, claim.kind):
                raise RejectedRecordError(
                    f"{claim.kind.value} claim {claim.claim_id} of {claim.writer_id!r} states claim "
                    f"{restated} again, which is {held.claim_id} of {held.writer_id!r}",
                    STALE_EPOCH,
                )
            # the holder states its claim again: every record of the claim that is still its key's
            # latest was written before this one, and a reader that no longer has the claim's first
            # record judges them without it; the holder re-publishes them after this record
            marks = [
                (claim_key_of(tp, held.claim_id), False),
                *claim_records(store, tp, header, lambda e: e == restated),
            ]
            return Change(shadows=tuple(marks))
        if (
            restated >= offset
            or (held is not None and held.epoch > restated)
            or restated < header.highest_claim_epoch
        ):
            # a later claim was made since (current, or released: an operator's command): a zombie
            # stating its old claim again never makes it current again
            raise RejectedRecordError(
                f"{claim.kind.value} claim {claim.claim_id} states claim {restated} again, but the current "
                f"claim is {header.current_epoch} (the highest so far {header.highest_claim_epoch})",
                STALE_EPOCH,
            )
        epoch = restated  # a reader of the compacted topic: the claim's first record is gone
    lineage = _claim_lineage(header.lineage, claim.topic_id)
    current = Claim(
        epoch, claim.claim_id, claim.kind, claim.writer_id, claim.topic_id, claim.event_timestamp_ms
    )
    return Change(
        header=replace(
            header,
            claimed=True,
            claim=current,
            lineage=lineage,
            highest_claim_epoch=max(header.highest_claim_epoch, epoch),
        ),
        unserve=tuple(switch_unserves(store, tp, header.lineage, lineage)),
        shadows=tuple(_claims_lost(store, tp, header)),
    )
