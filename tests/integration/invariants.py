"""The invariants every fault test ends with (Redpanda ends every tiered-storage test with a scrub):

- coverage: each partition's served finished segments start at 0, follow each other without a gap
  and end at the expected offset, so every record is in exactly one served segment;
- no overlap among served segments;
- nothing left to clean: no dangling copy or delete, no superseded segment;
- the bucket holds exactly the objects of served segments under the prefix: none unreferenced.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from processor.devstack.sample_data import produce_samples
from processor.devstack.stack import StackInfo
from processor.kafka.partition import TopicPartition
from processor.metadata.manifest import manifest_key
from processor.metadata.model import SegmentState
from processor.metadata.remote_log_state import coverage_gaps_and_overlaps
from processor.metadata.topic_io import load_remote_state
from processor.segment.object_keys import MANIFEST_SUFFIX
from processor.storage.s3 import S3ChunkStorage
from processor.storage.s3_client import S3Options
from tests.integration.worker_process import WorkerProcess


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)
    served: dict[TopicPartition, int] = field(default_factory=dict)  # segments served per partition
    objects: int = 0  # data and index objects under the prefix (manifests counted apart)
    manifests: int = 0
    stale_records: int = 0

    def __bool__(self) -> bool:
        return bool(self.problems)


def check_invariants(
    info: StackInfo,
    metadata_topic: str,
    prefix: str,
    expected_ends: dict[TopicPartition, int],
    topic_ids: dict[str, str] | None = None,
) -> Findings:
    """Check the invariants above against the metadata topic and the real bucket."""
    found = Findings()
    state, skipped = load_remote_state(info.bootstrap_servers, metadata_topic)
    found.stale_records = skipped
    referenced: set[str] = set()
    manifests: set[str] = set()  # of served segments: expected, not required (a copy may not write one)
    for tp, end in expected_ends.items():
        part = state.partition(tp)
        if topic_ids and tp.topic in topic_ids:
            part.current_topic_id = topic_ids[tp.topic]
        served = part.finished()
        found.served[tp] = len(served)
        found.problems += [f"{tp}: {p}" for p in coverage_gaps_and_overlaps(served)]
        if not served or served[0].start_offset != 0 or served[-1].end_offset != end:
            span = f"{served[0].start_offset}..{served[-1].end_offset}" if served else "nothing"
            found.problems.append(f"{tp}: served coverage is {span}, expected 0..{end}")
        for seg in part.dangling():
            found.problems.append(f"{tp}: left to clean up: {seg.segment_id} in {seg.state.value}")
        referenced |= {k for s in served for k in (s.data_object_key, s.index_object_key)}
        manifests |= {manifest_key(s.data_object_key) for s in served}
    for tp, part in state.partitions.items():
        if tp in expected_ends:
            continue
        for seg in part.segments.values():
            if seg.state is not SegmentState.DELETE_SEGMENT_FINISHED:
                referenced |= {seg.data_object_key, seg.index_object_key}
                manifests.add(manifest_key(seg.data_object_key))
    storage = S3ChunkStorage(
        S3Options(bucket=info.bucket, endpoint_url=info.s3_endpoint_url, region="us-east-1")
    )
    try:
        keys = {o.key for o in storage.list(prefix.rstrip("/") + "/")}
    finally:
        storage.close()
    found.manifests = sum(1 for k in keys if k.endswith(MANIFEST_SUFFIX))
    found.objects = len(keys) - found.manifests
    for key in sorted(keys - referenced - manifests):
        found.problems.append(f"unreferenced object in the bucket: {key}")
    for key in sorted(k for k in referenced - keys if k.startswith(prefix)):
        found.problems.append(f"a served segment's object is missing: {key}")
    return found


def settled_invariants(
    info: StackInfo,
    metadata_topic: str,
    prefix: str,
    expected_ends: dict[TopicPartition, int],
    timeout_s: float = 60.0,
    worker: WorkerProcess | None = None,
) -> Findings:
    """:func:`check_invariants` once they hold (a leader that just took over cleans what its
    predecessors left), or its last findings when ``timeout_s`` has passed or ``worker`` exited."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = check_invariants(info, metadata_topic, prefix, expected_ends)
        if not found.problems or time.monotonic() > deadline:
            return found
        if worker is not None and worker.proc.poll() is not None:
            return found
        time.sleep(0.5)


def expected_ends(counts: Counter[int], topic: str) -> dict[TopicPartition, int]:
    return {TopicPartition(topic, p): n - 1 for p, n in counts.items()}


class SteadyProducer:
    """Keeps producing sample records to a topic from a thread until stopped; counts per partition."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, batch: int = 200, pause_s: float = 0.1):
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.batch, self.pause_s = batch, pause_s
        self.counts: Counter[int] = Counter()
        self.next = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for r in produce_samples(
                    self.bootstrap, self.topic, self.batch, self.partitions, start=self.next, big_every=0
                ):
                    self.counts[r.partition] += 1
                self.next += self.batch
                self._stop.wait(self.pause_s)
        except BaseException as exc:
            self.error = exc

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def stop(self) -> Counter[int]:
        self._stop.set()
        self._thread.join(60)
        assert self.error is None, f"the producer failed: {self.error}"
        return self.counts


@contextmanager
def running_worker(env: dict[str, str], log_path: Path) -> Iterator[WorkerProcess]:
    worker = WorkerProcess(env, log_path)
    try:
        yield worker
    finally:
        if worker.proc.poll() is None:
            worker.proc.send_signal(signal.SIGCONT)
        worker.stop()


def wait_for_log(worker: WorkerProcess, text: str, timeout_s: float, after: int = 0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if worker.proc.poll() is not None:
            tail = "\n".join(worker.log()[after:].splitlines()[-40:])
            raise AssertionError(f"worker exited ({worker.proc.returncode}) before logging {text!r}:\n{tail}")
        if text in worker.log()[after:]:
            return
        time.sleep(0.1)
    tail = "\n".join(worker.log()[after:].splitlines()[-40:])
    raise AssertionError(f"worker did not log {text!r} within {timeout_s} s; its log ends:\n{tail}")


def jitter(rng: random.Random, low: float, high: float) -> float:
    return low + (high - low) * rng.random()
