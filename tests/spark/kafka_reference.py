"""A reference reader: Spark's Kafka source semantics, written from its documentation
(``structured-streaming-kafka-integration``), reading the live topic with the project's consumer
factory. The conformance tests run the same query through it and through ``tiered_records`` and
compare rows. It shares no code with ``processor.spark`` on purpose: two readings of one spec.

What it implements (batch): ``subscribe`` / ``subscribePattern`` (the whole topic name must match the
regex; Kafka's internal topics are left out) / ``assign``; starting bounds by preference
``startingTimestamp`` > ``startingOffsetsByTimestamp`` > ``startingOffsets`` (default earliest),
ending bounds likewise (default latest); JSON bounds must name every assigned partition, -2 is
earliest and -1 latest, ``latest`` cannot start and ``earliest`` cannot end a batch; a timestamp
resolves to the earliest offset whose timestamp is >= it, and when none is, a start fails unless
``startingOffsetsByTimestampStrategy=latest`` (then latest) and an end is latest; ``includeHeaders``
adds the ``headers`` column, null for a record without headers. And the micro-batch arithmetic of
``maxOffsetsPerTrigger`` (a cap spread in proportion over the partitions, shares below one rounded up,
others down).

The timestamp lookup reads the partition instead of asking the broker: Tansu answers ListOffsets by
timestamp with offset 0 whatever the time.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition as KafkaTP

from processor.kafka.clients import new_consumer

INTERNAL = {"__consumer_offsets", "__transaction_state"}
Key = tuple[str, int]


class ReferenceError(Exception):
    """A query Spark's Kafka source refuses."""


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    timestamp_type: int  # Spark's numbering: 0 CreateTime, 1 LogAppendTime
    headers: tuple[tuple[str, bytes | None], ...] | None  # None: the record has none

    def row(self, include_headers: bool) -> tuple[Any, ...]:
        base = (
            self.key,
            self.value,
            self.topic,
            self.partition,
            self.offset,
            self.timestamp_ms,
            self.timestamp_type,
        )
        return (*base, self.headers) if include_headers else base


class KafkaReference:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    # -- the topic ----------------------------------------------------------------------------------

    def _consumer(self) -> Any:
        return new_consumer(self.bootstrap, "spark-reference")

    def assigned(self, options: dict[str, str]) -> list[Key]:
        opts = {k.lower(): v for k, v in options.items()}
        consumer = self._consumer()
        try:
            topics = {
                name: sorted(t.partitions)
                for name, t in consumer.list_topics(timeout=10).topics.items()
                if t.error is None and name not in INTERNAL
            }
        finally:
            consumer.close()
        if "assign" in opts:
            return sorted((t, int(p)) for t, ps in json.loads(opts["assign"]).items() for p in ps)
        if "subscribepattern" in opts:
            pattern = re.compile(opts["subscribepattern"])
            return sorted((t, p) for t, ps in topics.items() if pattern.fullmatch(t) for p in ps)
        names = [t.strip() for t in opts["subscribe"].split(",") if t.strip()]
        return sorted((t, p) for t in names for p in topics.get(t, []))

    def watermarks(self, key: Key) -> tuple[int, int]:
        consumer = self._consumer()
        try:
            low, high = consumer.get_watermark_offsets(KafkaTP(key[0], key[1]), timeout=10)
            return int(low), int(high)
        finally:
            consumer.close()

    def records(self, key: Key, lo: int, hi: int) -> list[Record]:
        """Offsets ``[lo, hi)`` of one partition, as a plain consumer sees them."""
        if lo >= hi:
            return []
        consumer = self._consumer()
        out: list[Record] = []
        deadline = time.monotonic() + 60
        try:
            consumer.assign([KafkaTP(key[0], key[1], lo)])
            while not out or out[-1].offset < hi - 1:
                batch = consumer.consume(500, 0.1)
                if not batch:
                    position = consumer.position([KafkaTP(key[0], key[1])])[0].offset
                    if position >= hi:
                        break
                    assert time.monotonic() < deadline, f"reference read of {key} stalled at {position}"
                    continue
                for msg in batch:
                    assert msg.error() is None, msg.error()
                    if msg.offset() >= hi:
                        return out
                    ts_type, ts = msg.timestamp()
                    headers = msg.headers()
                    out.append(
                        Record(
                            key[0],
                            key[1],
                            int(msg.offset()),
                            msg.key(),
                            msg.value(),
                            int(ts),
                            int(ts_type) - 1,
                            tuple(headers) if headers else None,
                        )
                    )
            return out
        finally:
            consumer.close()

    def offset_for_timestamp(self, key: Key, timestamp: int) -> int | None:
        low, high = self.watermarks(key)
        for record in self.records(key, low, high):
            if record.timestamp_ms >= timestamp:
                return record.offset
        return None

    # -- bounds ---------------------------------------------------------------------------------------

    def _bound(
        self, opts: dict[str, str], keys: list[Key], which: str, default: str
    ) -> tuple[dict[Key, int | str], bool]:
        """Per partition: an offset, "earliest", "latest", or ("ts", t) pending; second: by time."""
        glob, by_ts, offsets = f"{which}timestamp", f"{which}offsetsbytimestamp", f"{which}offsets"
        if glob in opts:
            return {k: int(opts[glob]) for k in keys}, True
        if by_ts in opts:
            doc = json.loads(opts[by_ts])
            named = {(t, int(p)): int(v) for t, ps in doc.items() for p, v in ps.items()}
            if set(named) != set(keys):
                raise ReferenceError(f"{which}OffsetsByTimestamp must name every partition")
            return dict(named), True
        raw = opts.get(offsets, default)
        if raw in ("earliest", "latest"):
            return dict.fromkeys(keys, raw), False
        doc = json.loads(raw)
        named = {(t, int(p)): int(v) for t, ps in doc.items() for p, v in ps.items()}
        if set(named) != set(keys):
            raise ReferenceError(f"{which}Offsets must name every partition")
        return {k: {-2: "earliest", -1: "latest"}.get(v, v) for k, v in named.items()}, False

    def batch(self, options: dict[str, str]) -> list[tuple[Any, ...]]:
        """The rows of a batch query, sorted by (topic, partition, offset)."""
        opts = {k.lower(): v for k, v in options.items()}
        keys = self.assigned(options)
        starts, start_by_time = self._bound(opts, keys, "starting", "earliest")
        ends, end_by_time = self._bound(opts, keys, "ending", "latest")
        if not start_by_time and any(v == "latest" for v in starts.values()):
            raise ReferenceError("starting offset can't be latest for batch queries")
        if not end_by_time and any(v == "earliest" for v in ends.values()):
            raise ReferenceError("ending offset can't be earliest for batch queries")
        latest_on_no_match = opts.get("startingoffsetsbytimestampstrategy", "error").lower() == "latest"
        include_headers = opts.get("includeheaders", "false").lower() == "true"
        rows: list[tuple[Any, ...]] = []
        for key in keys:
            low, high = self.watermarks(key)
            lo = self._resolve(
                key, starts[key], start_by_time, low, high, start=True, latest=latest_on_no_match
            )
            hi = self._resolve(key, ends[key], end_by_time, low, high, start=False, latest=True)
            rows.extend(r.row(include_headers) for r in self.records(key, lo, hi))
        return sorted(rows, key=lambda r: (r[2], r[3], r[4]))

    def _resolve(
        self, key: Key, bound: int | str, by_time: bool, low: int, high: int, *, start: bool, latest: bool
    ) -> int:
        if by_time:
            found = self.offset_for_timestamp(key, int(bound))
            if found is not None:
                return found
            if start and not latest:
                raise ReferenceError(
                    f"No offset matched from request of topic-partition {key} and timestamp {bound}"
                )
            return high
        if bound == "earliest":
            return low
        if bound == "latest":
            return high
        return int(bound)

    # -- micro-batches -------------------------------------------------------------------------------

    @staticmethod
    def rate_limited_batches(start: dict[Key, int], latest: dict[Key, int], cap: int) -> list[dict[Key, int]]:
        """The end offsets of successive micro-batches from ``start`` to ``latest`` with
        maxOffsetsPerTrigger ``cap``."""
        out: list[dict[Key, int]] = []
        current = dict(start)
        while current != latest:
            waiting = {k: latest[k] - current[k] for k in latest if latest[k] > current[k]}
            total = sum(waiting.values())
            nxt = dict(current)
            for k, size in waiting.items():
                share = cap * size / total
                nxt[k] = min(latest[k], current[k] + (math.ceil(share) if share < 1 else math.floor(share)))
            out.append(nxt)
            current = nxt
        return out
