"""librdkafka's log lines, through Python logging: retriable ones in the project's words, repeats
folded into one line and a count.

Every client :mod:`processor.kafka.clients` builds logs to the ``librdkafka`` logger. Warnings about
what librdkafka retries by itself (a coordinator still loading after a broker start: "Failed to
acquire idempotence PID ... Coordinator load in progress: retrying") are not written as librdkafka's
lines: at debug level in ours, and once in ours when the condition lasts (:class:`RetriableWarnings`).
Repeated lines are folded (:class:`RepeatFolder`); the broker check
(:func:`processor.kafka.admin.check_broker`) keeps a client's FAIL lines as reasons for its error
instead (:func:`reasons_logger`).
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
log = logging.getLogger(__name__)


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


# librdkafka warnings about a condition it retries by itself and that resolves without us: a group or
# transaction coordinator loading its state after a broker (re)start, a coordinator or partition
# leader moving. librdkafka ends the lines it retries with ": retrying".
_RETRIABLE = re.compile(
    r": retrying$|Coordinator load in progress|Coordinator not available|Not coordinator"
    r"|Leader not available|Not leader for partition"
)
_THREAD = re.compile(r"^\[thrd:[^\]]*\]: ")  # librdkafka's thread, in front of a message
# How long a retried condition may last before it is said (once a window, in the project's words),
# and how long without one of its lines ends it.
RETRIABLE_LASTING_S = 30.0
RETRIABLE_QUIET_S = 30.0


class _Episode:
    __slots__ = ("said", "seen", "since")

    def __init__(self, now: float) -> None:
        self.since = now  # the first line of the condition
        self.seen = now  # its latest line
        self.said: float | None = None  # when it was last said


class RetriableWarnings(logging.Filter):
    """Keeps librdkafka's lines about what it retries by itself out of the log: each goes to the
    project's logger at debug level instead. A condition whose lines keep coming for ``lasting_s``
    (with no gap of ``quiet_s``) is said once in the project's words at warning level, with
    librdkafka's reason, and again each ``window_s`` while it lasts."""

    def __init__(
        self,
        lasting_s: float = RETRIABLE_LASTING_S,
        quiet_s: float = RETRIABLE_QUIET_S,
        window_s: float = FOLD_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.lasting_s, self.quiet_s, self.window_s = lasting_s, quiet_s, window_s
        self.clock = clock
        self._episodes: dict[tuple[str, str], _Episode] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or len(args) != 3:  # confluent-kafka: (facility, client, message)
            return True
        facility, client, message = (str(a) for a in args)
        if not _RETRIABLE.search(message):
            return True
        reason = _THREAD.sub("", message).removesuffix(": retrying")
        log.debug("Kafka client %s retries (librdkafka %s): %s", client, facility, reason)
        now = self.clock()
        key = (client, _VARYING.sub("", reason))
        with self._lock:
            episode = self._episodes.get(key)
            if episode is None or now - episode.seen > self.quiet_s:
                episode = self._episodes[key] = _Episode(now)
            episode.seen = now
            lasting = now - episode.since
            due = lasting >= self.lasting_s and (episode.said is None or now - episode.said >= self.window_s)
            if due:
                episode.said = now
        if due:
            log.warning(
                "Kafka client %s has been retrying for %.0f s (librdkafka retries it by itself; if it "
                "lasts, look at the broker): %s",
                client,
                lasting,
                reason,
            )
        return False


RDKAFKA_RETRIABLE = RetriableWarnings()
RDKAFKA_LOG.addFilter(RDKAFKA_RETRIABLE)  # first: a retried line is never folded or written
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
