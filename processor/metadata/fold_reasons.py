"""Why the metadata fold rejects a record: the ``reason`` label of
processor_metadata_records_rejected_total, which a rule raises with
:class:`processor.metadata.fencing.RejectedRecordError`."""

from __future__ import annotations

from processor.metadata.fencing import OLD_TOPIC_ID, STALE_EPOCH

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
