"""A finished future, as confluent-kafka's AdminClient returns them (fakes of the admin client)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaError, KafkaException


def done(value: Any = None, error: KafkaError | None = None) -> Future[Any]:
    """A future holding ``value``, or failing with ``KafkaException(error)``."""
    future: Future[Any] = Future()
    if error is not None:
        future.set_exception(KafkaException(error))
    else:
        future.set_result(value)
    return future
