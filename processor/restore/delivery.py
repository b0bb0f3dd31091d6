"""Where the restored records landed: target offsets from a few delivery reports. Pure.

A delivery report per record would cost the restore about a third of its speed (a Python call per
record). So the records of one archived batch form a *span*, and only the span's first and last
record report their target offset. Records of one producer reach a partition in produce order, at
strictly increasing offsets, so when ``last - first + 1`` equals the span's record count the span
sits at ``first..last`` exactly. Otherwise another producer wrote into the target partition between
them (librdkafka may split a span over several produce requests); then the span's offsets are read
back from the target's log: the batches in ``first..last`` written by the producer of the batch at
``first`` (ours) hold the span's records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from processor.errors import ProcessorError
from processor.restore.offset_map import OffsetRun, runs_from_pairs

# (target partition, first offset, last offset) -> the offsets our producer wrote in that range
ReadBack = Callable[[int, int, int], list[int]]


class DeliveryMismatchError(ProcessorError):
    """Delivery reports or the target's log do not account for the records produced."""


class DeliveryFailedError(ProcessorError):
    """A record was not delivered; ``error`` is the producer's error (the transaction must abort)."""

    def __init__(self, error: Any) -> None:
        super().__init__(f"delivery failed: {error}")
        self.error = error


class Span:
    """Records produced in a row to one target partition from one archived batch, with their
    source offsets (a range when the batch has no offset gaps)."""

    __slots__ = ("count", "error", "first", "last", "source_offsets", "source_partition")
    # callbacks get librdkafka's (KafkaError | None, Message); only the offset is read

    def __init__(self, source_partition: int, source_offsets: range | list[int]) -> None:
        self.source_partition = source_partition
        self.source_offsets = source_offsets
        self.count = len(source_offsets)
        self.first: int | None = None
        self.last: int | None = None
        self.error: Any = None

    def on_first(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.error = err
        else:
            self.first = msg.offset()

    def on_last(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.error = err
        else:
            self.last = msg.offset()

    def on_only(self, err: Any, msg: Any) -> None:
        self.on_first(err, msg)
        self.on_last(err, msg)


def offsets_in_range(batches: Sequence[tuple[int, int, int]], first: int, last: int) -> list[int]:
    """Offsets in ``first..last`` of the batches ``(base offset, last offset, producer id)`` that
    the producer of the batch holding ``first`` wrote (a fresh producer batch has no offset gaps)."""
    ours = next((pid for base, end, pid in batches if base <= first <= end), None)
    if ours is None:
        raise DeliveryMismatchError(f"no batch of the target holds offset {first}")
    out: list[int] = []
    for base, end, pid in batches:
        if pid == ours and end >= first and base <= last:
            out.extend(range(max(base, first), min(end, last) + 1))
    return out


def landed(spans: dict[int, list[Span]], read_back: ReadBack) -> dict[int, list[OffsetRun]]:
    """Each source partition's offset map runs (source -> target), in produce order. A failed
    delivery raises DeliveryFailedError (the transaction must abort)."""
    out: dict[int, list[OffsetRun]] = {}
    for target_partition, in_order in spans.items():
        for span in in_order:
            if span.error is not None:
                raise DeliveryFailedError(span.error)
            if span.first is None or span.last is None:
                raise DeliveryMismatchError(
                    f"target partition {target_partition}: a record was acknowledged without its offset"
                )
            runs = out.setdefault(span.source_partition, [])
            sources = span.source_offsets
            if span.last - span.first + 1 == span.count and isinstance(sources, range):
                _append(runs, OffsetRun(sources.start, span.first, span.count))
                continue
            if span.last - span.first + 1 == span.count:
                targets: list[int] | range = range(span.first, span.last + 1)
            else:
                targets = read_back(target_partition, span.first, span.last)
                if len(targets) != span.count:
                    raise DeliveryMismatchError(
                        f"target partition {target_partition}: {len(targets)} of our records in "
                        f"{span.first}..{span.last}, {span.count} produced"
                    )
            for run in runs_from_pairs(sources, targets):
                _append(runs, run)
    return out


def _append(runs: list[OffsetRun], run: OffsetRun) -> None:
    last = runs[-1] if runs else None
    if last is not None and (last.source_end, last.target_end) == (run.source_start, run.target_start):
        runs[-1] = OffsetRun(last.source_start, last.target_start, last.length + run.length)
    else:
        runs.append(run)
