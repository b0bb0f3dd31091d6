"""``processor demo`` (``make demo``): the whole offload path on the embedded stack, then everything it
started stops.

Starts Tansu + SeaweedFS, creates a topic, produces sample records (keys, null values, headers),
runs ``processor worker`` as a child process until every record is in a COPY_SEGMENT_FINISHED
segment, prints a summary, and stops the worker and the stack.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from processor.commands.progress import progress
from processor.config import load_settings
from processor.devstack import stack
from processor.devstack.sample_data import SampleRecord, produce_samples
from processor.kafka_clients import KafkaTarget, ensure_topic, new_admin, partition_counts
from processor.logs import setup_logging
from processor.metadata.model import TopicPartition
from processor.metadata.topic_io import load_remote_state
from processor.wiring.follower import build_follower, build_reader
from processor.wiring.storage import build_storage

DEMO_TOPIC = "demo-events"
DEMO_PARTITIONS = 4
METADATA_TOPIC = "__remote_log_metadata"


def worker_env(info: stack.StackInfo, data_dir: Path) -> dict[str, str]:
    return info.worker_env(
        data_dir,
        DEMO_TOPIC,
        PROCESSOR_METADATA_TOPIC=METADATA_TOPIC,
        PROCESSOR_SEGMENT_BYTES=str(4 * 1024 * 1024),
        PROCESSOR_SEGMENT_MS="2000",
        PROCESSOR_BUFFER_BYTES=str(64 * 1024 * 1024),
        PROCESSOR_WORKER_ID="demo-worker-1",
        PROCESSOR_LOG_LEVEL="warn",
    )


def wait_offloaded(
    bootstrap: KafkaTarget,
    metadata_topic: str,
    expected_end: dict[TopicPartition, int],
    timeout_s: float,
    proc: subprocess.Popen[bytes] | None = None,
    show_progress: bool = False,
) -> dict[TopicPartition, int]:
    """Poll the metadata topic until every partition's finished coverage reaches its expected end
    (with a progress bar of the offsets covered when asked and on a terminal)."""
    deadline = time.monotonic() + timeout_s
    reached: dict[TopicPartition, int] = {}
    total = sum(end + 1 for end in expected_end.values())
    with progress("offloaded", total, enabled=None if show_progress else False) as bar:
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"the worker exited with code {proc.returncode}")
            state, _ = load_remote_state(bootstrap, metadata_topic)
            reached = {tp: state.partition(tp).highest_finished_offset() or -1 for tp in expected_end}
            bar.set(sum(min(reached[tp], end) + 1 for tp, end in expected_end.items()))
            if all(reached[tp] >= end for tp, end in expected_end.items()):
                return reached
            time.sleep(1.0)
    raise TimeoutError(
        f"records not offloaded within {timeout_s:.0f} s: reached {reached}, expected {expected_end}"
    )


def read_back_and_compare(info: stack.StackInfo, stack_dir: Path, produced: list[SampleRecord]) -> list[str]:
    """Read every partition back from offset 0 via a fresh follower cache + remote reader."""
    settings = load_settings(
        {
            **{k: v for k, v in info.env().items() if k.startswith("PROCESSOR_")},
            "PROCESSOR_METADATA_TOPIC": METADATA_TOPIC,
            "PROCESSOR_FOLLOW_TOPICS": DEMO_TOPIC,
            "PROCESSOR_S3_REGION": "us-east-1",
        }
    )
    meta_parts = partition_counts(new_admin(info.kafka, "demo"), [METADATA_TOPIC])[METADATA_TOPIC]
    follower = build_follower(settings, meta_parts, cache_dir=stack_dir / "read-back-cache")
    storage = build_storage(settings)
    problems: list[str] = []
    try:
        follower.materializer.catch_up()
        reader = build_reader(settings, storage, follower.rlmm)
        for p in range(DEMO_PARTITIONS):
            want = [r for r in produced if r.partition == p]
            got = reader.read_from_offset(
                TopicPartition(DEMO_TOPIC, p), 0, max_records=len(want), max_bytes=1 << 40
            )
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
    finally:
        follower.close()
        storage.close()
    return problems


def run_demo(stack_dir: Path, records: int = 20000) -> int:
    print(f"starting the embedded stack in {stack_dir} ...", flush=True)
    info = stack.start(stack_dir)
    # This process reads the objects back itself, with the embedded stack's credentials.
    os.environ.update({k: v for k, v in info.env().items() if k.startswith("AWS_")})
    worker: subprocess.Popen[bytes] | None = None
    try:
        print(f"  Kafka {info.bootstrap_servers}, S3 {info.s3_endpoint_url} (bucket {info.bucket})")
        ensure_topic(new_admin(info.kafka, "demo"), DEMO_TOPIC, DEMO_PARTITIONS, 1, {})
        print(
            f"producing {records} sample records to {DEMO_TOPIC} ({DEMO_PARTITIONS} partitions) ...",
            flush=True,
        )
        produced = produce_samples(info.kafka, DEMO_TOPIC, records, DEMO_PARTITIONS, big_every=0)
        expected = {
            TopicPartition(DEMO_TOPIC, p): sum(1 for r in produced if r.partition == p) - 1
            for p in range(DEMO_PARTITIONS)
        }
        log_path = stack_dir / "worker.log"
        print(f"running the worker until every record is offloaded (log: {log_path}) ...", flush=True)
        with log_path.open("ab") as log_file:
            worker = subprocess.Popen(
                [sys.executable, "-m", "processor", "worker"],
                env=worker_env(info, stack_dir / "worker-data"),
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        t0 = time.monotonic()
        wait_offloaded(info.kafka, METADATA_TOPIC, expected, 180, worker, show_progress=True)
        elapsed = time.monotonic() - t0
        state, _skipped = load_remote_state(info.kafka, METADATA_TOPIC)
        segments = [s for tp in sorted(expected) for s in state.partition(tp).finished()]
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
        mismatches = read_back_and_compare(info, stack_dir, produced)
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
        if worker is not None and worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        print("stopping the stack ...", flush=True)
        stack.stop(stack_dir)


def cmd_demo(args: argparse.Namespace) -> int:
    setup_logging("warning")
    return run_demo(Path(args.dir), records=args.records)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="offload sample records on the embedded stack, then stop everything")
    demo.add_argument("--dir", default=".stack/demo")
    demo.add_argument("--records", type=int, default=20000)
    demo.set_defaults(func=cmd_demo)
