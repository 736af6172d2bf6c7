"""The driver's side of a receiver task's control channel, blocking, for tests of the task without Spark or anyio."""

from __future__ import annotations

import socket

from streaming.inputs._control import receiver_roles
from streaming.network import FRAME_HEADER, accept, encode_challenge, hello_size, new_challenge, parse_hello


def _exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        assert chunk, "the task closed its connection during the hello"
        data += chunk
    return data


def accept_task(server: socket.socket, token: str, stream_id: int) -> socket.socket:
    """Accept the next connection and admit it as the receiver task of ``stream_id`` (its hello must prove ``token``)."""
    conn, _ = server.accept()
    conn.settimeout(60)  # a hang guard only
    challenge = new_challenge()
    conn.sendall(encode_challenge(challenge))
    payload = _exactly(conn, hello_size(_exactly(conn, FRAME_HEADER.size)))
    hello = parse_hello(payload, token=token, challenge=challenge, roles=receiver_roles(stream_id))
    conn.sendall(accept(token, challenge, hello.role, hello.fields))
    return conn
