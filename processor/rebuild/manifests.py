"""Read the complete segments' manifests, in parallel, and check them against the listing.

One small GET per segment of the size the listing gave (no HEAD first; a manifest whose size
changed since the listing is read whole, as before), ``threads`` at a time and at most
``IN_FLIGHT_PER_THREAD`` a thread queued ahead of the results taken (the reads of a listing of
millions are not all queued at once). A manifest counts only if it decodes (magic,
version, CRC, a COPY_SEGMENT_FINISHED body), names the very objects it sits next to (keys this
prefix's key factory would build for the segment's topic and partition) and agrees with the listing
on their sizes; anything else is a problem, reported and never served. A manifest gone between the
listing and the read is a problem too (a deletion ran meanwhile); an unreachable bucket is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from processor.errors import FormatError, InvalidNameError, InvalidRangeError, ObjectNotFoundError
from processor.metadata.manifest import SegmentManifest, decode_manifest
from processor.rebuild.inventory import SegmentObjects
from processor.rebuild.parallel import bounded_map
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage

READ_THREADS = 16
IN_FLIGHT_PER_THREAD = 4


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


def _body(storage: ChunkStorage, objects: SegmentObjects) -> tuple[bytes, bool]:
    """The manifest's bytes, and whether they were read by the listed size alone."""
    key, size = objects.manifest_key, objects.manifest_size
    if size:
        try:
            return storage.read(key, 0, size), True
        except InvalidRangeError:  # shorter than listed: replaced since the listing
            pass
    return storage.read_all(key), False


def read_one(
    storage: ChunkStorage, keys: ObjectKeyFactory, objects: SegmentObjects
) -> SegmentManifest | Problem:
    key = objects.manifest_key
    try:
        body, by_listing = _body(storage, objects)
        try:
            manifest = decode_manifest(body, where=key)
        except FormatError:
            if not by_listing:
                raise
            # longer than listed (replaced since the listing): judged on the whole object, as before
            manifest = decode_manifest(storage.read_all(key), where=key)
    except ObjectNotFoundError:
        return Problem(key, "deleted after the listing")
    except FormatError as exc:
        return Problem(key, f"does not decode: {exc}")
    wrong = _check(objects, manifest, keys)
    return manifest if wrong is None else Problem(key, wrong)


def read_in_order(
    storage: ChunkStorage,
    keys: ObjectKeyFactory,
    complete: Iterable[SegmentObjects],
    threads: int = READ_THREADS,
) -> Iterator[SegmentManifest | Problem]:
    """Each segment's manifest or problem, in the order of ``complete``, read ``threads`` at a time
    with at most ``threads * IN_FLIGHT_PER_THREAD`` reads queued or unclaimed. A storage error is
    raised here, never lost; the reads not started yet are cancelled."""
    return bounded_map(
        lambda objects: read_one(storage, keys, objects),
        complete,
        threads,
        max(1, threads) * IN_FLIGHT_PER_THREAD,
        "rebuild-read",
    )


def read_manifests(
    storage: ChunkStorage,
    keys: ObjectKeyFactory,
    complete: Iterable[SegmentObjects],
    threads: int = READ_THREADS,
    on_read: Callable[[int], None] = lambda _n: None,
) -> tuple[list[SegmentManifest], list[Problem]]:
    manifests: list[SegmentManifest] = []
    problems: list[Problem] = []
    for result in read_in_order(storage, keys, complete, threads):  # in listing order
        on_read(1)
        if isinstance(result, Problem):
            problems.append(result)
        else:
            manifests.append(result)
    return manifests, problems
