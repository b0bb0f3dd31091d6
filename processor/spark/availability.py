"""Which offsets of the subscribed partitions are available, and where: the archive (through the
materialized metadata view) and, with ``tail=live``, the live topic. Driver side.

``observe`` takes one look; ``Availability`` answers Spark's questions from it: the assigned
partitions (the broker's partitions of the subscribed topics and the archive's; ``assign`` names
them), ``earliest`` and ``latest`` per partition, and the offsets a starting or ending bound
resolves to (``resolve``), with Spark's rules: JSON bounds must name every assigned partition, -2
and -1 inside them mean earliest and latest, a starting timestamp no record reaches is an error
unless ``startingOffsetsByTimestampStrategy=latest``, an ending one means latest.

Without ``tail=live``, ``latest`` is the archive's end; a partition with nothing archived yet has no
offsets (a stream picks it up, from its first archived offset, when its first segment lands).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from processor.errors import ConfigError
from processor.kafka.partition import TopicPartition
from processor.segment.object_keys import ObjectKeyFactory
from processor.spark.bounds import EARLIEST, LATEST, Bound
from processor.spark.fold_adapter import PartitionArchive
from processor.spark.live_tail import (
    broker_partitions,
    broker_topic_ids,
    live_offset_for_timestamp,
    watermarks,
)
from processor.spark.metadata_view import MaterializedMetadata
from processor.spark.options import RecordOptions
from processor.spark.planning import archive_offset_for_timestamp

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Availability:
    partitions: tuple[TopicPartition, ...]
    archive: Mapping[TopicPartition, PartitionArchive]
    live: Mapping[TopicPartition, tuple[int, int]] | None = None  # (low, high), tail=live only
    topic_ids: Mapping[str, str] = field(default_factory=dict)

    def archived(self, tp: TopicPartition) -> PartitionArchive | None:
        arch = self.archive.get(tp)
        return arch if arch is not None and arch.earliest is not None else None

    def known(self, tp: TopicPartition) -> bool:
        """True when the partition has offsets: something archived, or a live topic partition."""
        return self.archived(tp) is not None or (self.live is not None and tp in self.live)

    def live_low(self, tp: TopicPartition) -> int | None:
        if self.live is None or tp not in self.live:
            return None
        return self.live[tp][0]

    def earliest(self, tp: TopicPartition) -> int:
        arch = self.archived(tp)
        candidates = [arch.earliest] if arch is not None and arch.earliest is not None else []
        if self.live is not None and tp in self.live:
            candidates.append(self.live[tp][0])
        if candidates:
            return min(candidates)
        return self.archive[tp].log_start_offset if tp in self.archive else 0

    def latest(self, tp: TopicPartition) -> int:
        ends = [self.archive[tp].next_offset] if tp in self.archive else []
        if self.live is not None and tp in self.live:
            ends.append(self.live[tp][1])
        return max(ends, default=0)

    def resolve(
        self,
        bound: Bound,
        *,
        is_start: bool,
        no_match_latest: bool,
        offset_for_timestamp: Callable[[TopicPartition, int], int | None],
        partitions: list[TopicPartition] | None = None,
    ) -> dict[TopicPartition, int]:
        """The offset ``bound`` means for each partition (``partitions``: default every known one)."""
        which = "starting" if is_start else "ending"
        named = bound.named_partitions()
        if named is not None and named != set(self.partitions):
            option = f"{which}Offsets" + ("ByTimestamp" if bound.kind == "timestamps" else "")
            raise ConfigError(
                f"If {option} contains specific offsets, you must specify all TopicPartitions. "
                "Use -1 for latest, -2 for earliest. "
                f"Specified: {sorted(map(str, named))} Assigned: {sorted(map(str, self.partitions))}"
            )
        chosen = partitions if partitions is not None else [tp for tp in self.partitions if self.known(tp)]
        if bound.kind == "earliest":
            return {tp: self.earliest(tp) for tp in chosen}
        if bound.kind == "latest":
            return {tp: self.latest(tp) for tp in chosen}
        if bound.kind == "offsets":
            given = bound.offset_map
            return {
                tp: self.earliest(tp)
                if given[tp] == EARLIEST
                else self.latest(tp)
                if given[tp] == LATEST
                else given[tp]
                for tp in chosen
                if tp in given
            }
        times = bound.timestamp_map if bound.kind == "timestamps" else dict.fromkeys(chosen, bound.timestamp)
        wanted = [tp for tp in chosen if tp in times]
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(wanted)))) as pool:
            found = dict(
                zip(
                    wanted,
                    pool.map(lambda tp: offset_for_timestamp(tp, int(times[tp] or 0)), wanted),
                    strict=True,
                )
            )
        out: dict[TopicPartition, int] = {}
        for tp in wanted:
            offset = found[tp]
            if offset is None:
                if is_start and not no_match_latest:
                    raise ConfigError(
                        f"No offset matched from request of topic-partition {tp} and timestamp "
                        f"{times[tp]} (set startingOffsetsByTimestampStrategy=latest to start at the "
                        "latest offset instead)"
                    )
                offset = self.latest(tp)
            out[tp] = offset
        return out


def observe(options: RecordOptions, metadata: MaterializedMetadata) -> Availability:
    """One look at the archive (new metadata records applied) and, with tail=live, the live topic."""
    conn = options.connection
    archive = metadata.read(options.wants)
    # without tail=live nothing is read from the source topics: a principal refused them reads the
    # archive; with it, a refused topic is an error (never a read of the archive alone)
    needs = "tail=live needs Read and Describe on the source topics" if options.tail_live else None
    if options.subscription.assign:
        partitions = set(options.subscription.assign)
        on_broker = broker_partitions(conn, options.subscription, needs=needs) if options.tail_live else []
    else:
        on_broker = broker_partitions(conn, options.subscription, needs=needs)
        partitions = set(on_broker) | set(archive)
    topic_ids = {tp.topic: a.topic_id for tp, a in archive.items() if a.topic_id}
    live = None
    if options.tail_live:
        current = broker_topic_ids(conn, sorted({tp.topic for tp in on_broker}))
        for topic, tid in current.items():
            old = topic_ids.get(topic)
            if old is not None and old != tid:
                log.warning(
                    "the archive of %s holds a deleted incarnation of the topic (topic id %s; it is %s "
                    "now): reading the live topic only",
                    topic,
                    old,
                    tid,
                )
                archive = {tp: a for tp, a in archive.items() if tp.topic != topic}
        topic_ids = {**topic_ids, **current}
        live = watermarks(
            conn, on_broker, options.fetch_offset_retries, options.fetch_offset_retry_interval_ms
        )
    return Availability(tuple(sorted(partitions)), archive, live, topic_ids)


def timestamp_lookup(
    options: RecordOptions, availability: Availability
) -> Callable[[TopicPartition, int], int | None]:
    """Where a timestamp falls in a partition: the archive first, then (tail=live) the live topic
    past the archive's end."""
    conn = options.connection
    keys = ObjectKeyFactory(conn.s3_prefix)

    def lookup(tp: TopicPartition, timestamp: int) -> int | None:
        arch = availability.archived(tp)
        if arch is not None:
            found = archive_offset_for_timestamp(
                conn.shared_storage(), keys, arch, timestamp, conn.decryption()
            )
            if found is not None:
                return found
        if availability.live is not None and tp in availability.live:
            low, high = availability.live[tp]
            start = max(low, arch.next_offset if arch is not None else low)
            return live_offset_for_timestamp(conn, tp, start, high, timestamp, options.group_id)
        return None

    return lookup
