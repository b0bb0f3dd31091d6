"""The readers' side of encryption at rest (processor/reader/segment_keys.py): which segments are
encrypted, one unwrap per segment, and the errors that name the segment."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from processor.crypto.keyring import KeyringProvider, new_key
from processor.crypto.keys import DataKey, EncryptionContext, WrappedKey
from processor.errors import FormatError, SegmentKeyError, SegmentShreddedError
from processor.metadata.model import RemoteLogSegmentId
from processor.reader.segment_keys import SegmentDecryption, encryption_context
from processor.segment.index_sealing import seal_index

TOPIC = "orders"


class CountingKeyring(KeyringProvider):
    """A real key ring that counts its unwraps."""

    unwraps = 0

    def unwrap(self, wrapped: WrappedKey, ctx: EncryptionContext) -> bytes:
        self.unwraps += 1
        return super().unwrap(wrapped, ctx)


def _segment(topic: str = TOPIC) -> RemoteLogSegmentId:
    return RemoteLogSegmentId(topic, 3, uuid.uuid4(), "tid-1")


def _sealed(ring: KeyringProvider, sid: RemoteLogSegmentId) -> DataKey:
    return ring.new_data_key(encryption_context(sid))


def test_a_segment_without_custom_metadata_is_in_the_clear(tmp_path: Path) -> None:
    assert SegmentDecryption({}).cipher_for(_segment(), None) is None


def test_an_encrypted_segments_key_is_unwrapped_once_and_opens_its_objects(tmp_path: Path) -> None:
    new_key(tmp_path)
    ring = CountingKeyring(tmp_path)
    sid = _segment()
    key = _sealed(ring, sid)
    decryption = SegmentDecryption({"keyring": ring})
    for _ in range(3):
        cipher = decryption.cipher_for(sid, key.wrapped.encode())
        assert cipher is not None and cipher.key == key.plaintext
    assert ring.unwraps == 1
    assert cipher is not None
    index = b"\x3d\x1f\xb0\xbc" + b"index bytes"
    assert cipher.open_index(seal_index(index, key.plaintext, sid.id), where="i") == index
    with pytest.raises(FormatError, match="is not"):
        cipher.open_index(index, where="i")  # an encrypted segment's index in the clear: refused


def test_the_cache_is_bounded(tmp_path: Path) -> None:
    new_key(tmp_path)
    ring = CountingKeyring(tmp_path)
    decryption = SegmentDecryption({"keyring": ring}, max_keys=2)
    segments = [(sid, _sealed(ring, sid).wrapped.encode()) for sid in (_segment() for _ in range(3))]
    for sid, blob in [*segments, segments[0]]:
        decryption.cipher_for(sid, blob)
    assert ring.unwraps == 4  # the first was evicted by the third


def test_a_reader_without_the_provider_or_the_key_names_the_segment(tmp_path: Path) -> None:
    new_key(tmp_path / "a")
    new_key(tmp_path / "b")
    sid = _segment()
    blob = _sealed(KeyringProvider(tmp_path / "a"), sid).wrapped.encode()
    with pytest.raises(SegmentKeyError, match=str(sid.id)) as none:
        SegmentDecryption({}).cipher_for(sid, blob)
    assert "PROCESSOR_ENCRYPTION_KEYRING" in str(none.value)
    with pytest.raises(SegmentKeyError, match=str(sid.id)):
        SegmentDecryption({"keyring": KeyringProvider(tmp_path / "b")}).cipher_for(sid, blob)
    other = RemoteLogSegmentId(sid.topic, sid.partition, uuid.uuid4(), sid.topic_id)
    with pytest.raises(SegmentKeyError, match=str(other.id)):  # a wrapped key moved to another segment
        SegmentDecryption({"keyring": KeyringProvider(tmp_path / "a")}).cipher_for(other, blob)
    with pytest.raises(SegmentKeyError, match="malformed"):
        SegmentDecryption({}).cipher_for(sid, b"not a wrapped key")


def test_a_shredded_topic_is_shredded_and_another_topic_reads_on(tmp_path: Path) -> None:
    new_key(tmp_path)
    new_key(tmp_path, topic=TOPIC)
    ring = KeyringProvider(tmp_path)
    mine, theirs = _segment(), _segment("payments")
    mine_blob = _sealed(ring, mine).wrapped.encode()
    theirs_blob = _sealed(ring, theirs).wrapped.encode()
    ring.shred_topic(TOPIC)
    decryption = SegmentDecryption({"keyring": KeyringProvider(tmp_path)})
    with pytest.raises(SegmentShreddedError, match="shredded"):
        decryption.cipher_for(mine, mine_blob)
    assert decryption.cipher_for(theirs, theirs_blob) is not None


def test_a_tombstone_at_the_top_of_the_ring_counts_as_in_its_folder(tmp_path: Path) -> None:
    """A ring kept in a Kubernetes Secret has no folders: after shredding a copy of the ring, the
    Secret gets ``<topic>.shredded`` beside the keys, and readers say "shredded", not "unknown key"."""
    ring_dir, secret = tmp_path / "ring", tmp_path / "secret"
    new_key(ring_dir)
    new_key(ring_dir, topic=TOPIC)
    sid = _segment()
    blob = _sealed(KeyringProvider(ring_dir), sid).wrapped.encode()
    KeyringProvider(ring_dir).shred_topic(TOPIC)
    secret.mkdir()
    for key_file in ring_dir.glob("*.key"):
        (secret / key_file.name).write_bytes(key_file.read_bytes())
    (secret / f"{TOPIC}.shredded").write_bytes((ring_dir / "shredded" / f"{TOPIC}.json").read_bytes())
    with pytest.raises(SegmentShreddedError):
        SegmentDecryption({"keyring": KeyringProvider(secret)}).cipher_for(sid, blob)
