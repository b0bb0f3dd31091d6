"""Merging small archived segments, end to end without servers: real segments copied into a
directory by the worker's own copier, the metadata log folded as every reader folds it, the merge
run as the command runs it. Every record reads back byte-exact from the merged segments, the
sources are deleted only by the accepted merge's proof, and a merge killed at each step leaves the
old segments or the new one served, never neither."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest

from processor.errors import ProcessorError
from processor.kafka.partition import TopicPartition
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.reader.segment_blocks import fetch_index, read_block_range_batches
from processor.reader.segment_keys import SegmentDecryption
from processor.rewrite.merge_plan import MergeLimits, MergeRun, plan_merges
from processor.rewrite.merge_runner import MergeReport, merge_partition
from processor.rewrite.merged_segment import merged_segment
from processor.rewrite.ports import Copier, DeleteSuperseded
from processor.segment.entries_v2 import parse_batch_header, records_as_batches
from processor.segment.records import KafkaRecord, TimestampType
from processor.segment.sealed_segment import SealedSegment
from processor.segment.segment_assembler import SegmentAssembler
from processor.storage.filesystem import FilesystemChunkStorage
from tests.unit.test_claims import KEYS, TP, Log, deleter

NOW = 10**12
LIMITS = MergeLimits(target_bytes=4000, small_bytes=1500, min_age_ms=0)
NO_KEYS = SegmentDecryption({})
CREATE = TimestampType.CREATE_TIME
Merged = tuple[MergeReport, list[MergeRun]]


class Archive:
    """One partition's archive: a metadata log, a directory as the bucket, a copier, a claim."""

    def __init__(self, tmp: Path, segments: int = 10, per: int = 6) -> None:
        self.log = Log()
        self.storage = FilesystemChunkStorage(tmp)
        self.epoch = self.log.claim("w")
        self.copier = SegmentCopier(
            self.storage, self.log, KEYS, "w", clock_ms=lambda: 1, confirm=self.log.confirm
        )
        self.records: list[KafkaRecord] = []
        self.batches: list[bytes] = []
        for n in range(segments):
            start = n * per
            recs = [
                KafkaRecord(o, 1_000 + o, CREATE, b"k%d" % o, bytes([o % 251]) * (20 + o % 40))
                for o in range(start, start + per)
            ]
            batches = records_as_batches(recs, max_batch_bytes=200)  # a few batches per segment
            assembler = SegmentAssembler(TP.partition, start, 256)  # a few blocks per segment
            for b in batches:
                assembler.append(parse_batch_header(b), b)
            self.copier.copy(TP, assembler.seal(), self.epoch)
            self.records += recs
            self.batches += batches

    def served(self) -> list[RemoteLogSegmentMetadata]:
        return self.log.state().finished()

    def read_batches(self) -> list[bytes]:
        out: list[bytes] = []
        for s in self.served():
            index = fetch_index(self.storage, KEYS, s)
            for content in read_block_range_batches(
                self.storage, s.data_object_key, str(s.segment_id), index.blocks, 0
            ):
                out += [bytes(b) for b in content.batches]
        return out

    def build(self, run: MergeRun) -> SealedSegment:
        return merged_segment(self.storage, KEYS, run, NO_KEYS, 512)

    def delete(
        self,
        tp: TopicPartition,
        sources: Sequence[RemoteLogSegmentMetadata],
        epoch: int,
        part: PartitionRemoteState | None,
    ) -> list[str]:
        return deleter(self.log, self.storage).delete_superseded(tp, sources, epoch, part)

    def merge(self, copier: Copier | None = None, delete: DeleteSuperseded | None = None) -> Merged:
        return merge_partition(
            TP, self.log.state, self.epoch, LIMITS, NOW, self.build, copier or self.copier,
            delete or self.delete,
        )  # fmt: skip

    def keys(self) -> set[str]:
        return {o.key for o in self.storage.list("")}


def test_runs_are_adjacent_small_old_segments_up_to_the_target(tmp_path: Path) -> None:
    arch = Archive(tmp_path)
    sizes = [s.segment_size_in_bytes for s in arch.served()]
    assert all(s < LIMITS.small_bytes for s in sizes)
    runs = plan_merges(arch.served(), LIMITS, NOW)
    assert runs and all(len(r.segments) >= 2 and r.size_bytes <= LIMITS.target_bytes for r in runs)
    for run in runs:
        assert all(
            b.start_offset == a.end_offset + 1 for a, b in zip(run.segments, run.segments[1:], strict=False)
        )
    # too young to merge: nothing
    assert plan_merges(arch.served(), dataclasses.replace(LIMITS, min_age_ms=NOW), NOW) == []


def test_a_merge_serves_every_batch_byte_exact_from_fewer_segments_and_deletes_the_sources(
    tmp_path: Path,
) -> None:
    arch = Archive(tmp_path)
    before = arch.served()
    objects_before = len(arch.keys())
    report, runs = arch.merge()
    assert report.runs == len(runs) > 0 and not report.failed
    after = arch.served()
    assert len(after) == report.segments_after < len(before)
    assert arch.read_batches() == arch.batches  # every batch, as produced, at its offset
    assert (after[0].start_offset, after[-1].end_offset) == (0, before[-1].end_offset)
    merged_away = {s.segment_id.id for r in runs for s in r.segments}
    for s in before:  # the sources' objects and manifests are gone, the others' kept
        gone = arch.storage.stat(s.data_object_key) is None
        assert gone == (s.segment_id.id in merged_away)
    assert len(arch.keys()) < objects_before
    assert arch.log.state().rewritten() == []
    # the same merge again changes nothing
    again, runs_again = arch.merge()
    assert runs_again == [] and again.runs == 0 and arch.served() == after


def test_a_merge_killed_after_its_finished_record_is_completed_by_the_next_run(tmp_path: Path) -> None:
    arch = Archive(tmp_path)

    def killed(
        tp: TopicPartition, sources: Sequence[RemoteLogSegmentMetadata], epoch: int, part: object
    ) -> list[str]:
        raise KeyboardInterrupt  # the process dies before deleting anything

    with pytest.raises(KeyboardInterrupt):
        arch.merge(delete=killed)
    # the merged segment is served, the sources are garbage with proof; every batch still reads back
    leftovers = arch.log.state().rewritten()
    assert leftovers and arch.read_batches() == arch.batches
    report, _ = arch.merge()
    assert report.leftovers_deleted == len(leftovers)
    assert all(arch.storage.stat(s.data_object_key) is None for s in leftovers)
    assert arch.read_batches() == arch.batches


def test_a_merge_killed_before_its_finished_record_leaves_the_sources_served(tmp_path: Path) -> None:
    arch = Archive(tmp_path)
    before = arch.served()

    class Killed(SegmentCopier):
        def _publish_accepted(self, record: RemoteLogSegmentMetadata) -> None:
            if record.supersedes and record.state.value == "COPY_SEGMENT_FINISHED":
                raise KeyboardInterrupt
            super()._publish_accepted(record)

    dying = Killed(arch.storage, arch.log, KEYS, "w", clock_ms=lambda: 1, confirm=arch.log.confirm)
    with pytest.raises(KeyboardInterrupt):
        arch.merge(copier=dying)
    assert arch.served() == before and arch.read_batches() == arch.batches
    assert arch.log.state().rewritten() == []


def test_a_source_that_does_not_read_back_is_not_merged_and_nothing_is_lost(tmp_path: Path) -> None:
    arch = Archive(tmp_path)
    runs = plan_merges(arch.served(), LIMITS, NOW)
    victim = runs[0].segments[1]
    data = arch.storage.read(victim.data_object_key, 0, victim.segment_size_in_bytes)
    arch.storage.delete(victim.data_object_key)
    arch.storage.create(victim.data_object_key, [data[:-1] + bytes([data[-1] ^ 1])])
    report, _ = arch.merge()
    assert len(report.failed) == 1 and "crc" in report.failed[0].lower()
    served = {s.segment_id.id for s in arch.served()}
    assert all(s.segment_id.id in served for s in runs[0].segments)  # the run is left as it was
    assert report.runs == len(runs) - 1


def test_a_rewrite_naming_a_segment_of_another_run_is_refused_by_the_readers(tmp_path: Path) -> None:
    arch = Archive(tmp_path)
    runs = plan_merges(arch.served(), LIMITS, NOW)
    sealed = arch.build(runs[0])
    partial = tuple(s.segment_id.id for s in runs[0].segments[:-1])  # one source left out
    with pytest.raises(ProcessorError):
        arch.copier.copy(TP, sealed, arch.epoch, supersedes=partial)
    assert {s.segment_id.id for s in arch.served()} >= {s.segment_id.id for s in runs[0].segments}
    assert arch.read_batches() == arch.batches
