"""librdkafka's log lines, through Python logging: repeats folded into one line and a count.

Every client :mod:`processor.kafka.clients` builds logs to the ``librdkafka`` logger, which folds
repeated lines (:class:`RepeatFolder`); the broker check (:func:`processor.kafka.admin.check_broker`)
keeps a client's FAIL lines as reasons for its error instead (:func:`reasons_logger`).
"""

from __future__ import annotations

import atexit
import collections
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable

RDKAFKA_LOG = logging.getLogger("librdkafka")


# Parts of a librdkafka line that change between repeats of the same event (how long the attempt
# took, librdkafka's own count of what it suppressed): left out of the key repeats are folded by.
_VARYING = re.compile(r"\(after \d+ms in state |(, )?\d+ identical error\(s\) suppressed")
FOLD_WINDOW_S = 60.0


class _Fold:
    __slots__ = ("count", "last", "since")

    def __init__(self, since: float) -> None:
        self.since = since
        self.count = 0  # repeats held back since ``since``
        self.last: logging.LogRecord | None = None  # the latest of them, for the summary


class RepeatFolder(logging.Filter):
    """Folds librdkafka's repeated lines: the first of a (facility, message) is let through, the
    repeats within ``window_s`` are counted, not written. The next one after the window carries the
    count ("... (repeated 37 more times in the last 60 s)"), so a lasting problem shows once per
    window; :meth:`flush` writes the counts still held (before a command reports its error, and at
    exit). With no broker a client retries every few milliseconds: ~190 identical ``FAIL`` lines
    before the one message that matters, without this."""

    def __init__(
        self,
        target: logging.Logger,
        window_s: float = FOLD_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.target = target  # where summaries are written
        self.window_s = window_s
        self.clock = clock
        self._folds: dict[tuple[str, str], _Fold] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(record: logging.LogRecord) -> tuple[str, str] | None:
        args = record.args
        if not isinstance(args, tuple) or len(args) != 3:  # confluent-kafka: (facility, client, message)
            return None
        return str(args[0]), _VARYING.sub("", str(args[2]))

    def filter(self, record: logging.LogRecord) -> bool:
        if "rdkafka_repeated" in record.__dict__:  # a summary of ours
            return True
        key = self.key(record)
        if key is None:
            return True
        now = self.clock()
        with self._lock:
            fold = self._folds.get(key)
            if fold is not None and now - fold.since < self.window_s:
                fold.count += 1
                fold.last = record
                return False
            summaries = self._expired(now, keep=key)
            self._folds[key] = _Fold(now)
            if fold is not None and fold.count:
                record.__dict__["rdkafka_repeated"] = fold.count
                record.msg = (
                    f"{record.msg} (repeated {fold.count} more times in the last {now - fold.since:.0f} s)"
                )
        self._write(summaries)
        return True

    def flush(self) -> None:
        """Write the counts of the repeats held back so far (each as one summary line)."""
        with self._lock:
            summaries = self._expired(None, keep=None)
        self._write(summaries)

    def _expired(self, now: float | None, keep: tuple[str, str] | None) -> list[logging.LogRecord]:
        """Summaries of the folds whose window closed (all of them with ``now`` None), dropped."""
        out: list[logging.LogRecord] = []
        for key, fold in list(self._folds.items()):
            if key == keep or (now is not None and now - fold.since < self.window_s):
                continue
            del self._folds[key]
            if fold.count and fold.last is not None:
                span = (self.clock() if now is None else now) - fold.since
                summary = logging.makeLogRecord(fold.last.__dict__)
                summary.msg = f"{fold.last.msg} (repeated {fold.count} more times in {span:.0f} s)"
                summary.__dict__["rdkafka_repeated"] = fold.count
                out.append(summary)
        return out

    def _write(self, summaries: list[logging.LogRecord]) -> None:
        for summary in summaries:
            self.target.handle(summary)


RDKAFKA_FOLD = RepeatFolder(RDKAFKA_LOG)
RDKAFKA_LOG.addFilter(RDKAFKA_FOLD)
atexit.register(RDKAFKA_FOLD.flush)


class _ReasonHandler(logging.Handler):
    def __init__(self, seen: collections.deque[tuple[str, str]]) -> None:
        super().__init__(logging.INFO)
        self.seen = seen

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        if args and args[0] == "FAIL":  # confluent-kafka logs (facility, client name, message)
            self.seen.append(("FAIL", str(args[-1])))
            return  # a reason: the check's error says it once, if the check fails
        if record.levelno >= logging.WARNING:
            RDKAFKA_LOG.handle(record)


def reasons_logger(seen: collections.deque[tuple[str, str]]) -> logging.Logger:
    """A logger of its own (not in the logging tree) that keeps librdkafka's FAIL lines in ``seen``
    (not written: the check's error names the reason) and passes other warnings on to the
    ``librdkafka`` logger."""
    logger = logging.Logger("librdkafka.check", logging.INFO)
    logger.propagate = False
    logger.addHandler(_ReasonHandler(seen))
    return logger


# A FAIL line of a connection refused, naming the broker ("host:port/bootstrap", with the protocol
# in front when it is not PLAINTEXT).
_CONNECTION_REFUSED = re.compile(r"(?:^|\]: )(?P<broker>[^\s\]]+): Connect to \S+ failed: Connection refused")


def refusing_brokers(seen: Iterable[tuple[str, str]]) -> set[str]:
    return {m.group("broker") for _, message in seen if (m := _CONNECTION_REFUSED.search(message))}
