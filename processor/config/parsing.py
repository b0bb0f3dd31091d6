"""Parsing of the settings' values that are more than a number or a name: the per-topic retention
overrides, and sizes and durations with their units (``-1`` meaning unlimited). Pure."""

from __future__ import annotations

from collections.abc import Callable

from processor.config.variables import ENV_PREFIX
from processor.errors import InvalidNameError
from processor.lifecycle.retention_config import RetentionOverride
from processor.segment.object_keys import validate_topic

RETENTION_KINDS = ("ms", "bytes")


def parse_overrides(text: str) -> tuple[RetentionOverride, ...]:
    """Parse ``PROCESSOR_REMOTE_RETENTION_OVERRIDES``: a comma-separated list of ``topic=kind:value``
    entries, ``kind`` being ``ms`` (time) or ``bytes`` (size per partition), ``value`` an integer
    >= -1 (-1: unlimited). A topic may appear once per kind::

        orders=ms:604800000,payments=bytes:1073741824,payments=ms:-1

    Raise ValueError naming the entry and what is wrong with it."""
    out: list[RetentionOverride] = []
    seen: set[tuple[str, str]] = set()
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        topic, eq, rest = entry.partition("=")
        kind, colon, value = rest.partition(":")
        topic, kind, value = topic.strip(), kind.strip(), value.strip()
        if not eq or not colon:
            raise ValueError(f"entry {entry!r} is not of the form topic=ms:N or topic=bytes:N")
        try:
            validate_topic(topic)
        except InvalidNameError as exc:
            raise ValueError(f"entry {entry!r}: {exc}") from None
        if kind not in RETENTION_KINDS:
            raise ValueError(f"entry {entry!r}: unknown limit {kind!r} (use 'ms' or 'bytes')")
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"entry {entry!r}: {value!r} is not an integer") from None
        if number < -1:
            raise ValueError(f"entry {entry!r}: {number} is below -1 (-1 means unlimited)")
        if (topic, kind) in seen:
            raise ValueError(f"entry {entry!r}: topic {topic!r} has more than one '{kind}' override")
        seen.add((topic, kind))
        out.append((topic, kind, number))
    return tuple(out)


def with_units(parse: Callable[[str], int], name: str, value: str) -> int:
    """The parsed number, or a ValueError naming the variable (a model-level error has no field)."""
    try:
        stripped = value.strip()
        if stripped.startswith("-"):  # -1 (any unit) is the "unlimited" of retention and rate limits
            return -parse(stripped[1:])
        return parse(value)
    except ValueError as exc:
        raise ValueError(f"{ENV_PREFIX}{name.upper()}: {exc}") from None
