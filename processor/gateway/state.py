"""What the gateway's answers share: the archive's side (:class:`Archive`), the state every client
connection of one gateway shares (:class:`GatewayState`), how a request is sent upstream, and the
modes of archive reads."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from processor.gateway.prefetch import Prefetcher
from processor.gateway.protocol import Frame
from processor.kafka.partition import TopicPartition
from processor.reader.remote_reader import ArchivedBatches


class ReadMode(StrEnum):
    """Which fetch offsets the archive answers (``PROCESSOR_GATEWAY_ARCHIVE_READS``)."""

    ARCHIVED = "archived"  # every offset the archive holds
    BELOW_LOG_START = "below-log-start"  # only offsets the broker no longer has


EARLIEST = -2
LATEST = -1


class Archive:
    """What the gateway asks of the archive (the RemoteReader and the follower's metadata behind
    it); blocking calls, run in threads."""

    def __init__(
        self,
        read_batches: Callable[[TopicPartition, int, int, str | None], ArchivedBatches | None],
        first_offset: Callable[[TopicPartition], int | None],
        offset_for_timestamp: Callable[[TopicPartition, int], tuple[int, int] | None],
        read_whole_blocks: Callable[[TopicPartition, int, int, str | None], ArchivedBatches | None]
        | None = None,
    ) -> None:
        self.read_batches = read_batches
        # read-ahead's reads: whole blocks within the byte limit (default: as read_batches)
        self.read_whole_blocks = read_batches if read_whole_blocks is None else read_whole_blocks
        self.first_offset = first_offset
        self.offset_for_timestamp = offset_for_timestamp


@dataclass
class GatewayState:
    """Shared by every connection of one gateway: topic ids learned from Metadata answers, the
    brokers' log start offsets seen, the upstream's ListOffsets version."""

    mode: ReadMode
    topic_names: dict[uuid.UUID, str] = field(default_factory=dict)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    broker_log_start: dict[TopicPartition, int] = field(default_factory=dict)
    # (partition, isolation level) -> (when, (high watermark, last stable offset, log start))
    broker_offsets: dict[tuple[TopicPartition, int], tuple[float, tuple[int, int, int]]] = field(
        default_factory=dict
    )
    refreshing: set[tuple[TopicPartition, int]] = field(default_factory=set)  # being asked again
    list_offsets_version: int = 4
    broker_api_keys: set[int] = field(default_factory=set)  # API keys the brokers' ApiVersions list
    prefetch: Prefetcher | None = None  # read-ahead for sequential consumers (None: off)
    # SASL passed through: ask the broker, with the client's identity, whether it may read a
    # partition before the archive answers for it (see fetch_access.may_read)
    check_access: bool = False
    # records and record batch bytes of Fetch answers: (topic, source "archive" or "broker", records, bytes)
    served: Callable[[str, str, int, int], None] = lambda _topic, _source, _records, _bytes: None


Send = Callable[[bytes], Awaitable[Frame]]


def build(cls: Any, **values: Any) -> Any:
    """An instance of a kio dataclass from the values its version has (others are left out)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})
