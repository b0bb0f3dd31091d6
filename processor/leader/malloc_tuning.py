"""glibc's allocator set for the data path's large, short-lived buffers (fetch responses).

Every fetch response is several MiB, and aiokafka's reader makes fresh buffers of that size for
each (the socket's chunks gathered, then cut into the response's ``bytes``). glibc serves such
sizes from memory it maps and, once freed, hands back to the kernel (``munmap`` or trimming the
heap top past ``M_TRIM_THRESHOLD``), so the next response faults in its pages again: the kernel
zeroes and maps every 4 KiB page once per copy. Measured on this machine, the batch source alone
reading a 1 KiB-record topic: 2.2-3.1 CPU-seconds per GB with glibc's defaults, 1.0-1.1 with the
settings below, most of the difference page faults inside ``memcpy``.

:func:`tune_allocator` fixes the mmap threshold at 32 MiB (glibc's own ceiling for its dynamic
threshold; fetch responses are at most 32 MiB, ``wiring/fetch_sizes``) and keeps up to 64 MiB of
freed memory at a heap's top instead of returning it, so buffers reuse pages already mapped. The
cost is that much memory held between responses, outside the offload buffer's bound (the memory
benchmark checks that the worker's RSS still follows the bound). Only glibc has ``mallopt`` with
these meanings; elsewhere (musl, macOS) nothing is changed and this says so.

Hand-written with ``ctypes`` (standard library) because no maintained package exposes ``mallopt``.
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger(__name__)

MiB = 1024 * 1024
M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * MiB
TRIM_THRESHOLD_BYTES = 64 * MiB


def tune_allocator() -> bool:
    """Apply the settings above to this process's glibc allocator; True if they were applied."""
    if not sys.platform.startswith("linux"):
        log.info("allocator tuning skipped: not Linux (%s)", sys.platform)
        return False
    process = ctypes.CDLL(None)  # the symbols of the running program, the C library's included
    if not hasattr(process, "gnu_get_libc_version") or not hasattr(process, "mallopt"):
        log.info("allocator tuning skipped: the C library is not glibc")
        return False
    mallopt = process.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    applied = bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
        and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    )
    if not applied:
        log.warning(
            "glibc refused the allocator settings (mmap threshold %d, trim threshold %d): fetch "
            "responses keep faulting in fresh pages (more CPU per byte fetched)",
            MMAP_THRESHOLD_BYTES,
            TRIM_THRESHOLD_BYTES,
        )
    return applied
