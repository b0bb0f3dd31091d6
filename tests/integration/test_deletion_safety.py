"""Nothing archived is deleted when a worker's view of the metadata is wrong, on a running stack.

Each test archives a topic with a real worker first (records produced, every segment's
COPY_SEGMENT_FINISHED accepted and its manifest in the bucket), then puts a worker in front of a
metadata view that does not match the bucket:

- a misspelt ``PROCESSOR_METADATA_TOPIC`` (an empty metadata topic of another name);
- the metadata topic deleted (and the follower cache with it), re-created empty by the worker, then
  brought back by ``processor rebuild-metadata``;
- hostile tombstones on the metadata topic under served segments' keys (their copy key, their delete
  key, and the key of another partition);
- two deployments (each its own metadata topic and consumer group) on one bucket and prefix, the
  second cluster's topic id emulated by a copy of the archive in another topic-id folder.

What they prove, on the real bucket listing and on reads: a worker whose metadata knows nothing of a
partition while the bucket holds its segment manifests refuses to lead it (``/readyz`` 503 naming
``metadata_behind_bucket`` and ``rebuild-metadata``) and neither deletes nor writes an object; a
worker that leads runs its retention passes (its first, with the once-per-claim sweep) without
touching another topic id's folder or a segment a hostile tombstone named; the owner re-publishes
what the tombstones shadowed; and after ``rebuild-metadata`` a worker leads again and every record
reads back byte-exact. The bucket's object set (data, index and manifest objects, with their sizes
and modification times) is compared before and after, so a deletion or an overwrite fails the test.

The refusal relies on the worker's view knowing nothing of the partition. A worker that keeps its
data dir keeps the follower cache of the metadata topic it followed before; the cache records the
topic it was built from (name and topic id) and is rebuilt when that differs, so a misspelt topic or
a deleted and re-created one is refused with a kept data dir too (the ``kept`` cases).
"""

from __future__ import annotations

import json
import re
import shutil
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from processor.devstack.servers import free_port
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic, partition_counts
from processor.kafka.clients import new_admin, new_producer
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import delete_key, metadata_partition_for, segment_key
from processor.metadata.manifest import manifest_key
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.metadata.topic_io import load_remote_state
from processor.storage.s3 import S3ChunkStorage
from tests.integration.invariants import running_worker, wait_for_log
from tests.integration.lifecycle_support import storage_for, wait_for
from tests.integration.test_ownership import PARTITIONS, Produced, _env, assert_reads_byte_exact
from tests.integration.worker_process import WorkerProcess
from tests.support.cli import run_cli
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

RECORDS = 40  # per partition: a few 12 KiB segments each (tests/integration/test_ownership.py _env)
RETENTION_CHECK_S = 1.0  # PROCESSOR_RETENTION_CHECK_MS of _env
# How long a refused worker is watched: several retention intervals, so its timer has fired a few
# times (a refused partition is not led, so a pass has no observable effect on it).
OBSERVE_S = 6 * RETENTION_CHECK_S
BEHIND = "metadata_behind_bucket"

Snapshot = dict[str, tuple[int, int | None]]  # key -> (size, modified_ms)


def _names(name: str) -> tuple[str, str]:
    """A topic and a metadata topic of their own (the stack is shared by the whole session)."""
    suffix = uuid.uuid4().hex[:6]
    return f"ds-{name}-{suffix}", f"__remote_log_metadata_ds_{name}_{suffix}"


def snapshot(storage: S3ChunkStorage, prefix: str) -> Snapshot:
    """The objects under ``prefix``, but the storage-clock probes a running worker's retention pass
    writes and deletes at once (lifecycle/sweep.py: the other deployment's, caught mid-pass)."""
    return {
        i.key: (i.size, i.modified_ms)
        for i in storage.list(prefix.rstrip("/") + "/")
        if not i.key.rsplit("/", 1)[-1].startswith(".clock-probe-")
    }


def assert_unchanged(before: Snapshot, after: Snapshot, what: str) -> None:
    deleted = sorted(set(before) - set(after))
    added = sorted(set(after) - set(before))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    assert not (deleted or added or changed), (
        f"{what}: {len(deleted)} objects deleted {deleted[:5]}, {len(added)} written {added[:5]}, "
        f"{len(changed)} overwritten {changed[:5]}"
    )


def served(bootstrap: str, meta: str, topic: str) -> dict[TopicPartition, list[RemoteLogSegmentMetadata]]:
    state, _rejected = load_remote_state(bootstrap, meta)
    return {
        TopicPartition(topic, p): state.partition(TopicPartition(topic, p)).finished()
        for p in range(PARTITIONS)
    }


def ids(segments: dict[TopicPartition, list[RemoteLogSegmentMetadata]]) -> dict[TopicPartition, list[str]]:
    return {tp: [str(s.segment_id.id) for s in segs] for tp, segs in segments.items()}


def archive(
    info: StackInfo, env: dict[str, str], topic: str, meta: str, log_path: Path
) -> tuple[Produced, dict[TopicPartition, list[RemoteLogSegmentMetadata]]]:
    """Archive RECORDS records a partition with a worker of ``env``, stopped afterwards; returns
    what was produced and the served segments, each with its manifest in the bucket."""
    ensure_topic(new_admin(info.bootstrap_servers, "t"), topic, PARTITIONS, 1, {})
    produced = Produced(info, topic)
    with running_worker(env, log_path) as worker:
        wait_for_log(worker, "resuming at", 60)
        produced.each(RECORDS, int(time.time() * 1000))
        wait_offloaded(info.bootstrap_servers, meta, produced.ends(), 90, worker.proc)
        segments = served(info.bootstrap_servers, meta, topic)
        assert all(segments.values()), f"a partition has no served segment: {ids(segments)}"
        wait_manifests(info, segments, worker)
    return produced, segments


def wait_manifests(
    info: StackInfo, segments: dict[TopicPartition, list[RemoteLogSegmentMetadata]], worker: WorkerProcess
) -> None:
    """The copier writes a segment's manifest right after its FINISHED is accepted: wait for them
    all, so the snapshots below start from the archive as it is once the copies are done."""
    storage = storage_for(info)
    try:
        wanted = {manifest_key(s.data_object_key) for segs in segments.values() for s in segs}
        wait_for(
            "every served segment's manifest",
            lambda: all(storage.stat(k) is not None for k in wanted),
            30,
            worker.proc,
        )
    finally:
        storage.close()


def readyz(env: dict[str, str]) -> tuple[int, dict[str, Any]] | None:
    url = f"http://127.0.0.1:{env['PROCESSOR_WEB_PORT']}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except (OSError, ValueError):
        return None  # the web server is not up yet


def refusal(env: dict[str, str]) -> str | None:
    """The readiness reason of the behind-the-bucket refusal, if /readyz answers 503 with it."""
    answer = readyz(env)
    if answer is None or answer[0] != 503:
        return None
    return next((p["reason"] for p in answer[1].get("problems", []) if p.get("component") == BEHIND), None)


def wait_refused(worker: WorkerProcess, env: dict[str, str], timeout_s: float = 60) -> str:
    found: list[str] = []

    def refused() -> bool:
        reason = refusal(env)
        if reason is not None:
            found.append(reason)
        return reason is not None

    def refused_or_led() -> bool:
        assert "resuming at" not in worker.log(), "the worker leads a partition its metadata does not know"
        return refused()

    wait_for("/readyz 503 with the metadata_behind_bucket reason", refused_or_led, timeout_s, worker.proc)
    reason = found[-1]
    assert "rebuild-metadata" in reason, reason
    assert f"of {PARTITIONS} partitions" in reason, reason
    assert "not leading it" in worker.log()
    return reason


def watch_refused(
    worker: WorkerProcess, env: dict[str, str], storage: S3ChunkStorage, prefix: str, before: Snapshot
) -> None:
    """For OBSERVE_S (several retention intervals) the worker stays up, unready with the refusal,
    leads nothing and the bucket stays exactly as it was (checked over and over, not just at the end)."""
    deadline = time.monotonic() + OBSERVE_S
    while True:
        assert worker.proc.poll() is None, f"the worker exited ({worker.proc.returncode})"
        assert refusal(env) is not None, f"the worker stopped refusing: {readyz(env)}"
        assert_unchanged(before, snapshot(storage, prefix), "while the worker refused to lead")
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)  # polling conditions over an observation window
    log = worker.log()
    assert "resuming at" not in log, "the refused worker led a partition"
    assert "segments deleted" not in log and "objects of this claim" not in log, log[-3000:]


def metric(env: dict[str, str], name: str, labels: str) -> float | None:
    url = f"http://127.0.0.1:{env['PROCESSOR_WEB_PORT']}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    m = re.search(rf"^{re.escape(name)}\{{{re.escape(labels)}\}} (\S+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else None


def wait_retention_pass(worker: WorkerProcess, env: dict[str, str], topic: str, segments: int) -> None:
    """A retention pass over every partition of ``topic`` ran in this worker process (the pass sets
    the topic's ``processor_remote_log_segments`` gauge at its end, to the served segments of the
    partitions it covered; the first pass of a claim runs the sweep of unreferenced objects)."""
    wait_for(
        f"a retention pass over the {segments} served segments of {topic}",
        lambda: metric(env, "processor_remote_log_segments", f'topic="{topic}"') == segments,
        60,
        worker.proc,
    )


# The kept data dir is the harder case (its follower cache holds the real topic's view); a new one
# runs with the slow tests.
@pytest.mark.parametrize(
    "data_dir",
    [pytest.param("own", marks=pytest.mark.slow), "kept"],
    ids=["a-new-data-dir", "the-data-dir-of-the-real-topic"],
)
def test_a_worker_on_a_misspelt_metadata_topic_deletes_nothing_and_refuses_to_lead(
    local_stack: StackInfo, tmp_path: Path, data_dir: str
) -> None:
    topic, meta = _names("misspelt")
    bootstrap = local_stack.bootstrap_servers
    env = _env(local_stack, tmp_path / "a", topic, meta, "ds-misspelt-a")
    produced, before_served = archive(local_stack, env, topic, meta, tmp_path / "a.log")
    storage = storage_for(local_stack)
    try:
        before = snapshot(storage, topic)
        assert sum(k.endswith("-manifest") for k in before) == sum(map(len, before_served.values()))
        misspelt = meta.replace("metadata", "metdata")
        env_b = {
            **env,
            "PROCESSOR_METADATA_TOPIC": misspelt,
            "PROCESSOR_DATA_DIR": str(tmp_path / ("b" if data_dir == "own" else "a")),
            "PROCESSOR_WEB_PORT": str(free_port()),
            "PROCESSOR_WORKER_ID": "ds-misspelt-b",
        }
        with running_worker(env_b, tmp_path / "b.log") as b:
            wait_refused(b, env_b)
            watch_refused(b, env_b, storage, topic, before)
        assert_unchanged(before, snapshot(storage, topic), "after the misspelt worker stopped")
        misspelt_state, _ = load_remote_state(bootstrap, misspelt)
        assert not any(misspelt_state.partition(tp).segments for tp in before_served), (
            "the misspelt worker recorded segments"
        )
    finally:
        storage.close()
    assert ids(served(bootstrap, meta, topic)) == ids(before_served)
    ends = produced.ends()
    assert_reads_byte_exact(local_stack, env, topic, {tp: 0 for tp in ends}, ends)


# The kept follower cache is the harder case (it holds the lost topic's view); the one deleted with
# its data dir runs with the slow tests.
@pytest.mark.parametrize(
    "cache",
    [pytest.param("deleted", marks=pytest.mark.slow), "kept"],
    ids=["with-the-follower-cache", "the-follower-cache-kept"],
)
def test_a_deleted_metadata_topic_is_refused_then_rebuild_brings_it_back(
    local_stack: StackInfo, tmp_path: Path, cache: str
) -> None:
    topic, meta = _names("deleted")
    bootstrap = local_stack.bootstrap_servers
    env = _env(local_stack, tmp_path / "w", topic, meta, "ds-deleted-w")
    produced, before_served = archive(local_stack, env, topic, meta, tmp_path / "w1.log")
    storage = storage_for(local_stack)
    try:
        before = snapshot(storage, topic)
        admin = new_admin(bootstrap, "t")  # kept: the future fails once its client is destroyed
        admin.delete_topics([meta])[meta].result(timeout=30)
        if cache == "deleted":
            shutil.rmtree(tmp_path / "w")  # the follower cache of the lost topic goes with it
        with running_worker(env, tmp_path / "w2.log") as again:
            wait_refused(again, env)
            watch_refused(again, env, storage, topic, before)
        recreated, _ = load_remote_state(bootstrap, meta)
        assert not any(recreated.partition(tp).segments for tp in before_served)

        done = run_cli(env, "rebuild-metadata", "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        report = json.loads(done.stdout)
        assert report["mismatches"] == [], done.stdout
        assert report["segments"] == sum(map(len, before_served.values())), done.stdout
        assert ids(served(bootstrap, meta, topic)) == ids(before_served)

        with running_worker(env, tmp_path / "w3.log") as rebuilt:
            wait_for_log(rebuilt, "resuming at", 60)
            wait_for(
                "/readyz 200",
                lambda: (readyz(env) or (0, {}))[0] == 200,
                60,
                rebuilt.proc,
            )
            wait_retention_pass(rebuilt, env, topic, sum(map(len, before_served.values())))
            assert_unchanged(before, snapshot(storage, topic), "after the rebuild and a retention pass")
            produced.each(10, int(time.time() * 1000))  # it leads: it archives what comes next
            wait_offloaded(bootstrap, meta, produced.ends(), 90, rebuilt.proc)
        after = snapshot(storage, topic)
        assert set(before) <= set(after), f"objects deleted: {sorted(set(before) - set(after))[:5]}"
        assert all(after[k] == v for k, v in before.items()), "archived objects overwritten"
    finally:
        storage.close()
    ends = produced.ends()
    assert_reads_byte_exact(local_stack, env, topic, {tp: 0 for tp in ends}, ends)


def test_hostile_tombstones_delete_nothing_and_are_repaired(local_stack: StackInfo, tmp_path: Path) -> None:
    topic, meta = _names("tombstones")
    bootstrap = local_stack.bootstrap_servers
    env = _env(local_stack, tmp_path / "w", topic, meta, "ds-tombstones-w")
    ensure_topic(new_admin(bootstrap, "t"), topic, PARTITIONS, 1, {})
    produced = Produced(local_stack, topic)
    storage = storage_for(local_stack)
    try:
        with running_worker(env, tmp_path / "w1.log") as w:
            wait_for_log(w, "resuming at", 60)
            produced.each(RECORDS, int(time.time() * 1000))
            wait_offloaded(bootstrap, meta, produced.ends(), 90, w.proc)
            before_served = served(bootstrap, meta, topic)
            assert all(before_served.values())
            wait_manifests(local_stack, before_served, w)
            before = snapshot(storage, topic)
            _state, rejected_before = load_remote_state(bootstrap, meta)

            admin = new_admin(bootstrap, "t")
            count = partition_counts(admin, [meta])[meta]
            producer = new_producer(bootstrap, "ds-hostile")
            sent = 0  # tombstones the fold knows the segment of (rejected: misplaced)
            for tp, segments in before_served.items():
                other = TopicPartition(topic, (tp.partition + 1) % PARTITIONS)
                home = metadata_partition_for(tp, count)
                for s in segments:
                    foreign = f"{other.topic}/{other.partition}/{s.segment_id.id}".encode()
                    for key in (segment_key(s.segment_id), delete_key(s.segment_id), foreign):
                        producer.produce(meta, key=key, value=None, partition=home)
                        sent += 1
                    # where a reader of the other partition's metadata partition would look
                    producer.produce(
                        meta, key=foreign, value=None, partition=metadata_partition_for(other, count)
                    )
            assert producer.flush(30) == 0
            _state, rejected = load_remote_state(bootstrap, meta)
            assert rejected - rejected_before >= sent, (rejected_before, rejected, sent)
            assert ids(served(bootstrap, meta, topic)) == ids(before_served), "a tombstone unserved a segment"
        # a fresh claim: its first retention pass re-publishes what the tombstones shadow, and sweeps
        with running_worker(env, tmp_path / "w2.log") as w2:
            wait_for_log(w2, "resuming at", 60)
            wait_retention_pass(w2, env, topic, sum(map(len, before_served.values())))

            def repaired() -> bool:
                state, _ = load_remote_state(bootstrap, meta)
                return not any(state.partition(tp).repairs() for tp in before_served)

            wait_for("the owner re-publishing the shadowed segments", repaired, 60, w2.proc)
            assert_unchanged(before, snapshot(storage, topic), "after the hostile tombstones and a pass")
            assert ids(served(bootstrap, meta, topic)) == ids(before_served)
            assert w2.proc.poll() is None
    finally:
        storage.close()
    ends = produced.ends()
    assert_reads_byte_exact(local_stack, env, topic, {tp: 0 for tp in ends}, ends)


def test_two_deployments_sharing_a_bucket_and_prefix_delete_nothing_of_each_other(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    topic, meta = _names("shared")
    bootstrap = local_stack.bootstrap_servers
    env1 = _env(local_stack, tmp_path / "d1", topic, meta, "ds-shared-d1")
    env2 = {  # another deployment: its own metadata topic, consumer group and data
        **_env(local_stack, tmp_path / "d2", topic, meta + "_two", "ds-shared-d2"),
        "PROCESSOR_APP_ID": f"app-{topic}-two",
    }
    produced, before_served = archive(local_stack, env1, topic, meta, tmp_path / "d1-1.log")
    topic_id = next(iter(before_served.values()))[0].segment_id.topic_id
    assert topic_id is not None
    live_folder = f"{topic}/{topic}-{topic_id}/"
    foreign_folder = f"{topic}/{topic}-{uuid.uuid4()}/"  # the other cluster's topic id
    storage = storage_for(local_stack)
    try:
        live = [i.key for i in storage.list(live_folder)]
        assert live, "nothing archived in the live topic id's folder"
        for key in live:  # the other cluster's archive of its topic of the same name
            storage.create(foreign_folder + key[len(live_folder) :], [storage.read_all(key)])
        before = snapshot(storage, topic)
        assert sum(k.startswith(foreign_folder) for k in before) == len(live)

        with running_worker(env1, tmp_path / "d1-2.log") as d1:  # a fresh claim: the sweep runs
            wait_for_log(d1, "resuming at", 60)
            wait_retention_pass(d1, env1, topic, sum(map(len, before_served.values())))
            assert_unchanged(before, snapshot(storage, topic), "deployment 1's claim and retention pass")
            with running_worker(env2, tmp_path / "d2.log") as d2:
                wait_refused(d2, env2)
                watch_refused(d2, env2, storage, topic, before)
            assert d1.proc.poll() is None
            assert_unchanged(before, snapshot(storage, topic), "both deployments on one prefix")
        d2_state, _ = load_remote_state(bootstrap, meta + "_two")
        assert not any(d2_state.partition(tp).segments for tp in before_served)
    finally:
        storage.close()
    assert ids(served(bootstrap, meta, topic)) == ids(before_served)
    ends = produced.ends()
    assert_reads_byte_exact(local_stack, env1, topic, {tp: 0 for tp in ends}, ends)
