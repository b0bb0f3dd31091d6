"""One contract, run unchanged against every ChunkStorage: filesystem, S3 on moto, S3 on SeaweedFS, GCS
on fake-gcs-server, Azure Blob on Azurite."""

from __future__ import annotations

import dataclasses
import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from processor.devstack import emulators
from processor.devstack.emulators import Emulator
from processor.devstack.stack import StackInfo
from processor.errors import (
    InvalidNameError,
    InvalidRangeError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
)
from processor.storage.chunk_storage import ChunkStorage
from processor.storage.filesystem import FilesystemChunkStorage
from processor.storage.gcs import GcsChunkStorage
from processor.storage.s3 import S3ChunkStorage
from processor.storage.s3_client import S3Options
from tests.contract.conftest import EMULATOR_BUCKET
from tests.support.fault_proxy import FaultProxy, FaultRule

MiB = 1024 * 1024


# The first use of an emulator on a machine installs it (npm, a Go build: minutes on a loaded machine)
_INSTALLING = pytest.mark.timeout(900)


@pytest.fixture(
    params=[
        "filesystem",
        "moto",
        "seaweedfs",
        pytest.param("gcs", marks=_INSTALLING),
        pytest.param("azure", marks=_INSTALLING),
    ]
)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChunkStorage]:
    if request.param == "filesystem":
        yield FilesystemChunkStorage(tmp_path)
        return
    if request.param in {"gcs", "azure"}:
        s = emulator_storage(request.getfixturevalue(f"{request.param}_emulator"))
        yield s
        s.close()
        return
    if request.param == "moto":
        from moto import mock_aws

        with mock_aws():
            client = boto3.client("s3", region_name="us-east-1")
            client.create_bucket(Bucket="contract")
            s = S3ChunkStorage(
                S3Options(bucket="contract", part_size=5 * MiB, multipart_threshold=6 * MiB), client
            )
            yield s
            s.close()
        return
    info = request.getfixturevalue("local_stack")
    s = seaweedfs_storage(info)
    yield s
    s.close()


def seaweedfs_storage(info: StackInfo) -> S3ChunkStorage:
    """S3 on the stack's SeaweedFS, with parts small enough that a few MiB go up in parts."""
    return S3ChunkStorage(
        S3Options(
            bucket=info.bucket,
            endpoint_url=info.s3_endpoint_url,
            region="us-east-1",
            part_size=5 * MiB,
            multipart_threshold=6 * MiB,
        )
    )


def emulator_storage(emulator: Emulator) -> ChunkStorage:
    """GCS on fake-gcs-server or Azure on Azurite (tests/contract/conftest.py), with parts small
    enough that a few MiB go up in parts (a resumable upload's chunks, staged blocks)."""
    return emulators.storage_for(emulator, EMULATOR_BUCKET, part_size=5 * MiB, multipart_threshold=6 * MiB)


def key() -> str:
    return f"contract/{uuid.uuid4()}"


def test_create_then_read_ranges(storage: ChunkStorage) -> None:
    k = key()
    info = storage.create(k, [b"hello ", bytearray(b"chunk "), memoryview(b"world")])
    assert info.size == 17
    assert storage.read(k, 0, 17) == b"hello chunk world"
    assert storage.read(k, 6, 5) == b"chunk"
    assert storage.stat(k).size == 17  # type: ignore[union-attr]
    assert storage.exists(k)


def test_create_is_conditional(storage: ChunkStorage) -> None:
    k = key()
    storage.create(k, [b"first"])
    with pytest.raises(ObjectExistsError):
        storage.create(k, [b"second"])
    assert storage.read_all(k) == b"first"


def test_large_objects_go_up_in_parts_and_read_back(storage: ChunkStorage) -> None:
    k = key()
    blocks = [bytes([i]) * (MiB + i) for i in range(13)]  # ~13 MiB: three 5 MiB parts on S3
    storage.create(k, blocks)
    whole = b"".join(blocks)
    assert storage.stat(k).size == len(whole)  # type: ignore[union-attr]
    assert storage.read(k, 5 * MiB - 3, 10) == whole[5 * MiB - 3 : 5 * MiB + 7]
    with pytest.raises(ObjectExistsError):
        storage.create(k, blocks)


def test_missing_objects_and_bad_ranges(storage: ChunkStorage) -> None:
    k = key()
    assert storage.stat(k) is None
    with pytest.raises(ObjectNotFoundError):
        storage.read(k, 0, 1)
    storage.create(k, [b"abc"])
    with pytest.raises(InvalidRangeError):
        storage.read(k, 2, 5)
    storage.delete(k)
    storage.delete(k)  # idempotent
    assert not storage.exists(k)


def test_list_by_prefix_in_key_order(storage: ChunkStorage) -> None:
    base = key()
    for name in ["b", "a", "c"]:
        storage.create(f"{base}/{name}", [name.encode()])
    assert [c.key for c in storage.list(base + "/")] == [f"{base}/a", f"{base}/b", f"{base}/c"]


def test_stat_and_list_report_when_an_object_was_written(storage: ChunkStorage) -> None:
    """The storage's own clock: the sweep judges an object's age by it, never by a local clock."""
    k = key()
    storage.create(k, [b"x"])
    stated = storage.stat(k)
    (listed,) = [c for c in storage.list(k) if c.key == k]
    assert stated is not None and stated.modified_ms is not None and listed.modified_ms is not None
    assert abs(stated.modified_ms - listed.modified_ms) <= 1000  # S3 lists and heads at 1 s or 1 ms


def test_concat(storage: ChunkStorage) -> None:
    if not storage.supports_concat:
        pytest.skip("no concat")
    base = key()
    first = bytes(5 * MiB)
    storage.create(f"{base}/1", [first])
    storage.create(f"{base}/2", [b"tail"])
    info = storage.concat(f"{base}/all", [f"{base}/1", f"{base}/2"])
    assert info.size == len(first) + 4
    assert storage.read(f"{base}/all", len(first) - 2, 6) == b"\x00\x00tail"


def test_delete_many_deletes_every_key_and_a_missing_one_is_no_error(storage: ChunkStorage) -> None:
    base = key()
    keys = [f"{base}/{i}" for i in range(5)]
    for k in keys:
        storage.create(k, [k.encode()])
    storage.create(f"{base}-kept", [b"x"])
    storage.delete_many([*keys[:3], f"{base}/missing", *keys[3:], keys[0]])
    assert [i.key for i in storage.list(base)] == [f"{base}-kept"]
    storage.delete_many([])


def test_s3_delete_many_crosses_its_request_limit_and_names_what_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from moto import mock_aws

    import processor.storage.s3 as s3

    monkeypatch.setattr(s3, "DELETE_BATCH", 2)  # five keys: three DeleteObjects requests
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="contract")
        storage = S3ChunkStorage(S3Options(bucket="contract"), client)
        keys = [f"d/{i}" for i in range(5)]
        for k in keys:
            storage.create(k, [b"x"])
        storage.delete_many(keys)
        assert list(storage.list("d/")) == []
        gone = S3ChunkStorage(S3Options(bucket="no-such-bucket"), client)
        with pytest.raises(StorageError) as failed:
            gone.delete_many(keys)
        assert "5 objects not deleted" in str(failed.value) and "d/4" in str(failed.value)
        assert not failed.value.retriable  # a missing bucket: no retry fixes it
        storage.close()


def test_filesystem_keys_cannot_escape_the_root(tmp_path: Path) -> None:
    s = FilesystemChunkStorage(tmp_path / "root")
    for bad in ["../x", "a/../../x", "/etc/passwd", "a//b", ""]:
        with pytest.raises(InvalidNameError):
            s.create(bad, [b"x"])


def test_the_store_checks_usable(storage: ChunkStorage) -> None:
    storage.check_bucket()  # raises StorageError when unreachable or unusable


def test_multipart_uploads_are_listed_and_aborted(storage: ChunkStorage) -> None:
    base = key()
    assert storage.list_multipart_uploads(base + "/") == []
    storage.abort_multipart_upload(f"{base}/x", "no-such-upload")  # already gone: not an error
    if not isinstance(storage, S3ChunkStorage):
        return  # a backend that writes each chunk in one step never has an upload to list
    started = storage.client.create_multipart_upload(Bucket=storage.bucket, Key=f"{base}/x")["UploadId"]
    listed = storage.list_multipart_uploads(base + "/")
    assert [(u.key, u.upload_id) for u in listed] == [(f"{base}/x", started)]
    assert listed[0].initiated_ms > 0
    storage.abort_multipart_upload(f"{base}/x", started)
    assert storage.list_multipart_uploads(base + "/") == []


def _weed_ports(pid: int) -> dict[str, str]:
    args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return {a.split("=")[0].lstrip("-"): a.split("=", 1)[1] for a in args if a.startswith("-") and "=" in a}


def _chunks_stored_gzipped(pid: int, bucket: str, k: str) -> list[bool]:
    """Per chunk of ``k``: does SeaweedFS's volume server hold it gzipped (it answers a gzip-accepting
    GET of a chunk it stored compressed with Content-Encoding: gzip)?"""
    ports = _weed_ports(pid)
    url = f"http://127.0.0.1:{ports['filer.port']}/buckets/{bucket}/{k}?metadata=true"
    with urllib.request.urlopen(url, timeout=10) as resp:
        chunks = json.load(resp)["chunks"]
    stored = []
    for chunk in chunks:
        get = urllib.request.Request(
            f"http://127.0.0.1:{ports['volume.port']}/{chunk['file_id']}", headers={"Accept-Encoding": "gzip"}
        )
        with urllib.request.urlopen(get, timeout=10) as resp:
            stored.append(resp.headers.get("Content-Encoding") == "gzip")
    return stored


@pytest.mark.parametrize("parts", [1, 3], ids=["one-put", "multipart"])
def test_objects_are_labelled_as_bytes_and_stored_as_is(local_stack: StackInfo, parts: int) -> None:
    """Objects carry S3's type for bytes, so an S3-compatible store does not compress compressible
    archives (SeaweedFS then inflates a whole 4 MiB chunk for every ranged read)."""
    if "weed" not in local_stack.pids:
        pytest.skip("looks inside the stack's own SeaweedFS")
    s = seaweedfs_storage(local_stack)
    lines = b"".join(b"record %08d of a very compressible topic\n" % i for i in range(140_000))
    text = lines[: parts * 4 * MiB + 12345]
    k = key()
    try:
        s.create(k, [text])
        assert s.client.head_object(Bucket=s.bucket, Key=k)["ContentType"] == "binary/octet-stream"
        stored = _chunks_stored_gzipped(local_stack.pids["weed"], s.bucket, k)
        assert stored and not any(stored)
        assert s.read(k, 4 * MiB - 7, 20) == text[4 * MiB - 7 : 4 * MiB + 13]
    finally:
        s.close()


# -- the cloud backends: what their emulators do not check, checked another way ------------------


def test_gcs_compose_asks_for_no_existing_target(gcs_emulator: Emulator) -> None:
    """fake-gcs-server ignores ``ifGenerationMatch`` on compose (it overwrote an existing target when
    tried), so the request GCS enforces it on is checked on the wire: every compose carries
    ``ifGenerationMatch=0``. Uploads' preconditions are enforced by the emulator (the contract)."""
    s = emulators.storage_for(gcs_emulator, EMULATOR_BUCKET)
    assert isinstance(s, GcsChunkStorage)
    sent: list[str] = []
    s.client._http.hooks["response"].append(lambda resp, **_: sent.append(resp.request.url))
    try:
        base = key()
        s.create(f"{base}/1", [b"head"])
        s.create(f"{base}/2", [b"tail"])
        s.concat(f"{base}/all", [f"{base}/1", f"{base}/2"])
    finally:
        s.close()
    composes = [url for url in sent if "/compose" in url]
    assert composes and all("ifGenerationMatch=0" in url for url in composes)


@pytest.mark.parametrize("kind", ["gcs", "azure"])
def test_a_create_whose_answer_was_lost_succeeds_on_the_clients_retry(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """The first upload reaches the store and its answer is lost (the connection cut after it was
    forwarded): the client's retry finds the object there (412 / 409) holding this create's own
    token, so the create succeeds. A second writer's create still fails (the contract)."""
    emulator: Emulator = request.getfixturevalue(f"{kind}_emulator")
    upstream = emulator.endpoint.rsplit("/", 1)[0] if kind == "azure" else emulator.endpoint
    k = key()
    with FaultProxy(upstream) as proxy:
        proxied = dataclasses.replace(
            emulator, endpoint=emulator.endpoint.replace(upstream, proxy.endpoint_url)
        )
        s = emulators.storage_for(proxied, EMULATOR_BUCKET)
        try:
            if kind == "gcs":  # POST /upload/storage/v1/b/BUCKET/o?uploadType=multipart&ifGenerationMatch=0
                rule = proxy.add_rule(
                    FaultRule("drop", frozenset({"other"}), path_contains="/upload/", limit=1)
                )
            else:  # PUT /ACCOUNT/CONTAINER/KEY with If-None-Match: *
                rule = proxy.add_rule(FaultRule("drop", frozenset({"put"}), path_contains=k, limit=1))
            assert s.create(k, [b"only once"]).size == 9
            assert rule.applied == 1
            assert s.read_all(k) == b"only once"
            with pytest.raises(ObjectExistsError):
                s.create(k, [b"a second writer"])
        finally:
            s.close()


def test_list_folders_gives_a_folders_own_entries(storage: ChunkStorage) -> None:
    """The delimiter listing the rebuild walks the bucket by: the folders directly under a prefix and
    the chunks directly in it, each in key order, whether the store lists by delimiter or not."""
    base = key()
    for name in ["t2/0/a", "t1/1/b", "t1/0/c", "x", "w"]:
        storage.create(f"{base}/{name}", [b"."])
    folders, chunks = storage.list_folders(f"{base}/")
    assert folders == [f"{base}/t1/", f"{base}/t2/"]
    assert [c.key for c in chunks] == [f"{base}/w", f"{base}/x"] and all(c.size == 1 for c in chunks)
    assert storage.list_folders(f"{base}/t1/")[0] == [f"{base}/t1/0/", f"{base}/t1/1/"]
