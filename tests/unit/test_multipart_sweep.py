from __future__ import annotations

import uuid

from processor.lifecycle.multipart_sweep import abandoned, sweep_multipart_uploads
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import MultipartUpload


class Store:
    def __init__(self, uploads: list[MultipartUpload]) -> None:
        self.uploads = uploads
        self.aborted: list[str] = []

    def list_multipart_uploads(self, prefix: str) -> list[MultipartUpload]:
        return [u for u in self.uploads if u.key.startswith(prefix)]

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        self.aborted.append(upload_id)


KEYS = ObjectKeyFactory("p")


def key(n: int, topic_id: str | None = None) -> str:
    return KEYS.segment("orders", 0, n, uuid.UUID(int=n), 1, topic_id).data


def test_only_uploads_older_than_the_threshold_are_abandoned() -> None:
    ups = [
        MultipartUpload(key(1), "1", 0),
        MultipartUpload(key(2), "2", 9_000),
        MultipartUpload(key(3) + "-index", "3", 5_000),
    ]
    assert [u.upload_id for u in abandoned(ups, 10_000, 5_000, KEYS)] == ["1", "3"]


def test_sweep_aborts_old_uploads_of_the_projects_objects_under_the_prefix_only() -> None:
    store = Store(
        [
            MultipartUpload(key(1), "old", 0),
            MultipartUpload(key(2, str(uuid.UUID(int=7))), "old-with-id", 0),
            MultipartUpload("q/a", "other-prefix", 0),
            MultipartUpload("p/backups/db.tar", "another-app", 0),
            MultipartUpload("p/orders/0/notes.txt", "not-a-segment", 0),
        ]
    )
    assert sweep_multipart_uploads(store, KEYS, "p/", 60_000) == 2
    assert store.aborted == ["old", "old-with-id"]


def test_with_an_empty_prefix_other_applications_uploads_are_left_alone() -> None:
    keys = ObjectKeyFactory("")
    ours = keys.segment("orders", 3, 0, uuid.UUID(int=1), 1).data
    store = Store([MultipartUpload(ours, "ours", 0), MultipartUpload("exports/2026/big.csv", "theirs", 0)])
    assert sweep_multipart_uploads(store, keys, "", 60_000) == 1 and store.aborted == ["ours"]
