"""The real :class:`~processor.leader.segment_copier.SegmentCopier` run one step at a time.

A model test (tests/unit/test_ownership_model.py) must be able to pause a copy between any two of
its external effects, and let other owners act meanwhile. The copier is synchronous code, so it
runs in a thread of its own that stops at each *gate* and waits for the model's next step: only one
of the two threads runs at any moment (a hand-over through two queues), so a run is as
deterministic as the model's own steps.

Gates, in the order a copy meets them:

- ``confirm COPY_SEGMENT_STARTED``: the STARTED was published; the model answers the confirm
  (accepted, rejected, or ``None``: not confirmed in time);
- ``upload``: the copier is about to create its data object;
- ``publish COPY_SEGMENT_FINISHED``: the objects are up; FINISHED is about to be published;
- ``confirm COPY_SEGMENT_FINISHED``;
- ``done`` (the copy returned) or ``failed`` (it raised): the thread has ended.

A crash (:meth:`SteppedCopy.crash`) makes the copier's every further call to the outside world
raise, so whatever cleanup the copier would attempt on its way out has no effect, as if the process
had died at that gate.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from processor.kafka.partition import TopicPartition
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.model import MetadataRecord, RemoteLogSegmentMetadata, SegmentState
from processor.metadata.sink import Confirm
from processor.segment.sealed_segment import SealedSegment
from processor.storage.chunk_storage import Buffer, ChunkInfo, ChunkStorage

HAND_OVER_S = 30  # one step of the copier is microseconds; this only bounds a bug (a lost hand-over)


class _Crashed(BaseException):
    """Raised inside a crashed copier's thread at its next contact with the outside world."""


class ModelTopic(Protocol):
    def publish(self, record: MetadataRecord) -> int: ...


@dataclass
class Stop:
    gate: str
    record: RemoteLogSegmentMetadata | None = None  # the record published or about to be
    offset: int = -1  # where the record at a confirm gate was published
    result: RemoteLogSegmentMetadata | None = None  # done: the FINISHED metadata
    error: BaseException | None = None  # failed: what the copy raised


class SteppedCopy:
    """One copy attempt of the real copier, advanced by :meth:`resume`."""

    def __init__(
        self,
        copier_factory: Callable[[ChunkStorage, _Sink, Confirm], SegmentCopier],
        storage: ChunkStorage,
        topic: ModelTopic,
        tp: TopicPartition,
        segment: SealedSegment,
        epoch: int,
        still_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        self._to_copier: queue.Queue[object] = queue.Queue()
        self._to_model: queue.Queue[Stop] = queue.Queue()
        self.crashed = False
        seen = cast(ChunkStorage, _Storage(self, storage))
        self.copier = copier_factory(seen, _Sink(self, topic), self._confirm)
        self._thread = threading.Thread(
            target=self._run, args=(tp, segment, epoch, still_leader), daemon=True
        )
        self.stop: Stop | None = None

    # -- the model's side ------------------------------------------------------------------------

    def start(self) -> Stop:
        self._thread.start()
        return self._next()

    def resume(self, answer: object = None) -> Stop:
        """Let the copier go on from its gate (a confirm gate gets ``answer``) to the next one."""
        assert self.stop is not None and self.stop.gate not in ("done", "failed")
        self._to_copier.put(answer)
        return self._next()

    def crash(self) -> None:
        """The process dies where the copier stands: nothing it would still do reaches the world."""
        if self.stop is not None and self.stop.gate not in ("done", "failed"):
            self.crashed = True
            self._to_copier.put(None)
            self._next()
        self._thread.join(HAND_OVER_S)

    def _next(self) -> Stop:
        self.stop = self._to_model.get(timeout=HAND_OVER_S)
        return self.stop

    # -- the copier's side -------------------------------------------------------------------------

    def _run(
        self, tp: TopicPartition, segment: SealedSegment, epoch: int, still_leader: Callable[[], bool]
    ) -> None:
        try:
            result = self.copier.copy(tp, segment, epoch, still_leader)
        except BaseException as exc:  # handed to the model: a failed copy is one of its outcomes
            self._to_model.put(Stop("failed", error=exc))
        else:
            self._to_model.put(Stop("done", result=result))

    def gate(self, stop: Stop) -> object:
        self.outside()
        self._to_model.put(stop)
        answer = self._to_copier.get(timeout=HAND_OVER_S)
        self.outside()
        return answer

    def outside(self) -> None:
        if self.crashed:
            raise _Crashed()

    def _confirm(self, record: MetadataRecord, offset: int) -> bool | None:
        assert isinstance(record, RemoteLogSegmentMetadata)
        answer = self.gate(Stop(f"confirm {record.state.value}", record, offset))
        assert answer is None or isinstance(answer, bool)
        return answer


class _Sink:
    def __init__(self, run: SteppedCopy, topic: ModelTopic) -> None:
        self.run = run
        self.topic = topic

    def publish(self, record: MetadataRecord) -> int:
        if (
            isinstance(record, RemoteLogSegmentMetadata)
            and record.state is SegmentState.COPY_SEGMENT_FINISHED
        ):
            self.run.gate(Stop("publish COPY_SEGMENT_FINISHED", record))
        self.run.outside()
        return self.topic.publish(record)


class _Storage:
    """The model's bucket as the copier sees it: the data object's create is a gate."""

    def __init__(self, run: SteppedCopy, bucket: ChunkStorage) -> None:
        self.run = run
        self.bucket = bucket
        self.uploading = True

    def create(self, key: str, parts: Sequence[Buffer]) -> ChunkInfo:
        if self.uploading:
            self.uploading = False
            self.run.gate(Stop("upload"))
        self.run.outside()
        return self.bucket.create(key, parts)

    def stat(self, key: str) -> ChunkInfo | None:
        self.run.outside()
        return self.bucket.stat(key)

    def delete(self, key: str) -> None:
        self.run.outside()
        self.bucket.delete(key)

    def __getattr__(self, name: str) -> object:
        return getattr(self.bucket, name)
