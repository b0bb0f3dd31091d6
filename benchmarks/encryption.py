"""Encryption at rest: offload throughput and remote random reads of an archive sealed under a key
ring (PROCESSOR_ENCRYPTION=keyring), each beside the same thing without encryption in the same run.

Both archives are written from the same loaded topic by ``processor worker`` children, each into its
own metadata topic and S3 prefix; the plain and the encrypted offloads alternate (which goes first
changes every round), so neither always runs on the warmer or the busier machine. The random reads
are a RemoteReader per archive (as in the reads section) reading the same targets, interleaved.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from benchmarks.offload import (
    PARTITIONS,
    LoadedTopic,
    OffloadRun,
    archive_env,
    load_topic,
    run_worker_offload,
)
from benchmarks.report import Figure, Report, percentile
from processor.config import load_settings
from processor.crypto.keyring import new_key
from processor.devstack import stack
from processor.kafka.partition import TopicPartition
from processor.reader.remote_reader import RemoteReader
from processor.segment.records import KafkaRecord
from processor.storage.chunk_storage import ChunkStorage
from processor.wiring.follower import Follower, build_follower, build_reader
from processor.wiring.storage import build_storage

MiB = 1024 * 1024


@dataclass
class Archive:
    """One offload's archive: the settings' environment (its own metadata topic and S3 prefix)."""

    label: str
    env: dict[str, str]
    run: OffloadRun | None = None


def _archive_env(
    info: stack.StackInfo, topic: LoadedTopic, kind: str, keyring: Path | None
) -> dict[str, str]:
    env = archive_env(info, topic, f"enc-{kind}")
    if keyring is not None:
        env["PROCESSOR_ENCRYPTION"] = "keyring"
        env["PROCESSOR_ENCRYPTION_KEYRING"] = str(keyring)
    return env


class _Reader:
    """A RemoteReader over one archive, as `build_reader` wires it for readers with these settings."""

    def __init__(self, env: dict[str, str], cache_dir: Path) -> None:
        settings = load_settings(env)
        self.follower: Follower = build_follower(settings, 4, cache_dir=cache_dir)
        self.follower.materializer.catch_up()
        self.storage: ChunkStorage = build_storage(settings)
        self.reader: RemoteReader = build_reader(settings, self.storage, self.follower.rlmm)

    def encrypted(self, topic: str) -> bool:
        """Whether every partition's first segment carries a wrapped data key (is encrypted)."""
        firsts = [
            self.follower.rlmm.finished_segment_for_offset(TopicPartition(topic, p), 0)
            for p in range(PARTITIONS)
        ]
        if any(s is None for s in firsts):
            raise RuntimeError(f"{topic}: a partition has no finished segment at offset 0")
        flags = {s.custom_metadata is not None for s in firsts if s is not None}
        if len(flags) != 1:
            raise RuntimeError(f"{topic}: some segments are encrypted and some are not")
        return flags.pop()

    def read(self, topic: str, partition: int, offset: int, span: int) -> tuple[float, list[KafkaRecord]]:
        t0 = time.perf_counter()
        got = self.reader.read_from_offset(
            TopicPartition(topic, partition), offset, max_records=span, max_bytes=1 << 40
        )
        seconds = time.perf_counter() - t0
        if len(got) != span or got[0].offset != offset:
            raise RuntimeError(
                f"read {len(got)} records at {got[0].offset if got else None}, wanted {span} at {offset}"
            )
        return seconds, got

    def close(self) -> None:
        self.follower.close()
        self.storage.close()


def bench_encryption(
    report: Report,
    info: stack.StackInfo,
    workdir: Path,
    topic: LoadedTopic | None,
    total_bytes: int,
    reads: int = 200,
    smoke: bool = False,
) -> None:
    """``topic``: the loaded 1 KiB-value topic of the other sections, or None to load one of
    ``total_bytes``. Two rounds of a plain and an encrypted offload (one round with ``smoke``)."""
    if topic is None:
        print(
            f"[encryption] loading {total_bytes / MiB:.0f} MiB into {PARTITIONS} partitions ...", flush=True
        )
        topic = load_topic(info, f"bench-enc-1024B-{uuid.uuid4().hex[:6]}", 1024, total_bytes)
    keyring = workdir / f"bench-keyring-{uuid.uuid4().hex[:6]}"
    new_key(keyring)
    mb = topic.payload_bytes / 1e6
    rounds = 1 if smoke else 2
    best: dict[bool, float] = {}  # encrypted? -> fastest offload's seconds
    last: dict[bool, Archive] = {}
    for i in range(rounds):
        for encrypted in (False, True) if i % 2 == 0 else (True, False):
            kind = "encrypted" if encrypted else "plain"
            print(
                f"[encryption] offloading {topic.name} ({mb:.0f} MB), {kind}, round {i + 1} ...", flush=True
            )
            archive = Archive(kind, _archive_env(info, topic, kind, keyring if encrypted else None))
            archive.run = run_worker_offload(info, topic, workdir, 256 * MiB, 64 * MiB, extra_env=archive.env)
            best[encrypted] = min(best.get(encrypted, float("inf")), archive.run.seconds)
            last[encrypted] = archive
    enc_rate, plain_rate = mb / best[True], mb / best[False]
    ratio = enc_rate / plain_rate
    plain_run, enc_run = last[False].run, last[True].run
    assert plain_run is not None and enc_run is not None
    stored = enc_run.stored_bytes / plain_run.stored_bytes if plain_run.stored_bytes else float("nan")
    report.add(
        Figure(
            "encryption", "offload with encryption", enc_rate, "MB/s",
            "the same offload without", plain_rate, ratio, ">= 0.9 x", ratio >= 0.9,
            note=f"best of {rounds} each, alternating; {mb:.0f} MB; {stored:.3f} x the bytes in S3",
        )
    )  # fmt: skip

    print(f"[encryption] {reads} random reads of each archive ...", flush=True)
    plain = _Reader(last[False].env, workdir / f"enc-read-cache-plain-{uuid.uuid4().hex[:6]}")
    sealed = _Reader(last[True].env, workdir / f"enc-read-cache-sealed-{uuid.uuid4().hex[:6]}")
    try:
        if plain.encrypted(topic.name) or not sealed.encrypted(topic.name):
            raise RuntimeError("the plain archive is encrypted or the encrypted one is not")
        per_partition = topic.records // PARTITIONS
        span = min(1000, max(1, per_partition // 2))  # as the reads section: 1000, smaller when tiny
        rng = random.Random(13)
        targets = [(rng.randrange(PARTITIONS), rng.randrange(0, per_partition - span)) for _ in range(reads)]
        plain_s: list[float] = []
        sealed_s: list[float] = []
        for n, (p, offset) in enumerate(targets):
            # interleaved, and which goes first alternates: both see the same machine and bucket
            first, second = (plain, sealed) if n % 2 == 0 else (sealed, plain)
            a, got_a = first.read(topic.name, p, offset, span)
            b, got_b = second.read(topic.name, p, offset, span)
            if got_a != got_b:
                raise RuntimeError(f"the archives disagree on {span} records at {topic.name}-{p}@{offset}")
            (plain_s, sealed_s)[first is sealed].append(a)
            (plain_s, sealed_s)[second is sealed].append(b)
    finally:
        plain.close()
        sealed.close()
    for name, p in (("p50", 50), ("p99", 99)):
        e, b = percentile(sealed_s, p) * 1000, percentile(plain_s, p) * 1000
        report.add(
            Figure(
                "encryption", f"{span} records at random offset, {name}", e, "ms",
                "the same reads unencrypted", b, e / b, "<= 1.1 x" if name == "p50" else "",
                (e / b <= 1.1) if name == "p50" else None,
            )
        )  # fmt: skip
