"""A segment's key filter: a Bloom filter over the record keys of one segment, written at copy time,
so that erasing keys reads only the segments that may hold one of them. Pure.

A filter answers "maybe" or "certainly not": never a false "certainly not" for a key added, and a
false "maybe" for about ``fp_rate`` of the keys not added. Null keys are never added (an erasure
names keys). The hash is keyed with a secret of the processor and salted per filter, so the object
in the bucket does not reveal the keys: without the secret, nobody can test whether a guessed key
is in a segment, and the same key sets different bits in different segments, so filters do not
show which segments share keys.

Byte layout (format versions 1 and 2, big-endian; they differ only in the summary of a key longer
than 32 bytes, below)::

     0   4  magic        b"KTKF"
     4   2  version      u16  2 (this module writes 2, reads 1 and 2)
     6   1  hash_count   u8   k, 1..MAX_HASH_COUNT
     7   1  flags        u8   0 (reserved: a reader refuses any other value)
     8   8  secret_id    the first 8 bytes of BLAKE2b(person "ktp-kf-secretid", key secret) of the
                         empty string: which secret keyed the filter, without revealing it
    16  16  salt         this filter's own 16 bytes (the segment's id, say)
    32   8  key_count    u64  distinct keys added (as counted when built: see Sizing)
    40   4  bit_count    u32  m, a multiple of 8, MIN_BITS..MAX_BITS
    44 m/8  bits         bit i is bit (i & 7) of byte (i >> 3), least significant first
   end   4  crc32        u32  CRC-32 (zlib polynomial) of every byte before it

A key's bits, from a 16-byte digest ``d`` of it: ``h1 = d[0:8]``, ``h2 = d[8:16] | 1`` (little-endian
u64), bits ``(h1 + i * h2) mod m`` for ``i = 0 .. k-1`` (Kirsch and Mitzenmacher's double hashing: two
hashes give k indices with the same false-positive rate asymptotically). The digest::

    row  = version 2: the key, zero-padded to a multiple of 8 bytes and to at least 32;
           version 1: the key zero-padded to 32 bytes if it has at most 32, else BLAKE2b-256(key,
           person "ktp-kf-long") (the same row as version 2 for a key of up to 32 bytes; ``key_filter_v1``)
    w0..w(c-1) the row's little-endian u64 words; L the key's length
    mix(x) = splitmix64's finaliser: x ^= x >> 30; x *= 0xBF58476D1CE4E5B9; x ^= x >> 27;
             x *= 0x94D049BB133111EB; x ^= x >> 31 (mod 2**64)
    a = mix(w(c-1) ^ ... mix(w1 ^ mix(w0 ^ mix(L ^ 0x243F6A8885A308D3))))
    b = mix(a ^ 0x13198A2E03707344)
    d = AES-128(a || b), the 16 bytes little-endian, under the filter's key
        BLAKE2b(salt, digest_size 16, key secret, person "ktp-key-filter")

Version 2 summarises a long key by the same chain over all its words, where version 1 hashed it
first: one BLAKE2b call a key in Python (~0.5 us, the interpreter lock held) for every key of 33
bytes or more, a 36-character UUID string among them, the commonest key there is; the chain runs in
the compiled walk (``key_kernels``, ~10 ns for such a key). Version 1 filters are read as written:
a lookup summarises the keys it asks for by the filter's version.

``a || b`` is a public, non-cryptographic summary of the key, 64 bits of it independent (two keys
with the same summary only add a false "maybe": ~n^2 / 2^65 of them among n keys); the secret
enters through AES, a pseudo-random permutation under a key derived from the secret and the
filter's salt: without the secret the bits say nothing about the keys, and the same key sets
different bits in different segments. Why not a keyed hash of each key (BLAKE2b with the secret, a
call a key): in Python that is ~0.5 us a key and, with the rest of a key-at-a-time build, made the
filter cost 1.2 us a key on the offload path (measured: a worker's CPU 4x at 100-byte records);
here the summaries are computed in compiled code and sealed by one AES call over all of a
segment's, the bits set by compiled code too: ~0.1 us a key, most of it off the interpreter lock.

Sizing (n distinct keys, m bits, k hashes): the false-positive rate is p ~ (1 - e^(-k*n/m))^k,
smallest at k = (m/n) * ln 2, where p = 2^-k; so m = -n * ln(p) / (ln 2)^2 and k = -log2(p). At the
default p = 1 %: 9.59 bits (1.2 bytes) a key and k = 7 (p = 1.00 % with k rounded). Why 1 %: an
erasure of K keys reads each segment that holds none of them with probability about K * p (3 % of
them for 3 keys); 0.1 % would cost 1.8 bytes a key (1.5x the filter) to save reads of ~1 % of the
segments per erased key, while the filter adds 1.2 % to a segment of 100-byte records and 0.1 % to
one of 1 KiB records. A filter is at most MAX_BITS (64 MiB, ~56 million keys at 1 %); a segment with
more distinct keys gets a filter of that size and a higher rate (``KeyFilter.false_positive_rate``).
The builder counts distinct keys by linear counting over their digests (Whang, Vander-Zanden and
Taylor, 1990): each digest marks one of T slots, T a power of two from 4n (at least 2^20, at most
2^24), and n = -T ln(1 - marked / T), a standard error of about n / sqrt(2T) (0.07 % of n at most
up to 2^18 keys, less above; measured: 561,274 for 561,288), at 8 ns a key where sorting the
digests cost 50. The count only sizes the filter and estimates its rate.

Decoding (``decode_key_filter``) takes untrusted bytes from the bucket and checks them in one
place before anything uses them: length, magic, version, flags, hash count and bit count ranges,
exact length, CRC. Every failure is a ``FormatError`` saying what is wrong; a filter keyed with
another secret is a ``KeyFilterSecretError`` on lookup (answering "certainly not" would skip a
segment that holds the key). A decoded filter carries its version, and a lookup summarises the keys
it asks for by that version (:func:`summarise`).

Written here rather than taken from a Bloom filter library (PyPI's ``rbloom``, ``pyprobables``,
``pybloom-live``): none keys its hash with a secret, and their serialised forms are their own,
undocumented and tied to their versions, while an archive keeps its filters for years: the layout
above is the one this module owns. The filter is built by compiled code (``key_kernels``) and
looked up with numpy, each after one AES call over all its keys (a segment's, or an erasure's).
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from processor.errors import FormatError, ProcessorError
from processor.segment import key_filter_v1
from processor.segment.checksums import crc32

MAGIC = b"KTKF"
KEY_FILTER_VERSION = 2  # what this module writes
READABLE_VERSIONS = (1, 2)
DEFAULT_FP_RATE = 0.01
MIN_BITS = 64
MAX_BITS = 64 * 8 * 1024 * 1024  # 64 MiB of bits
MAX_HASH_COUNT = 32
SALT_LEN = 16
SECRET_ID_LEN = 8
MIN_SECRET_LEN = 16
MAX_SECRET_LEN = 64  # BLAKE2b's longest key

_HEAD = struct.Struct(">4sHBB8s16sQI")  # magic, version, k, flags, secret_id, salt, key_count, m
_CRC = struct.Struct(">I")
HEADER_LEN = _HEAD.size  # 44
OVERHEAD = HEADER_LEN + _CRC.size  # 48
_PERSON = b"ktp-key-filter"
_ID_PERSON = b"ktp-kf-secretid"


class KeyFilterSecretError(ProcessorError):
    """A key filter was keyed with another secret than the one given: it cannot answer."""


class FilterSecret:
    """The secret that keys every filter's hash (16 to 64 bytes), and its public id."""

    __slots__ = ("_secret", "secret_id")

    def __init__(self, secret: bytes) -> None:
        if not MIN_SECRET_LEN <= len(secret) <= MAX_SECRET_LEN:
            raise ValueError(
                f"a key filter secret has {MIN_SECRET_LEN} to {MAX_SECRET_LEN} bytes, not {len(secret)}"
            )
        self._secret = bytes(secret)
        self.secret_id = hashlib.blake2b(
            digest_size=SECRET_ID_LEN, key=self._secret, person=_ID_PERSON
        ).digest()

    def digests(self, keys: Sequence[bytes], salt: bytes, version: int = KEY_FILTER_VERSION) -> np.ndarray:
        """The 16-byte digests (see the module docstring) of ``keys`` for one filter's salt and
        version, as rows of two little-endian u64 (h1, h2 before reduction)."""
        return self.seal(summarise(keys, version), salt)

    def seal(self, summaries: np.ndarray, salt: bytes) -> np.ndarray:
        """:meth:`digests` of keys already summarised (:func:`summarise`): an erasure summarises its
        keys once a version and seals them for each segment's salt."""
        filter_key = hashlib.blake2b(salt, digest_size=16, key=self._secret, person=_PERSON).digest()
        encryptor = Cipher(algorithms.AES(filter_key), modes.ECB()).encryptor()
        sealed = encryptor.update(summaries.tobytes()) + encryptor.finalize()
        return np.frombuffer(sealed, dtype="<u8").reshape(-1, 2)

    def __repr__(self) -> str:
        return f"FilterSecret(id={self.secret_id.hex()})"  # never the secret


def filter_shape(key_count: int, fp_rate: float = DEFAULT_FP_RATE) -> tuple[int, int]:
    """(bit count m, hash count k) for ``key_count`` distinct keys at ``fp_rate`` (see the module
    docstring): m = -n ln p / (ln 2)^2 rounded up to whole bytes, within MIN_BITS..MAX_BITS;
    k = round((m / n) ln 2), within 1..MAX_HASH_COUNT."""
    if not 0.0 < fp_rate < 1.0:
        raise ValueError(f"a false-positive rate is between 0 and 1, not {fp_rate}")
    n = max(key_count, 1)
    bits = math.ceil(-n * math.log(fp_rate) / math.log(2) ** 2)
    bits = min(max(MIN_BITS, (bits + 7) // 8 * 8), MAX_BITS)
    hashes = min(max(1, round(bits / n * math.log(2))), MAX_HASH_COUNT)
    return bits, hashes


@dataclass(frozen=True, slots=True)
class KeyFilter:
    """A decoded (or built) filter; ``bits`` holds ``bit_count`` bits."""

    hash_count: int
    secret_id: bytes
    salt: bytes
    key_count: int
    bit_count: int
    bits: bytes = field(repr=False)
    version: int = KEY_FILTER_VERSION  # how its keys were summarised (module docstring)

    @property
    def false_positive_rate(self) -> float:
        """The expected rate of false "maybe"s: (1 - e^(-k n / m))^k."""
        return float((1.0 - math.exp(-self.hash_count * self.key_count / self.bit_count)) ** self.hash_count)

    def might_contain(self, key: bytes, secret: FilterSecret) -> bool:
        """False only when ``key`` was certainly not added."""
        return self.might_contain_any((key,), secret)

    def might_contain_any(self, keys: Iterable[bytes], secret: FilterSecret) -> bool:
        """False only when none of ``keys`` was added (what an erasure of several keys asks)."""
        return self.might_contain_summarised(summarise(list(keys), self.version), secret)

    def might_contain_summarised(self, summaries: np.ndarray, secret: FilterSecret) -> bool:
        """:meth:`might_contain_any` of keys already summarised for this filter's version
        (``summarise(keys, filter.version)``)."""
        if secret.secret_id != self.secret_id:
            raise KeyFilterSecretError(
                f"key filter keyed with secret {self.secret_id.hex()}, not {secret.secret_id.hex()}"
            )
        bits = np.frombuffer(self.bits, dtype=np.uint8)
        for index in _bit_indices(secret.seal(summaries, self.salt), self.bit_count, self.hash_count):
            found = (bits[index >> np.uint32(3)] >> (index & np.uint32(7)).astype(np.uint8)) & 1
            if found.all(axis=0).any():
                return True
        return False

    def encode(self) -> bytes:
        head = _HEAD.pack(
            MAGIC,
            self.version,
            self.hash_count,
            0,
            self.secret_id,
            self.salt,
            self.key_count,
            self.bit_count,
        )
        body = head + self.bits
        return body + _CRC.pack(crc32(body))


def build_key_filter(
    keys: Iterable[bytes | None], secret: FilterSecret, salt: bytes, *, fp_rate: float = DEFAULT_FP_RATE
) -> KeyFilter:
    """The filter of ``keys`` (null keys left out, duplicates counted once), sized for their
    number at ``fp_rate``, keyed with ``secret`` and salted with ``salt`` (16 bytes)."""
    return build_summarised_key_filter(
        summarise([key for key in keys if key is not None]), secret, salt, fp_rate=fp_rate
    )


def build_summarised_key_filter(
    summaries: np.ndarray, secret: FilterSecret, salt: bytes, *, fp_rate: float = DEFAULT_FP_RATE
) -> KeyFilter:
    """:func:`build_key_filter` of keys already summarised for this module's version
    (:func:`summarise`): a segment's keys are summarised from its blocks (``key_kernels``)."""
    if len(salt) != SALT_LEN:
        raise ValueError(f"a key filter salt has {SALT_LEN} bytes, not {len(salt)}")
    pairs = secret.seal(summaries, salt)
    distinct = _count_distinct(pairs[:, 0])  # a key added twice sets the same bits twice
    m, k = filter_shape(distinct, fp_rate)
    return KeyFilter(k, secret.secret_id, bytes(salt), distinct, m, _set_bits(pairs, m, k))


_MIN_SLOTS = 1 << 20
_MAX_SLOTS = 1 << 24


def _count_distinct(first: np.ndarray) -> int:
    """The number of distinct values among ``first`` (u64 digests, uniformly spread), by linear
    counting (module docstring: Sizing); never more than ``len(first)``, at least 1 if any."""
    n = len(first)
    if n == 0:
        return 0
    slots = min(max(_MIN_SLOTS, 1 << (4 * n - 1).bit_length()), _MAX_SLOTS)
    marked = np.zeros(slots, dtype=np.bool_)
    marked[first & np.uint64(slots - 1)] = True
    empty = slots - int(np.count_nonzero(marked))
    if empty == 0:  # every slot marked: far more keys than slots (a filter that big is capped anyway)
        return n
    return max(1, min(n, round(-slots * math.log(empty / slots))))


# Keys whose bit indices a lookup computes at once: bounds the temporary arrays (4 bytes an index).
_CHUNK_KEYS = 1 << 16


def _bit_indices(pairs: np.ndarray, m: int, k: int) -> Iterator[np.ndarray]:
    """The bit indices of keys whose (h1, h2) are the rows of ``pairs``, a chunk of keys at a time,
    one column of k indices a key (row j holds index j of every key): (h1 + j * h2) mod m for
    j = 0 .. k-1, with h1 = h1 mod m and h2 = (h2 | 1) mod m. Computed as a running sum reduced
    once a step, in 32 bits: for x < 2m (h1, h2 < m <= 2**29), x mod m = min(x, x - m), the
    subtraction wrapping above x when x < m. Two SIMD passes a step rather than a 64-bit modulo for
    each of the k indices (measured: 11 vs 46 ns a key at k = 7)."""
    m64, m32 = np.uint64(m), np.uint32(m)
    for at in range(0, len(pairs), _CHUNK_KEYS):
        chunk = pairs[at : at + _CHUNK_KEYS]
        rows = np.empty((k, len(chunk)), dtype=np.uint32)
        rows[0] = chunk[:, 0] % m64
        h2 = ((chunk[:, 1] | np.uint64(1)) % m64).astype(np.uint32)
        less_m = np.empty(len(chunk), dtype=np.uint32)
        for j in range(1, k):
            np.add(rows[j - 1], h2, out=rows[j])
            np.subtract(rows[j], m32, out=less_m)
            np.minimum(rows[j], less_m, out=rows[j])
        yield rows


def _set_bits(pairs: np.ndarray, m: int, k: int) -> bytes:
    """The filter's bits for keys whose (h1, h2) are the rows of ``pairs`` (:func:`_bit_indices`),
    set by compiled code (``key_kernels``, imported here as by :func:`summarise`)."""
    from processor.segment.key_kernels import filter_bits

    return filter_bits(pairs, m, k)


def decode_key_filter(data: bytes | bytearray | memoryview, *, where: str = "key filter") -> KeyFilter:
    """Check and decode a filter object (untrusted bytes): every check of the format is here."""
    view = memoryview(data)
    if len(view) < OVERHEAD:
        raise FormatError(f"{where}: {len(view)} bytes, shorter than the {OVERHEAD}-byte minimum")
    magic, version, k, flags, secret_id, salt, key_count, m = _HEAD.unpack_from(view)
    if magic != MAGIC:
        raise FormatError(f"{where}: bad magic {magic!r}, not a key filter")
    if version not in READABLE_VERSIONS:
        raise FormatError(f"{where}: format version {version} is not known (this reader knows 1 and 2)")
    if flags != 0:
        raise FormatError(f"{where}: reserved flags {flags:#04x} are set")
    if not 1 <= k <= MAX_HASH_COUNT:
        raise FormatError(f"{where}: hash count {k} is outside 1..{MAX_HASH_COUNT}")
    if m % 8 or not MIN_BITS <= m <= MAX_BITS:
        raise FormatError(f"{where}: bit count {m} is not a multiple of 8 in {MIN_BITS}..{MAX_BITS}")
    if len(view) != OVERHEAD + m // 8:
        raise FormatError(f"{where}: {len(view)} bytes where a filter of {m} bits has {OVERHEAD + m // 8}")
    (stored,) = _CRC.unpack_from(view, len(view) - _CRC.size)
    if crc32(view[: -_CRC.size]) != stored:
        raise FormatError(f"{where}: CRC-32 mismatch")
    return KeyFilter(
        k, bytes(secret_id), bytes(salt), key_count, m, bytes(view[HEADER_LEN : -_CRC.size]), version
    )


def summarise(keys: Sequence[bytes], version: int = KEY_FILTER_VERSION) -> np.ndarray:
    """Each key's 16-byte summary ``a || b`` (module docstring) by ``version``'s rule, as rows of
    two little-endian u64. Computed by the compiled chain (``key_kernels``, imported here: numba
    loads with the first summary a process computes) over the keys laid end to end."""
    if version not in READABLE_VERSIONS:
        raise ValueError(f"key filter version {version} is not known")
    from processor.segment.key_kernels import summarise_spans

    rows = keys if version == 2 else key_filter_v1.summary_rows(keys)
    n = len(keys)
    sizes = np.fromiter(map(len, rows), dtype=np.int64, count=n)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=n)
    return summarise_spans(b"".join(rows), starts, sizes, lengths)
