"""The rebuild's parallel listing lists what one listing of the prefix lists."""

from __future__ import annotations

from pathlib import Path

from processor.rebuild.listing import list_in_parallel
from processor.storage.filesystem import FilesystemChunkStorage
from tests.unit.test_rebuild_inventory import segment, store


class _Folders(FilesystemChunkStorage):
    lists_folders = True  # walked by folders, each answered by the contract's default list_folders


def test_the_parallel_listing_lists_every_object_once(tmp_path: Path) -> None:
    storage = _Folders(tmp_path)
    for partition in range(5):
        for n in range(4):
            store(storage, segment(partition, n * 10, n * 10 + 9))
    storage.create("pre/top-level-object", [b"x"])
    storage.create("pre/orders-x/in-a-topic-folder", [b"x"])
    storage.create("pre/orders-x/restores/c/r/0/00000000000000000010.offsetmap", [b"map"])
    storage.create("pre/snapshots/0/deep/er/still", [b"s"])
    storage.create("prefixed-but-not-under/x", [b"no"])
    once = sorted((i.key, i.size) for i in storage.list("pre/"))
    assert len(once) == 5 * 4 * 3 + 4
    for threads in (1, 3):
        walked = [(i.key, i.size) for i in list_in_parallel(storage, "pre/", threads=threads)]
        assert sorted(walked) == once
    assert sorted((i.key, i.size) for i in list_in_parallel(FilesystemChunkStorage(tmp_path), "pre/")) == once


def test_list_folders_by_default(tmp_path: Path) -> None:
    storage = FilesystemChunkStorage(tmp_path)
    for key in ("a/1", "a/b/2", "a/c/d/3", "a/e/4", "ab/5"):
        storage.create(key, [b"x"])
    folders, chunks = storage.list_folders("a/")
    assert folders == ["a/b/", "a/c/", "a/e/"]
    assert [c.key for c in chunks] == ["a/1"]
