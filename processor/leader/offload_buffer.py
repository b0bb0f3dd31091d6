"""The offload buffer's memory bound (PIP-76): bytes held between consumption and upload.

Bytes are counted when a record is encoded into an open segment and released when its segment has
been copied (or dropped on revocation). The engine asks :meth:`fits` before taking a record; when
it does not fit, consumption pauses until uploads bring usage under the resume mark (hysteresis, so
consumption does not flap). Thread-safe: the consumer thread adds, copier threads release.
"""

from __future__ import annotations

import threading


class OffloadBuffer:
    def __init__(self, bound_bytes: int, resume_fraction: float = 0.75) -> None:
        if bound_bytes <= 0:
            raise ValueError("the buffer bound must be positive")
        self.bound = bound_bytes
        self.resume_mark = int(bound_bytes * resume_fraction)
        self._used = 0
        self._peak = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    @property
    def peak(self) -> int:
        return self._peak

    def fits(self, nbytes: int) -> bool:
        """True if ``nbytes`` more stay within the bound. An empty buffer takes any one record, so a
        record larger than the whole bound cannot wedge its partition (it is logged by the engine)."""
        return self._used == 0 or self._used + nbytes <= self.bound

    def add(self, nbytes: int) -> None:
        with self._lock:
            self._used += nbytes
            if self._used > self._peak:
                self._peak = self._used

    def release(self, nbytes: int) -> None:
        with self._lock:
            self._used -= nbytes
            if self._used < 0:
                raise AssertionError(f"offload buffer released more than it held ({self._used})")

    def can_resume(self) -> bool:
        return self._used <= self.resume_mark
