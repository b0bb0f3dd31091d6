"""What every role that publishes metadata needs (the leader's copier, the follower's RLMM)."""

from __future__ import annotations

from typing import Protocol

from processor.metadata.model import MetadataRecord


class MetadataSink(Protocol):
    def publish(self, record: MetadataRecord) -> int: ...
