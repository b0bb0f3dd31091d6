"""``processor demo`` (``make demo``): the whole offload path on the embedded stack, then everything it
started stops.

Starts the local stack, Apache Kafka (Tansu without Java) and SeaweedFS (or uses the stack
``processor dev up --dir DIR`` runs: ``--stack DIR``, which stays up), creates a topic, produces
sample records (keys, null values, headers), runs ``processor worker`` as a child process until
every record is in a COPY_SEGMENT_FINISHED segment, prints a summary, reads every record back, and
stops the worker (and the stack it started).

Progress is watched through one follower of the metadata topic (cache + materializer, as a worker's
read side runs it): it reads each metadata record once and is polled in memory.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from processor.commands.progress import progress
from processor.config import Settings, load_settings
from processor.devstack import stack
from processor.devstack.sample_data import SampleRecord, produce_samples
from processor.errors import ServiceUnavailableError
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.logs import setup_logging
from processor.metadata.topic_io import ensure_metadata_topic
from processor.reader.remote_reader import RemoteReader
from processor.wiring.follower import Follower, build_follower, build_reader
from processor.wiring.storage import build_storage

DEMO_TOPIC = "demo-events"
DEMO_PARTITIONS = 4
METADATA_TOPIC = "__remote_log_metadata"
POLL_S = 0.2


def worker_env(info: stack.StackInfo, data_dir: Path, topic: str, metadata_topic: str) -> dict[str, str]:
    return info.worker_env(
        data_dir,
        topic,
        PROCESSOR_METADATA_TOPIC=metadata_topic,
        PROCESSOR_SEGMENT_BYTES=str(4 * 1024 * 1024),
        PROCESSOR_SEGMENT_MS="2000",
        PROCESSOR_BUFFER_BYTES=str(64 * 1024 * 1024),
        PROCESSOR_WORKER_ID="demo-worker-1",
        PROCESSOR_LOG_LEVEL="warn",
    )


def read_settings(info: stack.StackInfo, topic: str, metadata_topic: str) -> Settings:
    """This process's read side: the stack's addresses, the demo's topics."""
    return load_settings(
        {
            **{k: v for k, v in info.env().items() if k.startswith("PROCESSOR_")},
            "PROCESSOR_METADATA_TOPIC": metadata_topic,
            "PROCESSOR_FOLLOW_TOPICS": topic,
            "PROCESSOR_S3_REGION": "us-east-1",
        }
    )


def wait_offloaded(
    follower: Follower,
    expected_end: dict[TopicPartition, int],
    timeout_s: float,
    proc: subprocess.Popen[bytes] | None = None,
    show_progress: bool = False,
) -> dict[TopicPartition, int]:
    """Wait until every partition's finished coverage, as the running ``follower`` holds it, reaches its
    expected end (with a progress bar of the offsets covered when asked and on a terminal)."""
    deadline = time.monotonic() + timeout_s
    reached: dict[TopicPartition, int] = {}
    total = sum(end + 1 for end in expected_end.values())
    materializer = follower.materializer
    with progress("offloaded", total, enabled=None if show_progress else False) as bar:
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"the worker exited with code {proc.returncode}")
            if materializer.failure is not None:
                raise ServiceUnavailableError(f"following the metadata topic failed: {materializer.failure}")
            reached = {
                tp: materializer.remote_state(tp).highest_finished_offset() or -1 for tp in expected_end
            }
            bar.set(sum(min(reached[tp], end) + 1 for tp, end in expected_end.items()))
            if all(reached[tp] >= end for tp, end in expected_end.items()):
                return reached
            time.sleep(POLL_S)
    raise TimeoutError(
        f"records not offloaded within {timeout_s:.0f} s: reached {reached}, expected {expected_end}"
    )


def read_back_and_compare(
    reader: RemoteReader, topic: str, partitions: int, produced: list[SampleRecord]
) -> list[str]:
    """Read every partition back from offset 0 through the remote reader."""
    problems: list[str] = []
    for p in range(partitions):
        want = [r for r in produced if r.partition == p]
        got = reader.read_from_offset(TopicPartition(topic, p), 0, max_records=len(want), max_bytes=1 << 40)
        if len(got) != len(want):
            problems.append(f"partition {p}: {len(got)} records read, {len(want)} produced")
        for offset, (g, w) in enumerate(zip(got, want, strict=False)):
            if (g.offset, g.key, g.value, g.headers, g.timestamp) != (
                offset,
                w.key,
                w.value,
                w.headers,
                w.timestamp,
            ):
                problems.append(f"partition {p} offset {offset} differs")
    return problems


def _stop_worker(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def run_demo(stack_dir: Path, records: int = 20000, use_running: bool = False) -> int:
    """``use_running``: the stack in ``stack_dir`` already runs (``processor dev up``); use it, with
    topics of this run's own, and leave it running."""
    if use_running:
        info = stack.load(stack_dir)
        if info is None or not stack.status(stack_dir).get("running"):
            raise ServiceUnavailableError(f"no stack runs from {stack_dir} (start one: processor dev up)")
        run_id = uuid.uuid4().hex[:8]
        topic, metadata_topic = f"{DEMO_TOPIC}-{run_id}", f"{METADATA_TOPIC}_demo_{run_id}"
        print(f"using the stack running from {stack_dir} ...", flush=True)
    else:
        print(f"starting the embedded stack in {stack_dir} ...", flush=True)
        info = stack.start(stack_dir)
        topic, metadata_topic = DEMO_TOPIC, METADATA_TOPIC
    # This process reads the objects back itself, with the embedded stack's credentials.
    os.environ.update({k: v for k, v in info.env().items() if k.startswith("AWS_")})
    worker: subprocess.Popen[bytes] | None = None
    follower: Follower | None = None
    try:
        print(f"  Kafka {info.bootstrap_servers}, S3 {info.s3_endpoint_url} (bucket {info.bucket})")
        ensure_topic(new_admin(info.kafka, "demo"), topic, DEMO_PARTITIONS, 1, {})
        print(f"producing {records} sample records to {topic} ({DEMO_PARTITIONS} partitions) ...", flush=True)
        produced = produce_samples(info.kafka, topic, records, DEMO_PARTITIONS, big_every=0)
        expected = {
            TopicPartition(topic, p): sum(1 for r in produced if r.partition == p) - 1
            for p in range(DEMO_PARTITIONS)
        }
        settings = read_settings(info, topic, metadata_topic)
        meta_parts = ensure_metadata_topic(info.kafka, metadata_topic, settings.metadata_partitions, 1)
        follower = build_follower(settings, meta_parts, cache_dir=stack_dir / f"read-back-cache-{topic}")
        follower.materializer.start()
        log_path = stack_dir / "worker.log"
        print(f"running the worker until every record is offloaded (log: {log_path}) ...", flush=True)
        with log_path.open("ab") as log_file:
            worker = subprocess.Popen(
                [sys.executable, "-m", "processor", "worker"],
                env=worker_env(info, stack_dir / "worker-data", topic, metadata_topic),
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        t0 = time.monotonic()
        wait_offloaded(follower, expected, 180, worker, show_progress=True)
        elapsed = time.monotonic() - t0
        segments = [s for tp in sorted(expected) for s in follower.materializer.remote_state(tp).finished()]
        total_bytes = sum(s.segment_size_in_bytes + s.index_size_in_bytes for s in segments)
        total_records = sum(s.record_count for s in segments)
        print(
            f"\noffloaded in {elapsed:.1f} s: {len(segments)} segments, "
            f"{total_records} records, {total_bytes} bytes"
        )
        for s in segments[:8]:
            print(
                f"  {s.segment_id.topic}-{s.segment_id.partition} {s.start_offset:>6}..{s.end_offset:<6} "
                f"{s.record_count:>6} records {s.segment_size_in_bytes:>9} B  s3://{info.bucket}/{s.data_object_key}"
            )
        if len(segments) > 8:
            print(f"  ... and {len(segments) - 8} more")
        ok = total_records == records
        print(
            "all records are in finished segments"
            if ok
            else f"MISMATCH: produced {records}, offloaded {total_records}"
        )
        storage = build_storage(settings)
        try:
            reader = build_reader(settings, storage, follower.rlmm)
            mismatches = read_back_and_compare(reader, topic, DEMO_PARTITIONS, produced)
        finally:
            storage.close()
        print(
            f"read back {records} records from S3 through the remote reader: "
            + (
                "every one byte-exact"
                if not mismatches
                else f"{len(mismatches)} MISMATCHES, first: {mismatches[0]}"
            )
        )
        return 0 if ok and not mismatches else 1
    finally:
        if worker is not None:
            _stop_worker(worker)
        if follower is not None:
            follower.close()
        if not use_running:
            print("stopping the stack ...", flush=True)
            stack.stop(stack_dir)


def cmd_demo(args: argparse.Namespace) -> int:
    setup_logging("warning")
    if args.stack is not None:
        return run_demo(Path(args.stack), records=args.records, use_running=True)
    return run_demo(Path(args.dir), records=args.records)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="offload sample records on the embedded stack, then stop everything")
    demo.add_argument("--dir", default=".stack/demo")
    demo.add_argument("--records", type=int, default=20000)
    demo.add_argument(
        "--stack",
        metavar="DIR",
        help="use the stack `processor dev up --dir DIR` runs (topics of this run's own; it stays up)",
    )
    demo.set_defaults(func=cmd_demo)
