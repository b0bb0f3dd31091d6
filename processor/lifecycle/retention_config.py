"""Per-topic remote retention from the settings. Pure.

The overrides (``PROCESSOR_REMOTE_RETENTION_OVERRIDES``) are parsed with the settings
(:func:`processor.config.parse_overrides`); an override replaces only the limit it names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from processor.lifecycle.retention_policy import RetentionLimits

RetentionOverride = tuple[str, str, int]  # (topic, "ms" | "bytes", value)


class RetentionConfig:
    """The limits of each topic: the defaults, with the overrides applied."""

    def __init__(self, default: RetentionLimits, overrides: tuple[RetentionOverride, ...] = ()) -> None:
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
