"""Sizes and durations written with units: ``64MiB``, ``1.5GB``, ``60s``, ``7d``, or plain numbers.

Pure parsing, used by the configuration for every ``*_bytes`` and ``*_ms`` setting (keyed on the
field name, so settings added later get it too) and by the CLI. Plain numbers keep their old
meaning: bytes for sizes, milliseconds for durations.
"""

from __future__ import annotations

import re

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_DURATION_MS = {
    "": 1,
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 7 * 86_400_000,
}
_NUMBER_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([a-zA-Z]*)\s*$")


def _parse(text: str, units: dict[str, int], what: str) -> int:
    match = _NUMBER_UNIT.match(text)
    if match is None:
        raise ValueError(f"not a {what}: {text!r} (a number with an optional unit, e.g. {_example(what)})")
    number, unit = match.groups()
    factor = units.get(unit.lower())
    if factor is None:
        known = ", ".join(u for u in units if u)
        raise ValueError(f"unknown {what} unit {unit!r} in {text!r} (known: {known})")
    value = float(number) * factor
    if value != int(value):
        raise ValueError(f"{text!r} is not a whole number of {'bytes' if what == 'size' else 'ms'}")
    return int(value)


def _example(what: str) -> str:
    return "64MiB" if what == "size" else "60s"


def parse_size(text: str) -> int:
    """Bytes from ``"64MiB"``, ``"10MB"``, ``"512k"``, ``"1048576"`` (binary units: KiB, MiB, GiB,
    TiB; decimal: k/KB, M/MB, G/GB, T/TB; case-insensitive)."""
    return _parse(text, _SIZE_UNITS, "size")


def parse_duration_ms(text: str) -> int:
    """Milliseconds from ``"250ms"``, ``"60s"``, ``"5m"``, ``"2h"``, ``"7d"``, ``"1w"`` or a plain
    number of milliseconds."""
    return _parse(text, _DURATION_MS, "duration")


def format_size(n: int) -> str:
    """The largest binary unit that shows ``n`` exactly: ``64MiB``, ``1536KiB``, ``1000B``."""
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n and n % factor == 0:
            return f"{n // factor}{unit}"
    return f"{n}B"


def format_duration_ms(n: int) -> str:
    """The largest unit that shows ``n`` milliseconds exactly: ``7d``, ``60s``, ``1500ms``."""
    for unit, factor in (
        ("w", 7 * 86_400_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ):
        if n and n % factor == 0:
            return f"{n // factor}{unit}"
    return f"{n}ms"
