"""The offset map of a restore: which target offset each restored source record got. Pure.

A restore copies the records of a source partition, in order, into a target partition that may
already hold data, that other producers may write to meanwhile, and that receives a transaction
marker after every restore transaction. So target offsets are not source offsets plus a constant;
they are recorded batch by batch (from the base offset the broker answers for each batch) and
stored compactly as *runs*: ``source_start + i -> target_start + i`` for ``i < length``, where both sides are
contiguous. A run ends where the source has a gap (transaction markers, aborted or compacted
records) or the target does (a transaction marker, a record from someone else).

A map also says which source range it *covers*: ``covered_start`` (the first source offset the
restore was asked for) up to ``covered_end`` (exclusive: the next source offset after what was
restored). Source offsets inside the covered range but in no run are offsets without a record in the
archive; that is what lets a consumer position inside a gap be translated exactly.

Byte layout (format version 1, big-endian; the same bytes are stored in the bucket and, one
transaction's chunk at a time, in the ``offset_map`` field of each restore progress record)::

     0  4  magic              "KTOM" (0x4B 0x54 0x4F 0x4D)
     4  1  version            u8 = 1
     5  1  flags              u8 = 0 (reserved; a reader rejects other values)
     6  4  source_partition   i32
    10  4  target_partition   i32
    14  8  covered_start      i64  first source offset covered
    22  8  covered_end        i64  next source offset after the covered range (exclusive)
    30  4  run_count          u32
    34  .  runs               run_count x [source_gap uvarint][target_gap uvarint][length-1 uvarint]
                              source_gap: source_start - (previous run's source end, or
                                          covered_start for the first run)
                              target_gap: target_start - (previous run's target end, or 0 for the
                                          first run: the first run's target_start itself)
                              an end is start + length (exclusive)
    ..  4  crc32              u32  zlib CRC-32 of every byte before it

``uvarint`` is the unsigned LEB128 varint of protobuf (7 bits a byte, low group first, high bit set
on every byte but the last; at most 10 bytes). Every gap is >= 0 because runs increase on both
sides, so a map of a million records with a transaction every few thousand costs a few hundred
bytes. The varint codec is written here (a dozen lines) rather than pulled in from a protobuf
library: nothing else in the format is protobuf.
"""

from __future__ import annotations

import bisect
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from processor.errors import FormatError

MAGIC = b"KTOM"
VERSION = 1
_HEAD = struct.Struct(">4sBBiiqqI")
_CRC = struct.Struct(">I")
_MAX_VARINT_BYTES = 10
_I64_MAX = 2**63 - 1


class OutsideRestoredRange(ValueError):
    """A source position the map cannot translate: before or after what the restore covered."""


@dataclass(frozen=True, slots=True)
class OffsetRun:
    source_start: int
    target_start: int
    length: int

    @property
    def source_end(self) -> int:
        return self.source_start + self.length

    @property
    def target_end(self) -> int:
        return self.target_start + self.length


@dataclass(frozen=True, slots=True)
class OffsetMap:
    source_partition: int
    target_partition: int
    covered_start: int
    covered_end: int
    runs: tuple[OffsetRun, ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.covered_start <= self.covered_end:
            raise ValueError(f"covered range {self.covered_start}..{self.covered_end} is not a range")
        source_floor, target_floor = self.covered_start, 0
        for run in self.runs:
            if run.length < 1 or run.source_start < source_floor or run.target_start < target_floor:
                raise ValueError(f"run {run} does not follow the previous one")
            source_floor, target_floor = run.source_end, run.target_end
        if source_floor > self.covered_end:
            raise ValueError(f"runs reach source offset {source_floor} past covered_end {self.covered_end}")

    @property
    def records(self) -> int:
        return sum(run.length for run in self.runs)

    def target_of(self, source_offset: int) -> int | None:
        """The target offset of the record restored from ``source_offset``; None if no record was."""
        i = bisect.bisect_right(self.runs, source_offset, key=lambda r: r.source_start) - 1
        if i >= 0 and source_offset < self.runs[i].source_end:
            return self.runs[i].target_start + source_offset - self.runs[i].source_start
        return None

    def translate(self, source_position: int) -> int:
        """A consumer position (the next source offset to read) as a target position.

        The answer is the target offset of the first restored record at or after the position, or,
        when every restored record lies before it, the target offset just after the last one. A
        consumer seeking there gets exactly the restored records it had not consumed yet.
        Raises OutsideRestoredRange for positions the map does not cover (and for an empty map,
        which has no target anchor).
        """
        if source_position < self.covered_start or source_position > self.covered_end:
            raise OutsideRestoredRange(
                f"source position {source_position} is outside the restored range "
                f"{self.covered_start}..{self.covered_end} of partition {self.source_partition}"
            )
        if not self.runs:
            raise OutsideRestoredRange(f"no record of partition {self.source_partition} was restored")
        i = bisect.bisect_right(self.runs, source_position, key=lambda r: r.source_end)
        if i == len(self.runs):
            return self.runs[-1].target_end
        run = self.runs[i]
        return run.target_start + max(0, source_position - run.source_start)

    def extended(self, chunk: OffsetMap) -> OffsetMap:
        """This map followed by ``chunk``, which must start where this one ends."""
        out = concat((self, chunk))
        assert out is not None
        return out


def runs_from_pairs(source_offsets: Sequence[int], target_offsets: Sequence[int]) -> list[OffsetRun]:
    """Runs of (source, target) pairs given in increasing order on both sides."""
    if len(source_offsets) != len(target_offsets):
        raise ValueError("as many target offsets as source offsets are needed")
    runs: list[OffsetRun] = []
    n = len(source_offsets)
    i = 0
    while i < n:
        s0, t0 = source_offsets[i], target_offsets[i]
        j = i + 1
        while j < n and source_offsets[j] == s0 + (j - i) and target_offsets[j] == t0 + (j - i):
            j += 1
        runs.append(OffsetRun(s0, t0, j - i))
        i = j
    return runs


def concat(maps: Iterable[OffsetMap]) -> OffsetMap | None:
    """One map from chunks in order, each starting where the previous one ends (None for none).
    Runs that continue each other across a chunk boundary become one."""
    first: OffsetMap | None = None
    covered_end = 0
    runs: list[OffsetRun] = []
    for chunk in maps:
        if first is None:
            first = chunk
        else:
            if (chunk.source_partition, chunk.target_partition) != (
                first.source_partition,
                first.target_partition,
            ):
                raise ValueError("offset map chunks of different partitions")
            if chunk.covered_start != covered_end:
                raise ValueError(
                    f"offset map chunk starts at {chunk.covered_start}, the map ends at {covered_end}"
                )
        covered_end = chunk.covered_end
        for run in chunk.runs:
            last = runs[-1] if runs else None
            if last is not None and (last.source_end, last.target_end) == (
                run.source_start,
                run.target_start,
            ):
                runs[-1] = OffsetRun(last.source_start, last.target_start, last.length + run.length)
            else:
                runs.append(run)
    if first is None:
        return None
    return OffsetMap(
        first.source_partition, first.target_partition, first.covered_start, covered_end, tuple(runs)
    )


# -- codec ------------------------------------------------------------------------------------------


def _put_uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _get_uvarint(data: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(_MAX_VARINT_BYTES):
        if pos + i >= end:
            raise FormatError("offset map: truncated varint")
        byte = data[pos + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos + i + 1
        shift += 7
    raise FormatError("offset map: varint longer than 10 bytes")


def encode(offset_map: OffsetMap) -> bytes:
    out = bytearray(
        _HEAD.pack(
            MAGIC,
            VERSION,
            0,
            offset_map.source_partition,
            offset_map.target_partition,
            offset_map.covered_start,
            offset_map.covered_end,
            len(offset_map.runs),
        )
    )
    source_end, target_end = offset_map.covered_start, 0
    for run in offset_map.runs:
        _put_uvarint(out, run.source_start - source_end)
        _put_uvarint(out, run.target_start - target_end)
        _put_uvarint(out, run.length - 1)
        source_end, target_end = run.source_end, run.target_end
    out += _CRC.pack(zlib.crc32(out))
    return bytes(out)


def decode(data: bytes | bytearray | memoryview, *, where: str = "offset map") -> OffsetMap:
    view = memoryview(data)
    if len(view) < _HEAD.size + _CRC.size:
        raise FormatError(f"{where}: {len(view)} bytes is too short for an offset map")
    magic, version, flags, source_p, target_p, covered_start, covered_end, count = _HEAD.unpack_from(view)
    if magic != MAGIC:
        raise FormatError(f"{where}: bad magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise FormatError(f"{where}: offset map version {version} is not supported (this reader knows 1)")
    if flags != 0:
        raise FormatError(f"{where}: unknown flags {flags:#x}")
    end = len(view) - _CRC.size
    (crc,) = _CRC.unpack_from(view, end)
    if zlib.crc32(view[:end]) != crc:
        raise FormatError(f"{where}: CRC-32 mismatch")
    if count > (end - _HEAD.size) // 3:
        raise FormatError(f"{where}: {count} runs cannot fit in {end - _HEAD.size} bytes")
    runs: list[OffsetRun] = []
    pos = _HEAD.size
    source_end, target_end = covered_start, 0
    for _ in range(count):
        source_gap, pos = _get_uvarint(view, pos, end)
        target_gap, pos = _get_uvarint(view, pos, end)
        length_less_one, pos = _get_uvarint(view, pos, end)
        run = OffsetRun(source_end + source_gap, target_end + target_gap, length_less_one + 1)
        if run.source_end > _I64_MAX or run.target_end > _I64_MAX:
            raise FormatError(f"{where}: run {run} overflows a Kafka offset")
        runs.append(run)
        source_end, target_end = run.source_end, run.target_end
    if pos != end:
        raise FormatError(f"{where}: {end - pos} bytes after the last run")
    try:
        return OffsetMap(source_p, target_p, covered_start, covered_end, tuple(runs))
    except ValueError as exc:
        raise FormatError(f"{where}: {exc}") from None
