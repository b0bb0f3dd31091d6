"""What every role that publishes metadata needs: a sink, and read-your-write through a follower."""

from __future__ import annotations

from typing import Protocol

from processor.metadata.model import MetadataRecord


class MetadataSink(Protocol):
    def publish(self, record: MetadataRecord) -> int:
        """Publish one record durably; returns the offset it got in its metadata partition."""
        ...


class Confirm(Protocol):
    """Read-your-write on the metadata topic: whether the topic's readers accepted ``record``,
    published at ``offset`` (the writer's own follower applies the same fold as every reader).

    True only when the fold accepted it; False when it rejected it; None when that could not be
    confirmed in time. A writer goes on only on True (it never fails open); only on False does it
    know that nobody serves what the record named."""

    def __call__(self, record: MetadataRecord, offset: int) -> bool | None: ...
