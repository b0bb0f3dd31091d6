"""The erasure audit trail: what each run of ``processor erase`` did, kept in the bucket beside the
archive (``{prefix}/erasures=audit/{topic}/{started_ms:013d}-{erasure id}-{stage}.json``, a folder
name no topic can have). Pure: the records are built here, written by the command.

A run writes a ``started`` record before it rewrites anything and a ``finished`` record at its end,
so a run that was killed is visible as one without a ``finished``. Both name the keys only by keyed
hashes, never in the clear: ``BLAKE2b-256(key, key = a key derived from PROCESSOR_ERASURE_SECRET,
person "ktp-erased-key")``, hex. Whoever holds the secret can show that a given key was erased (hash
it again and look); without it, the trail does not tell which keys were erased, nor can a guessed
key be tested against it.

Record layout (JSON, version 1)::

    {"version": 1, "stage": "started" | "finished", "erasure_id": str, "topic": str,
     "started_ms": int, "finished_ms": int | null, "key_hash": "blake2b-256-keyed",
     "keys": [hex digest, ...]  (sorted, each key once), "key_count": int,
     "partitions": [{"partition": int, "segments": int, "skipped_by_filter": int, "scanned": int,
                     "rewritten": int, "records_removed": int, "failed": int}, ...]  (finished only),
     "records_removed": int, "complete": bool}   (finished only; complete: nothing failed)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from processor.rewrite.erase_runner import EraseReport

AUDIT_VERSION = 1
AUDIT_FOLDER = "erasures=audit"
_PERSON = b"ktp-erased-key"


def key_digest(key: bytes, audit_key: bytes) -> str:
    return hashlib.blake2b(key, digest_size=32, key=audit_key, person=_PERSON).hexdigest()


def audit_object_key(prefix: str, topic: str, started_ms: int, erasure_id: str, stage: str) -> str:
    name = f"{AUDIT_FOLDER}/{topic}/{started_ms:013d}-{erasure_id}-{stage}.json"
    return f"{prefix}/{name}" if prefix else name


def audit_record(
    *,
    stage: str,
    erasure_id: str,
    topic: str,
    keys: Iterable[bytes],
    audit_key: bytes,
    started_ms: int,
    finished_ms: int | None = None,
    reports: Sequence[EraseReport] = (),
) -> bytes:
    digests = sorted({key_digest(k, audit_key) for k in keys})
    record: dict[str, Any] = {
        "version": AUDIT_VERSION,
        "stage": stage,
        "erasure_id": erasure_id,
        "topic": topic,
        "started_ms": started_ms,
        "finished_ms": finished_ms,
        "key_hash": "blake2b-256-keyed",
        "keys": digests,
        "key_count": len(digests),
    }
    if stage == "finished":
        record["partitions"] = [
            {
                "partition": r.tp.partition,
                "segments": r.segments,
                "skipped_by_filter": r.skipped_by_filter,
                "scanned": r.scanned,
                "rewritten": r.rewritten,
                "records_removed": r.records_removed,
                "failed": len(r.failed),
            }
            for r in reports
        ]
        record["records_removed"] = sum(r.records_removed for r in reports)
        record["complete"] = not any(r.failed for r in reports)
    return json.dumps(record, sort_keys=True).encode()
