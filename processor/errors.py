"""The package's whole error taxonomy. Third-party exceptions never leak past an edge module.

Every error derives from ``ProcessorError``. ``retriable`` tells a caller whether trying the same
operation again may succeed (an unreachable server) or never will (corrupt bytes, bad config).
"""

from __future__ import annotations


class ProcessorError(Exception):
    """Root of every error this package raises on purpose."""

    retriable: bool = False


class ConfigError(ProcessorError):
    """A configuration value is missing or invalid; the message names the variable."""


class InvalidNameError(ProcessorError, ValueError):
    """A topic, prefix or object name that is not allowed (could escape a bucket prefix)."""


class FormatError(ProcessorError):
    """Bytes that do not decode as the format they claim to be (bad magic, length, CRC, version)."""


class CorruptObjectError(FormatError):
    """A stored object's bytes fail verification; names the object (and segment, when known)."""

    def __init__(self, message: str, *, object_key: str | None = None, segment: str | None = None) -> None:
        parts = [message]
        if segment:
            parts.append(f"segment={segment}")
        if object_key:
            parts.append(f"object={object_key}")
        super().__init__("; ".join(parts))
        self.object_key = object_key
        self.segment = segment


class SegmentKeyError(ProcessorError):
    """An encrypted segment's data key cannot be had: no key provider configured for it, Decrypt
    refused, the key unknown or its wrapping altered. Names the segment; never a wrong record."""

    def __init__(self, message: str, *, segment: str, topic: str | None = None) -> None:
        where = f"segment={segment}" + (f", topic={topic}" if topic else "")
        super().__init__(f"{message}; {where}")
        self.segment = segment
        self.topic = topic


class SegmentShreddedError(SegmentKeyError):
    """The segment's topic was crypto-shredded: its key was destroyed on purpose, so the segment can
    never be read again. Not corruption."""


class IllegalTransitionError(ProcessorError):
    """A RemoteLogSegmentMetadata state change that KIP-405 does not allow."""


class StorageError(ProcessorError):
    """The object store failed an operation; may be retriable (network, throttling, 5xx)."""

    def __init__(self, message: str, *, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


class ObjectNotFoundError(StorageError):
    """The named object does not exist."""

    def __init__(self, key: str) -> None:
        super().__init__(f"object not found: {key}", retriable=False)
        self.key = key


class ObjectExistsError(StorageError):
    """A conditional create found the object already there (another writer, or a retry)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"object already exists: {key}", retriable=False)
        self.key = key


class InvalidRangeError(StorageError):
    """A ranged read asked for bytes outside the object."""

    def __init__(self, key: str, detail: str) -> None:
        super().__init__(f"invalid range for {key}: {detail}", retriable=False)
        self.key = key


class ServiceUnavailableError(ProcessorError):
    """A required server (Kafka broker, S3 endpoint) cannot be reached at start."""

    retriable = True


class MetadataTopicError(ProcessorError):
    """Publishing to or reading the metadata topic failed."""

    retriable = True


class OffsetNotInRemoteError(ProcessorError):
    """No COPY_SEGMENT_FINISHED segment holds the requested offset or timestamp."""


class SegmentObjectMissingError(CorruptObjectError):
    """A finished segment's data or index object is gone from remote storage."""


class FencedWriterError(ProcessorError):
    """A record this writer published was not accepted by the metadata topic's readers (another
    claim holds the partition), or its acceptance could not be confirmed: the writer must stop
    writing the partition. Retriable: a new claim (the next assignment) may succeed. ``rejected``:
    the readers definitely rejected it (not merely unconfirmed)."""

    retriable = True
    rejected = False


class TopicIdUnknownError(ProcessorError):
    """The broker could not say, even after retries, which topic id a topic has or whether it exists
    (DescribeTopics timed out, a transport or authorization error ...). Never the same as "the topic
    does not exist". ``topics``: the topics whose answer is missing; ``found``: the ids read
    meanwhile for the other topics asked (topics not in either do not exist or report no id)."""

    retriable = True

    def __init__(self, topics: list[str], reason: str, found: dict[str, str] | None = None) -> None:
        super().__init__(
            f"the topic id of {', '.join(sorted(topics))} could not be read from the broker: {reason}"
        )
        self.topics = sorted(topics)
        self.found = dict(found or {})


class MetadataBehindBucketError(ProcessorError):
    """The bucket holds archived segments (manifests) of a partition that the metadata topic knows
    nothing of: a lost or re-created metadata topic, a misspelt one, or another deployment writing
    the same bucket and prefix. The partition is not led until ``processor rebuild-metadata`` ran."""
