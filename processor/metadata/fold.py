"""The one fold of the metadata topic: applies its messages, in topic order, to a store and answers
each with a :class:`Verdict` (accepted, or rejected with the reason it counts under). Pure; every
reader uses it (the follower cache through its RocksDB store, the leader's resume, retention, the
CLI, the Spark metadata source, the audit, the rebuild). :class:`MetadataFold` is the fold in memory.

The rules each record is judged by are in :mod:`processor.metadata.fold_rules` (claims in
:mod:`processor.metadata.fold_claim_rules`); what the fold keeps in
:mod:`processor.metadata.fold_state`, the store in memory in :mod:`processor.metadata.memory_store`
and the header's bytes in :mod:`processor.metadata.partition_header_codec`."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from processor.errors import FormatError, IllegalTransitionError
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import (
    CLAIM_KEY_PART,
    LOG_START_OFFSET_KEY_SUFFIX,
    decode_message,
    decode_messages,
    delete_key,
    segment_key,
)
from processor.metadata.fencing import RejectedRecordError
from processor.metadata.fold_claim_rules import claim_key_of, claim_records
from processor.metadata.fold_reasons import ILLEGAL, INTERNAL, INVALID, UNDECODABLE
from processor.metadata.fold_rules import decide, decide_tombstone, parse_key, rejected_change
from processor.metadata.fold_state import Change, FoldStore
from processor.metadata.memory_store import MemoryStore, PartitionView
from processor.metadata.model import DELETE_STATES, MetadataRecord, RemoteLogSegmentMetadata

log = logging.getLogger(__name__)


class Verdict(NamedTuple):
    """The fold's answer to one message (a named tuple: one is made per record, on the hot path)."""

    accepted: bool
    reason: str | None = None  # one of fold_reasons.REASONS when rejected
    detail: str = ""
    topic_partition: TopicPartition | None = None
    record: MetadataRecord | None = None
    ignored: bool = False  # of a topic this reader does not keep


ACCEPTED_TOMBSTONE = Verdict(True)
_new_tuple = tuple.__new__  # Verdict(...) without the named tuple's Python-level __new__ (hot path)
IGNORED = Verdict(True, ignored=True)


class Fold:
    """Applies messages of the metadata topic, in topic order, to a store; every record is judged
    by the rules of :mod:`processor.metadata.fold_rules` and either applied whole or rejected whole."""

    def __init__(self, store: FoldStore, topics: frozenset[str] | None = None) -> None:
        self.store = store
        self.topics = topics  # the source topics this reader keeps (None: all)

    def apply_raw(self, offset: int, key: bytes | None, value: bytes | None) -> Verdict:
        """Decode, check and apply one message (``value`` None: a tombstone)."""
        if value is None:
            return self.apply_decoded(offset, key, None, None)
        try:
            decoded: MetadataRecord | FormatError = decode_message(key, value)
        except FormatError as exc:
            decoded = exc
        return self.apply_decoded(offset, key, value, decoded)

    def apply_messages(self, messages: Sequence[tuple[int, bytes | None, bytes | None]]) -> Iterator[Verdict]:
        """:meth:`apply_raw` of each (offset, key, value) of a consumed batch, in order, the batch
        decoded at once first (:func:`~processor.metadata.codec.decode_messages`: the same records
        and errors, a large batch's segment records read by compiled code). Lazy: each verdict is
        given before the next message is applied."""
        decoded = decode_messages([(key, value) for _offset, key, value in messages])
        apply_decoded = self.apply_decoded
        apply_record = self.apply_record
        topics = self.topics
        # a decoded segment record of a kept topic goes to apply_record, as apply_decoded would send
        # it (one call a record less), unless a subclass does more in apply_decoded
        direct = type(self).apply_decoded is Fold.apply_decoded
        segment = RemoteLogSegmentMetadata
        for (offset, key, value), outcome in zip(messages, decoded, strict=True):
            if (
                direct
                and type(outcome) is segment
                and value is not None
                and (topics is None or outcome.segment_id.topic in topics)
            ):
                yield apply_record(offset, outcome, value, key)
            else:
                yield apply_decoded(offset, key, value, outcome)

    def apply_decoded(
        self,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        decoded: MetadataRecord | FormatError | None,
    ) -> Verdict:
        """Apply one message already decoded by :func:`~processor.metadata.codec.decode_message`:
        its record, the FormatError it raised, or None for a tombstone (``value`` None)."""
        if value is None:
            if self.topics is not None:
                parsed = parse_key(key)
                if parsed is not None and parsed[0].topic not in self.topics:
                    return IGNORED
            return self._apply_tombstone(key)
        if isinstance(decoded, FormatError) or decoded is None:
            detail = str(decoded) if decoded is not None else "metadata record was not decoded"
            reason = INVALID if detail.startswith("invalid metadata record") else UNDECODABLE
            self._shadow_by_key(key)
            return Verdict(False, reason, detail)
        if self.topics is not None and decoded.topic_partition.topic not in self.topics:
            return IGNORED
        return self.apply_record(offset, decoded, value, key)

    def apply_record(
        self, offset: int, record: MetadataRecord, raw: bytes | None = None, key: bytes | None = None
    ) -> Verdict:
        """Apply one decoded record (``key``: its message key, when it was read from the topic)."""
        tp = record.topic_partition
        try:
            change = decide(self.store, offset, record, raw, key)
            self.store.commit(tp, change)
        except RejectedRecordError as exc:
            return self._reject(tp, record, raw, exc.reason, str(exc), key)
        except IllegalTransitionError as exc:
            return self._reject(tp, record, raw, ILLEGAL, str(exc), key)
        except Exception as exc:  # a bug or a record no check foresaw: contained to this record
            log.exception("metadata record at offset %d could not be applied", offset)
            return Verdict(False, INTERNAL, f"{type(exc).__name__}: {exc}", tp, record)
        return _new_tuple(Verdict, (True, None, "", tp, record, False))

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
            marks += claim_records(self.store, tp, header, lambda e: claim is None or e != claim.epoch)
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
            book = rejected_change(self.store, record, raw, key)
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
        except RejectedRecordError as exc:
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


class MetadataFold(Fold):
    """The fold in memory: for a bounded set of partitions (the CLI, a leader without a follower,
    retention views, the audit, tests)."""

    def __init__(self, topics: frozenset[str] | None = None) -> None:
        self.memory = MemoryStore()
        super().__init__(self.memory, topics)
        self.rejected: dict[str, int] = {}
        self._next_offset: int = 0  # of :meth:`append`
        self._raw = False  # inside apply_decoded: its apply_record is not counted twice

    def apply_decoded(
        self,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        decoded: MetadataRecord | FormatError | None,
    ) -> Verdict:
        self._raw = True
        try:
            verdict = super().apply_decoded(offset, key, value, decoded)
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
