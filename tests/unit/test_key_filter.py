"""The per-segment key filter (``processor.segment.key_filter``): no false negatives, the rate it was
sized for, a hash keyed so the object reveals no key, and bounded decoding of untrusted bytes (every
truncation, every bit flip, forged headers under a good CRC)."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.segment import key_filter
from processor.segment.batch_rewrite import batch_keys
from processor.segment.checksums import crc32
from processor.segment.key_filter import (
    HEADER_LEN,
    MAX_BITS,
    MIN_BITS,
    OVERHEAD,
    FilterSecret,
    KeyFilterSecretError,
    build_key_filter,
    decode_key_filter,
    filter_shape,
)
from tests.batch_samples import make_batch

SECRET = FilterSecret(b"k" * 32)
SALT = bytes(range(16))


def small_filter() -> bytes:
    return build_key_filter([b"alice", b"bob", None, b"", b"alice"], SECRET, SALT).encode()


def test_round_trip_and_every_key_added_is_found() -> None:
    keys = [b"key-%d" % i for i in range(2000)]
    built = build_key_filter([*keys, None], SECRET, SALT)
    decoded = decode_key_filter(built.encode())
    assert decoded == built
    # distinct keys are estimated (linear counting): within a few of 2,000
    assert abs(decoded.key_count - 2000) <= 10 and decoded.hash_count == 7 and decoded.salt == SALT
    assert all(decoded.might_contain(key, SECRET) for key in keys)
    assert decoded.might_contain_any([b"nope", b"key-1999"], SECRET)
    assert len(built.encode()) == OVERHEAD + decoded.bit_count // 8


def test_a_lookup_over_several_chunks_of_keys_finds_every_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lookup computes its keys' indices a chunk at a time (bounded memory): any chunk finds."""
    keys = [b"key-%d" % i for i in range(5000)]
    built = build_key_filter(keys, SECRET, SALT)
    monkeypatch.setattr(key_filter, "_CHUNK_KEYS", 999)
    assert all(built.might_contain(key, SECRET) for key in keys[::97])
    assert built.might_contain_any([b"absent-%d" % i for i in range(3000)] + keys[-1:], SECRET)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)), max_size=30),
    st.integers(MIN_BITS // 8, 4096).map(lambda n: n * 8) | st.just(MAX_BITS),
    st.integers(1, 32),
)
def test_property_the_bits_set_are_the_documented_ones(pairs: list[tuple[int, int]], m: int, k: int) -> None:
    """The compiled build sets exactly the bits of the documented indices, up to the largest size."""
    expected = bytearray(m // 8)
    for h1, h2 in pairs:
        for j in range(k):
            index = (h1 % m + j * ((h2 | 1) % m)) % m
            expected[index >> 3] |= 1 << (index & 7)
    digests = np.array(pairs, dtype=np.uint64).reshape(-1, 2)
    digests.flags.writeable = False  # as sealed digests are
    assert key_filter._set_bits(digests, m, k) == bytes(expected)


def test_null_keys_are_left_out_and_the_empty_key_is_a_key() -> None:
    decoded = decode_key_filter(small_filter())
    assert decoded.key_count == 3  # alice, bob, b"": duplicates once, None never
    assert decoded.might_contain(b"", SECRET)


def test_the_false_positive_rate_is_what_it_was_sized_for() -> None:
    built = build_key_filter([b"in-%d" % i for i in range(20_000)], SECRET, SALT)
    false = sum(built.might_contain(b"out-%d" % i, SECRET) for i in range(20_000))
    assert math.isclose(built.false_positive_rate, 0.01, rel_tol=0.01)
    assert 0.007 < false / 20_000 < 0.013  # deterministic (fixed keys, secret, salt): 1 % +- noise


def test_the_shape_follows_the_formula() -> None:
    # m = -n ln p / (ln 2)^2 rounded up to bytes, k = round(m / n * ln 2)
    assert filter_shape(1000, 0.01) == (9592, 7)
    assert filter_shape(1000, 0.001) == (14384, 10)
    assert filter_shape(0) == (MIN_BITS, 32)  # the smallest filter; more hashes only lower its rate
    bits, hashes = filter_shape(10**9)
    assert bits == MAX_BITS and hashes == 1  # capped: a higher rate, never a false negative
    with pytest.raises(ValueError):
        filter_shape(10, 0.0)


def test_an_empty_segment_has_a_filter_that_finds_nothing() -> None:
    decoded = decode_key_filter(build_key_filter([None, None], SECRET, SALT).encode())
    assert decoded.key_count == 0 and not decoded.might_contain(b"anything", SECRET)


def test_the_object_reveals_no_key_and_answers_only_with_its_secret() -> None:
    key = b"customer-4711@example.com"
    raw = build_key_filter([key], SECRET, SALT).encode()
    assert key not in raw
    other = FilterSecret(b"x" * 32)
    with pytest.raises(KeyFilterSecretError, match="keyed with secret"):
        decode_key_filter(raw).might_contain(key, other)
    assert b"k" * 16 not in repr(SECRET).encode()
    # another secret or another salt sets other bits for the same keys
    keys = [b"a", b"b", b"c"]
    bits = build_key_filter(keys, SECRET, SALT).bits
    assert build_key_filter(keys, other, SALT).bits != bits
    assert build_key_filter(keys, SECRET, bytes(16)).bits != bits
    with pytest.raises(ValueError):
        FilterSecret(b"short")
    with pytest.raises(ValueError):
        build_key_filter(keys, SECRET, b"salt")


def test_a_filter_of_a_batchs_keys() -> None:
    batch = make_batch(0, [(1, b"a", b"x", []), (2, None, b"y", []), (3, b"b", None, [])], "zstd")
    built = build_key_filter(batch_keys(batch), SECRET, SALT)
    assert built.key_count == 2 and built.might_contain_any([b"b"], SECRET)


@settings(max_examples=100, deadline=None)
@given(st.sets(st.binary(max_size=20), max_size=200), st.binary(min_size=16, max_size=16))
def test_property_no_false_negatives(keys: set[bytes], salt: bytes) -> None:
    decoded = decode_key_filter(build_key_filter(keys, SECRET, salt).encode())
    assert all(decoded.might_contain(key, SECRET) for key in keys)


def test_every_truncation_is_refused() -> None:
    raw = small_filter()
    for cut in range(len(raw)):
        with pytest.raises(FormatError):
            decode_key_filter(raw[:cut])
    with pytest.raises(FormatError, match="bytes where a filter of"):
        decode_key_filter(raw + b"\x00")


def test_every_bit_flip_is_refused() -> None:
    raw = small_filter()
    assert len(raw) * 8 < 2974  # CRC-32 detects every error of up to 3 bits in this length
    for bit in range(len(raw) * 8):
        flipped = bytearray(raw)
        flipped[bit >> 3] ^= 1 << (bit & 7)
        with pytest.raises(FormatError):
            decode_key_filter(bytes(flipped))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 8 * (OVERHEAD + MIN_BITS // 8) - 1), min_size=1, max_size=3, unique=True))
def test_property_up_to_three_bit_flips_are_refused(bits: list[int]) -> None:
    raw = bytearray(small_filter())
    for bit in bits:
        raw[bit >> 3] ^= 1 << (bit & 7)
    with pytest.raises(FormatError):
        decode_key_filter(bytes(raw))


def forged(
    *,
    magic: bytes = b"KTKF",
    version: int = 1,
    k: int = 7,
    flags: int = 0,
    m: int = MIN_BITS,
    body: int | None = None,
) -> bytes:
    """A filter with a good CRC over whatever header it is given."""
    head = struct.pack(">4sHBB8s16sQI", magic, version, k, flags, SECRET.secret_id, SALT, 1, m)
    data = head + bytes(m // 8 if body is None else body)
    return data + struct.pack(">I", crc32(data))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (forged(magic=b"KTSI"), "bad magic"),
        (forged(version=3), "format version 3 is not known"),
        (forged(flags=1), "reserved flags"),
        (forged(k=0), "hash count 0"),
        (forged(k=33), "hash count 33"),
        (forged(m=0), "bit count 0"),
        (forged(m=MIN_BITS + 3, body=MIN_BITS // 8), "bit count 67"),
        (forged(m=MAX_BITS + 8, body=0), "bit count"),
        (forged(m=2**32 - 8, body=0), "bit count"),
        (forged(m=1024, body=8), "bytes where a filter of 1024 bits has"),
        (b"\x00" * (OVERHEAD - 1), "shorter than"),
    ],
)
def test_forged_headers_are_refused_with_what_is_wrong(raw: bytes, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        decode_key_filter(raw, where="segment s key filter")


def test_errors_name_the_object() -> None:
    raw = bytearray(small_filter())
    raw[HEADER_LEN] ^= 0xFF
    with pytest.raises(FormatError, match=r"^segment 7: CRC-32 mismatch"):
        decode_key_filter(bytes(raw), where="segment 7")


def _reference_digest(key: bytes, secret: bytes, salt: bytes, version: int) -> bytes:
    """The digest as the module docstring writes it, a key at a time, in plain integers."""
    import hashlib

    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    mask = 2**64 - 1

    def mix(x: int) -> int:
        x ^= x >> 30
        x = x * 0xBF58476D1CE4E5B9 & mask
        x ^= x >> 27
        x = x * 0x94D049BB133111EB & mask
        return x ^ (x >> 31)

    if version == 1 and len(key) > 32:
        row = hashlib.blake2b(key, digest_size=32, person=b"ktp-kf-long").digest()
    else:
        row = key.ljust(max(32, -(-len(key) // 8) * 8), b"\0")
    a = mix(len(key) ^ 0x243F6A8885A308D3)
    for j in range(len(row) // 8):
        a = mix(int.from_bytes(row[8 * j : 8 * j + 8], "little") ^ a)
    b = mix(a ^ 0x13198A2E03707344)
    filter_key = hashlib.blake2b(salt, digest_size=16, key=secret, person=b"ktp-key-filter").digest()
    enc = Cipher(algorithms.AES(filter_key), modes.ECB()).encryptor()
    return enc.update(a.to_bytes(8, "little") + b.to_bytes(8, "little")) + enc.finalize()


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.binary(max_size=80), max_size=40),
    st.binary(min_size=16, max_size=16),
    st.sampled_from([1, 2]),
)
def test_property_the_digests_are_the_documented_ones(keys: list[bytes], salt: bytes, version: int) -> None:
    secret = b"k" * 32
    got = FilterSecret(secret).digests(keys, salt, version)
    assert [bytes(row.tobytes()) for row in got] == [
        _reference_digest(k, secret, salt, version) for k in keys
    ]


def test_versions_differ_only_for_keys_longer_than_32_bytes() -> None:
    keys = [b"", b"k", b"x" * 32, b"x" * 33, b"%036d" % 7]
    v1, v2 = (key_filter.summarise(keys, version).tolist() for version in (1, 2))
    assert v1[:3] == v2[:3] and all(a != b for a, b in zip(v1[3:], v2[3:], strict=True))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)), min_size=1, max_size=30),
    st.integers(MIN_BITS // 8, MAX_BITS // 8).map(lambda n: n * 8),
    st.integers(1, 32),
)
def test_property_the_bit_indices_are_the_documented_ones(
    pairs: list[tuple[int, int]], m: int, k: int
) -> None:
    """(h1 + j * h2) mod m with h1 mod m and (h2 | 1) mod m, as the docstring writes it, for any
    size up to the largest (the vectorised running sum reduces in 32 bits)."""
    array = np.array(pairs, dtype=np.uint64).reshape(-1, 2)
    got = np.concatenate(list(key_filter._bit_indices(array, m, k)), axis=1).T.tolist()
    assert got == [[(h1 % m + j * ((h2 | 1) % m)) % m for j in range(k)] for h1, h2 in pairs]


@pytest.mark.parametrize("count", [1, 2, 3, 100, 5_000, 200_000])
def test_distinct_keys_are_counted_closely(count: int) -> None:
    """Linear counting's standard error is 0.07 % of the count here: three of them allowed."""
    keys = [b"d-%d" % i for i in range(count)]
    counted = build_key_filter(keys + keys[: count // 2], SECRET, SALT).key_count
    assert abs(counted - count) <= max(1, count // 500)


def test_a_known_filter_never_changes() -> None:
    """Filters stay in the bucket for years: a change to the hashing would make old filters answer
    "certainly not" for keys they hold, and an erasure would skip their segments. This pins it."""
    import hashlib

    built = build_key_filter([b"alice", b"", b"x" * 33, b"k7", None], SECRET, SALT)
    assert built.version == 2
    assert (
        hashlib.sha256(built.encode()).hexdigest()
        == "72e68849617bc585772bad56067eb5ea864710eed341bf938dd38462cb9df768"
    )


# Written by the first version of this module (format version 1): 30 UUID-shaped keys of 36 bytes
# (BLAKE2b-summarised in version 1) and 30 short ones.
V1_KEYS = [b"%08d-0000-4000-8000-%012d" % (i, i * 7919) for i in range(30)] + [
    b"user-%d" % i for i in range(30)
]
V1_FILTER = bytes.fromhex(
    "4b544b4600010700186f01d11b734688000102030405060708090a0b0c0d0e0f000000000000003c000002401c829a08"
    "05b3749f7ea7f1b0f98b4bde1abd6cc415f9bcd9f73453d7fc3c870682afe57979f514331ae5f66fa5bf9a4b60480fe9"
    "36e427d84b69de51fb32be2f9b400d68399d3debd3732376"
)


def test_a_version_1_filter_is_read_as_written() -> None:
    old = decode_key_filter(V1_FILTER)
    assert (old.version, old.key_count, old.encode()) == (1, 60, V1_FILTER)
    assert all(old.might_contain(key, SECRET) for key in V1_KEYS)
    # asked with version 2's summaries, it would deny most of its long keys: the version decides
    v2 = key_filter.summarise(V1_KEYS[:30], 2)
    assert sum(old.might_contain_summarised(v2[i : i + 1], SECRET) for i in range(30)) < 10
