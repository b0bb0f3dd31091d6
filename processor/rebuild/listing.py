"""The listing of a rebuild: every object under the prefix, listed in parallel.

A store that lists a folder's own entries (S3's delimiter listing) is walked two levels down (the
topic folders ``{topic}-{topic_id}/``, then their partition folders and side folders), and each
folder found there is listed whole, ``threads`` at a time: one sequential listing of a bucket of
millions of objects is a request after a request, 1,000 keys each. The objects met on the way (in
the prefix itself, in a topic folder) are listed too, so the union is what one listing of the
prefix gives, in another order. Any other store is listed once.

:func:`walk` stops after the two levels: the rebuild lists the partition folders itself, a source
partition's folders at a time (processor/rebuild/stream.py), so that it never holds more than one
partition's listing.
"""

from __future__ import annotations

from collections.abc import Iterator

from processor.rebuild.parallel import bounded_map
from processor.storage.chunk_storage import ChunkInfo, ChunkStorage

LIST_THREADS = 8
FOLDER_DEPTH = 2  # topic folders, then partition folders
WINDOW_PER_THREAD = 2  # folders listed ahead of the one taken


def walk(storage: ChunkStorage, root: str, threads: int = LIST_THREADS) -> tuple[list[str], list[ChunkInfo]]:
    """The folders ``FOLDER_DEPTH`` levels below ``root`` (a store that lists folders only) and the
    objects met above them."""
    folders = [root]
    loose: list[ChunkInfo] = []
    for _level in range(FOLDER_DEPTH):
        below: list[str] = []
        walked = bounded_map(storage.list_folders, folders, threads, len(folders), "rebuild-list")
        for found, chunks in walked:
            below += found
            loose += chunks
        folders = below
    return folders, loose


def list_in_parallel(storage: ChunkStorage, root: str, threads: int = LIST_THREADS) -> Iterator[ChunkInfo]:
    """Every object under ``root``, in no particular order."""
    if not storage.lists_folders:
        yield from storage.list(root)
        return
    folders, loose = walk(storage, root, threads)
    yield from loose
    for chunks in bounded_map(
        lambda folder: list(storage.list(folder)),
        folders,
        threads,
        max(1, threads) * WINDOW_PER_THREAD,
        "rebuild-list",
    ):
        yield from chunks
