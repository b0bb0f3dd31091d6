"""The restore's transactional batch producer against a real broker: what commits is visible once,
what aborts never is, a new producer with the same transactional id fences the old one, and
sequences carry on across transactions and start again after an abort."""

from __future__ import annotations

import uuid

import pytest

from processor.devstack.stack import StackInfo
from processor.kafka.partition import TopicPartition
from processor.restore.batch_producer import BatchProducer, TxnFencedError
from processor.restore.log_reader import read_partition_log
from processor.restore.target import TargetCluster
from processor.restore.transaction_view import Outcome, resolve
from processor.segment.entries_v2 import batch_records
from tests.batch_samples import make_batch


def _batch(tag: bytes, n: int) -> bytes:
    # a batch as archived: another producer's fields, a source base offset
    return make_batch(5000, [(1000 + i, tag + b"-%d" % i, b"v" * i, [("h", tag)]) for i in range(n)], "zstd",
                      producer_id=77)  # fmt: skip


def _outcomes(bootstrap: str, topic: str) -> list[tuple[Outcome, list[bytes | None]]]:
    view = resolve(read_partition_log(bootstrap, TopicPartition(topic, 0)))
    return [
        (b.outcome, [r.key for r in batch_records(b.batch)]) for b in view.batches if not b.header.is_control
    ]


@pytest.fixture
def topic(local_stack: StackInfo) -> str:
    name = f"batch-producer-{uuid.uuid4().hex[:8]}"
    TargetCluster(local_stack.bootstrap_servers).create_topic(name, 1)
    return name


def test_committed_batches_are_visible_and_aborted_ones_never(local_stack: StackInfo, topic: str) -> None:
    producer = BatchProducer(local_stack.bootstrap_servers, f"bp-{topic}")
    try:
        producer.init()
        producer.begin()
        first = producer.send(topic, 0, _batch(b"a", 3), 3)
        second = producer.send(topic, 0, _batch(b"b", 2), 2)
        producer.commit(30)
        assert (first.result(), second.result()) == (0, 3)  # base offsets as the broker assigned them
        producer.begin()
        producer.send(topic, 0, _batch(b"c", 2), 2)
        producer.flush(30)
        epoch = producer.epoch
        producer.abort(30)
        assert producer.epoch > epoch  # a new epoch: sequences from 0 again
        producer.begin()
        producer.send(topic, 0, _batch(b"d", 1), 1)
        producer.commit(30)
    finally:
        producer.close()
    got = _outcomes(local_stack.bootstrap_servers, topic)
    assert [(o, keys) for o, keys in got] == [
        (Outcome.COMMITTED, [b"a-0", b"a-1", b"a-2"]),
        (Outcome.COMMITTED, [b"b-0", b"b-1"]),
        (Outcome.ABORTED, [b"c-0", b"c-1"]),
        (Outcome.COMMITTED, [b"d-0"]),
    ]


def test_a_new_producer_with_the_same_id_fences_the_old_one(local_stack: StackInfo, topic: str) -> None:
    old = BatchProducer(local_stack.bootstrap_servers, f"bp-{topic}")
    new = BatchProducer(local_stack.bootstrap_servers, f"bp-{topic}")
    try:
        old.init()
        old.begin()
        old.send(topic, 0, _batch(b"old", 2), 2)
        old.flush(30)
        new.init()  # aborts the old producer's open transaction
        new.begin()
        new.send(topic, 0, _batch(b"new", 1), 1)
        new.commit(30)
        old.begin()
        old.send(topic, 0, _batch(b"zombie", 1), 1)
        with pytest.raises(TxnFencedError):
            old.flush(30)
    finally:
        old.close()
        new.close()
    got = _outcomes(local_stack.bootstrap_servers, topic)
    assert [keys for o, keys in got if o is Outcome.COMMITTED] == [[b"new-0"]]
    assert [keys for o, keys in got if o is Outcome.ABORTED] == [[b"old-0", b"old-1"]]
