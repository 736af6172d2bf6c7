"""The hello of an authenticated front door, without I/O: challenge, proof, and the strict parse (Spark's RPC auth, small).

A connection's first bytes prove the peer holds the run's token without sending it: the server
sends a random challenge, the peer answers with a JSON hello carrying its role, its fields and
``HMAC-SHA256(token, challenge + role + fields)``. The server's answer proves the token back
(``ok`` and ``HMAC-SHA256(token, "accepted" + challenge + role + fields)``), so a peer never
trusts, let alone unpickles, what a process without the token sends it (a port taken over after
the driver closed it). Every check here is a plain function, so the parse is tested without
sockets; whatever a stranger sends becomes one :class:`HelloError`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import struct
from typing import Any, Mapping

import attrs

from scheduler import StreamingError

__all__ = [
    "ACCEPTED_SIZE",
    "CHALLENGE_BYTES",
    "FRAME_HEADER",
    "HELLO_MAX_BYTES",
    "HELLO_VERSION",
    "Hello",
    "HelloError",
    "MAX_FIELD",
    "RoleSchema",
    "accept",
    "encode_challenge",
    "encode_hello",
    "hello_size",
    "new_challenge",
    "new_token",
    "parse_hello",
    "prove",
]

FRAME_HEADER = struct.Struct(">I")
"""Every handshake frame is a 4-byte big-endian length, then that many bytes."""

HELLO_MAX_BYTES = 4096
"""The largest hello a front door reads: a role, a few small integers and a 64-digit proof fit in a tenth of it."""

CHALLENGE_BYTES = 32
"""The size of the server's random challenge."""

HELLO_VERSION = 1
"""The hello's format version (its ``"v"``)."""

MAX_FIELD = 2**31 - 1
"""Hello fields are integers in ``[0, MAX_FIELD]`` (Spark's ids are Java ints), further bounded by the role's ranges."""

_ACCEPTED = b"accepted"
ACCEPTED_SIZE = FRAME_HEADER.size + 2 + 64
"""The size of the server's answer to an authentic hello (see :func:`accept`)."""

RoleSchema = Mapping[str, Mapping[str, range]]
"""Role -> its hello fields, each with the range its value must lie in, e.g. ``{"task": {"partition": range(4)}}``."""

_KEYS = frozenset({"v", "role", "fields", "proof"})
_PROOF_HEX = 64


class HelloError(StreamingError, ValueError):
    """A connection's first bytes are not an authentic hello: the connection is dropped, nothing else happens."""


@attrs.frozen
class Hello:
    """An authenticated peer: its role and its fields (each checked against the role's schema).

    Attributes:
        role: one of the front door's roles.
        fields: field name -> its value, exactly the role's fields.
    """

    role: str
    fields: Mapping[str, int]


def new_token() -> str:
    """A fresh per-run token: 256 random bits as 64 hex digits (``secrets``)."""
    return secrets.token_hex(32)


def new_challenge() -> bytes:
    """A fresh random challenge of :data:`CHALLENGE_BYTES` bytes."""
    return secrets.token_bytes(CHALLENGE_BYTES)


def encode_challenge(challenge: bytes) -> bytes:
    """The challenge frame the server sends first."""
    return FRAME_HEADER.pack(len(challenge)) + challenge



def _canonical(role: str, fields: Mapping[str, int]) -> bytes:
    return json.dumps([role, dict(sorted(fields.items()))], separators=(",", ":")).encode("ascii")


def prove(token: str, challenge: bytes, role: str, fields: Mapping[str, int]) -> str:
    """``HMAC-SHA256(token, challenge + canonical role and fields)`` as 64 hex digits: what the peer sends instead of the token."""
    return hmac.new(token.encode("utf-8"), challenge + _canonical(role, fields), hashlib.sha256).hexdigest()


def accept(token: str, challenge: bytes, role: str, fields: Mapping[str, int]) -> bytes:
    """The server's answer to an authentic hello (header included): ``ok`` and the server's own proof of the token.

    The proof covers the same challenge, role and fields as the peer's, behind a prefix the peer's
    proof can never start with (a challenge is exactly :data:`CHALLENGE_BYTES` long, so the two
    inputs differ in length): a server cannot answer by replaying what the peer sent it. The peer
    compares it with :func:`hmac.compare_digest` before it trusts anything that follows.
    """
    proof = hmac.new(token.encode("utf-8"), _ACCEPTED + challenge + _canonical(role, fields), hashlib.sha256).hexdigest()
    return FRAME_HEADER.pack(2 + len(proof)) + b"ok" + proof.encode("ascii")


def encode_hello(token: str, challenge: bytes, role: str, fields: Mapping[str, int]) -> bytes:
    """The peer's hello frame (header included) answering ``challenge``.

    Raises:
        ValueError: a field that is not an integer in ``[0, MAX_FIELD]``, or a hello over :data:`HELLO_MAX_BYTES`.
    """
    for name, value in fields.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_FIELD:
            raise ValueError(f"hello field {name!r} must be an integer in [0, {MAX_FIELD}], got {value!r}")
    body = json.dumps({"v": HELLO_VERSION, "role": role, "fields": dict(fields), "proof": prove(token, challenge, role, fields)},
                      separators=(",", ":")).encode("utf-8")
    if len(body) > HELLO_MAX_BYTES:
        raise ValueError(f"a hello is at most {HELLO_MAX_BYTES} bytes, this one is {len(body)}; use fewer or shorter fields")
    return FRAME_HEADER.pack(len(body)) + body


def hello_size(header: bytes) -> int:
    """The payload size a hello's header announces.

    Raises:
        HelloError: zero, or more than :data:`HELLO_MAX_BYTES` (the payload is then never read).
    """
    (size,) = FRAME_HEADER.unpack(header)
    if not 0 < size <= HELLO_MAX_BYTES:
        raise HelloError(f"a hello is 1 to {HELLO_MAX_BYTES} bytes, this one announces {size}")
    return int(size)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a hello may carry")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def parse_hello(payload: bytes, *, token: str, challenge: bytes, roles: RoleSchema) -> Hello:
    """Check a hello's payload and return the peer it authenticates.

    Checks, in order: UTF-8; JSON (no NaN or Infinity, no duplicate keys, any nesting error caught);
    exactly the keys ``v``, ``role``, ``fields``, ``proof``; the version; a known role; exactly the
    role's fields, each an integer in its range; then the proof, compared in constant time
    (``hmac.compare_digest``) with the one ``token`` gives for ``challenge``.

    Raises:
        HelloError: any check failed (the message names the first; it never quotes the token).
    """
    if len(payload) > HELLO_MAX_BYTES:
        raise HelloError(f"a hello is at most {HELLO_MAX_BYTES} bytes, got {len(payload)}")
    try:
        text = payload.decode("utf-8")
        hello = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique)
    except (ValueError, RecursionError, OverflowError, TypeError) as exc:  # UnicodeDecodeError is a ValueError
        raise HelloError(f"the hello is not well-formed JSON ({type(exc).__name__}): {payload[:60]!r}") from None
    if not isinstance(hello, dict) or set(hello) != _KEYS:
        got = sorted(hello) if isinstance(hello, dict) else type(hello).__name__
        raise HelloError(f"a hello is a JSON object with exactly the keys {sorted(_KEYS)}, got {got}")
    version, role, fields, proof = hello["v"], hello["role"], hello["fields"], hello["proof"]
    if type(version) is not int or version != HELLO_VERSION:
        raise HelloError(f"hello version {HELLO_VERSION} expected, got {version!r:.40}")
    if not isinstance(role, str) or role not in roles:
        raise HelloError(f"the hello's role must be one of {sorted(roles)}, got {role!r:.40}")
    schema = roles[role]
    if not isinstance(fields, dict) or set(fields) != set(schema):
        got = sorted(fields)[:10] if isinstance(fields, dict) else type(fields).__name__
        raise HelloError(f"a {role!r} hello has exactly the fields {sorted(schema)}, got {got}")
    for name, allowed in schema.items():
        value = fields[name]
        if type(value) is not int or not 0 <= value <= MAX_FIELD or value not in allowed:
            raise HelloError(f"the hello's field {name!r} must be an integer in [{allowed.start}, {allowed.stop}), "
                             f"got {value!r:.40}")
    if not isinstance(proof, str) or len(proof) != _PROOF_HEX:
        raise HelloError(f"the hello's proof must be {_PROOF_HEX} hex digits")
    expected = prove(token, challenge, role, fields).encode("ascii")
    if not hmac.compare_digest(expected, proof.encode("utf-8")):
        raise HelloError("the hello's proof does not match this run's token (a peer of another run, or a stranger)")
    return Hello(role, dict(fields))
