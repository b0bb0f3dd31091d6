"""ChunkStorage on a local directory (tests, single-node setups, NFS).

A chunk is written whole to a temporary file and linked into place, so there are no multipart
uploads: none to list, none to abort.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from processor.errors import (
    InvalidNameError,
    InvalidRangeError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
)
from processor.storage.chunk_storage import Buffer, ChunkInfo, ChunkStorage, MultipartUpload


class FilesystemChunkStorage(ChunkStorage):
    supports_concat = True

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or key.startswith("/") or any(p in {"", ".", ".."} for p in parts) or "\x00" in key:
            raise InvalidNameError(f"invalid object key {key!r}")
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root):
            raise InvalidNameError(f"object key {key!r} escapes the storage root")
        return path

    def create(self, key: str, parts: Sequence[Buffer]) -> ChunkInfo:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        size = 0
        try:
            with os.fdopen(fd, "wb") as f:
                for p in parts:
                    size += f.write(p)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)  # atomic, and fails if the key exists: a conditional create
            except FileExistsError:
                raise ObjectExistsError(key) from None
        except OSError as exc:
            raise StorageError(f"cannot write {key}: {exc}") from exc
        finally:
            os.unlink(tmp)
        return ChunkInfo(key, size)

    def read(self, key: str, offset: int, length: int) -> bytes:
        path = self._path(key)
        try:
            with path.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                if offset < 0 or length < 0 or offset + length > size:
                    raise InvalidRangeError(key, f"{offset}+{length} outside {size} bytes")
                f.seek(offset)
                return f.read(length)
        except FileNotFoundError:
            raise ObjectNotFoundError(key) from None
        except OSError as exc:
            raise StorageError(f"cannot read {key}: {exc}") from exc

    def stat(self, key: str) -> ChunkInfo | None:
        try:
            st = self._path(key).stat()
        except FileNotFoundError:
            return None
        return ChunkInfo(key, st.st_size, st.st_mtime_ns // 1_000_000)

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()

    def list(self, prefix: str) -> Iterator[ChunkInfo]:
        keys: list[ChunkInfo] = []
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if name.startswith(".tmp-"):
                    continue
                full = Path(dirpath) / name
                key = full.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    st = full.stat()
                    keys.append(ChunkInfo(key, st.st_size, int(st.st_mtime * 1000)))
        yield from sorted(keys, key=lambda c: c.key)

    def concat(self, target: str, sources: Sequence[str]) -> ChunkInfo:
        contents = [self.read_all(s) for s in sources]
        return self.create(target, contents)

    def list_multipart_uploads(self, prefix: str) -> builtins.list[MultipartUpload]:
        return []

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        self._path(key)  # a bad key is still bad input; there is never an upload to abort

    def check_bucket(self) -> None:
        if not self.root.is_dir() or not os.access(self.root, os.W_OK):
            raise StorageError(f"storage root {self.root} is not a writable directory")
