"""With PROCESSOR_METADATA_AUTH=require, a principal that can write the metadata and deletion topics
but holds no key can make a worker neither delete nor stop serving anything, on a running stack.

A worker archives a topic with every record it writes signed. Then a forger writes, unsigned and
signed with a key of its own under the deployment's key id, each kind of record the topics carry:
a claim (under a made-up topic id, then one copying the holder's writer id), a COPY_SEGMENT_STARTED
and FINISHED of a new segment over served offsets, a DELETE_SEGMENT_STARTED and FINISHED of a served
segment, a rewrite naming two served segments, a remote log start offset past them, the partition's
delete marker, tombstones of served segments' keys, and a deletion topic request of a served segment;
the records carry the current claim's epoch and writer id (both readable from the topic). The
worker's follower refuses every one (its metric counts them), its retention passes run on, and
every segment stays served, every object stays in the bucket and every record reads back.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from processor.crypto.keyring import new_key
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic, partition_counts, topic_config
from processor.kafka.clients import new_admin, new_producer
from processor.kafka.partition import TopicPartition
from processor.metadata import authentication
from processor.metadata.authentication import DOMAIN_DELETION, DOMAIN_METADATA, KeyRing, MetadataAuth
from processor.metadata.codec import delete_key, encode_value, metadata_partition_for, record_key, segment_key
from processor.metadata.model import (
    ClaimKind,
    MetadataRecord,
    PartitionClaim,
    PartitionDeleteState,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogStartOffset,
    RemotePartitionDeleteMetadata,
    SegmentState,
)
from processor.metadata.topic_io import load_remote_state, require_log_append_time
from tests.integration.invariants import running_worker, wait_for_log
from tests.integration.lifecycle_support import storage_for, wait_for
from tests.integration.test_deletion_safety import (
    assert_unchanged,
    ids,
    metric,
    served,
    snapshot,
    wait_manifests,
)
from tests.integration.test_ownership import PARTITIONS, Produced, _env, assert_reads_byte_exact
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

RECORDS = 40
S = SegmentState


@pytest.fixture
def keys(tmp_path: Path) -> Iterator[Path]:
    """The deployment's key directory; this process (the test's own reads of the metadata) screens
    by the same policy as the worker."""
    directory = tmp_path / "metadata-keys"
    new_key(directory)
    before = authentication.installed()
    authentication.install(authentication.from_settings("require", directory, None))
    yield directory
    authentication.install(before)


def _forgeries(
    tp: TopicPartition, segments: list[RemoteLogSegmentMetadata], epoch: int, writer: str
) -> list[MetadataRecord]:
    """One record of each kind, as a forger with the current claim's epoch and writer id writes it."""
    first, second = segments[0], segments[min(1, len(segments) - 1)]
    sid = RemoteLogSegmentId(tp.topic, tp.partition, uuid.uuid4(), first.segment_id.topic_id)
    fresh = dataclasses.replace(first, segment_id=sid, state=S.COPY_SEGMENT_STARTED, writer_epoch=epoch)
    rewrite = dataclasses.replace(
        first,
        segment_id=RemoteLogSegmentId(tp.topic, tp.partition, uuid.uuid4(), first.segment_id.topic_id),
        end_offset=second.end_offset,
        writer_epoch=epoch,
        writer_id=writer,
        supersedes=tuple({first.segment_id.id, second.segment_id.id}),
    )
    return [
        PartitionClaim(tp, uuid.uuid4(), ClaimKind.LEAD, "mallory", 0, str(uuid.uuid4())),
        PartitionClaim(tp, uuid.uuid4(), ClaimKind.LEAD, writer, 0, first.segment_id.topic_id),
        fresh,
        fresh.with_state(S.COPY_SEGMENT_FINISHED, 1),
        first.deleting(1, writer, epoch),
        dataclasses.replace(first.deleting(1, writer, epoch), state=S.DELETE_SEGMENT_FINISHED),
        rewrite,
        RemoteLogStartOffset(tp, second.end_offset + 1, 1, writer, epoch, first.segment_id.topic_id),
        RemotePartitionDeleteMetadata(
            tp, PartitionDeleteState.DELETE_PARTITION_MARKED, 1, writer, first.segment_id.topic_id, epoch
        ),
    ]


@pytest.mark.timeout(360)  # a worker's archive, forged records and two retention passes on a shared stack
def test_records_without_the_key_are_refused_and_change_nothing(
    local_stack: StackInfo, tmp_path: Path, keys: Path
) -> None:
    bootstrap = local_stack.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    topic, meta = f"auth-{suffix}", f"__remote_log_metadata_auth_{suffix}"
    env = _env(
        local_stack,
        tmp_path / "w",
        topic,
        meta,
        f"auth-w-{suffix}",
        PROCESSOR_METADATA_AUTH="require",
        PROCESSOR_METADATA_AUTH_KEYS=str(keys),
    )
    ensure_topic(new_admin(bootstrap, "t"), topic, PARTITIONS, 1, {})
    produced = Produced(local_stack, topic)
    storage = storage_for(local_stack)
    key_id = next(iter(KeyRing.from_directory(keys).keys))
    forger_key = MetadataAuth("require", KeyRing({key_id: (0, b"f" * 32)}))  # the deployment's key id
    try:
        with running_worker(env, tmp_path / "w.log") as w:
            wait_for_log(w, "resuming at", 60)
            produced.each(RECORDS, int(time.time() * 1000))
            wait_offloaded(bootstrap, meta, produced.ends(), 90, w.proc)
            before_served = served(bootstrap, meta, topic)
            assert all(before_served.values()), ids(before_served)
            wait_manifests(local_stack, before_served, w)
            before = snapshot(storage, topic)
            state, _rejected = load_remote_state(bootstrap, meta)

            count = partition_counts(new_admin(bootstrap, "t"), [meta])[meta]
            deletions = partition_counts(new_admin(bootstrap, "t"), [env["PROCESSOR_DELETION_TOPIC"]])
            producer: Producer = new_producer(bootstrap, "auth-forger")
            sent = 0
            for tp, segments in before_served.items():
                claim = state.partition(tp).header.claim
                assert claim is not None
                home = metadata_partition_for(tp, count)
                messages: list[tuple[str, int, bytes, bytes | None, bytes]] = [
                    (meta, home, record_key(r), encode_value(r), DOMAIN_METADATA)
                    for r in _forgeries(tp, segments, claim.epoch, claim.writer_id)
                ]
                messages += [(meta, home, k(s.segment_id), None, DOMAIN_METADATA) for s in segments[:1]
                             for k in (segment_key, delete_key)]  # fmt: skip
                request = segments[0].deleting(1, claim.writer_id, claim.epoch)
                deletion_topic = env["PROCESSOR_DELETION_TOPIC"]
                messages.append(
                    (
                        deletion_topic,
                        metadata_partition_for(tp, deletions[deletion_topic]),
                        segment_key(request.segment_id),
                        encode_value(request),
                        DOMAIN_DELETION,
                    )
                )
                for where, part, key, value, domain in messages:
                    producer.produce(where, key=key, value=value, partition=part)  # unsigned
                    wrong = forger_key.headers(domain, key, value)
                    producer.produce(where, key=key, value=value, partition=part, headers=wrong)
                    sent += 2 if where == meta else 0
            assert producer.flush(30) == 0

            def refused(domain: str) -> float:
                return sum(
                    metric(env, "processor_metadata_unauthenticated_total", labels) or 0.0
                    for labels in (
                        f'domain="{domain}",outcome="refused",reason="unsigned"',
                        f'domain="{domain}",outcome="refused",reason="bad_tag"',
                    )
                )

            wait_for(
                "the follower refusing every forged record", lambda: refused("metadata") >= sent, 60, w.proc
            )
            # every retention pass reads the deletion topic (and refuses the forged requests there):
            # two passes after the forgeries, the second wholly after them
            per_pass = 2 * len(before_served)
            wait_for("a retention pass after them", lambda: refused("deletion") >= per_pass, 60, w.proc)
            seen = refused("deletion")
            wait_for("another pass", lambda: refused("deletion") >= seen + per_pass, 60, w.proc)
            assert ids(served(bootstrap, meta, topic)) == ids(before_served), (
                "a forged record unserved a segment"
            )
            assert_unchanged(before, snapshot(storage, topic), "after the forged records and a pass")
            assert w.proc.poll() is None
    finally:
        storage.close()
    ends = produced.ends()
    assert_reads_byte_exact(local_stack, env, topic, {tp: 0 for tp in ends}, ends)


def test_the_unsigned_cut_off_needs_the_brokers_timestamps(local_stack: StackInfo) -> None:
    """PROCESSOR_METADATA_AUTH_UNSIGNED_BEFORE folds unsigned records by their timestamp: the topic
    is set to LogAppendTime (the broker's clock), once, and left alone when it already is."""
    admin = new_admin(local_stack.bootstrap_servers, "t")
    topic = f"__auth_cutoff_{uuid.uuid4().hex[:6]}"
    ensure_topic(admin, topic, 1, 1, {"cleanup.policy": "compact"})
    assert topic_config(admin, topic).get("message.timestamp.type") == "CreateTime"
    require_log_append_time(admin, topic, "metadata topic")
    assert topic_config(admin, topic).get("message.timestamp.type") == "LogAppendTime"
    require_log_append_time(admin, topic, "metadata topic")  # already so: nothing to change
    assert topic_config(admin, topic).get("message.timestamp.type") == "LogAppendTime"
