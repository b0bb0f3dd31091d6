"""Per-topic remote retention from the settings. Pure.

``PROCESSOR_REMOTE_RETENTION_OVERRIDES`` is a comma-separated list of ``topic=kind:value`` entries,
``kind`` being ``ms`` (time) or ``bytes`` (size per partition), ``value`` an integer >= -1 (-1:
unlimited). A topic may appear once per kind; an override replaces only the limit it names::

    orders=ms:604800000,payments=bytes:1073741824,payments=ms:-1
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from processor.errors import InvalidNameError
from processor.lifecycle.retention_policy import UNLIMITED, RetentionLimits
from processor.segment.object_keys import validate_topic

Override = tuple[str, str, int]  # (topic, "ms" | "bytes", value)
KINDS = ("ms", "bytes")


def parse_overrides(text: str) -> tuple[Override, ...]:
    """Parse the overrides list; raise ValueError naming the entry and what is wrong with it."""
    out: list[Override] = []
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
        if kind not in KINDS:
            raise ValueError(f"entry {entry!r}: unknown limit {kind!r} (use 'ms' or 'bytes')")
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"entry {entry!r}: {value!r} is not an integer") from None
        if number < UNLIMITED:
            raise ValueError(f"entry {entry!r}: {number} is below -1 (-1 means unlimited)")
        if (topic, kind) in seen:
            raise ValueError(f"entry {entry!r}: topic {topic!r} has more than one '{kind}' override")
        seen.add((topic, kind))
        out.append((topic, kind, number))
    return tuple(out)


class RetentionConfig:
    """The limits of each topic: the defaults, with the overrides applied."""

    def __init__(self, default: RetentionLimits, overrides: tuple[Override, ...] = ()) -> None:
        self.default = default
        per_topic: dict[str, RetentionLimits] = {}
        for topic, kind, value in overrides:
            base = per_topic.get(topic, default)
            per_topic[topic] = (
                replace(base, retention_ms=value) if kind == "ms" else replace(base, retention_bytes=value)
            )
        self._per_topic: Mapping[str, RetentionLimits] = per_topic

    def limits(self, topic: str) -> RetentionLimits:
        return self._per_topic.get(topic, self.default)

    @property
    def anything_limited(self) -> bool:
        return not self.default.unlimited or any(not v.unlimited for v in self._per_topic.values())
