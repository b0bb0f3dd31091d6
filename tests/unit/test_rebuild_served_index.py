"""The rebuild's fold over served segments indexed by offset judges every record as the fold in
memory does: random logs of overlapping segments, rewrites naming others, deletions (which serve
a deleted rewrite's sources again), with and without a claim."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace

import pytest

from processor.kafka.partition import TopicPartition
from processor.metadata.fold import MetadataFold
from processor.metadata.model import (
    ClaimKind,
    MetadataRecord,
    PartitionClaim,
    RemoteLogSegmentMetadata,
    SegmentState,
)
from processor.rebuild.served_index import indexed_fold
from tests.unit.test_rebuild_inventory import segment

TP = TopicPartition("orders", 0)


def _log(rng: random.Random, claimed: bool) -> list[MetadataRecord]:
    log: list[MetadataRecord] = []
    if claimed:
        log.append(PartitionClaim(TP, uuid.uuid4(), ClaimKind.ADMIN, "w", 0))
    made: list[RemoteLogSegmentMetadata] = []
    for _ in range(rng.randrange(1, 80)):
        roll = rng.random()
        if made and roll < 0.15:  # a deletion of an earlier segment
            log.append(replace(rng.choice(made), state=SegmentState.DELETE_SEGMENT_STARTED))
            continue
        start = rng.randrange(0, 200)
        seg = replace(
            segment(0, start, start + rng.choice((0, 1, 5, 20, 60))),
            writer_epoch=0 if claimed else rng.randrange(0, 3),
        )
        if made and roll < 0.35:  # a rewrite naming some earlier segments (and one nobody knows)
            named = rng.sample(made, min(len(made), rng.randrange(1, 4)))
            seg = replace(seg, supersedes=(*(s.segment_id.id for s in named), uuid.uuid4()))
        made.append(seg)
        log.append(seg)
    return log


@pytest.mark.parametrize("seed", range(100))
def test_indexed_fold_judges_as_the_fold(seed: int) -> None:
    rng = random.Random(seed)
    log = _log(rng, claimed=seed % 4 != 0)
    plain, indexed = MetadataFold(frozenset({"orders"})), indexed_fold(frozenset({"orders"}))
    for record in log:
        a, b = plain.append(record), indexed.append(record)
        assert (a.accepted, a.reason) == (b.accepted, b.reason)
        assert plain.partition(TP).served == indexed.partition(TP).served
        assert plain.partition(TP).segments == indexed.partition(TP).segments
    assert plain.rejected == indexed.rejected
