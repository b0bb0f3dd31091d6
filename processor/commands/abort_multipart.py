"""``processor abort-multipart [--older-than-ms N]``: abort abandoned multipart uploads under the
bucket prefix now (workers also do it at start and every few minutes)."""

from __future__ import annotations

import argparse

from processor.config import load_settings
from processor.errors import ConfigError
from processor.lifecycle.multipart_sweep import sweep_multipart_uploads
from processor.segment.object_keys import ObjectKeyFactory
from processor.wiring.lifecycle import bucket_prefix
from processor.wiring.storage import build_storage


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("abort-multipart", help="abort abandoned multipart uploads under the prefix")
    p.add_argument(
        "--older-than-ms",
        type=int,
        default=None,
        help="only uploads started this long ago (default PROCESSOR_MULTIPART_ABORT_AFTER_MS)",
    )
    p.set_defaults(func=cmd_abort_multipart)


def cmd_abort_multipart(args: argparse.Namespace) -> int:
    settings = load_settings()
    older = settings.multipart_abort_after_ms if args.older_than_ms is None else args.older_than_ms
    if older < 0:
        raise ConfigError("--older-than-ms must be >= 0")
    storage = build_storage(settings)
    try:
        storage.check_bucket()
        aborted = sweep_multipart_uploads(
            storage, ObjectKeyFactory(settings.s3_prefix), bucket_prefix(settings), older
        )
    finally:
        storage.close()
    print(f"aborted {aborted} multipart uploads")
    return 0
