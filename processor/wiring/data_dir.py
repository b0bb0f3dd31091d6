"""One process per PROCESSOR_DATA_DIR: a worker, follower or gateway locks it while it runs.

Two processes on one data directory would share its RocksDB follower cache, which RocksDB refuses
("IO error: While lock file: .../metadata-cache/LOCK"), naming neither the setting nor the other
process. The lock is taken first, on ``PROCESSOR_DATA_DIR/.lock`` (``flock``: the kernel releases it
when the process ends, however it ends), and the refusal says what to change.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from processor.errors import ConfigError

LOCK_FILE = ".lock"


class DataDirLock:
    """An exclusive lock on a data directory, held until :meth:`release` or the process ends."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        data_dir.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(self._fd, 32, 0).decode(errors="replace").strip()
            os.close(self._fd)
            self._fd = None
            holder = f" (pid {pid})" if pid.isdigit() else ""
            raise ConfigError(
                f"PROCESSOR_DATA_DIR {data_dir} is in use by another worker, follower or gateway{holder}: "
                "give each process a data directory of its own (PROCESSOR_DATA_DIR)"
            ) from None
        except BaseException:
            os.close(self._fd)
            self._fd = None
            raise
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, str(os.getpid()).encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None
