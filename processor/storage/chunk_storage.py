"""The storage contract, after Pravega's ChunkStorageProvider.

Pravega's provider has create, write, openRead/openWrite, read, delete, list, stat and optional
concat/truncate. Object stores cannot append, and segments here are immutable once sealed, so
``create`` takes the whole content and writes the chunk exactly once (Pravega's create + write +
seal); it is conditional, so two writers can never overwrite one object. Everything else maps
one to one. Only the implementations (``s3.py``, ``filesystem.py``) import an SDK.

Errors: ``ObjectNotFoundError`` (missing), ``ObjectExistsError`` (conditional create lost),
``InvalidRangeError`` (read outside the object), ``StorageError`` (anything else; ``retriable``).
``delete`` of a missing object is not an error (deletes are idempotent, as in Kafka's RSM);
``delete_many`` deletes several, in one request where the store has a batch delete; what it could not
delete is a StorageError naming each key.

Multipart uploads that a crash left behind (stored, billed, part of no object) are listed and aborted
through the contract too (``list_multipart_uploads``, ``abort_multipart_upload``); a backend that
writes each chunk in one step has none to list.
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from processor.errors import ObjectNotFoundError, StorageError

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class ChunkInfo:
    key: str
    size: int
    modified_ms: int | None = None  # when the object was written (listings give it; None: unknown)


@dataclass(frozen=True, slots=True)
class MultipartUpload:
    """An upload that was started and neither completed nor aborted."""

    key: str
    upload_id: str
    initiated_ms: int


class ChunkStorage(abc.ABC):
    """A flat namespace of immutable chunks (objects) addressed by key."""

    supports_concat: bool = False
    # list_folders answers from one request per page of the folder's own entries (S3's delimiter
    # listing); without it, a folder's listing lists everything under it
    lists_folders: bool = False

    @abc.abstractmethod
    def create(self, key: str, parts: Sequence[Buffer]) -> ChunkInfo:
        """Write a new chunk whose content is ``parts`` concatenated; fail if ``key`` exists."""

    @abc.abstractmethod
    def read(self, key: str, offset: int, length: int) -> bytes:
        """Read ``length`` bytes from ``offset``; the whole range must lie inside the chunk."""

    @abc.abstractmethod
    def stat(self, key: str) -> ChunkInfo | None:
        """Size of the chunk, or None if it does not exist."""

    def exists(self, key: str) -> bool:
        return self.stat(key) is not None

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove the chunk; a missing chunk is not an error."""

    def delete_many(self, keys: Iterable[str]) -> None:
        """Remove several chunks; missing ones are not an error. Stores with a batch delete send many
        keys in one request (S3's DeleteObjects: up to 1,000); by default, one ``delete`` each. Raises
        StorageError naming the keys that are not deleted (the others are)."""
        failed: dict[str, StorageError] = {}
        for k in keys:
            try:
                self.delete(k)
            except StorageError as exc:  # gathered, raised below with every key that failed
                failed[k] = exc
        if failed:
            raise not_deleted(failed)

    @abc.abstractmethod
    def list(self, prefix: str) -> Iterator[ChunkInfo]:
        """Chunks whose key starts with ``prefix``, in key order."""

    def list_folders(self, prefix: str) -> tuple[builtins.list[str], builtins.list[ChunkInfo]]:
        """The folders directly under ``prefix`` (each ending in ``/``) and the chunks directly in
        it, each in key order: what a listing with the delimiter ``/`` gives (optional: by default
        from a listing of everything under ``prefix``)."""
        folders: dict[str, None] = {}
        chunks: builtins.list[ChunkInfo] = []
        for info in self.list(prefix):
            slash = info.key.find("/", len(prefix))
            if slash < 0:
                chunks.append(info)
            else:
                folders.setdefault(info.key[: slash + 1])
        return sorted(folders), chunks

    @abc.abstractmethod
    def list_multipart_uploads(self, prefix: str) -> builtins.list[MultipartUpload]:
        """Multipart uploads under ``prefix`` that were started and neither completed nor aborted."""

    @abc.abstractmethod
    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        """Abort one multipart upload; one that is already gone is not an error."""

    @abc.abstractmethod
    def check_bucket(self) -> None:
        """Fail fast with a clear StorageError when the store (bucket, root directory) cannot be
        reached or used."""

    def missing_permissions(self) -> builtins.list[str]:
        """The permissions a worker needs on the store that its credentials are known to lack, each
        named as the store names it (GCS's IAM permissions, a SAS's grants); empty when none is
        missing or the store cannot tell without writing (optional: by default, empty)."""
        return []

    def concat(self, target: str, sources: Sequence[str]) -> ChunkInfo:
        """Create ``target`` as the concatenation of existing chunks (optional, see supports_concat)."""
        raise NotImplementedError(f"{type(self).__name__} does not support concat")

    def read_all(self, key: str) -> bytes:
        info = self.stat(key)
        if info is None:
            raise ObjectNotFoundError(key)
        return self.read(key, 0, info.size) if info.size else b""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients and threads."""


class NotDeletedError(StorageError):
    """What ``delete_many`` could not delete: ``errors`` names each key left with its own error (every
    other key was deleted), so a caller deleting several segments at once knows which are done."""

    def __init__(self, message: str, errors: dict[str, StorageError]) -> None:
        super().__init__(message, retriable=all(e.retriable for e in errors.values()))
        self.errors = errors


def not_deleted(failed: dict[str, StorageError]) -> NotDeletedError:
    """One error for the keys a batch delete left, each named with its own error (retriable when
    every one of them is)."""
    shown = "; ".join(f"{k}: {e}" for k, e in builtins.list(failed.items())[:5])
    more = f" (and {len(failed) - 5} more)" if len(failed) > 5 else ""
    return NotDeletedError(f"{len(failed)} objects not deleted: {shown}{more}", dict(failed))


def split_parts(parts: Sequence[Buffer], part_size: int) -> list[list[memoryview]]:
    """Regroup buffers into upload parts of ``part_size`` bytes (the last may be smaller), no copies."""
    groups: list[list[memoryview]] = [[]]
    filled = 0
    for p in parts:
        view = memoryview(p).cast("B")
        while len(view):
            take = min(len(view), part_size - filled)
            groups[-1].append(view[:take])
            view = view[take:]
            filled += take
            if filled == part_size:
                groups.append([])
                filled = 0
    if not groups[-1]:
        groups.pop()
    return groups
