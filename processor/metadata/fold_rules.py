"""The rules of the one fold of the metadata topic: which records are accepted and which segments
are served. Pure; :mod:`processor.metadata.fold` applies them for every reader (the follower cache
through its RocksDB store, the leader's resume, retention, the CLI, the Spark metadata source, the
audit, the rebuild). The claim rules are in :mod:`processor.metadata.fold_claim_rules`.

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
- a *rewritten* segment (a merge of adjacent segments, or one with records erased) names in
  ``supersedes`` the served segments whose offsets it takes over: its FINISHED is accepted only if
  every served segment it overlaps is named there and lies within its offsets, and those stop being
  served in the same step (readers see the old segments or the new one, never both, never neither).
  The superseded segments stay in COPY_SEGMENT_FINISHED, unserved, until the owner deletes them:
  the accepted rewrite is the proof (:mod:`processor.metadata.deletion_proof`). One's FINISHED
  stated again (its holder re-publishing a key a rejected record hit) is accepted and not served,
  where every served segment over it names it, directly or through a rewrite it names;
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
(:meth:`~processor.metadata.restatements.Restatements.repairs`) long before the topic's
``min.compaction.lag.ms`` lets the cleaner reach them, also a deleted segment's delete state before
it tombstones the segment's keys (tombstones written after the rejected record neutralise it only
for a cleaner point past them both).
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

import uuid
from dataclasses import replace

from processor.errors import FormatError
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import (
    CLAIM_KEY_PART,
    DELETE_KEY_SUFFIX,
    LOG_START_OFFSET_KEY_SUFFIX,
    delete_key,
    log_start_offset_key,
    record_key,
    segment_key,
)
from processor.metadata.fencing import RejectedRecordError
from processor.metadata.fold_claim_rules import check_epoch, copy_lineage, decide_claim, switch_unserves
from processor.metadata.fold_reasons import CONDITION, MISPLACED, OVERLAP, UNSERVABLE
from processor.metadata.fold_state import Change, FoldStore
from processor.metadata.model import (
    DELETE_STATES,
    MetadataRecord,
    PartitionClaim,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogStartOffset,
    RemotePartitionDeleteMetadata,
    SegmentState,
)
from processor.metadata.state_machine import apply_snapshot, apply_update, check_partition_transition
from processor.metadata.validation import MAX_PARTITION
from processor.metadata.validation import TOPIC_NAME as _TOPIC

_FINISHED = SegmentState.COPY_SEGMENT_FINISHED
_COPYING = (SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED)


def _check_condition(record: RemoteLogSegmentMetadata, current: RemoteLogSegmentMetadata | None) -> None:
    """A conditional delete (DELETE_SEGMENT_STARTED naming the state it was planned on) holds only
    while the segment is still in that state (or already being deleted). A segment this reader does
    not know is accepted, as any snapshot is: compaction may have removed the state it names."""
    if current is None or current.state is record.replaces_state:
        return
    if current.state is SegmentState.DELETE_SEGMENT_STARTED:
        return
    assert record.replaces_state is not None
    raise RejectedRecordError(
        f"DELETE_SEGMENT_STARTED of {record.segment_id} planned on {record.replaces_state.value}, but the "
        f"segment is {current.state.value} now",
        CONDITION,
    )


def _superseded(
    new: RemoteLogSegmentMetadata, overlapping: list[RemoteLogSegmentMetadata]
) -> list[RemoteLogSegmentMetadata]:
    """The served segments a rewritten segment's FINISHED takes over: every served segment it
    overlaps must be one it names and lie within its offsets (else ``overlap``: a rewrite never
    hides offsets it does not serve itself). Named segments it does not overlap keep being served,
    named ones this reader does not know (compacted away after their deletion) need nothing."""
    named = frozenset(new.supersedes)
    for s in overlapping:
        if s.segment_id.id not in named or s.start_offset < new.start_offset or s.end_offset > new.end_offset:
            raise RejectedRecordError(
                f"{new.state.value} of {new.segment_id} ({new.start_offset}..{new.end_offset}) overlaps "
                f"served segment {s.segment_id} ({s.start_offset}..{s.end_offset}), which it "
                f"{'does not name' if s.segment_id.id not in named else 'does not cover'}",
                OVERLAP,
            )
    return overlapping


def _held(store: FoldStore, new: RemoteLogSegmentMetadata, served: list[RemoteLogSegmentMetadata]) -> bool:
    """Whether every one of ``served`` (the served segments ``new`` overlaps) holds ``new``: lies
    over all of its offsets and names it, or names a segment that does in turn (a merge's source
    under an erasure's rewrite of the merge). Only segments over all of ``new``'s offsets are
    followed, so the walk is one path down a rewrite's names; a rewrite's own FINISHED (its sources
    lie within it, not over it) is answered without a lookup."""
    sid = new.segment_id.id
    for top in served:
        if top.start_offset > new.start_offset or top.end_offset < new.end_offset:
            return False
    for top in served:
        todo = [top]
        seen: set[uuid.UUID] = set()
        while todo:
            holder = todo.pop()
            if sid in holder.supersedes:
                break
            for named in holder.supersedes:
                s = store.segment(named) if named not in seen else None
                seen.add(named)
                if s is not None and s.start_offset <= new.start_offset and new.end_offset <= s.end_offset:
                    todo.append(s)
        else:
            return False
    return bool(served)


def _served_again(
    store: FoldStore, rewrite: RemoteLogSegmentMetadata
) -> tuple[RemoteLogSegmentMetadata, ...]:
    """A served rewrite being deleted (retention, its owner finding its objects gone, or a forged
    delete its holder undoes): the segments it superseded that are still finished are served again,
    where nothing else served overlaps them, so its offsets are not left unserved while they exist."""
    tp = rewrite.topic_partition
    served = store.served_overlapping(tp, rewrite.start_offset, rewrite.end_offset)
    if not any(s.segment_id.id == rewrite.segment_id.id for s in served):
        return ()  # not served: nothing taken over to give back
    lineage = store.header(tp).lineage
    again: list[RemoteLogSegmentMetadata] = []
    for sid in rewrite.supersedes:
        s = store.segment(sid)
        if (
            s is None
            or s.state is not _FINISHED
            or s.topic_partition != tp
            or not lineage.serves(s.segment_id.topic_id, lineage.topic_id)
            or s.start_offset < rewrite.start_offset
            or s.end_offset > rewrite.end_offset
            or any(
                o.segment_id.id != rewrite.segment_id.id
                for o in store.served_overlapping(tp, s.start_offset, s.end_offset)
            )
            or any(a.start_offset <= s.end_offset and s.start_offset <= a.end_offset for a in again)
        ):
            continue
        again.append(s)
    return tuple(again)


def decide_segment(
    store: FoldStore,
    record: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate,
    raw: bytes | None,
    key: bytes | None = None,
) -> Change:
    segment_id = record.segment_id
    tp = segment_id.topic_partition
    header = store.header(tp)
    sid = segment_id.id
    current = store.segment(sid)
    if header.claimed:
        check_epoch(header, record.writer_epoch, record)
        after = copy_lineage(header, record, current)  # a re-created topic's first copy switches
    else:
        lineage = header.lineage
        tid = record.segment_id.topic_id
        if record.writer_epoch == lineage.max_epoch and (tid is None or tid == lineage.topic_id):
            after = lineage  # what admit returns here, field for field (one lineage less a record)
        else:
            after = lineage.admit(record, current)  # the old rules; raises RejectedRecordError
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
    if header.claimed and current is not None and current.supersedes and new.state in DELETE_STATES:
        change.reserve = _served_again(store, current)
    if after is not header.lineage and after != header.lineage:
        change.header = replace(header, lineage=after)
        change.unserve = tuple(switch_unserves(store, tp, header.lineage, after))
    change.put = new  # a finished delete is kept (the state machine needs it) until its tombstone
    serves = new.state is _FINISHED and after.serves(new.segment_id.topic_id, after.topic_id)
    if header.claimed and new.state is _FINISHED and not serves:
        # never accepted without being served: its writer would count it done, and nobody would
        # read it (a copy that carried no topic id, say, in a topic that was re-created)
        raise RejectedRecordError(
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
            if others and _held(store, new, others):
                # the holder states again a segment a served rewrite holds (its copy key was hit):
                # accepted, not served. A reader of the compacted topic that lost the segment's
                # first record needs this one to accept the rewrites over it (stated again after)
                serves, others = False, []
            if new.supersedes and others:
                others = _superseded(new, others)
                change.unserve = (*change.unserve, *others)
                others = []
            if others:
                first = others[0]
                raise RejectedRecordError(
                    f"{new.state.value} of {record.segment_id} ({new.start_offset}..{new.end_offset}) "
                    f"overlaps served segment {first.segment_id} ({first.start_offset}..{first.end_offset})",
                    OVERLAP,
                )
        else:
            # the old rule: the newest epoch's lineage wins where finished segments overlap. A rewrite
            # too: rewrites are written under claims, and a reader sees one here only when the cleaner
            # removed its claim's record (a tombstone under the claim's key): judged as the copies
            # around it are, it takes over what it names as it did under its claim
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
        check_epoch(header, record.writer_epoch, record)
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
        check_epoch(header, record.writer_epoch, record)
    check_partition_transition(header.delete_state, record.state, tp)
    return Change(header=replace(header, delete_state=record.state))


def decide(
    store: FoldStore, offset: int, record: MetadataRecord, raw: bytes | None, key: bytes | None = None
) -> Change:
    # the type's identity first: isinstance with a union (a Python-level check) for the other kinds
    if type(record) is RemoteLogSegmentMetadata or isinstance(
        record, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate
    ):
        return decide_segment(store, record, raw, key)
    if isinstance(record, PartitionClaim):
        return decide_claim(store, offset, record)
    if isinstance(record, RemoteLogStartOffset):
        return decide_log_start(store, record)
    return decide_partition_delete(store, record)


def rejected_change(
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
        raise RejectedRecordError(f"tombstone of claim key {key!r}: a claim is never forgotten", MISPLACED)
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
        raise RejectedRecordError(
            f"tombstone {key!r} names segment {current.segment_id} of another partition", MISPLACED
        )
    if current.state is not SegmentState.DELETE_SEGMENT_FINISHED:
        # Only a finished deletion may be forgotten. Anything else would unserve the segment here
        # while a reader of the compacted topic still serves it; the owner re-publishes its state.
        raise RejectedRecordError(
            f"tombstone of segment {current.segment_id} in state {current.state.value} (not deleted)",
            MISPLACED,
        )
    change = Change(shadow=(own_key, False), orphan=(sid, None))
    if not slash:
        change.dropped = current  # the copy key's tombstone forgets the segment
    return tp, change
