"""The bucket inventory of a rebuild and the manifests read from it (filesystem storage)."""

from __future__ import annotations

import uuid
from pathlib import Path

from processor.metadata.manifest import SegmentManifest, encode_manifest, manifest_key
from processor.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, SegmentState
from processor.rebuild.inventory import take_inventory
from processor.rebuild.manifests import read_manifests
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.filesystem import FilesystemChunkStorage

KEYS = ObjectKeyFactory("pre")
TOPIC_ID = str(uuid.UUID(int=7))


def segment(partition: int, start: int, end: int, epoch: int = 3) -> RemoteLogSegmentMetadata:
    sid = uuid.uuid4()
    keys = KEYS.segment("orders", partition, start, sid, epoch, TOPIC_ID)
    return RemoteLogSegmentMetadata(
        segment_id=RemoteLogSegmentId("orders", partition, sid, TOPIC_ID),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=1,
        event_timestamp_ms=2,
        writer_id="w",
        writer_epoch=epoch,
        segment_leader_epochs=((0, start),),
        segment_size_in_bytes=10,
        state=SegmentState.COPY_SEGMENT_FINISHED,
        data_object_key=keys.data,
        index_object_key=keys.index,
        segment_format_version=2,
        record_count=end - start + 1,
        index_crc32=5,
        index_size_in_bytes=4,
    )


def store(
    storage: FilesystemChunkStorage,
    seg: RemoteLogSegmentMetadata,
    *,
    data: bool = True,
    index: bool = True,
    manifest: bytes | None = b"",
) -> None:
    if data:
        storage.create(seg.data_object_key, [b"d" * seg.segment_size_in_bytes])
    if index:
        storage.create(seg.index_object_key, [b"i" * seg.index_size_in_bytes])
    if manifest is not None:
        body = manifest or encode_manifest(SegmentManifest(seg, uuid.uuid4()))
        storage.create(manifest_key(seg.data_object_key), [body])


def test_inventory_and_manifests(tmp_path: Path) -> None:
    storage = FilesystemChunkStorage(tmp_path)
    good = [segment(0, 0, 99), segment(0, 100, 199), segment(1, 0, 9)]
    for seg in good:
        store(storage, seg)
    no_manifest = segment(0, 200, 299)
    store(storage, no_manifest, manifest=None)
    no_index = segment(1, 10, 19)
    store(storage, no_index, index=False)
    corrupt = segment(1, 20, 29)
    store(storage, corrupt, manifest=b"KTSM" + b"\x00" * 40)
    wrong_size = segment(1, 30, 39)
    store(storage, wrong_size, manifest=encode_manifest(SegmentManifest(wrong_size, None)))
    storage.delete(wrong_size.data_object_key)
    storage.create(wrong_size.data_object_key, [b"short"])
    elsewhere = segment(1, 40, 49)
    store(storage, elsewhere, manifest=encode_manifest(SegmentManifest(good[0], None)))
    storage.create("pre/orders-x/restores/c/r/0/00000000000000000010.offsetmap", [b"map"])
    storage.create(good[0].data_object_key + "-keys", [b"filter"])  # a key filter: optional, its own slot

    inventory = take_inventory((info.key, info.size) for info in storage.list("pre/"))
    assert [o.data_key for o in inventory.without_manifest] == [no_manifest.data_object_key]
    assert [o.data_key for o in inventory.manifest_without_objects] == [no_index.data_object_key]
    assert inventory.other_objects == 1
    sizes = {o.data_key: o.key_filter_size for o in inventory.complete}
    assert sizes[good[0].data_object_key] == 6 and sizes[good[1].data_object_key] is None
    manifests, problems = read_manifests(storage, KEYS, inventory.complete, threads=4)
    assert sorted(m.segment.segment_id.id for m in manifests) == sorted(s.segment_id.id for s in good)
    assert {p.key: p.what.split(":")[0].split(" (")[0] for p in problems} == {
        manifest_key(corrupt.data_object_key): "does not decode",
        manifest_key(wrong_size.data_object_key): "sizes differ",
        manifest_key(elsewhere.data_object_key): "names other objects",
    }
