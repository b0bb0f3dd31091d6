"""What a restore does, partition by partition, before any record moves. Pure.

A request names a source topic, optionally one partition, a range (``--from-offset``/``--from-time``,
``--to-offset``/``--to-time``) and how source partitions map onto target partitions
(``--partitioner``). Against what the archive holds, what the target has and what earlier runs of
the same restore committed, it becomes one :class:`PartitionPlan` per source partition: restore the
archived records with offsets in ``[position, stop)`` into ``target_partition``.

Range semantics (the same as Kafka's ``offsetsForTimes``): ``--from-time T`` starts at the first
archived record whose timestamp is >= T; ``--to-time T`` stops before that record; ``--to-offset N``
is exclusive. Without ``--to-*`` a run restores up to the archive's end as it is when the run
starts (a later run of the same restore picks up what was archived since).
"""

from __future__ import annotations

from dataclasses import dataclass

from processor.errors import ConfigError

PARTITIONERS = ("same", "modulo")


@dataclass(frozen=True, slots=True)
class RangeBound:
    """One end of the requested range: ``start``/``end``, an offset, or a timestamp (ms)."""

    kind: str  # "start", "end", "offset", "time"
    value: int | None = None

    def text(self) -> str:
        return self.kind if self.value is None else f"{self.kind}:{self.value}"


def _bound(side: str, offset: int | None, timestamp: int | None, open_end: str) -> RangeBound:
    if offset is not None and timestamp is not None:
        raise ConfigError(f"give --{side}-offset or --{side}-time, not both")
    if offset is not None:
        if offset < 0:
            raise ConfigError(f"--{side}-offset {offset}: offsets are never negative")
        return RangeBound("offset", offset)
    if timestamp is not None:
        return RangeBound("time", timestamp)
    return RangeBound(open_end)


def range_from(offset: int | None, timestamp: int | None) -> RangeBound:
    return _bound("from", offset, timestamp, "start")


def range_to(offset: int | None, timestamp: int | None) -> RangeBound:
    return _bound("to", offset, timestamp, "end")


def target_partition_for(source_partition: int, target_partitions: int, partitioner: str) -> int:
    """Where a source partition's records go. ``same`` keeps the partition number (so keyed records
    stay with their key's partition and consumer groups can be moved); ``modulo`` folds a larger
    source onto a smaller target (source partition mod target count)."""
    if partitioner == "same":
        if source_partition >= target_partitions:
            raise ConfigError(
                f"the target topic has {target_partitions} partitions, so source partition "
                f"{source_partition} has no partition of the same number there: add partitions to "
                "the target or pass --partitioner modulo"
            )
        return source_partition
    if partitioner == "modulo":
        return source_partition % target_partitions
    raise ConfigError(f"--partitioner {partitioner!r}: one of {', '.join(PARTITIONERS)}")


@dataclass(frozen=True, slots=True)
class ArchivedRange:
    """What the archive serves of one partition: offsets ``earliest..highest`` (inclusive)."""

    earliest: int
    highest: int


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    source_partition: int
    target_partition: int
    start: int  # first source offset of the requested range (what the offset map covers from)
    stop: int  # exclusive end of this run
    position: int  # where this run starts: start, or where an earlier run stopped
    sequence: int  # the sequence number of this partition's next progress record
    records_done: int  # restored by earlier runs
    bytes_done: int

    @property
    def remaining_offsets(self) -> int:
        return max(0, self.stop - self.position)

    @property
    def finished(self) -> bool:
        return self.position >= self.stop


def resolve_start(bound: RangeBound, archived: ArchivedRange, first_at_time: int | None) -> int:
    """The first source offset of the range. ``first_at_time``: the offset of the first archived
    record at or after a ``time`` bound (None when there is none)."""
    if bound.kind == "start":
        return archived.earliest
    if bound.kind == "offset":
        assert bound.value is not None
        if bound.value < archived.earliest:
            raise ConfigError(
                f"--from-offset {bound.value}: the archive starts at offset {archived.earliest}"
            )
        return bound.value
    return archived.highest + 1 if first_at_time is None else first_at_time


def resolve_stop(bound: RangeBound, archived: ArchivedRange, first_at_time: int | None) -> int:
    """The exclusive end of the range, never past the archive's end."""
    end = archived.highest + 1
    if bound.kind == "end":
        return end
    if bound.kind == "offset":
        assert bound.value is not None
        return min(bound.value, end)
    return end if first_at_time is None else min(first_at_time, end)
