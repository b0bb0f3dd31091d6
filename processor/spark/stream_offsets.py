"""Stream offsets of ``tiered_records`` and Spark's admission-control arithmetic. Pure.

Offsets are JSON (Spark keeps them in the checkpoint's offset log). Layout, version 2::

    {"<topic>": {"<partition>": <next offset>, ...}, ...,     as Spark's Kafka source
     "@ids": {"<topic>": "<topic id>", ...},                  the topic incarnation the offsets belong to
     "@initial": {"<topic>": {"<partition>": <offset>}},      only in a new query's first offsets
     "@v": 2}

Keys starting with ``@`` cannot be topic names (Kafka allows ``[a-zA-Z0-9._-]``). Version 1 (no
``@`` keys: only topics) is still read; its topic ids are unknown. Topics and partitions are in
sorted (string) key order, so equal offsets are equal JSON (Spark compares them as strings).

``@initial`` persists a new query's initial offsets in its checkpoint, as Spark's Kafka source does
with its initial offset writer: Python data sources get no checkpoint path, so the initial offsets
ride in the end offsets of the query's first batch (Spark writes those to the offset log before the
batch runs), and the reader plans that batch from them. A query restarted before its first batch
committed re-runs that batch with a ``start`` Spark takes from ``initialOffset()`` again (a new
``latest``); the batch still reads from ``@initial``, so what arrived in between is not skipped.

``rate_limit`` and ``delay_batch`` are Spark's ``KafkaMicroBatchStream.rateLimit`` and
``delayBatch`` (maxOffsetsPerTrigger; minOffsetsPerTrigger with maxTriggerDelay).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from processor.errors import FormatError
from processor.kafka.partition import TopicPartition

OFFSETS_VERSION = 2
Offsets = dict[TopicPartition, int]


def _nested(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for tp in offsets:
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return {t: dict(sorted(ps.items())) for t, ps in sorted(out.items())}


def _flat(doc: Mapping[str, Any], where: str) -> Offsets:
    try:
        return {TopicPartition(t, int(p)): int(o) for t, ps in doc.items() for p, o in ps.items()}
    except (AttributeError, TypeError, ValueError) as exc:
        raise FormatError(f"{where}: not {{topic: {{partition: offset}}}}: {doc!r}") from exc


@dataclass(frozen=True)
class StreamOffsets:
    offsets: Offsets
    topic_ids: dict[str, str] = field(default_factory=dict)
    initial: Offsets | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = dict(_nested(self.offsets))
        if self.topic_ids:
            doc["@ids"] = dict(sorted(self.topic_ids.items()))
        if self.initial is not None:
            doc["@initial"] = _nested(self.initial)
        doc["@v"] = OFFSETS_VERSION
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any] | None) -> StreamOffsets:
        if not doc:
            return cls({})
        version = doc.get("@v", 1)
        if version not in (1, OFFSETS_VERSION):
            raise FormatError(f"tiered_records offsets version {version} is not 1 or {OFFSETS_VERSION}")
        topics = {k: v for k, v in doc.items() if not k.startswith("@")}
        ids = doc.get("@ids") or {}
        initial = doc.get("@initial")
        return cls(
            _flat(topics, "offsets"),
            {str(k): str(v) for k, v in ids.items()},
            _flat(initial, "initial offsets") if initial is not None else None,
        )


def rate_limit(
    limit: int, start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]
) -> Offsets:
    """Spread ``limit`` offsets over the partitions in proportion to what each has waiting (Spark's
    rateLimit: a share below one rounds up, so no partition starves; others round down)."""
    sizes = {tp: end - start[tp] for tp, end in latest.items() if tp in start and end - start[tp] > 0}
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(latest)
    out: Offsets = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        prorate = limit * (sizes[tp] / total)
        step = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, start[tp] + step)
    return out


def delay_batch(
    min_rows: int,
    latest: Mapping[TopicPartition, int],
    start: Mapping[TopicPartition, int],
    now_ms: int,
    last_trigger_ms: int,
    max_delay_ms: int,
) -> tuple[bool, int]:
    """Spark's delayBatch: (hold the batch back?, the new last trigger time). A batch is held while
    fewer than ``min_rows`` offsets wait, at most ``max_delay_ms`` after the last batch."""
    if now_ms - last_trigger_ms >= max_delay_ms:
        return False, now_ms
    waiting = sum(end - start.get(tp, 0) for tp, end in latest.items())
    if waiting < min_rows:
        return True, last_trigger_ms
    return False, now_ms
