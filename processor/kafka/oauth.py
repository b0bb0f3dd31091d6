"""OAUTHBEARER tokens for the Kafka clients: a user hook, or Amazon MSK IAM.

A token source is a zero-argument callable returning ``(token, expires_at)`` with ``expires_at`` in
seconds since the epoch (or the token alone: it is then taken as valid for
``DEFAULT_LIFETIME_S``). It is named by ``PROCESSOR_SASL_OAUTH_TOKEN_PROVIDER``:

- ``module:function`` (or ``module.function``): the user's own callable, imported once;
- ``aws-msk-iam``: Amazon MSK IAM through ``aws-msk-iam-sasl-signer-python`` (the ``[msk]`` extra),
  signing with the standard AWS credential chain for ``PROCESSOR_SASL_OAUTH_AWS_REGION``, or after
  assuming ``PROCESSOR_SASL_OAUTH_AWS_ROLE_ARN`` when set.

:class:`CachedToken` wraps a source for both client families: librdkafka's ``oauth_cb`` (called with
the ``sasl.oauthbearer.config`` string, wants ``(token, expiry seconds)``) and aiokafka's
``AbstractTokenProvider`` (``async token()``, called on every new connection, so the token is
cached until shortly before it expires). A failing source raises ``TokenError`` naming the source,
never the token.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
import time
from collections.abc import Callable
from typing import Any

from aiokafka.abc import AbstractTokenProvider

from processor.errors import ConfigError, ServiceUnavailableError

MSK_IAM = "aws-msk-iam"
DEFAULT_LIFETIME_S = 300.0
REFRESH_MARGIN_S = 30.0  # a cached token is renewed this long before it expires

TokenSource = Callable[[], Any]


class TokenError(ServiceUnavailableError):
    """The OAUTHBEARER token source failed (the Kafka connection cannot authenticate)."""


def load_hook(path: str, variable: str) -> TokenSource:
    """Import ``module:function`` (or ``module.function``); ConfigError naming ``variable`` if not."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(f"{variable}: {path!r} is not a 'module:function' path")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{variable}: cannot import {module_name!r}: {exc}") from None
    hook = getattr(module, attr, None)
    if not callable(hook):
        raise ConfigError(f"{variable}: {module_name!r} has no callable {attr!r}")
    return hook  # type: ignore[no-any-return]


def msk_iam_source(region: str, role_arn: str | None = None, signer: Any = None) -> TokenSource:
    """Tokens from ``aws_msk_iam_sasl_signer.MSKAuthTokenProvider`` (``signer`` replaces it in tests).

    The signer answers ``(token, expiry in milliseconds)``; this returns seconds, like every source.
    """
    if signer is None:
        try:
            from aws_msk_iam_sasl_signer import MSKAuthTokenProvider  # optional extra [msk]
        except ImportError:
            raise ConfigError(
                f"PROCESSOR_SASL_OAUTH_TOKEN_PROVIDER={MSK_IAM} needs the [msk] extra: "
                "pip install 'kafka-tiered-processor[msk]' (the container image has it)"
            ) from None
        signer = MSKAuthTokenProvider

    def token() -> tuple[str, float]:
        if role_arn:
            value, expiry_ms = signer.generate_auth_token_from_role_arn(region, role_arn)
        else:
            value, expiry_ms = signer.generate_auth_token(region)
        return str(value), float(expiry_ms) / 1000.0

    return token


class CachedToken(AbstractTokenProvider):  # type: ignore[misc]
    """One token source shared by every client of a process, cached until near its expiry."""

    def __init__(self, source: TokenSource, name: str, clock: Callable[[], float] = time.time) -> None:
        self._source = source
        self.name = name
        self._clock = clock
        self._lock = threading.Lock()
        self._value: tuple[str, float] | None = None

    def current(self) -> tuple[str, float]:
        """``(token, expires_at seconds)``, from the cache or a fresh call of the source."""
        with self._lock:
            now = self._clock()
            if self._value is not None and self._value[1] - REFRESH_MARGIN_S > now:
                return self._value
            try:
                answer = self._source()
            except Exception as exc:
                raise TokenError(
                    f"OAUTHBEARER token provider {self.name} failed: {type(exc).__name__}: {exc}"
                ) from None
            if isinstance(answer, str):
                value = (answer, now + DEFAULT_LIFETIME_S)
            elif isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[0], str):
                value = (answer[0], float(answer[1]))
            else:
                raise TokenError(
                    f"OAUTHBEARER token provider {self.name} returned {type(answer).__name__}; "
                    "expected a token string or (token, expires_at epoch seconds)"
                )
            if not value[0]:
                raise TokenError(f"OAUTHBEARER token provider {self.name} returned an empty token")
            self._value = value
            return value

    def oauth_cb(self, _config: str) -> tuple[str, float]:
        """librdkafka's callback (``oauth_cb``)."""
        return self.current()

    async def token(self) -> str:
        """aiokafka's provider method; the source may block (network), so it runs in a thread."""
        return (await asyncio.to_thread(self.current))[0]
