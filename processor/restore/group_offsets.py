"""Consumer group positions moved from a source topic to its restored copy. Pure.

A group's committed offset on a source partition is the next offset it would read. Through the
partition's offset map it becomes the target offset of the first restored record at or after it
(or just past the last restored record, when the group had read them all): a consumer of the
restored topic starting there gets every restored record the group had not consumed, and none it
had. Positions outside what the restore covered are reported, never guessed: committing them would
skip or redeliver records.

Exported offsets (``--offsets-file``) are read in the CSV layout of Kafka's
``kafka-consumer-groups.sh --reset-offsets --export``: ``topic,partition,offset`` lines for one group,
or ``group,topic,partition,offset`` lines for several.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from processor.errors import ConfigError
from processor.restore.offset_map import OffsetMap, OutsideRestoredRange


@dataclass(frozen=True, slots=True)
class Translation:
    group: str
    source_partition: int
    source_offset: int
    target_partition: int | None
    target_offset: int | None
    problem: str | None = None


def check_one_to_one(maps: Mapping[int, OffsetMap]) -> None:
    """Group positions move only where each target partition holds one source partition's records."""
    seen: dict[int, int] = {}
    for p, m in sorted(maps.items()):
        if m.target_partition in seen:
            raise ConfigError(
                f"source partitions {seen[m.target_partition]} and {p} were both restored into target "
                f"partition {m.target_partition} (--partitioner modulo): one committed offset there cannot "
                "stand for two source positions, so group offsets cannot be moved"
            )
        seen[m.target_partition] = p


def translate(group: str, committed: Mapping[int, int], maps: Mapping[int, OffsetMap]) -> list[Translation]:
    out: list[Translation] = []
    for p, offset in sorted(committed.items()):
        m = maps.get(p)
        if m is None:
            out.append(Translation(group, p, offset, None, None, f"source partition {p} was not restored"))
            continue
        try:
            out.append(Translation(group, p, offset, m.target_partition, m.translate(offset)))
        except OutsideRestoredRange as exc:
            out.append(Translation(group, p, offset, m.target_partition, None, str(exc)))
    return out


def parse_offsets_csv(text: str, topic: str, groups: Iterable[str]) -> dict[str, dict[int, int]]:
    """Committed offsets of ``topic`` per group from an exported CSV (see the module doc)."""
    wanted = list(groups)
    out: dict[str, dict[int, int]] = {g: {} for g in wanted}
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or not "".join(row).strip():
            continue
        cells = [c.strip() for c in row]
        if len(cells) == 3:
            if len(wanted) != 1:
                raise ConfigError(
                    f"offsets file line {number}: topic,partition,offset lines need exactly one --group"
                )
            group, (row_topic, partition, offset) = wanted[0], cells
        elif len(cells) == 4:
            group, row_topic, partition, offset = cells
        else:
            raise ConfigError(
                f"offsets file line {number}: expected topic,partition,offset or group,topic,partition,offset"
            )
        try:
            p, o = int(partition), int(offset)
        except ValueError:
            raise ConfigError(f"offsets file line {number}: partition and offset must be integers") from None
        if p < 0 or o < 0:
            raise ConfigError(f"offsets file line {number}: negative partition or offset")
        if row_topic == topic and group in out:
            out[group][p] = o
    return out
