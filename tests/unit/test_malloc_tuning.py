"""The leader's allocator settings: on glibc, buffers of fetch-response size come from the heap (no
fresh mapping each, no page faults again) once tuned. Run in a child process: the settings are the
whole process's, and the test process keeps glibc's defaults."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import ctypes, json

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
            "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2

    def mapped_for(size):
        before = libc.mallinfo2().hblkhd
        buf = bytearray(size)
        during = libc.mallinfo2().hblkhd
        del buf
        return during - before

    from processor.leader.malloc_tuning import tune_allocator
    untuned = mapped_for(16 << 20)
    applied = tune_allocator()
    print(json.dumps({"untuned": untuned, "applied": applied, "tuned": mapped_for(16 << 20)}))
    """
)


def _glibc_with_mallinfo2() -> bool:
    process = ctypes.CDLL(None)
    return hasattr(process, "gnu_get_libc_version") and hasattr(process, "mallinfo2")


@pytest.mark.skipif(not _glibc_with_mallinfo2(), reason="glibc 2.33+ only (mallinfo2)")
def test_once_tuned_a_fetch_sized_buffer_comes_from_the_heap_not_a_fresh_mapping() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], check=True, capture_output=True, text=True)
    seen = json.loads(out.stdout)
    assert seen["untuned"] >= 16 << 20  # glibc's default: a 16 MiB buffer is mapped for itself
    assert seen["applied"] is True
    assert seen["tuned"] == 0  # from the heap, whose pages stay mapped between buffers
