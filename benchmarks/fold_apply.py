"""The follower's apply in process, without a broker: the records of the follower section
(``publish_metadata``: 100 source partitions, each a chain of segments published as STARTED then
FINISHED, spread over 4 metadata partitions) applied to a fresh :class:`MetadataCache` in consumed
batches of 10,000, beside a bare decode of the same messages. CPU time of this process
(``time.process_time``), best of ``--rounds``; ``--profile FILE`` writes a cProfile of one more
apply round.

    python -m benchmarks.fold_apply [--records 50000] [--rounds 3] [--profile out.prof]

Runs against whichever tree it is started in (``cd /work/base && .venv/bin/python
/work/main/benchmarks/fold_apply.py`` measures another checkout's code with the same records).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # started as a file: the tree of the working directory
    sys.path.insert(0, os.getcwd())

from benchmarks.reads import _segment
from processor.follower.cache_writes import RawMessage
from processor.follower.metadata_cache import MetadataCache
from processor.kafka.partition import TopicPartition
from processor.metadata import codec
from processor.metadata.codec import encode_value, metadata_partition_for, record_key
from processor.metadata.model import SegmentState
from processor.runtime import tune_gc

BATCH = 10_000
PARTS = 4


def messages(records: int) -> list[RawMessage]:
    """The follower section's records, in the order a consumer of each metadata partition sees them
    (partition after partition)."""
    by_part: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(PARTS)}
    tps = [TopicPartition("orders", p) for p in range(100)]
    next_start = dict.fromkeys(tps, 0)
    for i in range(records // 2):
        tp = tps[i % len(tps)]
        seg = _segment(tp, next_start[tp], next_start[tp] + 999, SegmentState.COPY_SEGMENT_STARTED)
        next_start[tp] += 1000
        for state in (SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED):
            rec = seg.with_state(state, 2)
            by_part[metadata_partition_for(tp, PARTS)].append((record_key(rec), encode_value(rec)))
    out: list[RawMessage] = []
    for p, items in by_part.items():
        out.extend(RawMessage(p, offset, key, value) for offset, (key, value) in enumerate(items))
    return out


def _batches(msgs: list[RawMessage]) -> list[list[RawMessage]]:
    return [msgs[i : i + BATCH] for i in range(0, len(msgs), BATCH)]


def apply_round(msgs: list[RawMessage], workdir: Path) -> float:
    """CPU-seconds to apply every message to a new cache; every record must be accepted."""
    cache = MetadataCache(Path(tempfile.mkdtemp(prefix="fold-apply-", dir=workdir)))
    batches = _batches(msgs)
    gc.collect()
    cpu0 = time.process_time()
    applied = sum(cache.apply_batch(batch).applied for batch in batches)
    cpu = time.process_time() - cpu0
    cache.close()
    assert applied == len(msgs), f"{applied} of {len(msgs)} records applied"
    return cpu


def decode_round(msgs: list[RawMessage]) -> float:
    """CPU-seconds of the bare decode of the same batches (no fold, no store)."""
    batch_decode = getattr(codec, "decode_messages", None)
    batches = [[(m.key, m.value) for m in batch] for batch in _batches(msgs)]
    gc.collect()
    cpu0 = time.process_time()
    for batch in batches:
        if batch_decode is not None:
            batch_decode(batch)
        else:
            for key, value in batch:
                codec.decode_message(key, value)
    return time.process_time() - cpu0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fold_apply", description=__doc__)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", default=None, help="write a cProfile of one more apply round here")
    args = parser.parse_args(argv)
    tune_gc()  # as the follower's process does (processor/cli.py)
    msgs = messages(args.records)
    with tempfile.TemporaryDirectory(prefix="fold-apply-") as tmp:
        workdir = Path(tmp)
        apply_round(msgs[: min(len(msgs), 2 * BATCH)], workdir)  # warm: imports, compiled kernels
        decode_round(msgs[: min(len(msgs), 2 * BATCH)])
        applies, decodes = [], []
        for _ in range(args.rounds):
            applies.append(apply_round(msgs, workdir))
            decodes.append(decode_round(msgs))
        n = len(msgs)
        best_apply, best_decode = min(applies), min(decodes)
        print(f"load average {os.getloadavg()[0]:.2f}, {n:,} records, batches of {BATCH:,}")
        print(
            f"apply:  {best_apply / n * 1e6:6.2f} us a record, {n / best_apply:9,.0f} rec/CPU-s "
            f"(rounds {', '.join(f'{a / n * 1e6:.2f}' for a in applies)} us)"
        )
        print(
            f"decode: {best_decode / n * 1e6:6.2f} us a record, {n / best_decode:9,.0f} rec/CPU-s "
            f"(rounds {', '.join(f'{d / n * 1e6:.2f}' for d in decodes)} us)"
        )
        if args.profile:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
            apply_round(msgs, workdir)
            profiler.disable()
            profiler.dump_stats(args.profile)
            print(f"profile written to {args.profile}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
