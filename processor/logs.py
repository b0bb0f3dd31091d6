"""Logging of every entry point: human-readable text, or one JSON object per line.

``PROCESSOR_LOG_FORMAT=json`` makes every line the worker writes a JSON object, Faust's and the
libraries' included: Faust (through mode) replaces the root logger's handlers when its worker starts,
so :func:`faust_logging_options` hands it the same ``dictConfig`` that :func:`setup_logging` applies
(our formatter on the root logger, stdout), and Faust's stdout/stderr redirection turns stray prints
into log records of the ``mode.redirect`` logger. Python warnings and uncaught exceptions are logged
too. librdkafka's lines already go through the ``librdkafka`` logger (processor/kafka/rdkafka_log.py).

Structured fields come from ``extra=``: ``topic``, ``partition``, ``start_offset``, ``end_offset``,
``segment_id``, ``component``, ... (any non-standard record attribute becomes a field).

Nothing secret is written: the values of secret-looking environment variables (``*SECRET*``,
``*TOKEN*``, ``*PASSWORD*``, ``*SESSION*``, ``*CREDENTIAL*``) seen at start-up, and the password of
any URL-valued variable (``https://user:password@host``), are replaced by ``***`` in every line,
whatever logged them. In JSON lines every string is redacted before it is escaped: a secret holding
``"`` or ``\\`` would no longer match once JSON had escaped it.
"""

from __future__ import annotations

import datetime
import json
import logging
import logging.config
import os
import re
import sys
import traceback
from collections.abc import Mapping
from types import TracebackType
from typing import Any, ClassVar

# SESSION alone is not secret-looking: PROCESSOR_SESSION_TIMEOUT_MS=6000 masked every 6000 in the logs
# (offsets included); AWS_SESSION_TOKEN is a TOKEN.
_SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|PRIVATE", re.IGNORECASE)
# Attributes every LogRecord has; anything else on a record came from ``extra=`` and is a field.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName", "color_message"}
MASK = "***"


_URL_PASSWORD = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*:([^/@\s]+)@")


def mask_url_password(value: str) -> str:
    """``scheme://user:***@host...`` for a URL that carries a password; anything else unchanged."""
    match = _URL_PASSWORD.match(value)
    if match is None:
        return value
    return value[: match.start(1)] + MASK + value[match.end(1) :]


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if _SECRET_NAME.search(k)}
    values |= {m.group(1) for v in env.values() if (m := _URL_PASSWORD.match(v))}
    values = {v for v in values if len(v) >= 4}  # shorter ones would mask common words
    return sorted(values, key=len, reverse=True)  # longest first: a secret may contain another


class _Redacting(logging.Formatter):
    secrets: ClassVar[list[str]] = []  # set by setup_logging, shared by every formatter

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text


def _text_field(text: str) -> str:
    if not text or any(c.isspace() or c in '"=' for c in text):
        return json.dumps(text, ensure_ascii=False)
    return text


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra=`` fields of a record (any attribute a LogRecord does not have of its own)."""
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


class TextFormatter(_Redacting):
    """``time LEVEL logger: message key=value ...``: the ``extra=`` fields the JSON lines carry
    follow the message (a value with spaces, quotes or ``=`` in quotes)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        # each value redacted before it is quoted: quoting escapes a secret's quotes and backslashes
        fields = " ".join(f"{k}={_text_field(self.redact(str(v)))}" for k, v in record_fields(record).items())
        return f"{line} {fields}" if fields else line

    def format(self, record: logging.LogRecord) -> str:
        return self.redact(super().format(record))


class JsonFormatter(_Redacting):
    """One JSON object per record: ts, level, logger, message, the ``extra=`` fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": self.redact(record.getMessage().rstrip("\n")),
        }
        for key, value in record_fields(record).items():
            keep = isinstance(value, int | float | bool | None)
            entry[key] = value if keep else self.redact(str(value))
        if record.exc_info:
            entry["exception"] = self.redact(self.formatException(record.exc_info))
        if record.stack_info:
            entry["stack"] = self.redact(self.formatStack(record.stack_info))
        # Redacted above, before json.dumps escapes quotes and backslashes.
        return json.dumps(entry, default=str, ensure_ascii=False)


def level_number(level: str) -> int:
    name = level.upper()
    name = {"WARN": "WARNING", "CRIT": "CRITICAL"}.get(name, name)
    return int(logging.getLevelNamesMapping().get(name, logging.INFO))


# Libraries' info lines that say nothing an operator acts on, written only at debug level:
# botocore's "Found credentials in environment variables." on every S3 client made.
QUIET_BELOW_DEBUG = ("botocore.credentials",)


def logging_config(level: str, log_format: str) -> dict[str, Any]:
    formatter = JsonFormatter if log_format.lower() == "json" else TextFormatter
    root_level = level_number(level)
    quiet_level = root_level if root_level <= logging.DEBUG else max(root_level, logging.WARNING)
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"processor": {"()": formatter}},
        "handlers": {
            "processor": {
                "class": "logging.StreamHandler",
                "formatter": "processor",
                "stream": "ext://sys.stdout",
            }
        },
        "loggers": {name: {"level": quiet_level} for name in QUIET_BELOW_DEBUG},
        "root": {"level": root_level, "handlers": ["processor"]},
    }


def _log_uncaught(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, value, tb)
        return
    logging.getLogger("processor").critical(
        "uncaught exception: %s",
        "".join(traceback.format_exception_only(kind, value)).strip(),
        exc_info=(kind, value, tb),
    )


def setup_logging(level: str = "info", log_format: str = "text") -> None:
    """Configure the root logger for this process (idempotent)."""
    _Redacting.secrets = secret_values()
    logging.root.handlers.clear()
    logging.config.dictConfig(logging_config(level, log_format))
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught


def faust_logging_options(settings: Any) -> dict[str, Any]:
    """Keyword arguments for ``faust.Worker`` so that it installs our handler, not its own."""
    return {"logging_config": logging_config(settings.log_level, settings.log_format)}


def segment_fields(metadata: Any) -> dict[str, Any]:
    """``extra=`` fields of a log line about one remote segment (a RemoteLogSegmentMetadata)."""
    sid = metadata.segment_id
    return {
        "topic": sid.topic,
        "partition": sid.partition,
        "segment_id": str(sid.id),
        "start_offset": metadata.start_offset,
        "end_offset": metadata.end_offset,
        "size_bytes": metadata.segment_size_in_bytes,
        "records": metadata.record_count,
        "state": metadata.state.name,
    }


def json_logging_active() -> bool:
    return any(isinstance(h.formatter, JsonFormatter) for h in logging.root.handlers)
