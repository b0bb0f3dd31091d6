"""The dev gateway's hand-written Kafka framing: checked against aiokafka's own message structs."""

from __future__ import annotations

import io
import struct
from typing import Any

import pytest
from aiokafka.protocol.admin import (
    SaslAuthenticateRequest_v0,
    SaslAuthenticateRequest_v1,
    SaslAuthenticateResponse_v0,
    SaslAuthenticateResponse_v1,
    SaslHandShakeRequest_v1,
    SaslHandShakeResponse_v1,
)
from hypothesis import given
from hypothesis import strategies as st

from processor.devstack import kafka_gateway as gw


def _request_frame(struct_: Any, correlation_id: int, client_id: str = "c") -> bytes:
    header = struct.pack(">hhih", struct_.API_KEY, struct_.API_VERSION, correlation_id, len(client_id))
    return header + client_id.encode() + bytes(struct_.encode())


@given(st.integers(0, 2**35))
def test_uvarint_round_trip(value: int) -> None:
    encoded = gw._put_uvarint(value)
    assert gw._uvarint(encoded + b"tail", 0) == (value, len(encoded))


@given(auth=st.binary(max_size=300), correlation_id=st.integers(0, 2**31 - 1))
def test_authenticate_v0_v1_answers_decode_with_aiokafka(auth: bytes, correlation_id: int) -> None:
    for request, response in (
        (SaslAuthenticateRequest_v0(auth), SaslAuthenticateResponse_v0),
        (SaslAuthenticateRequest_v1(auth), SaslAuthenticateResponse_v1),
    ):
        req = gw._parse_request(_request_frame(request, correlation_id), gw._sasl_flexible)
        assert (req.api_key, req.correlation_id) == (gw.API_SASL_AUTHENTICATE, correlation_id)
        assert gw._auth_bytes(req) == auth
        frame = gw._authenticate_response(req, 58, "Authentication failed: x", b"server")
        size, got_id = struct.unpack_from(">ii", frame, 0)
        assert size == len(frame) - 4 and got_id == correlation_id
        decoded = response.decode(io.BytesIO(frame[8:]))
        assert (decoded.error_code, decoded.error_message, decoded.sasl_auth_bytes) == (
            58,
            "Authentication failed: x",
            b"server",
        )


@given(auth=st.binary(max_size=300), tags=st.lists(st.binary(max_size=5), max_size=3))
def test_authenticate_v2_flexible_round_trip(auth: bytes, tags: list[bytes]) -> None:
    tagged = gw._put_uvarint(len(tags)) + b"".join(
        gw._put_uvarint(i) + gw._put_uvarint(len(t)) + t for i, t in enumerate(tags)
    )
    header = struct.pack(">hhih", gw.API_SASL_AUTHENTICATE, 2, 7, 1) + b"c" + tagged
    body = gw._put_uvarint(len(auth) + 1) + auth + b"\x00"
    req = gw._parse_request(header + body, gw._sasl_flexible)
    assert gw._auth_bytes(req) == auth
    frame = gw._authenticate_response(req, 0, None, b"ok")
    # header v1: correlation id + empty tagged fields; then error, null message, bytes, lifetime, tags
    assert (
        frame[4:]
        == struct.pack(">i", 7)
        + b"\x00"
        + struct.pack(">h", 0)
        + b"\x00"
        + b"\x03ok"
        + struct.pack(">q", gw.SESSION_LIFETIME_MS)
        + b"\x00"
    )


def test_handshake_answer_decodes_with_aiokafka() -> None:
    req = gw._parse_request(_request_frame(SaslHandShakeRequest_v1("SCRAM-SHA-512"), 3), gw._sasl_flexible)
    assert req.body == struct.pack(">h", 13) + b"SCRAM-SHA-512"
    frame = gw._handshake_response(3, 0, ["PLAIN", "SCRAM-SHA-256"])
    decoded = SaslHandShakeResponse_v1.decode(io.BytesIO(frame[8:]))
    assert (decoded.error_code, decoded.enabled_mechanisms) == (0, ["PLAIN", "SCRAM-SHA-256"])


def test_plain_and_oauthbearer_sessions_check_the_credentials() -> None:
    policy = gw.SaslPolicy({"alice": "pw"}, ("tok",))
    assert policy.mechanisms() == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    plain = gw._session("PLAIN", policy)
    assert plain is not None and plain.step(b"\x00alice\x00pw") == (True, b"")
    for bad in (b"\x00alice\x00nope", b"\x00bob\x00pw", b"garbage"):
        with pytest.raises(gw.AuthFailed):
            plain.step(bad)
    oauth = gw._session("OAUTHBEARER", policy)
    assert oauth is not None and oauth.step(b"n,,\x01auth=Bearer tok\x01\x01") == (True, b"")
    with pytest.raises(gw.AuthFailed):
        oauth.step(b"n,,\x01auth=Bearer other\x01\x01")
    assert gw._session("GSSAPI", policy) is None
    assert gw._session("OAUTHBEARER", gw.SaslPolicy({"a": "b"})) is None


def test_scram_session_against_a_scram_client() -> None:
    from scramp import ScramClient

    policy = gw.SaslPolicy({"alice": 'p"w\\'})
    for mechanism in gw.SCRAM_MECHANISMS:
        session = gw._session(mechanism, policy)
        assert session is not None
        client = ScramClient([mechanism], "alice", 'p"w\\')
        done, server_first = session.step(client.get_client_first().encode())
        assert not done
        client.set_server_first(server_first.decode())
        done, server_final = session.step(client.get_client_final().encode())
        assert done
        client.set_server_final(server_final.decode())  # raises if the server's signature is wrong
        wrong = gw._session(mechanism, policy)
        assert wrong is not None
        bad = ScramClient([mechanism], "alice", "wrong")
        _, first = wrong.step(bad.get_client_first().encode())
        bad.set_server_first(first.decode())
        with pytest.raises(gw.AuthFailed):
            wrong.step(bad.get_client_final().encode())
