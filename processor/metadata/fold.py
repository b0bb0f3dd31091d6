"""The one fold of the metadata topic: which records are accepted and which segments are served.
Pure; every reader uses it (the follower cache through its RocksDB store, the leader's resume,
retention, the CLI, the Spark metadata source, the audit, the rebuild).

Ownership by the metadata log
=============================
All records about one source partition ``tp`` live in one metadata partition, in one order. An owner
*claims* ``tp`` by appending a :class:`~processor.metadata.model.PartitionClaim`; the claim's
**epoch is the offset the claim got**. So no two claims ever share an epoch, and every reader sees
the same claims in the same order (Kafka's leader epochs come from one sequencer, the controller;
here the sequencer is the metadata log). From the first claim of ``tp`` on (*claim mode*):

- a ``LEAD`` or ``ADMIN`` claim is always accepted and becomes the *current claim*; a ``RELEASE``
  ends the current claim if it names its epoch (then no one holds ``tp`` until the next claim);
- a segment record, start-offset record or partition-delete record is accepted only if its
  ``writer_epoch`` is the current claim's epoch at that point of the log (else ``stale_epoch``, or
  ``no_claim`` after a release): a writer paused past its session timeout, a zombie, or a process
  with a made-up epoch writes nothing anyone reads;
- then the usual checks: the topic id (a claim carrying a new topic id means the topic was deleted
  and re-created: the old id's segments are no longer served, copies of a retired id are
  ``old_topic_id``), the KIP-405 state machine (``illegal``), and for COPY_SEGMENT_FINISHED: it must
  not overlap a segment already served (``overlap``). Owners never produce an overlap: an owner
  resumes after reading the log up to its own claim, so it knows every finished segment accepted
  before it; what remains is a hostile or broken record, and it can never unserve what was
  acknowledged (the first finished segment of a range stays served);
- served = the accepted COPY_SEGMENT_FINISHED segments of the current topic id.

Records of a partition before its first claim (written by versions without claims) are folded by
the old rules (:mod:`processor.metadata.fencing`: the newest writer epoch seen wins, older ones
are rejected; overlapping finished segments of a newer epoch replace older ones).

Compaction
----------
Claims are keyed one per claim, so compaction never removes one: a reader of a compacted topic
judges each surviving record against the same claim as a reader of the live topic. A record that
survives compaction is the latest of its key; the fold decides it the same way in both. One case
needs the owner's help: a *rejected* record under the key of an *accepted* state (a zombie's delete
of a finished segment) would, once compacted, leave only the rejected record. The fold marks such
keys *shadowed*; the current owner re-publishes the accepted state under its own epoch
(:func:`repairs`) long before the topic's ``min.compaction.lag.ms`` lets the cleaner reach them,
also a deleted segment's delete state before it tombstones the segment's keys (tombstones written
after the rejected record neutralise it only for a cleaner point past them both).
A rejected record of a segment no accepted record knows is an *orphan*: its objects (if any were
uploaded) are deleted and its key tombstoned by the owner's cleanup.

Tombstones mean what compaction makes of them: a segment's tombstone forgets the segment, a
start-offset tombstone resets the start offset to 0, a partition-delete tombstone forgets the
partition's delete state. A claim is never forgotten: once the partition has a claim, a tombstone
(or an undecodable value) under a claim's key is rejected and shadows the key. The current holder
states its claim again under the same key (``restates_epoch``: a reader that no longer has the
first record takes the claim from this one), which marks every state it wrote under the claim for
re-publishing after it; a shadowed key of another claim waits for the next claim, which marks every
state written before it for its holder to re-publish.

Every exception while applying one record is contained to that record: it is rejected
(``internal_error``) and nothing of it is applied.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import NamedTuple, Protocol

from processor.errors import FormatError, IllegalTransitionError
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import (
    CLAIM_KEY_PART,
    DELETE_KEY_SUFFIX,
    LOG_START_OFFSET_KEY_SUFFIX,
    decode_message,
    delete_key,
    log_start_offset_key,
    record_key,
    segment_key,
)
from processor.metadata.fencing import OLD_TOPIC_ID, STALE_EPOCH, Lineage, StaleRecordError
from processor.metadata.model import (
    DELETE_STATES,
    ClaimKind,
    MetadataRecord,
    PartitionClaim,
    PartitionDeleteState,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogStartOffset,
    RemotePartitionDeleteMetadata,
    SegmentState,
)
from processor.metadata.state_machine import apply_snapshot, apply_update, check_partition_transition
from processor.metadata.validation import MAX_PARTITION
from processor.metadata.validation import TOPIC_NAME as _TOPIC

log = logging.getLogger(__name__)

# Why a record was rejected: the ``reason`` label of processor_metadata_records_rejected_total.
UNDECODABLE = "undecodable"
INVALID = "invalid"
NO_CLAIM = "no_claim"
ILLEGAL = "illegal"
OVERLAP = "overlap"
CONDITION = "condition_failed"  # a conditional delete whose segment is no longer in the state it names
UNSERVABLE = "unservable"  # a COPY_SEGMENT_FINISHED the fold would accept but never serve
MISPLACED = "misplaced_tombstone"  # a tombstone that names another partition's segment, or a live one
INTERNAL = "internal_error"
REASONS = (
    UNDECODABLE,
    INVALID,
    STALE_EPOCH,
    NO_CLAIM,
    OLD_TOPIC_ID,
    ILLEGAL,
    OVERLAP,
    CONDITION,
    UNSERVABLE,
    MISPLACED,
    INTERNAL,
)

_FINISHED = SegmentState.COPY_SEGMENT_FINISHED
_COPYING = (SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED)
HEADER_VERSION = 1


RejectedRecord = StaleRecordError  # a record the fold does not accept, with the reason it counts under


@dataclass(frozen=True, slots=True)
class Claim:
    """The current claim of a partition: who holds it and since which point of the log."""

    epoch: int  # the claim record's offset in its metadata partition
    claim_id: uuid.UUID
    kind: ClaimKind
    writer_id: str
    topic_id: str | None
    at_ms: int


@dataclass(frozen=True, slots=True)
class PartitionHeader:
    """The small per-partition state of the fold; the follower cache keeps it as one value."""

    claimed: bool = False  # a claim was seen: claim rules apply from then on
    claim: Claim | None = None  # the current claim (None: no claim yet, or released)
    lineage: Lineage = field(default_factory=Lineage)  # topic ids (and, before claims, epochs)
    log_start_offset: int = 0  # remote log start offset; only grows
    delete_state: PartitionDeleteState | None = None  # of the whole partition (delete-topic)

    @property
    def current_epoch(self) -> int | None:
        return self.claim.epoch if self.claim is not None else None


class Verdict(NamedTuple):
    """The fold's answer to one message (a named tuple: one is made per record, on the hot path)."""

    accepted: bool
    reason: str | None = None  # one of REASONS when rejected
    detail: str = ""
    topic_partition: TopicPartition | None = None
    record: MetadataRecord | None = None
    ignored: bool = False  # of a topic this reader does not keep


ACCEPTED_TOMBSTONE = Verdict(True)
IGNORED = Verdict(True, ignored=True)


@dataclass(slots=True)
class Change:
    """What applying one record changes; decided first, committed to the store in one step."""

    header: PartitionHeader | None = None
    put: RemoteLogSegmentMetadata | None = None  # the segment's new state
    put_raw: bytes | None = None  # its encoded bytes when ``put`` is the record as received
    served: bool = False  # whether ``put`` is served
    dropped: RemoteLogSegmentMetadata | None = None  # a segment forgotten (its tombstone)
    unserve: tuple[RemoteLogSegmentMetadata, ...] = ()  # served ones that stop being served
    shadow: tuple[bytes, bool] | None = None  # key shadowed by a rejected record (True) or no more
    shadows: tuple[tuple[bytes, bool], ...] = ()  # more of them (a claim's records to re-publish)
    orphan: tuple[uuid.UUID, RemoteLogSegmentMetadata | None] | None = None  # rejected, of an unknown segment


class FoldStore(Protocol):
    """Where the fold keeps its state: dicts (:class:`MemoryStore`) or RocksDB (the follower cache)."""

    def header(self, tp: TopicPartition) -> PartitionHeader: ...

    def segment(self, sid: uuid.UUID) -> RemoteLogSegmentMetadata | None: ...

    def served_overlapping(
        self, tp: TopicPartition, start: int, end: int
    ) -> Iterable[RemoteLogSegmentMetadata]:
        """Served segments of ``tp`` with at least one offset in ``start..end``."""
        ...

    def served(self, tp: TopicPartition) -> Iterable[RemoteLogSegmentMetadata]: ...

    def deleting(self, tp: TopicPartition) -> Iterable[RemoteLogSegmentMetadata]:
        """Segments of ``tp`` in a delete state the store lists (rare: a claim's records are being
        re-published)."""
        ...

    def shadowed_keys(self, tp: TopicPartition) -> Iterable[bytes]: ...

    def is_shadowed(self, tp: TopicPartition, key: bytes) -> bool: ...

    def is_orphan(self, tp: TopicPartition, sid: uuid.UUID) -> bool: ...

    def commit(self, tp: TopicPartition, change: Change) -> None: ...


# -- deciding one record ----------------------------------------------------------------------------


def _overlaps(a: RemoteLogSegmentMetadata, start: int, end: int) -> bool:
    return a.start_offset <= end and start <= a.end_offset


def _claim_lineage(lineage: Lineage, topic_id: str | None) -> Lineage:
    """The lineage after a claim made when the broker reported ``topic_id``."""
    if topic_id is None or topic_id == lineage.topic_id or topic_id in lineage.retired:
        return lineage
    if lineage.topic_id is None:
        return replace(lineage, topic_id=topic_id)
    # a claim under a new id: the topic was deleted and re-created, a new history begins
    return Lineage(lineage.max_epoch, topic_id, lineage.retired | {lineage.topic_id}, True)


def _switch_unserves(
    store: FoldStore, tp: TopicPartition, before: Lineage, after: Lineage
) -> list[RemoteLogSegmentMetadata]:
    if after.topic_id == before.topic_id or before.topic_id is None:
        return []
    return [s for s in store.served(tp) if not after.serves(s.segment_id.topic_id, after.topic_id)]


def _check_epoch(header: PartitionHeader, epoch: int, record: MetadataRecord) -> None:
    claim = header.claim
    if claim is not None and epoch == claim.epoch:
        writer = getattr(record, "writer_id", claim.writer_id)
        if writer == claim.writer_id:
            return
        # the claim's epoch, another writer: a version without claims whose epoch (its consumer
        # group's generation) happens to equal the claim's offset, or a forgery
        raise RejectedRecord(
            f"{_describe(record)} from writer {writer!r} with the epoch of claim {claim.epoch}, which "
            f"{claim.writer_id!r} holds",
            STALE_EPOCH,
        )
    what = _describe(record)
    if claim is None:
        raise RejectedRecord(f"{what} (writer epoch {epoch}) while nobody holds a claim", NO_CLAIM)
    raise RejectedRecord(
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


def _claim_records(
    store: FoldStore, tp: TopicPartition, header: PartitionHeader, pick: Callable[[int], bool]
) -> list[tuple[bytes, bool]]:
    """The keys holding an accepted state of ``tp`` whose record's epoch ``pick`` selects (served
    segments' copy keys, deleting segments' delete keys, the remote log start offset's key), to be
    marked shadowed: the owner re-publishes each under its claim (:func:`repairs`)."""
    keys = [(segment_key(s.segment_id), True) for s in store.served(tp) if pick(s.writer_epoch)]
    keys += [(delete_key(s.segment_id), True) for s in store.deleting(tp) if pick(s.writer_epoch)]
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
    return _claim_records(store, tp, header, lambda epoch: epoch == claim.epoch)


def _claims_lost(store: FoldStore, tp: TopicPartition, header: PartitionHeader) -> list[tuple[bytes, bool]]:
    """A new claim: from here on every reader, with or without the claim records a tombstone or an
    undecodable value took, agrees on who holds the partition. The keys those claims held are no
    longer anyone's to repair; every state written before is marked for the new holder to re-publish
    under its own claim (a reader of the compacted topic may have judged it without its claim)."""
    head = f"{tp.topic}/{tp.partition}/{CLAIM_KEY_PART}/".encode()
    lost = [k for k in store.shadowed_keys(tp) if k.startswith(head)]
    if not lost:
        return []
    return [*((k, False) for k in lost), *_claim_records(store, tp, header, lambda epoch: True)]


def decide_claim(store: FoldStore, offset: int, claim: PartitionClaim) -> Change:
    tp = claim.topic_partition
    header = store.header(tp)
    if claim.kind is ClaimKind.RELEASE:
        if header.claim is None or header.claim.epoch != claim.released_epoch:
            raise RejectedRecord(
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
                raise RejectedRecord(
                    f"{claim.kind.value} claim {claim.claim_id} of {claim.writer_id!r} states claim "
                    f"{restated} again, which is {held.claim_id} of {held.writer_id!r}",
                    STALE_EPOCH,
                )
            # the holder states its claim again: every record of the claim that is still its key's
            # latest was written before this one, and a reader that no longer has the claim's first
            # record judges them without it; the holder re-publishes them after this record
            marks = [
                (claim_key_of(tp, held.claim_id), False),
                *_claim_records(store, tp, header, lambda e: e == restated),
            ]
            return Change(shadows=tuple(marks))
        if restated >= offset or (held is not None and held.epoch > restated):
            raise RejectedRecord(
                f"{claim.kind.value} claim {claim.claim_id} states claim {restated} again, but the current "
                f"claim is {header.current_epoch}",
                STALE_EPOCH,
            )
        epoch = restated  # a reader of the compacted topic: the claim's first record is gone
    lineage = _claim_lineage(header.lineage, claim.topic_id)
    current = Claim(
        epoch, claim.claim_id, claim.kind, claim.writer_id, claim.topic_id, claim.event_timestamp_ms
    )
    return Change(
        header=replace(header, claimed=True, claim=current, lineage=lineage),
        unserve=tuple(_switch_unserves(store, tp, header.lineage, lineage)),
        shadows=tuple(_claims_lost(store, tp, header)),
    )


def _check_condition(record: RemoteLogSegmentMetadata, current: RemoteLogSegmentMetadata | None) -> None:
    """A conditional delete (DELETE_SEGMENT_STARTED naming the state it was planned on) holds only
    while the segment is still in that state (or already being deleted). A segment this reader does
    not know is accepted, as any snapshot is: compaction may have removed the state it names."""
    if current is None or current.state is record.replaces_state:
        return
    if current.state is SegmentState.DELETE_SEGMENT_STARTED:
        return
    assert record.replaces_state is not None
    raise RejectedRecord(
        f"DELETE_SEGMENT_STARTED of {record.segment_id} planned on {record.replaces_state.value}, but the "
        f"segment is {current.state.value} now",
        CONDITION,
    )


def decide_segment(
    store: FoldStore,
    record: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate,
    raw: bytes | None,
    key: bytes | None = None,
) -> Change:
    tp = record.topic_partition
    header = store.header(tp)
    sid = record.segment_id.id
    current = store.segment(sid)
    if header.claimed:
        _check_epoch(header, record.writer_epoch, record)
        lineage = header.lineage
        tid = record.segment_id.topic_id
        if record.state in _COPYING and tid is not None and lineage.topic_id not in (None, tid):
            raise RejectedRecord(
                f"{record.state.value} of {record.segment_id} for topic id {tid}, but the partition's is "
                f"{lineage.topic_id}",
                OLD_TOPIC_ID,
            )
        after = lineage if tid is None or lineage.topic_id is not None else replace(lineage, topic_id=tid)
    else:
        after = header.lineage.admit(record, current)  # the old rules; raises StaleRecordError
    if type(record) is RemoteLogSegmentMetadata and record.replaces_state is not None:
        _check_condition(record, current)
    if (
        header.claimed
        and current is not None
        and current.state is SegmentState.DELETE_SEGMENT_STARTED
        and current.replaces_state is not SegmentState.COPY_SEGMENT_STARTED
        and type(record) is RemoteLogSegmentMetadata
        and record.state is _FINISHED
    ):
        # the claim holder serves again a segment whose deletion it cannot prove it started (its
        # DELETE_SEGMENT_STARTED was forged with the claim's epoch and writer id, or left by a
        # process that crashed before any object went): only a served segment's deletion is undone
        current = replace(current, state=_FINISHED, replaces_state=None)
    new = (
        apply_snapshot(current, record)
        if isinstance(record, RemoteLogSegmentMetadata)
        else apply_update(current, record)
    )
    if (
        new.state is SegmentState.DELETE_SEGMENT_STARTED
        and new.replaces_state is None
        and current is not None
        and current.state in _COPYING
    ):
        # an unconditional delete (an earlier version's, or forged): kept with the state it ended, so
        # only a served segment's deletion can be undone by its holder
        new = replace(new, replaces_state=current.state)
    change = Change(put_raw=raw if new is record else None)
    if after is not header.lineage and after != header.lineage:
        change.header = replace(header, lineage=after)
        change.unserve = tuple(_switch_unserves(store, tp, header.lineage, after))
    change.put = new  # a finished delete is kept (the state machine needs it) until its tombstone
    serves = new.state is _FINISHED and after.serves(new.segment_id.topic_id, after.topic_id)
    if header.claimed and new.state is _FINISHED and not serves:
        # never accepted without being served: its writer would count it done, and nobody would
        # read it (a copy that carried no topic id, say, in a topic that was re-created)
        raise RejectedRecord(
            f"{new.state.value} of {record.segment_id} (topic id {new.segment_id.topic_id}) would not be "
            f"served: the partition's topic id is {after.topic_id}",
            UNSERVABLE,
        )
    if serves:
        others = [
            s
            for s in store.served_overlapping(tp, new.start_offset, new.end_offset)
            if s.segment_id.id != sid
        ]
        if header.claimed:
            if change.unserve:
                others = [s for s in others if s not in change.unserve]
            if others:
                first = others[0]
                raise RejectedRecord(
                    f"{new.state.value} of {record.segment_id} ({new.start_offset}..{new.end_offset}) "
                    f"overlaps served segment {first.segment_id} ({first.start_offset}..{first.end_offset})",
                    OVERLAP,
                )
        else:  # the old rule: the newest epoch's lineage wins where finished segments overlap
            gone = [s for s in others if s.writer_epoch <= new.writer_epoch and s not in change.unserve]
            if gone:
                change.unserve = (*change.unserve, *gone)
    change.served = serves and change.put is not None
    if key is None:
        key = record_key(record)
    if store.is_shadowed(tp, key):
        change.shadow = (key, False)
    if store.is_orphan(tp, sid):
        change.orphan = (sid, None)
    return change


def decide_log_start(store: FoldStore, record: RemoteLogStartOffset) -> Change:
    header = store.header(record.topic_partition)
    if header.claimed:
        _check_epoch(header, record.writer_epoch, record)
    change = Change()
    key = log_start_offset_key(record.topic_partition)
    if record.start_offset < header.log_start_offset:
        # The claim holder's own record from a view that lagged: accepted (it is the holder's) but
        # it moves nothing, and once compacted it would be the key's only record and move the
        # start back. It shadows the key until the owner re-publishes the start it holds.
        change.shadow = (key, True)
        return change
    if store.is_shadowed(record.topic_partition, key):
        change.shadow = (key, False)
    if record.start_offset > header.log_start_offset:
        change.header = replace(header, log_start_offset=record.start_offset)
    return change


def decide_partition_delete(store: FoldStore, record: RemotePartitionDeleteMetadata) -> Change:
    tp = record.topic_partition
    header = store.header(tp)
    if header.claimed:
        _check_epoch(header, record.writer_epoch, record)
    check_partition_transition(header.delete_state, record.state, tp)
    return Change(header=replace(header, delete_state=record.state))


def decide(
    store: FoldStore, offset: int, record: MetadataRecord, raw: bytes | None, key: bytes | None = None
) -> Change:
    if isinstance(record, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate):
        return decide_segment(store, record, raw, key)
    if isinstance(record, PartitionClaim):
        return decide_claim(store, offset, record)
    if isinstance(record, RemoteLogStartOffset):
        return decide_log_start(store, record)
    return decide_partition_delete(store, record)


def _rejected_change(
    store: FoldStore, record: MetadataRecord, raw: bytes | None, key: bytes | None = None
) -> Change | None:
    """Bookkeeping for a rejected record: the key it shadows (a key that holds an accepted state,
    which compaction could otherwise leave to the rejected record alone), or the orphan it leaves
    (a rejected copy record of a segment nobody accepted: its writer may have uploaded objects)."""
    if isinstance(record, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate):
        if key is None:
            key = record_key(record)
        current = store.segment(record.segment_id.id)
        if current is not None:
            if key == segment_key(current.segment_id) or current.state in DELETE_STATES:
                return Change(shadow=(key, True))
            return None
        if isinstance(record, RemoteLogSegmentMetadata) and record.state not in DELETE_STATES:
            return Change(orphan=(record.segment_id.id, record))
        return None
    tp = record.topic_partition
    if isinstance(record, RemoteLogStartOffset) and store.header(tp).log_start_offset > 0:
        return Change(shadow=(log_start_offset_key(tp), True))
    return None


def parse_key(key: bytes | None) -> tuple[TopicPartition, str] | None:
    """(partition, rest) of a metadata key: rest is a segment uuid, ``log-start-offset``,
    ``claim/{uuid}`` or '' (the partition's own key). None when the key is not one of ours."""
    if key is None:
        return None
    try:
        text = key.decode()
    except UnicodeDecodeError:
        return None
    topic, _, rest = text.partition("/")
    part, _, rest = rest.partition("/")
    if not _TOPIC.fullmatch(topic) or topic in {".", ".."} or not part.isdigit() or len(part) > 10:
        return None
    if int(part) > MAX_PARTITION:
        return None
    return TopicPartition(topic, int(part)), rest


def decide_tombstone(store: FoldStore, key: bytes | None) -> tuple[TopicPartition, Change] | None:
    parsed = parse_key(key)
    if parsed is None:
        raise FormatError(f"tombstone with a key that names nothing: {key!r}")
    tp, rest = parsed
    if rest == "":
        return tp, Change(header=replace(store.header(tp), delete_state=None))
    if rest == LOG_START_OFFSET_KEY_SUFFIX:
        return tp, Change(header=replace(store.header(tp), log_start_offset=0), shadow=(key or b"", False))
    if rest.startswith(CLAIM_KEY_PART + "/"):
        if not store.header(tp).claimed:
            return None  # no claim of the partition was ever accepted: nothing depends on the key
        # a claim's record is never removed: a reader of the compacted topic would judge the claim's
        # records without it (and reject them); the holder states its claim again
        raise RejectedRecord(f"tombstone of claim key {key!r}: a claim is never forgotten", MISPLACED)
    text, slash, suffix = rest.partition("/")
    if slash and suffix != DELETE_KEY_SUFFIX:
        raise FormatError(f"tombstone with a key that names no segment: {key!r}")
    try:
        sid = uuid.UUID(text)
    except ValueError as exc:
        raise FormatError(f"tombstone with a key that names no segment: {key!r}") from exc
    current = store.segment(sid)
    own_key = key or b""
    if current is None:
        # a segment nobody accepted (an orphan's key, or one already forgotten): nothing to drop
        return tp, Change(shadow=(own_key, False), orphan=(sid, None))
    expected = delete_key(current.segment_id) if slash else segment_key(current.segment_id)
    if own_key != expected:
        raise RejectedRecord(
            f"tombstone {key!r} names segment {current.segment_id} of another partition", MISPLACED
        )
    if current.state is not SegmentState.DELETE_SEGMENT_FINISHED:
        # Only a finished deletion may be forgotten. Anything else would unserve the segment here
        # while a reader of the compacted topic still serves it; the owner re-publishes its state.
        raise RejectedRecord(
            f"tombstone of segment {current.segment_id} in state {current.state.value} (not deleted)",
            MISPLACED,
        )
    change = Change(shadow=(own_key, False), orphan=(sid, None))
    if not slash:
        change.dropped = current  # the copy key's tombstone forgets the segment
    return tp, change


# -- applying messages ------------------------------------------------------------------------------


class Fold:
    """Applies messages of the metadata topic, in topic order, to a store; every record is judged
    by the rules in the module docstring and either applied whole or rejected whole."""

    def __init__(self, store: FoldStore, topics: frozenset[str] | None = None) -> None:
        self.store = store
        self.topics = topics  # the source topics this reader keeps (None: all)

    def apply_raw(self, offset: int, key: bytes | None, value: bytes | None) -> Verdict:
        """Decode, check and apply one message (``value`` None: a tombstone)."""
        if value is None:
            if self.topics is not None:
                parsed = parse_key(key)
                if parsed is not None and parsed[0].topic not in self.topics:
                    return IGNORED
            return self._apply_tombstone(key)
        try:
            record = decode_message(key, value)
        except FormatError as exc:
            reason = INVALID if str(exc).startswith("invalid metadata record") else UNDECODABLE
            self._shadow_by_key(key)
            return Verdict(False, reason, str(exc))
        if self.topics is not None and record.topic_partition.topic not in self.topics:
            return IGNORED
        return self.apply_record(offset, record, value, key)

    def apply_record(
        self, offset: int, record: MetadataRecord, raw: bytes | None = None, key: bytes | None = None
    ) -> Verdict:
        """Apply one decoded record (``key``: its message key, when it was read from the topic)."""
        tp = record.topic_partition
        try:
            change = decide(self.store, offset, record, raw, key)
            self.store.commit(tp, change)
        except StaleRecordError as exc:
            return self._reject(tp, record, raw, exc.reason, str(exc), key)
        except IllegalTransitionError as exc:
            return self._reject(tp, record, raw, ILLEGAL, str(exc), key)
        except Exception as exc:  # a bug or a record no check foresaw: contained to this record
            log.exception("metadata record at offset %d could not be applied", offset)
            return Verdict(False, INTERNAL, f"{type(exc).__name__}: {exc}", tp, record)
        return Verdict(True, None, "", tp, record)

    def _shadow_by_key(self, key: bytes | None) -> None:
        """A value that does not decode, filed under the key of an accepted state, shadows that state
        as any rejected record does (compaction would leave it as the key's only record)."""
        try:
            parsed = parse_key(key)
            if parsed is None or key is None:
                return
            tp, rest = parsed
            if rest.startswith(CLAIM_KEY_PART + "/"):
                self._shadow_claim_key(tp, key)
                return
            if rest == LOG_START_OFFSET_KEY_SUFFIX:
                if self.store.header(tp).log_start_offset > 0:
                    self.store.commit(tp, Change(shadow=(key, True)))
                return
            text, slash, _suffix = rest.partition("/")
            try:
                sid = uuid.UUID(text)
            except ValueError:
                return
            current = self.store.segment(sid)
            if current is None or current.topic_partition != tp:
                return
            if slash:
                holds = current.state in DELETE_STATES and delete_key(current.segment_id) == key
            else:
                holds = segment_key(current.segment_id) == key
            if holds:
                self.store.commit(tp, Change(shadow=(key, True)))
        except Exception:  # bookkeeping of a rejected record must not turn into a crash
            log.exception("bookkeeping of an undecodable metadata record failed")

    def _shadow_claim_key(self, tp: TopicPartition, key: bytes) -> None:
        """A tombstone or an undecodable value under a claim's key: once compacted, the claim's record
        is gone. The key is shadowed: the current claim's holder states its claim again; another
        claim's (an earlier one, a release, or a key no claim had) waits for the next claim, and every
        accepted state not written under the current claim is marked for the holder to re-publish."""
        header = self.store.header(tp)
        if not header.claimed:
            return
        claim = header.claim
        marks: list[tuple[bytes, bool]] = [(key, True)]
        if claim is None or key != claim_key_of(tp, claim.claim_id):
            marks += _claim_records(self.store, tp, header, lambda e: claim is None or e != claim.epoch)
        self.store.commit(tp, Change(shadows=tuple(marks)))

    def _reject(
        self,
        tp: TopicPartition,
        record: MetadataRecord,
        raw: bytes | None,
        reason: str,
        detail: str,
        key: bytes | None = None,
    ) -> Verdict:
        try:
            book = _rejected_change(self.store, record, raw, key)
            if book is not None:
                self.store.commit(tp, book)
        except Exception:  # bookkeeping of a rejected record must not turn into a crash
            log.exception("bookkeeping of a rejected metadata record failed")
        return Verdict(False, reason, detail, tp, record)

    def _apply_tombstone(self, key: bytes | None) -> Verdict:
        try:
            decided = decide_tombstone(self.store, key)
        except FormatError as exc:
            return Verdict(False, UNDECODABLE, str(exc))
        except RejectedRecord as exc:
            log.warning("metadata tombstone rejected: %s", exc)
            self._shadow_by_key(key)  # the owner re-publishes the state it would have removed
            return Verdict(False, exc.reason, str(exc))
        except Exception as exc:
            log.exception("metadata tombstone %r could not be applied", key)
            return Verdict(False, INTERNAL, f"{type(exc).__name__}: {exc}")
        if decided is None:
            return ACCEPTED_TOMBSTONE
        tp, change = decided
        try:
            self.store.commit(tp, change)
        except Exception as exc:
            log.exception("metadata tombstone %r could not be applied", key)
            return Verdict(False, INTERNAL, f"{type(exc).__name__}: {exc}")
        return Verdict(True, None, "", tp)


# -- the in-memory store, and the view every reader gets -----------------------------------------


@dataclass
class PartitionView:
    """What the fold knows of one partition."""

    header: PartitionHeader = field(default_factory=PartitionHeader)
    segments: dict[uuid.UUID, RemoteLogSegmentMetadata] = field(default_factory=dict)
    served: set[uuid.UUID] = field(default_factory=set)
    shadowed: set[bytes] = field(default_factory=set)
    orphans: dict[uuid.UUID, RemoteLogSegmentMetadata] = field(default_factory=dict)

    @property
    def log_start_offset(self) -> int:
        return self.header.log_start_offset

    @property
    def current_epoch(self) -> int | None:
        return self.header.current_epoch

    def finished(self) -> list[RemoteLogSegmentMetadata]:
        """The served finished segments, by start offset."""
        return sorted((self.segments[x] for x in self.served), key=lambda s: s.start_offset)


class MemoryStore:
    def __init__(self) -> None:
        self.partitions: dict[TopicPartition, PartitionView] = {}
        self._segments: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}

    def view(self, tp: TopicPartition) -> PartitionView:
        part = self.partitions.get(tp)
        if part is None:
            part = self.partitions[tp] = PartitionView()
        return part

    def header(self, tp: TopicPartition) -> PartitionHeader:
        part = self.partitions.get(tp)
        return part.header if part is not None else PartitionHeader()

    def segment(self, sid: uuid.UUID) -> RemoteLogSegmentMetadata | None:
        return self._segments.get(sid)

    def served_overlapping(
        self, tp: TopicPartition, start: int, end: int
    ) -> Iterator[RemoteLogSegmentMetadata]:
        part = self.partitions.get(tp)
        if part is None:
            return
        for sid in part.served:
            seg = part.segments[sid]
            if _overlaps(seg, start, end):
                yield seg

    def served(self, tp: TopicPartition) -> list[RemoteLogSegmentMetadata]:
        part = self.partitions.get(tp)
        return [] if part is None else [part.segments[x] for x in part.served]

    def shadowed_keys(self, tp: TopicPartition) -> set[bytes]:
        part = self.partitions.get(tp)
        return set() if part is None else set(part.shadowed)

    def deleting(self, tp: TopicPartition) -> list[RemoteLogSegmentMetadata]:
        part = self.partitions.get(tp)
        return [] if part is None else [s for s in part.segments.values() if s.state in DELETE_STATES]

    def is_shadowed(self, tp: TopicPartition, key: bytes) -> bool:
        part = self.partitions.get(tp)
        return part is not None and key in part.shadowed

    def is_orphan(self, tp: TopicPartition, sid: uuid.UUID) -> bool:
        part = self.partitions.get(tp)
        return part is not None and sid in part.orphans

    def commit(self, tp: TopicPartition, change: Change) -> None:
        part = self.view(tp)
        if change.header is not None:
            part.header = change.header
        for seg in change.unserve:
            part.served.discard(seg.segment_id.id)
        if change.dropped is not None:
            sid = change.dropped.segment_id.id
            part.segments.pop(sid, None)
            part.served.discard(sid)
            self._segments.pop(sid, None)
        if change.put is not None:
            sid = change.put.segment_id.id
            part.segments[sid] = self._segments[sid] = change.put
            if change.served:
                part.served.add(sid)
            else:
                part.served.discard(sid)
        for key, on in (*change.shadows, *(() if change.shadow is None else (change.shadow,))):
            if on:
                part.shadowed.add(key)
            else:
                part.shadowed.discard(key)
        if change.orphan is not None:
            sid, orphan = change.orphan
            if orphan is None:
                part.orphans.pop(sid, None)
            else:
                part.orphans[sid] = orphan


class MetadataFold(Fold):
    """The fold in memory: for a bounded set of partitions (the CLI, a leader without a follower,
    retention views, the audit, tests)."""

    def __init__(self, topics: frozenset[str] | None = None) -> None:
        self.memory = MemoryStore()
        super().__init__(self.memory, topics)
        self.rejected: dict[str, int] = {}
        self._next_offset: int = 0  # of :meth:`append`
        self._raw = False  # inside apply_raw: its apply_record is not counted twice

    def apply_raw(self, offset: int, key: bytes | None, value: bytes | None) -> Verdict:
        self._raw = True
        try:
            verdict = super().apply_raw(offset, key, value)
        finally:
            self._raw = False
        self._count(verdict)
        return verdict

    def apply_record(
        self, offset: int, record: MetadataRecord, raw: bytes | None = None, key: bytes | None = None
    ) -> Verdict:
        verdict = super().apply_record(offset, record, raw, key)
        if not self._raw:
            self._count(verdict)
        return verdict

    def append(self, record: MetadataRecord) -> Verdict:
        """Apply ``record`` as if it were the next message of one metadata partition (tests, models)."""
        offset = self._next_offset
        self._next_offset += 1
        return self.apply_record(offset, record)

    def _count(self, verdict: Verdict) -> None:
        if not verdict.accepted and verdict.reason is not None:
            self.rejected[verdict.reason] = self.rejected.get(verdict.reason, 0) + 1

    def partition(self, tp: TopicPartition) -> PartitionView:
        return self.memory.partitions.get(tp) or PartitionView()

    @property
    def partitions(self) -> dict[TopicPartition, PartitionView]:
        return self.memory.partitions


# -- header bytes (the follower cache keeps one value per partition) ------------------------------


def encode_header(header: PartitionHeader) -> bytes:
    """JSON, versioned: ``{"v": 1, ...}``. Small and rare (written when a partition's header changes)."""
    lineage = header.lineage
    claim = header.claim
    return json.dumps(
        {
            "v": HEADER_VERSION,
            "claimed": header.claimed,
            "claim": None
            if claim is None
            else [
                claim.epoch,
                str(claim.claim_id),
                claim.kind.value,
                claim.writer_id,
                claim.topic_id,
                claim.at_ms,
            ],
            "max_epoch": lineage.max_epoch,
            "topic_id": lineage.topic_id,
            "retired": sorted(lineage.retired),
            "legacy_retired": lineage.legacy_retired,
            "log_start": header.log_start_offset,
            "delete_state": header.delete_state.value if header.delete_state else None,
        },
        separators=(",", ":"),
    ).encode()


def decode_header(raw: bytes) -> PartitionHeader:
    d = json.loads(raw)
    if d.get("v") != HEADER_VERSION:
        raise FormatError(f"partition header version {d.get('v')!r} is not {HEADER_VERSION}")
    c = d["claim"]
    claim = None if c is None else Claim(c[0], uuid.UUID(c[1]), ClaimKind(c[2]), c[3], c[4], c[5])
    return PartitionHeader(
        claimed=d["claimed"],
        claim=claim,
        lineage=Lineage(d["max_epoch"], d["topic_id"], frozenset(d["retired"]), d["legacy_retired"]),
        log_start_offset=d["log_start"],
        delete_state=PartitionDeleteState(d["delete_state"]) if d["delete_state"] else None,
    )
