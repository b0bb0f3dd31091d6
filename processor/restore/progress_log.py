"""A restore's committed progress, recovered from the progress topic's records. Pure.

Input: the batches of the restore's progress partition, resolved against their transaction markers
(:mod:`processor.restore.transaction_view`). Only committed batches count; records of other restores
sharing the partition are skipped. Per source partition, the records must form one history: sequence
numbers 0, 1, 2, ... with each offset map chunk starting where the previous one ended. Anything else
means the topic was written by something else, or lost records (a compacted topic never drops a
key that has no newer record, and every key here is unique), and is reported, never guessed around.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from processor.errors import FormatError
from processor.restore import offset_map
from processor.restore.offset_map import OffsetMap
from processor.restore.progress_record import RestoreProgress, decode_value, parse_key
from processor.restore.transaction_view import Outcome, ResolvedBatch
from processor.segment.entries_v2 import batch_record_views, check_batch_crc


class ProgressHistoryError(FormatError):
    """The progress records of a restore do not form one unbroken history."""


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    """Everything committed for one source partition: the latest record and the whole offset map."""

    latest: RestoreProgress
    offset_map: OffsetMap


def committed_progress(batches: Iterable[ResolvedBatch], restore_id: str) -> dict[int, PartitionProgress]:
    found: dict[int, dict[int, RestoreProgress]] = {}
    for resolved in batches:
        if resolved.outcome is not Outcome.COMMITTED:
            continue
        where = f"progress record batch at offset {resolved.header.base_offset}"
        try:
            check_batch_crc(resolved.batch, where=where)
            records = batch_record_views(resolved.batch)
        except Exception as exc:  # aiokafka's own errors for bad bytes
            raise FormatError(f"{where}: does not decode: {exc!r}") from exc
        for record in records:
            parsed = parse_key(record.key) if record.key is not None else None
            if parsed is None or parsed[0] != restore_id:
                continue
            _rid, source_partition, sequence = parsed
            progress = decode_value(record.value, where=f"progress record at offset {record.offset}")
            if (progress.restore_id, progress.source_partition, progress.sequence) != parsed:
                raise ProgressHistoryError(
                    f"progress record at offset {record.offset}: key {record.key!r} names another record"
                )
            found.setdefault(source_partition, {})[sequence] = progress
    return {p: _history(p, records) for p, records in sorted(found.items())}


def _history(source_partition: int, by_sequence: dict[int, RestoreProgress]) -> PartitionProgress:
    ordered = [by_sequence[s] for s in sorted(by_sequence)]
    sequences = [r.sequence for r in ordered]
    if sequences != list(range(len(ordered))):
        raise ProgressHistoryError(
            f"source partition {source_partition}: progress sequences {sequences[:5]}... are not 0, 1, 2, ..."
        )
    first = ordered[0]
    for record in ordered[1:]:
        if record.source != first.source or record.target_partition != first.target_partition:
            raise ProgressHistoryError(
                f"source partition {source_partition}: progress record {record.sequence} describes "
                "another restore than record 0"
            )
    try:
        full = offset_map.concat(r.offset_map for r in ordered)
    except ValueError as exc:
        raise ProgressHistoryError(f"source partition {source_partition}: {exc}") from None
    assert full is not None
    return PartitionProgress(ordered[-1], full)
