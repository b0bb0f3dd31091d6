"""The read half on the real stack: records come back byte-exact by offset and time, through the
reader, the CLI and the worker's HTTP API; the follower resumes without re-reading; damage is caught."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from processor.config import Settings, load_settings
from processor.devstack.sample_data import SampleRecord
from processor.devstack.stack import StackInfo
from processor.errors import CorruptObjectError, OffsetNotInRemoteError
from processor.kafka.clients import new_producer
from processor.kafka.partition import TopicPartition
from processor.metadata.model import SegmentState
from processor.metadata.topic_io import ensure_metadata_topic
from processor.reader.remote_reader import RemoteReader
from processor.wiring.follower import build_follower, build_reader
from processor.wiring.storage import build_storage
from tests.support.archive import PARTITIONS, PREFIX, TOPIC, OffloadedArchive, objects_restored
from tests.support.cli import run_cli

pytestmark = pytest.mark.integration


@pytest.fixture
def offloaded(offloaded_archive: OffloadedArchive) -> dict[str, Any]:
    """The session's archive (tests/support/archive.py): a worker (leader + follower + HTTP API) that
    has offloaded its records in many small segments, and still runs."""
    return {
        "env": offloaded_archive.env,
        "by_partition": offloaded_archive.by_partition,
        "worker": offloaded_archive.worker,
        "tmp": offloaded_archive.tmp,
        "archive": offloaded_archive,
    }


def settings_for(env: dict[str, str]) -> Settings:
    return load_settings({**env, "PROCESSOR_S3_REGION": "us-east-1"})


@pytest.fixture
def reader(offloaded: dict[str, Any], tmp_path: Path) -> Iterator[RemoteReader]:
    settings = settings_for(offloaded["env"])
    follower = build_follower(settings, 4, cache_dir=tmp_path / "cache")
    follower.materializer.catch_up()
    storage = build_storage(settings)
    yield build_reader(settings, storage, follower.rlmm)
    follower.close()
    storage.close()


def same(record: Any, want: SampleRecord) -> bool:
    return (record.key, record.value, record.headers, record.timestamp) == (
        want.key,
        want.value,
        want.headers,
        want.timestamp,
    )


def test_every_record_reads_back_byte_exact_from_the_middle_and_across_segments(offloaded, reader) -> None:
    for p, want in offloaded["by_partition"].items():
        tp = TopicPartition(TOPIC, p)
        segments = list(reader.lookup.finished_segments(tp, 0))
        assert len(segments) >= 3, "the test needs several segments per partition"
        # everything, from the very first offset
        got = reader.read_from_offset(tp, 0, max_records=len(want), max_bytes=1 << 40)
        assert [r.offset for r in got] == list(range(len(want)))
        assert all(same(g, w) for g, w in zip(got, want, strict=True))
        # from the middle of a segment, across the next boundary
        seg = segments[1]
        start = (seg.start_offset + seg.end_offset) // 2
        got = reader.read_from_offset(tp, start, max_records=seg.end_offset - start + 51, max_bytes=1 << 40)
        assert got[0].offset == start and got[-1].offset == seg.end_offset + 50
        assert all(same(g, want[g.offset]) for g in got)


def test_reads_by_timestamp_return_the_first_record_at_or_after_it(offloaded, reader) -> None:
    want = offloaded["by_partition"][1]
    tp = TopicPartition(TOPIC, 1)
    for probe in [want[0].timestamp - 5, want[100].timestamp, want[1500].timestamp + 1, want[-1].timestamp]:
        first = next(r for r in want if r.timestamp >= probe)
        got = reader.read_from_timestamp(tp, probe, max_records=3)
        assert got[0].timestamp >= probe
        assert got[0].offset == want.index(first)
        assert all(same(g, want[g.offset]) for g in got)
    with pytest.raises(OffsetNotInRemoteError):
        reader.read_from_timestamp(tp, want[-1].timestamp + 10_000_000)


def test_reads_touch_only_the_needed_byte_ranges(offloaded, reader) -> None:
    tp = TopicPartition(TOPIC, 0)
    seg = list(reader.lookup.finished_segments(tp, 0))[2]
    offset = seg.start_offset + (seg.end_offset - seg.start_offset) // 2
    before = (reader.stats.requests, reader.stats.bytes_requested)
    got = reader.read_from_offset(tp, offset, max_records=5)
    requests = reader.stats.requests - before[0]
    fetched = reader.stats.bytes_requested - before[1]
    assert [r.offset for r in got] == list(range(offset, offset + 5))
    assert requests == 2  # the index, then one ranged GET for the block(s)
    assert fetched < seg.index_size_in_bytes + 2 * 32 * 1024 + 2 * 1024 * 1024 + 4096
    assert fetched < seg.segment_size_in_bytes // 3


def cli(env: dict[str, str], *args: str) -> Any:
    return run_cli(env, *args)


def test_cli_segments_and_fetch(offloaded) -> None:
    env = offloaded["env"]
    result = cli(env, "segments", "--topic", TOPIC, "--partition", "2", "--json")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows and all(r["partition"] == 2 and r["state"] == "COPY_SEGMENT_FINISHED" for r in rows)
    assert rows[0]["start_offset"] == 0 and [r["start_offset"] for r in rows[1:]] == [
        r["end_offset"] + 1 for r in rows[:-1]
    ]
    assert all(r["topic_id"] for r in rows)
    assert all(r["object_key"].startswith(f"{PREFIX}/{TOPIC}-{r['topic_id']}/2/") for r in rows)
    assert all(isinstance(r["writer_epoch"], int) for r in rows)

    want = offloaded["by_partition"][2]
    result = cli(
        env, "fetch", "--topic", TOPIC, "--partition", "2", "--offset", "7", "--max-records", "40", "--json"
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [x["offset"] for x in lines] == list(range(7, 47))
    for x in lines:
        w = want[x["offset"]]
        assert x["key"] == (None if w.key is None else base64.b64encode(w.key).decode())
        assert x["value"] == (None if w.value is None else base64.b64encode(w.value).decode())
        assert x["headers"] == [
            [n, None if v is None else base64.b64encode(v).decode()] for n, v in w.headers
        ]
        assert x["timestamp"] == w.timestamp
    result = cli(
        env, "fetch", "--topic", TOPIC, "--partition", "2", "--timestamp", str(want[30].timestamp), "--json"
    )
    assert json.loads(result.stdout.splitlines()[0])["timestamp"] >= want[30].timestamp
    missing = cli(env, "fetch", "--topic", TOPIC, "--partition", "2", "--offset", str(10**9))
    assert missing.returncode == 2 and "not in remote storage" in missing.stderr
    bad = cli(env, "fetch", "--topic", "../x", "--partition", "0", "--offset", "0")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def http(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_worker_http_api(offloaded) -> None:
    base = f"http://127.0.0.1:{offloaded['env']['PROCESSOR_WEB_PORT']}"
    want = offloaded["by_partition"][0]
    deadline = time.monotonic() + 30
    while True:  # the worker's follower catches up in the background
        status, body = http(f"{base}/fetch?topic={TOPIC}&partition=0&offset=100&max_records=20")
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert status == 200, body
    assert [r["offset"] for r in body["records"]] == list(range(100, 120))
    assert body["records"][0]["value"] == (
        None if want[100].value is None else base64.b64encode(want[100].value).decode()
    )
    status, body = http(f"{base}/segments?topic={TOPIC}&partition=0")
    assert status == 200 and body["segments"][0]["start_offset"] == 0
    assert http(f"{base}/fetch?topic={TOPIC}&partition=0&offset=999999999")[0] == 404
    assert http(f"{base}/fetch?topic={TOPIC}&partition=0")[0] == 400
    assert http(f"{base}/fetch?topic={TOPIC}&partition=x&offset=1")[0] == 400
    assert http(f"{base}/fetch?topic=a/b&partition=0&offset=1")[0] == 400
    assert http(f"{base}/fetch?topic={TOPIC}&partition=0&offset=1&timestamp=5")[0] == 400
    metrics = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
    assert "processor_segments_copied_total" in metrics
    # everything produced is offloaded, so no partition lags
    deadline = time.monotonic() + 15
    while True:
        lags = {
            line.split("partition=")[1].split('"')[1]: float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("processor_remote_copy_lag_records{") and f'topic="{TOPIC}"' in line
        }
        if len(lags) == PARTITIONS or time.monotonic() > deadline:
            break
        time.sleep(1)
        metrics = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
    assert lags == {str(p): 0.0 for p in range(PARTITIONS)}


def test_follower_restart_rereads_nothing(offloaded, tmp_path: Path) -> None:
    settings = settings_for(offloaded["env"])
    follower = build_follower(settings, 4, cache_dir=tmp_path / "cache")
    first = follower.materializer.catch_up()
    applied_before = first.consumed
    assert applied_before > 0
    follower.close()
    again = build_follower(settings, 4, cache_dir=tmp_path / "cache")
    second = again.materializer.catch_up()
    assert second.consumed == 0, "a restarted follower re-read records it had applied"
    assert again.rlmm.highest_log_offset(TopicPartition(TOPIC, 0)) == len(offloaded["by_partition"][0]) - 1
    again.close()


def test_garbage_and_illegal_transitions_are_skipped_while_good_records_apply(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    from processor.metadata.codec import encode_value, metadata_partition_for, record_key
    from tests.integration.test_metadata_topic import meta

    topic = "__meta_follower_garbage"
    parts = ensure_metadata_topic(local_stack.bootstrap_servers, topic, 2, 1)
    tp = TopicPartition("g", 0)
    where = metadata_partition_for(tp, parts)
    good1 = meta(tp, 0, 9, SegmentState.COPY_SEGMENT_FINISHED)
    illegal = good1.with_state(SegmentState.COPY_SEGMENT_STARTED, 5)  # finished cannot go back
    good2 = meta(tp, 10, 19, SegmentState.COPY_SEGMENT_FINISHED)
    producer = new_producer(local_stack.bootstrap_servers, "garbage")
    for key, value in [
        (record_key(good1), encode_value(good1)),
        (b"x", b"\xff\xfe garbage"),
        (record_key(illegal), encode_value(illegal)),
        (b"y", b"\x01"),
        (record_key(good2), encode_value(good2)),
    ]:
        producer.produce(topic, value=value, key=key, partition=where)
    producer.flush(10)
    settings = load_settings(
        {"PROCESSOR_BOOTSTRAP_SERVERS": local_stack.bootstrap_servers, "PROCESSOR_METADATA_TOPIC": topic}
    )
    follower = build_follower(settings, parts, cache_dir=tmp_path / "cache")
    stats = follower.materializer.catch_up()
    assert (stats.consumed, stats.applied, stats.skipped) == (5, 2, 3)
    assert follower.rlmm.remote_log_segment_metadata(tp, 5) == good1
    assert follower.rlmm.remote_log_segment_metadata(tp, 15) == good2
    follower.close()


def test_a_corrupted_data_object_yields_an_error_not_records(
    offloaded, reader, local_stack: StackInfo
) -> None:
    tp = TopicPartition(TOPIC, 1)
    seg = list(reader.lookup.finished_segments(tp, 0))[-1]
    with objects_restored(local_stack, seg.data_object_key) as s3:  # whole again for the next test
        data = bytearray(s3.get_object(Bucket=local_stack.bucket, Key=seg.data_object_key)["Body"].read())
        data[len(data) // 2] ^= 0x01
        s3.put_object(Bucket=local_stack.bucket, Key=seg.data_object_key, Body=bytes(data))  # behind our back
        with pytest.raises(CorruptObjectError) as err:
            reader.read_from_offset(tp, seg.start_offset, max_records=10**6, max_bytes=1 << 40)
        assert seg.data_object_key in str(err.value) and str(seg.segment_id.id) in str(err.value)
        result = cli(
            offloaded["env"],
            "fetch",
            "--topic",
            TOPIC,
            "--partition",
            "1",
            "--offset",
            str(seg.start_offset),
            "--max-records",
            "100000",
        )
        assert result.returncode != 0 and "CRC" in result.stderr and "Traceback" not in result.stderr
