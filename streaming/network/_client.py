"""The peer's side of a front door's handshake, blocking (it runs in executors' tasks and worker threads)."""

from __future__ import annotations

import hmac
import socket
from typing import Mapping

from scheduler import StreamingError

from ._hello import ACCEPTED_SIZE, CHALLENGE_BYTES, FRAME_HEADER, HelloError, accept, encode_hello

__all__ = ["HelloRefusedError", "connect", "handshake"]


class HelloRefusedError(StreamingError, ConnectionError):
    """The server closed the connection instead of accepting the hello (a wrong token: a task of another run)."""


def _receive_exactly(sock: socket.socket, size: int, what: str) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise HelloRefusedError(f"the server at {_peer(sock)} closed the connection {what}: it is gone, or it refused "
                                    "this hello (a peer of another run, or a port that is not an aiodstream front door)")
        data += chunk
    return bytes(data)


def _peer(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "(unknown)"


def handshake(sock: socket.socket, token: str, role: str, fields: Mapping[str, int]) -> None:
    """Prove ``token`` on a connected socket: read the challenge, send the hello, check the server's proof.

    The server must prove the token back (:func:`~streaming.network.accept`): a process that took
    the port without the token is refused before the caller reads, or unpickles, anything from it.

    The socket's own timeout bounds each read. After it returns the connection is the caller's.

    Raises:
        HelloRefusedError: the server closed the connection (it refused the hello, or it is gone), or its
            answer did not prove the token (not this run's server).
        HelloError: the server's first frame is not a challenge (not a front door).
        OSError: the connection failed or timed out.
    """
    (size,) = FRAME_HEADER.unpack(_receive_exactly(sock, FRAME_HEADER.size, "before its challenge"))
    if size != CHALLENGE_BYTES:
        raise HelloError(f"the server at {_peer(sock)} sent a first frame of {size} bytes, not a {CHALLENGE_BYTES}-byte "
                         "challenge: it is not an aiodstream front door")
    challenge = _receive_exactly(sock, size, "during its challenge")
    sock.sendall(encode_hello(token, challenge, role, fields))
    answer = _receive_exactly(sock, ACCEPTED_SIZE, "after the hello")
    if not hmac.compare_digest(answer, accept(token, challenge, role, fields)):
        raise HelloRefusedError(f"the server at {_peer(sock)} answered the hello without proving this run's token: it is "
                                "not this run's driver (another process may hold the port); nothing it sends is read")


def connect(host: str, port: int, token: str, role: str, fields: Mapping[str, int], *, timeout_s: float = 30.0) -> socket.socket:
    """A TCP connection to a front door at ``host:port``, admitted as ``role`` with ``fields`` (``TCP_NODELAY`` set).

    The socket keeps ``timeout_s`` as its timeout; the caller may change it.

    Raises:
        HelloRefusedError: the server refused the hello.
        OSError: the server cannot be reached.
    """
    sock = socket.create_connection((host, port), timeout=timeout_s)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        handshake(sock, token, role, fields)
    except BaseException:
        sock.close()
        raise
    return sock
