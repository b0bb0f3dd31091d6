from __future__ import annotations

from processor.lifecycle.multipart_sweep import abandoned, sweep_multipart_uploads
from processor.storage.chunk_storage import MultipartUpload


class Store:
    def __init__(self, uploads: list[MultipartUpload]) -> None:
        self.uploads = uploads
        self.aborted: list[str] = []

    def list_multipart_uploads(self, prefix: str) -> list[MultipartUpload]:
        return [u for u in self.uploads if u.key.startswith(prefix)]

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        self.aborted.append(upload_id)


def test_only_uploads_older_than_the_threshold_are_abandoned() -> None:
    ups = [
        MultipartUpload("p/a", "1", 0),
        MultipartUpload("p/b", "2", 9_000),
        MultipartUpload("p/c", "3", 5_000),
    ]
    assert [u.upload_id for u in abandoned(ups, 10_000, 5_000)] == ["1", "3"]


def test_sweep_aborts_old_uploads_under_the_prefix_only() -> None:
    store = Store([MultipartUpload("p/a", "old", 0), MultipartUpload("q/a", "other", 0)])
    assert sweep_multipart_uploads(store, "p/", 60_000) == 1
    assert store.aborted == ["old"]
