"""Erasing records by key from archived segments, end to end without servers: real segments copied
into a directory by the worker's own copier (with key filters), the metadata log folded as every
reader folds it, the erasure run as the command runs it. The erased keys' records are gone from
every object, every other record reads back as it was at its offset, segments whose filter says
"no" are not read, a second run changes nothing, and an erasure killed at each step leaves the old
segment or its rewrite served, never neither."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

import pytest

from processor import metrics
from processor.kafka.partition import TopicPartition
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.reader.segment_blocks import fetch_index, read_block_range
from processor.reader.segment_keys import SegmentDecryption
from processor.rewrite.erase_runner import EraseReport, erase_partition
from processor.rewrite.erased_segment import Erasure, erase_from
from processor.rewrite.ports import Copier, DeleteSuperseded
from processor.rewrite.source_segment import read_source
from processor.segment.batch_rewrite import erasing
from processor.segment.entries_v2 import parse_batch_header, records_as_batches
from processor.segment.key_filter import FilterSecret, decode_key_filter
from processor.segment.object_keys import KEY_FILTER_SUFFIX
from processor.segment.records import KafkaRecord, TimestampType
from processor.segment.segment_assembler import SegmentAssembler
from processor.storage.filesystem import FilesystemChunkStorage
from processor.wiring.rewrite import FilterStats, key_filter_lookup
from tests.batch_samples import batch_with_section
from tests.support.segment_v1_writer import SegmentBuilder
from tests.unit.test_claims import KEYS, TP, Log, deleter

SECRET = FilterSecret(b"s" * 32)
NO_KEYS = SegmentDecryption({})
CREATE = TimestampType.CREATE_TIME
PER = 12


def key_of(offset: int) -> bytes | None:
    if offset % 11 == 5:
        return None  # null keys are never erased
    if offset >= 10 * PER:  # the last segments: one key of their own each
        return b"only-%d" % (offset // PER)
    return b"user-%d" % (offset % 7)


class Archive:
    """One partition's archive of ``segments`` segments of PER records, several batches each."""

    def __init__(self, tmp: Path, segments: int = 12, secret: FilterSecret | None = SECRET) -> None:
        self.log = Log()
        self.storage = FilesystemChunkStorage(tmp)
        self.epoch = self.log.claim("w")
        self.secret = secret
        self.copier = self.new_copier()
        self.records: list[KafkaRecord] = []
        for n in range(segments):
            start = n * PER
            recs = [
                KafkaRecord(o, 1_000 + o, CREATE, key_of(o), bytes([o % 251]) * (10 + o % 30), (("h", b"v"),))
                for o in range(start, start + PER)
            ]
            assembler = SegmentAssembler(TP.partition, start, 300)
            for b in records_as_batches(recs, max_batch_bytes=150):
                assembler.append(parse_batch_header(b), b)
            self.copier.copy(TP, assembler.seal(), self.epoch)
            self.records += recs

    def new_copier(self, cls: type[SegmentCopier] = SegmentCopier) -> SegmentCopier:
        return cls(
            self.storage, self.log, KEYS, "w", clock_ms=lambda: 1, confirm=self.log.confirm,
            key_filter_secret=self.secret,
        )  # fmt: skip

    def served(self) -> list[RemoteLogSegmentMetadata]:
        return self.log.state().finished()

    def read(self) -> list[KafkaRecord]:
        out: list[KafkaRecord] = []
        for s in self.served():
            index = fetch_index(self.storage, KEYS, s)
            for block in read_block_range(
                self.storage, s.data_object_key, str(s.segment_id), index.blocks, 0
            ):
                out += block
        return out

    def delete(
        self,
        tp: TopicPartition,
        sources: Sequence[RemoteLogSegmentMetadata],
        epoch: int,
        part: PartitionRemoteState | None,
    ) -> list[str]:
        return deleter(self.log, self.storage).delete_superseded(tp, sources, epoch, part)

    def erase(
        self,
        keys: Sequence[bytes],
        copier: Copier | None = None,
        delete: DeleteSuperseded | None = None,
        dry_run: bool = False,
    ) -> tuple[EraseReport, FilterStats]:
        stats = FilterStats()
        may_hold = key_filter_lookup(self.storage, self.secret, keys, stats)

        def build(source: RemoteLogSegmentMetadata) -> Erasure:
            return erase_from(source, read_source(self.storage, KEYS, source, NO_KEYS), erasing(keys), 300)

        if dry_run:
            return erase_partition(TP, self.log.state, None, may_hold, build, None, None), stats
        report = erase_partition(
            TP, self.log.state, self.epoch, may_hold, build, copier or self.copier, delete or self.delete
        )
        return report, stats

    def object_bytes(self) -> bytes:
        return b"".join(self.storage.read_all(o.key) for o in self.storage.list(""))


def test_the_erased_keys_records_are_gone_and_every_other_record_reads_back_at_its_offset(
    tmp_path: Path,
) -> None:
    arch = Archive(tmp_path)
    before = arch.served()
    erased = [b"user-3", b"user-5", b"only-11"]
    assert all(key in arch.object_bytes() for key in erased)  # uncompressed batches: keys readable
    report, _stats = arch.erase(erased)
    kept = [r for r in arch.records if r.key not in erased]
    assert not report.failed
    assert report.records_removed == len(arch.records) - len(kept) > 0
    assert arch.read() == kept  # offsets, timestamps, keys, values, headers: as produced
    after = arch.served()
    assert [(s.start_offset, s.end_offset) for s in after] == [(s.start_offset, s.end_offset) for s in before]
    assert sum(s.record_count for s in after) == len(kept)
    assert report.rewritten == sum(1 for s in after if s.supersedes)
    assert [s.segment_leader_epochs for s in after] == [s.segment_leader_epochs for s in before]
    # no object in the bucket holds an erased key's value bytes with its key any more
    data = arch.object_bytes()
    assert all(key not in data for key in erased)
    assert arch.log.state().rewritten() == []  # every source deleted
    # the same erasure again changes nothing, and reads no rewrite its filter clears
    again, _ = arch.erase(erased)
    assert (again.rewritten, again.records_removed, again.failed) == (0, 0, [])
    assert arch.served() == after


def test_segments_whose_key_filter_says_no_are_not_read(tmp_path: Path) -> None:
    arch = Archive(tmp_path)
    report, stats = arch.erase([b"only-11"])  # in the last segment only
    assert report.segments == 12 and report.rewritten == 1 and report.records_removed == PER - 1
    assert report.skipped_by_filter >= 9  # 1 % false positives allowed: at most a few extra reads
    assert report.scanned == report.segments - report.skipped_by_filter
    assert stats.missing == 0 and stats.unusable == 0
    # a segment written without a secret has no filter: read whole
    plain = Archive(tmp_path / "plain", segments=3, secret=None)
    report, stats = plain.erase([b"user-1"])
    assert report.scanned == 3 and report.skipped_by_filter == 0 and stats.missing == 3


def test_a_segment_with_every_record_erased_keeps_its_offsets_with_one_empty_batch(tmp_path: Path) -> None:
    arch = Archive(tmp_path)
    last = arch.served()[-1]
    null_keyed = [r for r in arch.records if r.offset >= last.start_offset and r.key is None]
    report, _ = arch.erase([b"only-11"])
    assert report.records_removed == PER - len(null_keyed)
    rewrite = arch.served()[-1]
    assert (rewrite.start_offset, rewrite.end_offset) == (last.start_offset, last.end_offset)
    assert [r for r in arch.read() if r.offset >= last.start_offset] == null_keyed
    # a segment of one key only, no null key: left with an empty batch, covering its offsets
    solo = Archive(tmp_path / "solo", segments=1)
    only = [r for r in solo.records if r.key is not None]
    report, _ = solo.erase(sorted({r.key for r in only if r.key is not None}))
    (seg,) = solo.served()
    assert seg.record_count == len(solo.records) - len(only) and seg.end_offset == PER - 1


def test_an_erasure_killed_after_its_finished_record_is_completed_by_the_next_run(tmp_path: Path) -> None:
    arch = Archive(tmp_path)

    def killed(
        tp: TopicPartition, sources: Sequence[RemoteLogSegmentMetadata], epoch: int, part: object
    ) -> list[str]:
        raise KeyboardInterrupt  # the process dies before deleting the first source

    with pytest.raises(KeyboardInterrupt):
        arch.erase([b"user-2"], delete=killed)
    leftovers = arch.log.state().rewritten()
    assert len(leftovers) == 1
    assert [r for r in arch.read() if r.offset <= leftovers[0].end_offset] == [
        r for r in arch.records if r.offset <= leftovers[0].end_offset and r.key != b"user-2"
    ]
    report, _ = arch.erase([b"user-2"])
    assert report.leftovers_deleted == 1 and not report.failed
    assert arch.storage.stat(leftovers[0].data_object_key) is None
    assert arch.read() == [r for r in arch.records if r.key != b"user-2"]


def test_an_erasure_killed_before_its_finished_record_leaves_the_source_served(tmp_path: Path) -> None:
    arch = Archive(tmp_path)
    before = arch.served()

    class Killed(SegmentCopier):
        def _publish_accepted(self, record: RemoteLogSegmentMetadata) -> None:
            if record.supersedes and record.state.value == "COPY_SEGMENT_FINISHED":
                raise KeyboardInterrupt
            super()._publish_accepted(record)

    with pytest.raises(KeyboardInterrupt):
        arch.erase([b"user-2"], copier=arch.new_copier(Killed))
    assert arch.served() == before and arch.read() == arch.records
    report, _ = arch.erase([b"user-2"])  # the next run does it all
    assert not report.failed and arch.read() == [r for r in arch.records if r.key != b"user-2"]


def test_a_dry_run_counts_and_writes_nothing(tmp_path: Path) -> None:
    arch = Archive(tmp_path)
    objects = sorted(o.key for o in arch.storage.list(""))
    report, _ = arch.erase([b"user-4"], dry_run=True)
    assert report.records_removed == sum(1 for r in arch.records if r.key == b"user-4") > 0
    assert sorted(o.key for o in arch.storage.list("")) == objects and arch.read() == arch.records


def test_a_corrupt_or_foreign_key_filter_never_skips_a_segment(tmp_path: Path) -> None:
    arch = Archive(tmp_path, segments=2)
    first, second = arch.served()
    key = first.data_object_key + KEY_FILTER_SUFFIX
    body = arch.storage.read_all(key)
    arch.storage.delete(key)
    arch.storage.create(key, [body[:-1] + bytes([body[-1] ^ 1])])  # CRC mismatch
    foreign = Archive(tmp_path / "other", segments=1, secret=FilterSecret(b"o" * 32))
    other_key = foreign.served()[0].data_object_key + KEY_FILTER_SUFFIX
    arch.storage.delete(second.data_object_key + KEY_FILTER_SUFFIX)
    arch.storage.create(second.data_object_key + KEY_FILTER_SUFFIX, [foreign.storage.read_all(other_key)])
    report, stats = arch.erase([b"user-6"])
    assert stats.unusable == 2 and report.scanned == 2 and report.rewritten == 2
    assert arch.read() == [r for r in arch.records if r.key != b"user-6"]


def test_the_copier_writes_each_segments_key_filter_beside_it(tmp_path: Path) -> None:
    arch = Archive(tmp_path, segments=2)
    for s in arch.served():
        f = decode_key_filter(arch.storage.read_all(s.data_object_key + KEY_FILTER_SUFFIX))
        keys = {r.key for r in arch.records if s.start_offset <= r.offset <= s.end_offset and r.key}
        assert f.key_count == len(keys) and f.salt == s.segment_id.id.bytes
        assert all(f.might_contain(k, SECRET) for k in keys)
    assert not (tmp_path / "plain").exists()
    plain = Archive(tmp_path / "plain", segments=1, secret=None)
    assert all(not o.key.endswith(KEY_FILTER_SUFFIX) for o in plain.storage.list(""))


def test_a_segment_whose_records_do_not_frame_is_copied_without_a_filter(tmp_path: Path) -> None:
    """A batch that passed its CRC check but whose records do not frame (no broker writes one; a
    forged or buggy producer's through a broker that does not validate) is archived as served: the
    key filter is left out and counted, never the offload blocked."""
    arch = Archive(tmp_path, segments=1)
    forged = bytearray(batch_with_section(b"\x00" * 14, 2, last_delta=1))  # two records of length 0
    struct.pack_into(">q", forged, 0, PER)  # the base offset (outside the CRC): the next segment's
    assembler = SegmentAssembler(TP.partition, PER, 300)
    assembler.append(parse_batch_header(forged), forged)
    before = metrics.KEY_FILTER_FAILURES._value.get()
    copied = arch.copier.copy(TP, assembler.seal(), arch.epoch)
    assert metrics.KEY_FILTER_FAILURES._value.get() == before + 1
    assert arch.storage.read_all(copied.data_object_key)  # archived, served
    assert copied in arch.served()
    assert not arch.storage.exists(copied.data_object_key + KEY_FILTER_SUFFIX)


def test_a_segment_of_format_1_is_rewritten_as_batches_of_its_kept_records(tmp_path: Path) -> None:
    arch = Archive(tmp_path, segments=1)
    builder = SegmentBuilder(TP.partition, PER, 200)
    recs = [KafkaRecord(o, 5_000 + o, CREATE, key_of(o), b"v%d" % o) for o in range(PER, 2 * PER)]
    for r in recs:
        builder.append(r.offset, 0, r.timestamp, r.key, r.value, [])
    arch.copier.copy(TP, builder.seal(), arch.epoch)
    assert arch.served()[-1].segment_format_version == 1
    report, stats = arch.erase([b"user-1"])
    assert not report.failed and report.rewritten == 2 and stats.missing == 1  # format 1: no filter
    assert [r for r in arch.read() if r.offset >= PER] == [r for r in recs if r.key != b"user-1"]
    assert arch.served()[-1].segment_format_version == 2


def test_verify_counts_key_filters_as_the_segments_own_and_reports_a_corrupt_one(tmp_path: Path) -> None:
    from processor.commands.verify import VerifyReport, verify_partition

    arch = Archive(tmp_path, segments=3)
    segments = list(arch.log.state().segments.values())
    report = VerifyReport(TP.topic)
    verify_partition(arch.storage, TP, segments, KEYS, report)
    assert report.segments_checked == 3 and report.clean, report
    victim = arch.served()[1].data_object_key + KEY_FILTER_SUFFIX
    body = arch.storage.read_all(victim)
    arch.storage.delete(victim)
    arch.storage.create(victim, [body[:-2]])
    report = VerifyReport(TP.topic)
    verify_partition(arch.storage, TP, segments, KEYS, report)
    assert [c["key"] for c in report.corrupt] == [victim] and "key filter" in report.corrupt[0]["problem"]
    assert report.unreferenced == []
