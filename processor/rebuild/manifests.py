"""Read the complete segments' manifests, in parallel, and check them against the listing.

One small GET per segment, ``threads`` at a time. A manifest counts only if it decodes (magic,
version, CRC, a COPY_SEGMENT_FINISHED body), names the very objects it sits next to (keys this
prefix's key factory would build for the segment's topic and partition) and agrees with the listing
on their sizes; anything else is a problem, reported and never served. A manifest gone between the
listing and the read is a problem too (a deletion ran meanwhile); an unreachable bucket is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from processor.errors import FormatError, InvalidNameError, ObjectNotFoundError
from processor.metadata.manifest import SegmentManifest, decode_manifest
from processor.rebuild.inventory import SegmentObjects
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage

READ_THREADS = 16


@dataclass(frozen=True, slots=True)
class Problem:
    key: str
    what: str


def _check(objects: SegmentObjects, manifest: SegmentManifest, keys: ObjectKeyFactory) -> str | None:
    segment = manifest.segment
    tp = segment.topic_partition
    if (segment.data_object_key, segment.index_object_key) != (objects.data_key, objects.index_key):
        return f"names other objects ({segment.data_object_key})"
    try:
        keys.check_segment_key(segment.data_object_key, tp.topic, tp.partition)
    except InvalidNameError as exc:
        return str(exc)
    if (objects.data_size, objects.index_size) != (
        segment.segment_size_in_bytes,
        segment.index_size_in_bytes,
    ):
        return (
            f"sizes differ: data {objects.data_size} listed, {segment.segment_size_in_bytes} in the "
            "manifest; "
            f"index {objects.index_size} listed, {segment.index_size_in_bytes} in the manifest"
        )
    return None


def _read_one(
    storage: ChunkStorage, keys: ObjectKeyFactory, objects: SegmentObjects
) -> SegmentManifest | Problem:
    key = objects.manifest_key
    try:
        manifest = decode_manifest(storage.read_all(key), where=key)
    except ObjectNotFoundError:
        return Problem(key, "deleted after the listing")
    except FormatError as exc:
        return Problem(key, f"does not decode: {exc}")
    wrong = _check(objects, manifest, keys)
    return manifest if wrong is None else Problem(key, wrong)


def read_manifests(
    storage: ChunkStorage,
    keys: ObjectKeyFactory,
    complete: list[SegmentObjects],
    threads: int = READ_THREADS,
    on_read: Callable[[int], None] = lambda _n: None,
) -> tuple[list[SegmentManifest], list[Problem]]:
    manifests: list[SegmentManifest] = []
    problems: list[Problem] = []
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rebuild-read") as pool:
        results: Iterator[SegmentManifest | Problem] = pool.map(
            lambda o: _read_one(storage, keys, o), complete
        )
        for result in results:  # in listing order; a storage error is raised here, never lost
            on_read(1)
            if isinstance(result, Problem):
                problems.append(result)
            else:
                manifests.append(result)
    return manifests, problems
