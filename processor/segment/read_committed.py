"""What a read_committed consumer sees of a fetched record set: the archive keeps exactly that.

Pure. Follows Kafka's consumer (and aiokafka's ``PartitionRecords``): a fetch response lists the
aborted transactions overlapping it as ``(producer_id, first_offset)``; walking the batches in
order, a producer becomes "aborted" once a batch at or after its ``first_offset`` is reached and
stops being aborted at its abort marker. Transactional batches of an aborted producer are dropped,
control batches (commit/abort markers) are always dropped. Dropped batches keep their offsets in
coverage: the segment assembler is told to cover them, so remote coverage stays contiguous.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence

from aiokafka.record.default_records import DefaultRecordBatch

from processor.errors import FormatError
from processor.segment.entries_v2 import BatchHeader

_CONTROL_KEY = struct.Struct(">hh")  # version, type (0 abort, 1 commit)
ABORT = 0


def is_abort_marker(batch: memoryview | bytes) -> bool:
    try:
        record = next(iter(DefaultRecordBatch(bytes(batch))))
    except StopIteration:
        return False
    except Exception as exc:  # aiokafka's own errors for bad bytes
        raise FormatError(f"control batch does not decode: {exc!r}") from exc
    key = record.key
    if key is None or len(key) < _CONTROL_KEY.size:
        raise FormatError("control record without a valid key")
    return bool(_CONTROL_KEY.unpack_from(key)[1] == ABORT)


def committed(
    batches: Iterable[tuple[BatchHeader, memoryview]], aborted: Sequence[tuple[int, int]]
) -> Iterator[tuple[BatchHeader, memoryview, bool]]:
    """Every batch with ``keep``: False for control batches and batches of aborted transactions."""
    pending = sorted(aborted, key=lambda a: a[1])
    aborting: set[int] = set()
    i = 0
    for header, batch in batches:
        while i < len(pending) and pending[i][1] <= header.base_offset:
            aborting.add(pending[i][0])
            i += 1
        if header.is_control:
            if header.producer_id in aborting and is_abort_marker(batch):
                aborting.discard(header.producer_id)
            yield header, batch, False
        elif header.is_transactional and header.producer_id in aborting:
            yield header, batch, False
        else:
            yield header, batch, True
