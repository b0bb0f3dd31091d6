"""The bytes of a partition's fold header (:class:`~processor.metadata.fold_state.PartitionHeader`):
the follower cache keeps one value per partition."""

from __future__ import annotations

import json
import uuid

from processor.errors import FormatError
from processor.metadata.fencing import Lineage
from processor.metadata.fold_state import Claim, PartitionHeader
from processor.metadata.model import ClaimKind, PartitionDeleteState

HEADER_VERSION = 1


def encode_header(header: PartitionHeader) -> bytes:
    """JSON, versioned: ``{"v": 1, ...}``. Small and rare (written when a partition's header changes).
    Keys added within a version are optional on decode (``highest_claim``: -1 when absent)."""
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
            "highest_claim": header.highest_claim_epoch,
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
        # absent from headers written before it was kept: the next claim sets it
        highest_claim_epoch=d.get("highest_claim", -1),
    )
