"""Where a Spark read starts and ends (offsets, timestamps, per partition), and the option values
they are written in (JSON maps, longs, booleans, Spark's time strings). Pure (no pyspark)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from processor.errors import ConfigError
from processor.kafka.partition import TopicPartition
from processor.segment.object_keys import validate_topic
from processor.units import parse_duration_ms

EARLIEST = -2  # Spark's JSON offsets: -2 earliest, -1 latest


LATEST = -1


def lowered_options(options: Mapping[str, str]) -> dict[str, str]:
    # pyspark hands options in a case-insensitive dict; plain dicts are matched case-insensitively too.
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None and str(v) != ""}


def option(options: Mapping[str, str], name: str) -> str | None:
    return lowered_options(options).get(name.lower())


@dataclass(frozen=True, slots=True)
class Bound:
    """Where a read starts or ends (Spark's KafkaOffsetRangeLimit).

    ``kind``: ``earliest`` | ``latest`` | ``offsets`` (``offsets`` per partition, -2 earliest,
    -1 latest) | ``timestamps`` (``timestamps`` per partition) | ``timestamp`` (one for all)."""

    kind: Literal["earliest", "latest", "offsets", "timestamps", "timestamp"]
    offsets: tuple[tuple[TopicPartition, int], ...] = ()
    timestamps: tuple[tuple[TopicPartition, int], ...] = ()
    timestamp: int | None = None

    @property
    def offset_map(self) -> dict[TopicPartition, int]:
        return dict(self.offsets)

    @property
    def timestamp_map(self) -> dict[TopicPartition, int]:
        return dict(self.timestamps)

    def named_partitions(self) -> set[TopicPartition] | None:
        """The partitions a JSON bound names (None for the others)."""
        if self.kind == "offsets":
            return {tp for tp, _ in self.offsets}
        if self.kind == "timestamps":
            return {tp for tp, _ in self.timestamps}
        return None


EARLIEST_BOUND = Bound("earliest")


LATEST_BOUND = Bound("latest")


def parse_json(name: str, raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"option {name}: not valid JSON ({exc.msg}): {raw!r}") from None


def partition_longs(name: str, raw: str, example: str) -> tuple[tuple[TopicPartition, int], ...]:
    """``{"topic":{"0":23,...},...}`` as ((tp, value), ...) in topic, partition order."""
    doc = parse_json(name, raw)
    bad = ConfigError(f"option {name}: expected e.g. {example}, got {raw}")
    if not isinstance(doc, dict):
        raise bad
    out: list[tuple[TopicPartition, int]] = []
    for topic, parts in doc.items():
        validate_topic(topic)
        if not isinstance(parts, dict):
            raise bad
        for p, value in parts.items():
            try:
                partition = int(p)
            except (TypeError, ValueError):
                raise bad from None
            if not isinstance(value, int) or isinstance(value, bool) or partition < 0:
                raise bad
            out.append((TopicPartition(topic, partition), value))
    return tuple(sorted(out))


def parse_long(name: str, raw: str | None, minimum: int | None = None) -> int | None:
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"option {name}: expected a whole number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"option {name}: must be at least {minimum}, got {value}")
    return value


def long_or(lowered: Mapping[str, str], name: str, minimum: int, default: int) -> int:
    value = parse_long(name, lowered.get(name.lower()), minimum)
    return default if value is None else value


def parse_bool(name: str, raw: str | None, default: bool) -> bool:
    if raw is None:
        return default
    if raw.strip().lower() in {"true", "false"}:
        return raw.strip().lower() == "true"
    raise ConfigError(f"option {name}: expected true or false, got {raw!r}")


def time_string_ms(name: str, raw: str) -> int:
    """A time such as ``15m``, ``10s``, ``250ms``, ``2h`` or ``1d`` (a bare number is ms), as Spark's
    time strings; ConfigError naming the option otherwise."""
    try:
        return parse_duration_ms(raw)
    except ValueError as exc:
        raise ConfigError(f"option {name}: {exc}") from None


def parse_bound(
    options: Mapping[str, str], *, timestamp_key: str, by_timestamp_key: str, offsets_key: str, default: Bound
) -> Bound:
    """The bound an option set asks for, by Spark's preference: a global timestamp, then
    timestamps per partition, then offsets (earliest/latest/JSON), then ``default``."""
    lowered = lowered_options(options)
    if timestamp_key.lower() in lowered:
        return Bound("timestamp", timestamp=parse_long(timestamp_key, lowered[timestamp_key.lower()]))
    if by_timestamp_key.lower() in lowered:
        example = '{"topicA":{"0":1000,"1":1000},"topicB":{"0":2000}}'
        return Bound(
            "timestamps",
            timestamps=partition_longs(by_timestamp_key, lowered[by_timestamp_key.lower()], example),
        )
    raw = lowered.get(offsets_key.lower())
    return default if raw is None else offsets_bound(offsets_key, raw)


def offsets_bound(name: str, raw: str) -> Bound:
    """``earliest``, ``latest`` or JSON ``{"topic":{"0":23}}`` (-2 earliest, -1 latest)."""
    if raw.strip().lower() == "earliest":
        return EARLIEST_BOUND
    if raw.strip().lower() == "latest":
        return LATEST_BOUND
    offsets = partition_longs(name, raw, '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}')
    if any(o < EARLIEST for _tp, o in offsets):
        raise ConfigError(f"option {name}: offsets are >= 0, or -2 (earliest) / -1 (latest)")
    return Bound("offsets", offsets=offsets)
