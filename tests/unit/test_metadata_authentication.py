"""The metadata authenticator: its header's byte layout (round trip, property, corruption), the key
ring (several keys valid at once, rotation), the modes and the one screen every reader's intake
calls, and the settings that install it."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Message
from hypothesis import given
from hypothesis import strategies as st

from processor import metrics
from processor.config import load_settings
from processor.crypto.keyring import new_key
from processor.errors import ConfigError, FormatError
from processor.metadata import authentication as auth
from processor.metadata.authentication import (
    DOMAIN_DELETION,
    DOMAIN_METADATA,
    HEADER,
    REFUSED,
    KeyRing,
    MetadataAuth,
    decode_header,
    encode_header,
    mac_input,
    tag_of,
)

K1 = b"\x01" * 32
K2 = b"\x02" * 32
NOW = int(time.time() * 1000)


@pytest.fixture(autouse=True)
def _restore_installed() -> Iterator[None]:
    before = auth.installed()
    yield
    auth.install(before)


def _ring(*keys: tuple[str, int, bytes]) -> KeyRing:
    return KeyRing({kid: (created, material) for kid, created, material in keys})


def _msg(
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, str | bytes | None]] | None,
    ts: int = NOW,
) -> Message:
    return Message(topic="m", partition=0, offset=7, key=key, value=value, headers=headers, timestamp=(2, ts))


def _signed(
    a: MetadataAuth, key: bytes | None, value: bytes | None, domain: bytes = DOMAIN_METADATA
) -> Message:
    return _msg(key, value, a.headers(domain, key, value))


def _count(domain: str, reason: str, outcome: str) -> float:
    return float(metrics.METADATA_UNAUTHENTICATED.labels(domain, reason, outcome)._value.get())


# -- the byte layout


def test_a_header_is_its_version_key_id_and_tag() -> None:
    tag = bytes(range(32))
    raw = encode_header("k-1", tag)
    assert raw == b"\x01\x03k-1" + tag
    assert decode_header(raw) == ("k-1", tag)


def test_the_tag_is_keyed_blake2b_over_the_documented_input() -> None:
    key, value = b"t/0/abc", b"\x00\x01value"
    expected = b"\x01\x08metadata" + len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value
    assert mac_input(DOMAIN_METADATA, key, value) == expected
    assert (
        tag_of(K1, DOMAIN_METADATA, key, value) == hashlib.blake2b(expected, key=K1, digest_size=32).digest()
    )
    # a missing key and a tombstone are told apart from empty ones
    assert mac_input(DOMAIN_METADATA, None, None).endswith(b"\xff\xff\xff\xff" * 2)
    assert tag_of(K1, DOMAIN_METADATA, b"", b"") != tag_of(K1, DOMAIN_METADATA, None, None)


@given(st.from_regex(r"[A-Za-z0-9._-]{1,128}", fullmatch=True), st.binary(min_size=32, max_size=32))
def test_headers_round_trip(key_id: str, tag: bytes) -> None:
    assert decode_header(encode_header(key_id, tag)) == (key_id, tag)


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_fail_with_a_format_error(raw: bytes) -> None:
    try:
        key_id, tag = decode_header(raw)
    except FormatError:
        return
    assert encode_header(key_id, tag) == raw


@given(st.data())
def test_every_corrupted_byte_or_cut_is_refused(data: st.DataObject) -> None:
    a = MetadataAuth("require", _ring(("k-1", 0, K1)))
    key, value = b"t/0/x", data.draw(st.binary(min_size=1, max_size=64))
    [(_name, raw)] = a.headers(DOMAIN_METADATA, key, value) or []
    assert isinstance(raw, bytes)
    assert a.check(DOMAIN_METADATA, key, value, [(HEADER, raw)]) is None
    i = data.draw(st.integers(0, len(raw) - 1))
    flipped = raw[:i] + bytes((raw[i] ^ data.draw(st.integers(1, 255)),)) + raw[i + 1 :]
    assert a.check(DOMAIN_METADATA, key, value, [(HEADER, flipped)]) is not None
    assert a.check(DOMAIN_METADATA, key, value, [(HEADER, raw[:i])]) is not None
    # the value, the key and the topic are all covered
    assert a.check(DOMAIN_METADATA, key, value + b"x", [(HEADER, raw)]) == auth.BAD_TAG
    assert a.check(DOMAIN_METADATA, b"t/1/x", value, [(HEADER, raw)]) == auth.BAD_TAG
    assert a.check(DOMAIN_DELETION, key, value, [(HEADER, raw)]) == auth.BAD_TAG


@given(st.binary(max_size=40), st.binary(max_size=300), st.integers(0, 339))
def test_the_screens_quick_path_agrees_with_the_full_check(key: bytes, value: bytes, flip: int) -> None:
    a = MetadataAuth("require", _ring(("k-1", 0, K1), ("k-2", 0, K2)))
    good = _signed(a, key, value)
    assert a.screen(DOMAIN_METADATA, good) == value
    raw = key + value
    if raw:
        i = flip % len(raw)
        bent = raw[:i] + bytes((raw[i] ^ 1,)) + raw[i + 1 :]
        changed = _msg(bent[: len(key)], bent[len(key) :], a.headers(DOMAIN_METADATA, key, value))
        assert a.screen(DOMAIN_METADATA, changed) is REFUSED


def test_the_reasons_a_record_does_not_verify() -> None:
    a = MetadataAuth("require", _ring(("k-1", 0, K1)))
    good = encode_header("k-1", tag_of(K1, DOMAIN_METADATA, b"k", b"v"))
    assert a.check(DOMAIN_METADATA, b"k", b"v", None) == auth.UNSIGNED
    assert a.check(DOMAIN_METADATA, b"k", b"v", [("other", b"x")]) == auth.UNSIGNED
    assert a.check(DOMAIN_METADATA, b"k", b"v", [(HEADER, None)]) == auth.MALFORMED
    assert a.check(DOMAIN_METADATA, b"k", b"v", [(HEADER, good), (HEADER, good)]) == auth.MALFORMED
    assert a.check(DOMAIN_METADATA, b"k", b"v", [(HEADER, b"\x02" + good[1:])]) == auth.UNKNOWN_VERSION
    wrong_id = encode_header("k-2", tag_of(K1, DOMAIN_METADATA, b"k", b"v"))
    assert a.check(DOMAIN_METADATA, b"k", b"v", [(HEADER, wrong_id)]) == auth.UNKNOWN_KEY
    forged = encode_header("k-1", tag_of(K2, DOMAIN_METADATA, b"k", b"v"))
    assert a.check(DOMAIN_METADATA, b"k", b"v", [(HEADER, forged)]) == auth.BAD_TAG
    assert a.check(DOMAIN_METADATA, b"k", b"v", [("x", b""), (HEADER, good)]) is None


# -- keys


def test_several_keys_verify_and_the_newest_ripe_one_signs() -> None:
    old, new = ("k-old", NOW - 2 * auth.ACTIVATION_DELAY_MS, K1), ("k-new", NOW - 1000, K2)
    ring = _ring(old, new)
    assert ring.signing_key(NOW)[0] == "k-old"  # the new key is not yet ripe: readers may lack it
    assert ring.signing_key(NOW + auth.ACTIVATION_DELAY_MS)[0] == "k-new"
    assert _ring(new).signing_key(NOW)[0] == "k-new"  # the only key signs at once
    a = MetadataAuth("require", ring)
    for kid, material in (("k-old", K1), ("k-new", K2)):
        header = encode_header(kid, tag_of(material, DOMAIN_METADATA, b"k", b"v"))
        assert a.check(DOMAIN_METADATA, b"k", b"v", [(HEADER, header)]) is None


def test_a_key_added_to_the_directory_verifies_without_a_restart(tmp_path: Path) -> None:
    new_key(tmp_path)
    ring = KeyRing.from_directory(tmp_path)
    a = MetadataAuth("require", ring)
    added = new_key(tmp_path)
    material = json.loads((tmp_path / f"{added}.key").read_text())["material"]
    import base64

    header = encode_header(added, tag_of(base64.b64decode(material), DOMAIN_METADATA, b"k", b"v"))
    ring._scanned_at -= 2 * auth.RESCAN_INTERVAL_S
    assert a.check(DOMAIN_METADATA, b"k", b"v", [(HEADER, header)]) is None


def test_a_key_directory_without_keys_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="holds no key"):
        KeyRing.from_directory(tmp_path)
    with pytest.raises(ConfigError, match="PROCESSOR_METADATA_AUTH_KEYS"):
        KeyRing.from_directory(tmp_path / "missing")


# -- modes and the screen


def test_off_writes_no_header_and_folds_everything() -> None:
    a = MetadataAuth()
    assert a.headers(DOMAIN_METADATA, b"k", b"v") is None
    assert a.screen(DOMAIN_METADATA, _msg(b"k", b"v", None)) == b"v"


def test_sign_folds_what_does_not_verify_and_counts_it() -> None:
    a = MetadataAuth("sign", _ring(("k-1", 0, K1)))
    before = _count("metadata", auth.UNSIGNED, "folded")
    assert a.screen(DOMAIN_METADATA, _msg(b"k", b"v", None)) == b"v"
    assert _count("metadata", auth.UNSIGNED, "folded") == before + 1
    assert a.screen(DOMAIN_METADATA, _signed(a, b"k", b"v")) == b"v"
    assert _count("metadata", auth.UNSIGNED, "folded") == before + 1


def test_require_refuses_unsigned_and_wrongly_signed_records_and_tombstones() -> None:
    a = MetadataAuth("require", _ring(("k-1", 0, K1)))
    other = MetadataAuth("require", _ring(("k-1", 0, K2)))  # a key of the same id, not ours
    before = _count("metadata", auth.BAD_TAG, "refused")
    before_deletion = _count("deletion", auth.BAD_TAG, "refused")
    assert a.screen(DOMAIN_METADATA, _signed(a, b"k", b"v")) == b"v"
    assert a.screen(DOMAIN_METADATA, _signed(a, b"k", None)) is None  # a signed tombstone
    assert a.screen(DOMAIN_METADATA, _msg(b"k", b"v", None)) is REFUSED
    assert a.screen(DOMAIN_METADATA, _msg(b"k", None, None)) is REFUSED
    assert a.screen(DOMAIN_METADATA, _signed(other, b"k", b"v")) is REFUSED
    assert a.screen(DOMAIN_DELETION, _signed(a, b"k", b"v")) is REFUSED  # the other topic's
    assert _count("metadata", auth.BAD_TAG, "refused") == before + 1
    assert _count("deletion", auth.BAD_TAG, "refused") == before_deletion + 1


def test_require_folds_unsigned_records_the_broker_appended_before_the_cut_only() -> None:
    a = MetadataAuth("require", _ring(("k-1", 0, K1)), unsigned_before_ms=NOW)
    assert a.screen(DOMAIN_METADATA, _msg(b"k", b"v", None, ts=NOW - 1)) == b"v"
    assert a.screen(DOMAIN_METADATA, _msg(b"k", b"v", None, ts=NOW)) is REFUSED
    wrong = encode_header("k-1", tag_of(K2, DOMAIN_METADATA, b"k", b"v"))
    assert a.screen(DOMAIN_METADATA, _msg(b"k", b"v", [(HEADER, wrong)], ts=NOW - 1)) is REFUSED
    no_time = Message(topic="m", partition=0, offset=1, key=b"k", value=b"v", timestamp=(0, -1))
    assert a.screen(DOMAIN_METADATA, no_time) is REFUSED


def test_a_refused_record_is_one_the_fold_rejects_and_shadows_its_key() -> None:
    from processor.metadata.fold import MetadataFold

    fold = MetadataFold()
    verdict = fold.apply_raw(0, b"t/0/claim/00000000-0000-0000-0000-000000000000", REFUSED)
    assert not verdict.accepted and verdict.reason == "undecodable"


# -- settings


def test_settings_install_the_policy(tmp_path: Path) -> None:
    new_key(tmp_path)
    load_settings({"PROCESSOR_METADATA_AUTH": "require", "PROCESSOR_METADATA_AUTH_KEYS": str(tmp_path)})
    assert auth.installed().requires
    load_settings({})
    assert not auth.installed().signs


def test_settings_name_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="PROCESSOR_METADATA_AUTH_KEYS"):
        load_settings({"PROCESSOR_METADATA_AUTH": "sign"})
    with pytest.raises(ConfigError, match="holds no key"):
        load_settings({"PROCESSOR_METADATA_AUTH": "sign", "PROCESSOR_METADATA_AUTH_KEYS": str(tmp_path)})
    with pytest.raises(ConfigError, match="PROCESSOR_METADATA_AUTH"):
        load_settings({"PROCESSOR_METADATA_AUTH": "maybe"})
