"""Restore chaos on the real stack: an archive made by a worker, restored by ``processor restore``
child processes SIGKILLed at random moments, into a target that already holds data; then consumer
groups moved with ``processor restore-groups``.

Checked: every partition of the target holds, after its earlier records, every archived record
exactly once, in order, byte-identical in key, value, headers and timestamp (as read_committed sees
the target, see restore_support.py); each group resumes on the target with 0 records redelivered
and 0 skipped. The default run uses 50,000 records and 3 kills; the ``slow`` run one million
records, 20 kills and 5 groups.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import OFFSET_STORED, Consumer, ConsumerGroupTopicPartitions
from confluent_kafka import TopicPartition as KafkaTP

from processor.devstack.stack import StackInfo
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.restore.offset_map import OffsetMap
from processor.restore.target import DEFAULT_PROGRESS_TOPIC, TargetCluster
from processor.segment.records import KafkaRecord, TimestampType
from tests.integration.restore_support import (
    ForeignWriter,
    archive_topics,
    archived,
    committed_target,
    committed_transactions,
    content,
    high_watermarks,
    is_foreign,
    kill_at_a_random_moment,
    produce_foreign,
    produce_plain,
    produce_transactional,
    run_cli,
)

pytestmark = pytest.mark.integration

PARTITIONS = 4
TXN_PARTITIONS = 2
FOREIGN = 250  # records each target partition holds before the restore


def check_restored(
    bootstrap: str, source: dict[int, list[KafkaRecord]], to_topic: str, foreign: int
) -> tuple[dict[int, list[KafkaRecord]], int]:
    """Every target partition holds the archive's records exactly once, in order, among the
    ``foreign`` records others wrote (before and during the restore). Returns the restored records
    (with their target offsets) by partition, and how many batches of aborted restore transactions
    the target holds (what the kills left behind)."""
    out: dict[int, list[KafkaRecord]] = {}
    aborted = others = 0
    for p, records in source.items():
        got, dropped = committed_target(bootstrap, TopicPartition(to_topic, p))
        aborted += dropped
        restored = [r for r in got if not is_foreign(r)]
        others += len(got) - len(restored)
        assert len(restored) == len(records), (
            f"partition {p}: {len(restored)} records restored of {len(records)}"
        )
        if content(restored) != content(records):
            first = next(
                i for i, (a, b) in enumerate(zip(content(restored), content(records), strict=True)) if a != b
            )
            raise AssertionError(
                f"partition {p}: record {first} differs: {restored[first]} != {records[first]}"
            )
        out[p] = restored
    assert others == foreign
    return out, aborted


def committed_positions(bootstrap: str, restore_id: str) -> int:
    target = TargetCluster(bootstrap)
    partitions = target.partition_count(DEFAULT_PROGRESS_TOPIC)
    if not partitions:
        return 0
    found = target.committed_progress(DEFAULT_PROGRESS_TOPIC, partitions, restore_id)
    return sum(f.latest.records_total for f in found.values())


def restore_with_kills(
    stack: StackInfo,
    env: dict[str, str],
    args: list[str],
    restore_id: str,
    to_topic: str,
    partitions: int,
    kills: int,
    rng: random.Random,
    log: Path,
    window_s: float,
) -> dict[str, Any]:
    hits: list[str] = []
    restored_at_kill: list[int] = []
    for n in range(kills):
        size = lambda: committed_transactions(stack.bootstrap_servers)  # noqa: E731
        # the first kill always lands while records flow
        hits.append(kill_at_a_random_moment(args, env, rng, log, size, window_s, may_be_early=n > 0))
        restored_at_kill.append(committed_positions(stack.bootstrap_servers, restore_id))
    final = run_cli([*args, "--json"], env)
    assert final.returncode == 0, final.stderr[-3000:]
    summary = json.loads(final.stdout.strip().splitlines()[-1])
    return {"hits": hits, "restored_at_kill": restored_at_kill, "summary": summary}


def group_positions(
    rng: random.Random, source: dict[int, list[KafkaRecord]], groups: int
) -> dict[str, dict[int, int]]:
    """Committed offsets of ``groups`` groups: the start, the end, records in between, and offsets
    without a record (transaction markers, aborted records) where the archive has gaps."""
    out: dict[str, dict[int, int]] = {}
    for g in range(groups):
        positions: dict[int, int] = {}
        for p, records in source.items():
            offsets = [r.offset for r in records]
            gaps = [o + 1 for o, nxt in itertools.pairwise(offsets) if nxt > o + 1]
            choices = [offsets[0], offsets[-1] + 1, rng.choice(offsets), rng.choice(offsets)]
            choices += [rng.choice(gaps)] if gaps else []
            positions[p] = choices[(g + p) % len(choices)]
        out[f"group-{g}"] = positions
    return out


def commit_on_source(bootstrap: str, topic: str, positions: dict[str, dict[int, int]]) -> None:
    admin = new_admin(bootstrap, "restore-test")
    for g, offsets in positions.items():  # the admin API moves one group a call
        request = ConsumerGroupTopicPartitions(g, [KafkaTP(topic, p, o) for p, o in sorted(offsets.items())])
        admin.alter_consumer_group_offsets([request])[g].result(timeout=30)


def resume_and_check(
    bootstrap: str,
    group: str,
    to_topic: str,
    committed: dict[int, int],
    source: dict[int, list[KafkaRecord]],
    restored: dict[int, list[KafkaRecord]],
) -> None:
    """A consumer of ``group`` on the target starts from the group's committed offsets and must get
    exactly the archived records at or after the source position: none again (redelivered), none
    missing (skipped)."""
    ends = high_watermarks(bootstrap, to_topic, len(source))
    visible = {p: {r.offset for r in records} for p, records in restored.items()}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "error",  # a missing committed offset must fail, not guess
            "isolation.level": "read_committed",
            # long enough for Tansu on large partitions (it answers nothing within a shorter wait)
            "fetch.wait.max.ms": 3000,
        }
    )
    try:
        parts = sorted(committed)
        consumer.assign([KafkaTP(to_topic, p, OFFSET_STORED) for p in parts])
        got: dict[int, list[KafkaRecord]] = {p: [] for p in parts}
        done: set[int] = set()
        while len(done) < len(parts):
            msg = consumer.poll(0.5)
            if msg is None:
                positions = consumer.position([KafkaTP(to_topic, p) for p in parts])
                done |= {
                    tp.partition
                    for tp in positions
                    if tp.offset >= ends[TopicPartition(to_topic, tp.partition)]
                }
                continue
            assert msg.error() is None, msg.error()
            p, offset = cast(int, msg.partition()), cast(int, msg.offset())
            if offset in visible[p]:  # Tansu hands aborted records to read_committed consumers too
                _type, ts = msg.timestamp()
                headers = cast(list[tuple[str, bytes | None]], msg.headers() or [])
                got[p].append(
                    KafkaRecord(offset, ts, TimestampType.CREATE_TIME, msg.key(), msg.value(), tuple(headers))
                )
    finally:
        consumer.close()
    for p in parts:
        wanted = [r for r in source[p] if r.offset >= committed[p]]
        assert content(got[p]) == content(wanted), (
            f"{group} partition {p}: resumed with {len(got[p])} records, expected {len(wanted)} "
            f"(from source offset {committed[p]}): records redelivered or skipped"
        )


def expected_target_position(source: list[KafkaRecord], restored: list[KafkaRecord], position: int) -> int:
    """Worked out from the records themselves (the n-th restored record is the n-th archived one)."""
    for src, dst in zip(source, restored, strict=True):
        if src.offset >= position:
            return dst.offset
    return restored[-1].offset + 1


def check_group_committed(bootstrap: str, group: str, to_topic: str, expected: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = consumer.committed([KafkaTP(to_topic, p) for p in sorted(expected)], timeout=30)
    finally:
        consumer.close()
    assert {tp.partition: tp.offset for tp in got} == expected


def chaos(
    stack: StackInfo, tmp: Path, records: int, txn_records: int, kills: int, groups: int, seed: int, rate: int
) -> None:
    rng = random.Random(seed)
    src, txn, dst, txn_dst = (
        f"chaos{seed}-src",
        f"chaos{seed}-txn",
        f"chaos{seed}-dst",
        f"chaos{seed}-txn-dst",
    )
    produce_plain(stack.bootstrap_servers, src, records, PARTITIONS)
    produce_transactional(stack.bootstrap_servers, txn, txn_records, TXN_PARTITIONS)
    env = archive_topics(
        stack, tmp, {src: PARTITIONS, txn: TXN_PARTITIONS}, f"__meta_chaos{seed}", f"chaos{seed}"
    )
    source = archived(env, src)
    txn_source = archived(env, txn)
    assert sum(map(len, source.values())) == records
    # the targets already hold data
    produce_foreign(stack.bootstrap_servers, dst, FOREIGN * PARTITIONS, PARTITIONS)
    produce_foreign(stack.bootstrap_servers, txn_dst, FOREIGN * TXN_PARTITIONS, TXN_PARTITIONS)

    # rate-limited so that random kills land in the middle of the run; archived batches split into
    # small ones, so that the other producer's records land between ours
    args = ["restore", "--topic", src, "--to-topic", dst, "--transaction-records", "3000"]
    args += ["--max-records-per-second", str(rate), "--max-batch-bytes", "8192"]
    with ForeignWriter(stack.bootstrap_servers, dst, PARTITIONS) as writer:
        outcome = restore_with_kills(
            stack, env, args, f"{src}.{dst}", dst, PARTITIONS, kills, rng, tmp / "restore.log", window_s=2.0
        )
    restored, aborted = check_restored(
        stack.bootstrap_servers, source, dst, FOREIGN * PARTITIONS + writer.count
    )
    print(f"kills: {outcome['hits']}; records committed at each kill: {outcome['restored_at_kill']}")
    # the first kill lands while records flow: it leaves an open transaction that the next run aborts
    assert aborted > 0 and any(0 < n < records for n in outcome["restored_at_kill"]), outcome
    txn_args = ["restore", "--topic", txn, "--to-topic", txn_dst, "--transaction-records", "500"]
    txn_args += ["--max-records-per-second", str(rate // 4)]
    txn_outcome = restore_with_kills(
        stack,
        env,
        txn_args,
        f"{txn}.{txn_dst}",
        txn_dst,
        TXN_PARTITIONS,
        max(1, kills // 3),
        rng,
        tmp / "restore-txn.log",
        window_s=1.0,
    )
    txn_restored, _ = check_restored(stack.bootstrap_servers, txn_source, txn_dst, FOREIGN * TXN_PARTITIONS)
    for summary in (outcome["summary"], txn_outcome["summary"]):  # the final runs copied the maps
        assert all(p["bucket_map"] for p in summary["partitions"])

    for topic, to_topic, src_records, dst_records in (
        (src, dst, source, restored),
        (txn, txn_dst, txn_source, txn_restored),
    ):
        positions = group_positions(rng, src_records, groups)
        commit_on_source(stack.bootstrap_servers, topic, positions)
        maps_from = "bucket" if topic == txn else "progress"
        moved = run_cli(
            ["restore-groups", "--topic", topic, "--to-topic", to_topic, "--maps-from", maps_from, "--json"]
            + [a for g in positions for a in ("--group", g)],
            env,
        )
        assert moved.returncode == 0, moved.stdout + moved.stderr
        for g, committed in positions.items():
            expected = {
                p: expected_target_position(src_records[p], dst_records[p], c) for p, c in committed.items()
            }
            check_group_committed(stack.bootstrap_servers, g, to_topic, expected)
            resume_and_check(stack.bootstrap_servers, g, to_topic, committed, src_records, dst_records)


def test_restore_chaos(local_stack: StackInfo, tmp_path: Path) -> None:
    chaos(local_stack, tmp_path, records=25_000, txn_records=3_000, kills=2, groups=3, seed=1, rate=6_000)


@pytest.mark.slow
def test_restore_chaos_full_scale(local_stack: StackInfo, tmp_path: Path) -> None:
    chaos(
        local_stack, tmp_path, records=1_000_000, txn_records=50_000, kills=20, groups=5, seed=2, rate=20_000
    )


def test_bucket_maps_match_the_progress_topic(local_stack: StackInfo, tmp_path: Path) -> None:
    """A restore's offset maps in the bucket are the committed ones from the progress topic, and a
    dry run reports what a restore would produce without producing anything."""
    src, dst = "maps-src", "maps-dst"
    produce_plain(local_stack.bootstrap_servers, src, 3000, 2)
    env = archive_topics(local_stack, tmp_path, {src: 2}, "__meta_maps", "maps")
    dry = run_cli(["restore", "--topic", src, "--to-topic", dst, "--dry-run", "--json"], env)
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout.strip().splitlines()[-1])
    assert planned["records"] == 3000 and planned["dry_run"] is True
    assert dst not in new_admin(local_stack.bootstrap_servers, "t").list_topics(timeout=10).topics
    done = run_cli(["restore", "--topic", src, "--to-topic", dst, "--json"], env)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["records"] == 3000 and summary["bytes"] == planned["bytes"]
    target = TargetCluster(local_stack.bootstrap_servers)
    progress = target.committed_progress(
        DEFAULT_PROGRESS_TOPIC, target.partition_count(DEFAULT_PROGRESS_TOPIC) or 1, f"{src}.{dst}"
    )
    from processor.config import load_settings
    from processor.restore.bucket_maps import latest_maps
    from processor.wiring.storage import build_storage

    settings = load_settings({**env, "PROCESSOR_S3_REGION": "us-east-1"})
    storage = build_storage(settings)
    try:
        in_bucket: dict[int, OffsetMap] = latest_maps(
            storage, "maps", src, target.cluster_id(), f"{src}.{dst}"
        )
    finally:
        storage.close()
    assert in_bucket == {p: f.offset_map for p, f in progress.items()}
    again = run_cli(["restore", "--topic", src, "--to-topic", dst, "--json"], env)
    assert again.returncode == 0 and json.loads(again.stdout.strip().splitlines()[-1])["records"] == 0


def test_restore_while_another_producer_writes_into_the_target(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    """Another producer's records land between the restore's own batches (archived batches split
    into tiny ones by --max-batch-bytes): the offset map stays exact."""
    src, dst = "busy-src", "busy-dst"
    produce_plain(local_stack.bootstrap_servers, src, 20_000, 2)
    env = archive_topics(local_stack, tmp_path, {src: 2}, "__meta_busy", "busy")
    source = archived(env, src)
    produce_foreign(local_stack.bootstrap_servers, dst, 10, 2)
    args = ["restore", "--topic", src, "--to-topic", dst, "--json", "--max-records-per-second", "8000"]
    args += ["--max-batch-bytes", "1024"]
    with ForeignWriter(local_stack.bootstrap_servers, dst, 2, per_second=4000) as writer:
        done = run_cli(args, env)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["batches_written"] > summary["batches_as_archived"]
    restored, _ = check_restored(local_stack.bootstrap_servers, source, dst, 10 + writer.count)
    target = TargetCluster(local_stack.bootstrap_servers)
    progress = target.committed_progress(
        DEFAULT_PROGRESS_TOPIC, target.partition_count(DEFAULT_PROGRESS_TOPIC) or 1, f"{src}.{dst}"
    )
    for p, records in source.items():  # every restored record is where the offset map says
        offset_map = progress[p].offset_map
        assert [offset_map.target_of(r.offset) for r in records] == [r.offset for r in restored[p]]
