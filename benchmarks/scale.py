"""The metadata plane at a cluster's scale: a follower cache of many partitions and segments, its
snapshots written and loaded, lookups and listings on the loaded cache, against the fold of the
whole topic (``--only snapshots``).

Building a cache of ten million segments through the fold takes as long as the fold does (what this
section measures against), so the cache the snapshots are taken from is written straight into
RocksDB: the keys and values the fold writes for a claimed partition of finished segments, checked
key for key against the real fold on a sample first (``_check_against_the_fold``). The fold's own
rate is measured on a part of the same records and the time to fold them all is extrapolated from it
(a new follower without a snapshot). Loading runs in a child process, so its peak memory is its own.
Storage is a local folder (the bucket's GETs are not what this measures; a snapshot is read in 8 MiB
ranged GETs, so on S3 add its size over the GET throughput).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from benchmarks.report import Figure, Report
from processor.follower.cache_keys import CACHE_VERSION, I64, O_VALUE, U32, U64, VERSION_KEY, tp_key
from processor.follower.cache_writes import RawMessage
from processor.follower.metadata_cache import MetadataCache
from processor.follower.snapshots import SnapshotStore
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import encode_value, metadata_partition_for, record_key
from processor.metadata.fold import MetadataFold
from processor.metadata.model import (
    ClaimKind,
    PartitionClaim,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    SegmentState,
)
from processor.metadata.partition_header_codec import encode_header
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.filesystem import FilesystemChunkStorage

MiB = 1024 * 1024
KEYS = ObjectKeyFactory("bench")
ORIGIN = "__remote_log_metadata/bench"
TOPIC_PARTITIONS = 100  # partitions per topic: 10,000 partitions are 100 topics of 100
SEGMENT_RECORDS = 1000  # offsets per segment
WRITER = "bench-worker"
RECORDS_PER_SEGMENT = 2  # COPY_SEGMENT_STARTED and COPY_SEGMENT_FINISHED on the topic


def _tps(partitions: int) -> list[TopicPartition]:
    topics = max(1, -(-partitions // TOPIC_PARTITIONS))
    out = [TopicPartition(f"topic{t:04d}", p) for t in range(topics) for p in range(TOPIC_PARTITIONS)]
    return sorted(out[:partitions], key=tp_key)


class Layout:
    """The made-up cluster: each partition claimed once (its claim's epoch is the claim's offset in
    its metadata partition), then ``segments`` finished segments of SEGMENT_RECORDS offsets each."""

    def __init__(self, partitions: int, segments: int, metadata_partitions: int) -> None:
        self.tps = _tps(partitions)
        self.segments = segments
        self.metadata_partitions = metadata_partitions
        self.index = {tp: i for i, tp in enumerate(self.tps)}
        self.owner = {tp: metadata_partition_for(tp, metadata_partitions) for tp in self.tps}
        self.claims: dict[TopicPartition, PartitionClaim] = {}
        self.epochs: dict[TopicPartition, int] = {}
        self.next_offsets: dict[int, int] = dict.fromkeys(range(metadata_partitions), 0)
        for tp in self.tps:
            mp = self.owner[tp]
            self.epochs[tp] = self.next_offsets[mp]
            self.claims[tp] = PartitionClaim(tp, uuid.UUID(int=self.index[tp] + 1), ClaimKind.LEAD, WRITER, 1)
            self.next_offsets[mp] += 1
        for tp in self.tps:
            self.next_offsets[self.owner[tp]] += RECORDS_PER_SEGMENT * segments

    def segment_id(self, tp: TopicPartition, s: int) -> uuid.UUID:
        """Ids in key order of (segment, partition): ``S`` keys come out sorted as they are made."""
        i = s * len(self.tps) + self.index[tp]
        return uuid.UUID(int=(i << 64) | (0x4000_8000_0000_0000 ^ (i * 0x9E3779B97F4A7C15 & (2**64 - 1))))

    def segment(self, tp: TopicPartition, s: int, state: SegmentState) -> RemoteLogSegmentMetadata:
        sid = RemoteLogSegmentId(tp.topic, tp.partition, self.segment_id(tp, s))
        start = s * SEGMENT_RECORDS
        epoch = self.epochs[tp]
        keys = KEYS.segment(tp.topic, tp.partition, start, sid.id, epoch)
        return RemoteLogSegmentMetadata(
            sid, start, start + SEGMENT_RECORDS - 1, 1_700_000_000_000 + start, 2, WRITER, epoch,
            ((0, start),), 64 * MiB, state, keys.data, keys.index, 2, SEGMENT_RECORDS, 0, 1,
        )  # fmt: skip

    def messages(self, tps: list[TopicPartition], segments: int) -> Iterator[RawMessage]:
        """The records a real history of ``tps`` has on the topic, in an order the fold accepts (a
        partition's claim first, then its segments), with the offsets the layout gives them."""
        offsets = {mp: 0 for mp in range(self.metadata_partitions)}
        for tp in self.tps:
            offsets[self.owner[tp]] += 1
        for tp in tps:
            claim = self.claims[tp]
            yield RawMessage(self.owner[tp], self.epochs[tp], record_key(claim), encode_value(claim))
        for s in range(segments):
            for tp in tps:
                mp = self.owner[tp]
                for state in (SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED):
                    seg = self.segment(tp, s, state)
                    yield RawMessage(mp, offsets[mp], record_key(seg), encode_value(seg))
                    offsets[mp] += 1

    def cache_entries(self) -> Iterator[tuple[bytes, bytes]]:
        """Every key and value of the cache the fold builds from the whole history, in key order."""
        for mp in range(self.metadata_partitions):
            yield b"C" + U32.pack(mp), I64.pack(self.next_offsets[mp])
        fold = MetadataFold()
        for tp in self.tps:
            claim = self.claims[tp]
            fold.apply_raw(self.epochs[tp], record_key(claim), encode_value(claim))
        for tp in self.tps:
            yield b"E" + tp_key(tp), encode_header(fold.partition(tp).header)
        for prefix in (b"L", b"O"):
            for tp in self.tps:
                head = prefix + tp_key(tp)
                for s in range(self.segments):
                    start = s * SEGMENT_RECORDS
                    key = head + U64.pack(start) + self.segment_id(tp, s).bytes
                    end = start + SEGMENT_RECORDS - 1
                    yield (
                        key,
                        (I64.pack(end) if prefix == b"L" else O_VALUE.pack(end, 1_700_000_000_000 + start)),
                    )
        for s in range(self.segments):
            for tp in sorted(self.tps, key=lambda t: self.index[t]):
                seg = self.segment(tp, s, SegmentState.COPY_SEGMENT_FINISHED)
                yield b"S" + seg.segment_id.id.bytes, encode_value(seg)
        yield VERSION_KEY, CACHE_VERSION.to_bytes(2, "big")


def build_cache(layout: Layout, path: Path) -> MetadataCache:
    cache = MetadataCache(path)
    sst = path.parent / f"{path.name}.sst"
    from rocksdict import SstFileWriter

    writer = SstFileWriter(options=cache.sst_options())
    writer.open(str(sst))
    for key, value in layout.cache_entries():
        writer[key] = value
    writer.finish()
    cache.ingest([sst])
    return cache


def _check_against_the_fold(workdir: Path) -> None:
    """The generated cache is the fold's, key for key (a small layout through the real fold)."""
    layout = Layout(150, 4, 3)
    folded = MetadataCache(workdir / "check-folded")
    folded.apply_batch(list(layout.messages(layout.tps, layout.segments)))
    made = build_cache(layout, workdir / "check-made")
    try:
        a = dict(_all(folded))
        b = dict(_all(made))
        assert a == b, f"the generated cache differs from the fold's: {sorted(set(a) ^ set(b))[:3]}"
    finally:
        folded.close()
        made.close()


def _all(cache: MetadataCache) -> Iterator[tuple[bytes, bytes]]:
    it = cache.consistent_iterator()
    it.seek_to_first()
    while it.valid():
        yield it.key(), it.value()
        it.next()


class LayoutTopic:
    """The metadata topic of the layout as a snapshot's checks ask it (no broker: its last record of
    each partition is a fixed one, the same for writer and loader)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def watermarks(self, partition: int) -> tuple[int, int]:
        return 0, self.layout.next_offsets[partition]

    def record_from(self, partition: int, offset: int) -> tuple[int, bytes | None, bytes | None, int]:
        return offset, b"last", str(partition).encode(), int(time.time() * 1000)


def _fold_rate(layout: Layout, workdir: Path, records: int) -> float:
    """Metadata records a second the fold applies into a new cache (a follower reading the topic)."""
    per_tp = max(1, records // (RECORDS_PER_SEGMENT * len(layout.tps)))
    messages = list(layout.messages(layout.tps, min(per_tp, layout.segments)))
    cache = MetadataCache(workdir / "fold-rate")
    t0 = time.perf_counter()
    for i in range(0, len(messages), 10_000):
        cache.apply_batch(messages[i : i + 10_000])
    rate = len(messages) / (time.perf_counter() - t0)
    cache.close()
    return rate


LOAD_SCRIPT = r"""
import json, random, resource, sys, time
from pathlib import Path
from benchmarks.scale import Layout, LayoutTopic, ORIGIN, model_text, segments_text
from processor.follower.metadata_cache import MetadataCache
from processor.follower.snapshots import SnapshotStore, load_snapshots
from processor.kafka.partition import TopicPartition
from processor.storage.filesystem import FilesystemChunkStorage

root, partitions, segments, mps = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
layout = Layout(partitions, segments, mps)
store = SnapshotStore(FilesystemChunkStorage(root / "bucket"), "bench", ORIGIN)
t0 = time.perf_counter()
cache = MetadataCache(root / "loaded")
outcomes = load_snapshots(cache, store, LayoutTopic(layout), list(range(mps)), mps, None, 0)
tp0 = layout.tps[0]
assert cache.finished_segment_for_offset(tp0, 5) is not None
ready = time.perf_counter() - t0
assert all(o.key is not None for o in outcomes.values()), outcomes
def lookups(seed):
    rng = random.Random(seed)
    times = []
    for _ in range(20000):
        tp = layout.tps[rng.randrange(len(layout.tps))]
        o = rng.randrange(segments * 1000)
        t = time.perf_counter()
        found = cache.finished_segment_for_offset(tp, o)
        times.append(time.perf_counter() - t)
        assert found is not None and found.start_offset <= o <= found.end_offset
    times.sort()
    return times[len(times) // 2] * 1000, times[int(len(times) * 0.99)] * 1000

cold_p50, cold_p99 = lookups(3)  # right after loading: every block read from disk once
p50, p99 = lookups(4)
topic = layout.tps[0].topic
# `processor segments --topic T` on the loaded cache: its rows and text lines as the command makes
# them, against the model-based listing it replaced (a model a segment, its dict, the same lines)
listing = {}
for way in ("model", "rows", "model", "rows"):
    t, c = time.perf_counter(), time.process_time()
    tps = [tp for tp in cache.topic_partitions() if tp.topic == topic]
    text = segments_text(cache, tps) if way == "rows" else model_text(cache, tps)
    took = (time.perf_counter() - t, time.process_time() - c)
    listing[way] = min(listing.get(way, took), took)
listed = text.count("\n")
assert segments_text(cache, tps) == model_text(cache, tps)
rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
cache.close()
# a CLI call for that topic: a new cache of its keys only, from the snapshots, then the listing
t = time.perf_counter()
cold = MetadataCache(root / "cold")
load_snapshots(cold, store, LayoutTopic(layout), list(range(mps)), mps, frozenset({topic}), 0)
cold_text = segments_text(cold, [tp for tp in cold.topic_partitions() if tp.topic == topic])
cold_listing = time.perf_counter() - t
assert cold_text == text
print(json.dumps({"ready_s": ready, "p50_ms": p50, "p99_ms": p99, "cold_p99_ms": cold_p99,
                  "listing_s": listing["rows"][0], "listing_cpu_s": listing["rows"][1],
                  "model_listing_s": listing["model"][0], "model_listing_cpu_s": listing["model"][1],
                  "listed": listed, "rss_mib": rss_mib, "cold_listing_s": cold_listing}))
"""


def segments_text(cache: MetadataCache, tps: list[TopicPartition]) -> str:
    """The lines of ``processor segments`` (text) for ``tps``, as the command makes them."""
    from processor.commands.segments import _TEXT_FIELDS, _TEXT_LINE

    return "".join(map(_TEXT_LINE.__mod__, map(_TEXT_FIELDS, cache.listed_rows(tps))))


def model_text(cache: MetadataCache, tps: list[TopicPartition]) -> str:
    """The same lines as the command made them before: a model and a dict a segment."""
    from processor.reader.record_json import segment_to_json

    rows = [segment_to_json(s) for tp in tps for s in cache.listed_segments(tp)]
    return "".join(
        f"{r['id']:36}  {r['partition']:>9}  {r['start_offset']:>12}  {r['end_offset']:>12}  "
        f"{r['state']:22}  {r['size_bytes']:>12}  {r['object_key']}\n"
        for r in rows
    )


def bench_snapshots(
    report: Report,
    workdir: Path,
    partitions: int = 2_000,
    segments_per_partition: int = 100,
    metadata_partitions: int = 50,
    fold_sample: int = 200_000,
) -> None:
    total = partitions * segments_per_partition
    root = Path(tempfile.mkdtemp(prefix="snapshot-scale-", dir=workdir))
    try:
        _check_against_the_fold(root)
        layout = Layout(partitions, segments_per_partition, metadata_partitions)
        print(
            f"[snapshots] building a cache of {total:,} segments of {partitions:,} partitions ...", flush=True
        )
        t0 = time.perf_counter()
        cache = build_cache(layout, root / "taker")
        built = time.perf_counter() - t0
        disk = sum(f.stat().st_size for f in (root / "taker").rglob("*") if f.is_file())
        print(f"[snapshots] built in {built:.0f} s; writing snapshots ...", flush=True)
        store = SnapshotStore(FilesystemChunkStorage(root / "bucket"), "bench", ORIGIN)
        from processor.follower.snapshot_writer import write_snapshots

        t0 = time.perf_counter()
        written = write_snapshots(
            cache, store, LayoutTopic(layout), list(range(metadata_partitions)), metadata_partitions, 1
        )
        write_s = time.perf_counter() - t0
        cache.close()
        size = sum(w.size for w in written)
        print(
            f"[snapshots] written in {write_s:.0f} s ({size / MiB:.0f} MiB); loading in a new process ...",
            flush=True,
        )
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        shape = map(str, (partitions, segments_per_partition, metadata_partitions))
        command = [sys.executable, "-c", LOAD_SCRIPT, str(root), *shape]
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"loading the snapshots failed: {done.stderr[-2000:]}")
        loaded = json.loads(done.stdout.strip().splitlines()[-1])
        records = len(layout.tps) + RECORDS_PER_SEGMENT * total
        print(
            f"[snapshots] measuring the fold's rate on {min(fold_sample, records):,} records ...", flush=True
        )
        rate = _fold_rate(layout, root, fold_sample)
        from_topic_s = records / rate
        scale = f"{total:,} segments, {partitions:,} partitions, {metadata_partitions} metadata partitions"
        report.add(
            Figure(
                "snapshots", f"a new follower serving, from snapshots ({scale})", loaded["ready_s"], "s",
                "from the topic (the fold's measured rate, extrapolated)", from_topic_s,
                from_topic_s / loaded["ready_s"] if loaded["ready_s"] else None, "<= 120 s at 10 M",
                loaded["ready_s"] <= 120, note=f"fold {rate:,.0f} rec/s over {records:,} records",
            )
        )  # fmt: skip
        report.add(
            Figure(
                "snapshots",
                "snapshot write (all metadata partitions)",
                write_s,
                "s",
                note=f"{write_s / total * 1e6:.1f} us/segment",
            )
        )
        report.add(
            Figure(
                "snapshots", "snapshot size", size / MiB, "MiB", note=f"{size / total:.0f} B/segment (zstd)"
            )
        )
        report.add(
            Figure("snapshots", "cache on disk", disk / MiB, "MiB", note=f"{disk / total:.0f} B/segment")
        )
        report.add(
            Figure(
                "snapshots",
                "segment-for-offset p99 (loaded cache)",
                loaded["p99_ms"],
                "ms",
                "p50",
                loaded["p50_ms"],
                None,
                "< 1 ms",
                loaded["p99_ms"] < 1.0,
                note=f"the first 20,000 right after loading: p99 {loaded['cold_p99_ms']:.2f} ms",
            )
        )
        listed = loaded["listed"]
        report.add(
            Figure(
                "snapshots", f"`processor segments` of one topic ({listed:,} segments), warm: rows and text",
                loaded["listing_s"], "s", "the model-based listing (a model and a dict a segment)",
                loaded["model_listing_s"],
                loaded["model_listing_s"] / loaded["listing_s"] if loaded["listing_s"] else None,
                "< 1 s", loaded["listing_s"] < 1.0,
                note=f"CPU {loaded['listing_cpu_s'] / listed * 1e6:.1f} us/segment against "
                f"{loaded['model_listing_cpu_s'] / listed * 1e6:.1f}; load average {os.getloadavg()[0]:.1f}",
            )
        )  # fmt: skip
        report.add(
            Figure(
                "snapshots",
                f"list one topic's segments ({loaded['listed']:,}), cold: a new cache of that topic "
                "from the snapshots, then the listing",
                loaded["cold_listing_s"],
                "s",
            )
        )
        report.add(Figure("snapshots", "peak RSS of the loading process", loaded["rss_mib"], "MiB"))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":  # a quick look without the harness
    r = Report()
    bench_snapshots(r, Path(tempfile.gettempdir()), int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
    for f in r.figures:
        print(f)
    _ = random
