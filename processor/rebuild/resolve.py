"""Which manifested segments a rebuilt metadata topic serves, decided by the metadata fold. Pure.

A rebuild publishes, per partition, its own claim and then the FINISHED record of each manifested
segment stamped with that claim's epoch. What readers will serve is what the metadata fold makes of
exactly that log, so this module builds the same log in memory and asks the fold
(:func:`fold_served`). Rewrites (merged or erased segments, which name the segments they replaced)
are offered first, each right after the manifested segments it names, then the other segments,
each group in offset order (the earlier copy first where two overlap: the fold serves the first
finished segment of a range). The sources a rewrite names are published so that the fold records
them superseded and the partition's owner deletes them with the rewrite's proof (unpublished, their
objects stayed in the bucket for good, and came back in a later rebuild once retention had deleted
the rewrite). Why rewrites before the rest: a rewrite's manifest exists only if readers accepted its
FINISHED, and the fold accepts it only if it named and covered every served segment it overlapped;
so another manifested segment it overlaps is older and was not served when the rewrite was (a
source of a source, which it cannot name). Offered in offset order, such a leftover came first, was
served, and the rewrite was refused as an overlap: the rebuild lost the newer data, and left a gap
where the rewrite reached further. Such leftovers are refused (``overlap``) and stay in the bucket:
nothing names them any more (open). A
segment of another topic id than the partition's current one (a topic deleted and re-created) is
refused (``old_topic_id``), as is anything else the fold refuses.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from processor.kafka.partition import TopicPartition
from processor.metadata.manifest import SegmentManifest
from processor.metadata.model import ClaimKind, PartitionClaim, RemoteLogSegmentMetadata
from processor.rebuild.served_index import indexed_fold

REBUILD_WRITER = "rebuild-metadata"


@dataclass
class PartitionRebuild:
    tp: TopicPartition
    topic_id: str | None
    served: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    not_served: list[tuple[SegmentManifest, str]] = field(default_factory=list)  # with the reason
    # what to publish, in order: the served segments and, each before the rewrite that names it, the
    # sources a served rewrite replaces (published superseded: the owner deletes them with its proof)
    published: list[RemoteLogSegmentMetadata] = field(default_factory=list)

    @property
    def superseded(self) -> list[RemoteLogSegmentMetadata]:
        served = {s.segment_id.id for s in self.served}
        return [s for s in self.published if s.segment_id.id not in served]


def current_topic_ids(
    manifests: Iterable[SegmentManifest], broker: Mapping[str, str | None]
) -> dict[str, str | None]:
    """Each topic's current topic id: the broker's when the topic exists there, else the id of its
    most recently finished segment (a re-created topic's new history is the newer one). A rebuild
    that plans a partition at a time passes every topic's id resolved beforehand as ``broker``."""
    newest: dict[str, tuple[int, str | None]] = {}
    for m in manifests:
        topic = m.segment.segment_id.topic
        when = m.segment.event_timestamp_ms
        if topic not in newest or when > newest[topic][0]:
            newest[topic] = (when, m.segment.segment_id.topic_id)
    return {topic: broker.get(topic, tid) for topic, (_when, tid) in newest.items()}


def fold_served(
    tp: TopicPartition, topic_id: str | None, segments: list[RemoteLogSegmentMetadata]
) -> tuple[set[int], dict[int, str], set[int]]:
    """The metadata fold's verdict on the log a rebuild publishes for ``tp``: one ``ADMIN`` claim
    (carrying the partition's current topic id), then ``segments`` in this order, each stamped with
    the claim's epoch. Returns the indexes served, the reason each refused one was refused, and the
    indexes accepted and then superseded by a served rewrite that names them."""
    fold = indexed_fold(frozenset({tp.topic}))  # the fold's rules; served segments found by offset
    claim = PartitionClaim(tp, uuid.uuid4(), ClaimKind.ADMIN, REBUILD_WRITER, 0, topic_id=topic_id)
    epoch = 0  # the offset the claim gets in this one-partition log
    if not fold.append(claim).accepted:
        raise AssertionError("a first claim is always accepted")
    refused: dict[int, str] = {}
    for i, segment in enumerate(segments):
        verdict = fold.append(replace(segment, writer_epoch=epoch))
        if not verdict.accepted:
            refused[i] = verdict.reason or "rejected"
    finished = fold.partition(tp).finished()
    served_ids = {s.segment_id.id for s in finished}
    named = {sid for s in finished for sid in s.supersedes}
    served = {i for i, s in enumerate(segments) if s.segment_id.id in served_ids}
    superseded = {i for i, s in enumerate(segments) if i not in served and s.segment_id.id in named}
    for i in range(len(segments)):
        if i not in served and i not in refused and i not in superseded:  # replaced by a later record
            refused[i] = "not served"
    return served, refused, superseded


def _offer_order(found: list[SegmentManifest]) -> list[SegmentManifest]:
    """Rewrites first, each right after the manifested segments it names (recursively: a rewrite of
    a rewrite after the rewrite it names), then the other segments; each group in offset order."""
    found = sorted(
        found,
        key=lambda m: (m.segment.start_offset, m.segment.event_timestamp_ms, str(m.segment.segment_id.id)),
    )
    by_id = {m.segment.segment_id.id: m for m in found}
    position = {m.segment.segment_id.id: i for i, m in enumerate(found)}
    named = {sid for m in found for sid in m.segment.supersedes if sid in by_id}
    out: list[SegmentManifest] = []
    placed: set[uuid.UUID] = set()

    def place(m: SegmentManifest) -> None:
        sid = m.segment.segment_id.id
        if sid in placed:
            return
        placed.add(sid)  # before its sources: a cycle of forged names ends here
        for source_id in sorted((x for x in m.segment.supersedes if x in by_id), key=position.__getitem__):
            place(by_id[source_id])
        out.append(m)

    for m in found:
        if m.segment.supersedes and m.segment.segment_id.id not in named:
            place(m)
    out += [m for m in found if m.segment.segment_id.id not in placed]
    return out


def plan_rebuild(
    manifests: Iterable[SegmentManifest], broker_topic_ids: Mapping[str, str | None], now_ms: int
) -> dict[TopicPartition, PartitionRebuild]:
    """Per partition: the FINISHED records to publish (stamped by the rebuild) and what is not served."""
    manifests = list(manifests)
    topic_ids = current_topic_ids(manifests, broker_topic_ids)
    by_tp: dict[TopicPartition, list[SegmentManifest]] = {}
    for m in manifests:
        by_tp.setdefault(m.segment.topic_partition, []).append(m)
    out: dict[TopicPartition, PartitionRebuild] = {}
    for tp, found in sorted(by_tp.items()):
        found = _offer_order(found)
        stamped = [
            replace(m.segment, writer_epoch=0, writer_id=REBUILD_WRITER, event_timestamp_ms=now_ms)
            for m in found
        ]
        served, refused, superseded = fold_served(tp, topic_ids[tp.topic], stamped)
        plan = PartitionRebuild(tp, topic_ids[tp.topic])
        for i, m in enumerate(found):
            if i in served:
                plan.served.append(stamped[i])
            if i in served or i in superseded:
                plan.published.append(stamped[i])
            elif i not in superseded:
                plan.not_served.append((m, refused[i]))
        out[tp] = plan
    return out
