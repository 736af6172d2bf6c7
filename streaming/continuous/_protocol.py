"""The epoch coordinator's messages and their wire format (Spark's ``EpochCoordinatorMessage`` set).

The driver's coordinator and the long-running tasks talk over TCP in length-prefixed frames: a
JSON hello carrying the run's token first, then pickled message records. Nothing a peer sends is
unpickled before its hello named the run, so a stray connection cannot make the driver unpickle.
"""

from __future__ import annotations

import json
import pickle
import socket
import struct
from typing import Any, Union

import attrs

__all__ = [
    "CommitPartitionEpoch",
    "CoordinatorClient",
    "CoordinatorMessage",
    "CurrentEpoch",
    "GetCurrentEpoch",
    "HEADER",
    "IncrementAndGetEpoch",
    "ReportPartitionOffset",
    "SetReaderPartitions",
    "SetWriterPartitions",
    "StopContinuousExecutionWrites",
    "decode_hello",
    "encode_frame",
    "encode_hello",
]

HEADER = struct.Struct(">I")
"""A frame is a 4-byte big-endian length, then that many bytes."""

MAX_FRAME = 1 << 30


# -- asks (a reply is due) --


@attrs.frozen
class IncrementAndGetEpoch:
    """Driver only: advance the epoch by one and return the new value."""


@attrs.frozen
class GetCurrentEpoch:
    """A task's poll: the driver's epoch, and whether the task should end after reaching it."""


@attrs.frozen
class SetReaderPartitions:
    """How many reader partitions report offsets for each epoch."""

    num_partitions: int


@attrs.frozen
class SetWriterPartitions:
    """How many writer partitions commit each epoch."""

    num_partitions: int


@attrs.frozen
class StopContinuousExecutionWrites:
    """From now on drop every report and commit (a stopped run must not commit anything more)."""


@attrs.frozen
class CurrentEpoch:
    """The reply to :class:`GetCurrentEpoch`.

    Attributes:
        epoch: the driver's epoch; a task whose local epoch is lower closes its epochs up to it.
        stop: the run is stopping: once the task closed every epoch before ``epoch``, it ends.
    """

    epoch: int
    stop: bool = False


# -- sends (no reply) --


@attrs.frozen
class ReportPartitionOffset:
    """A reader partition reached the end of ``epoch`` at ``offset`` (JSON-able), having read ``rows`` rows in it."""

    partition: int
    epoch: int
    offset: Any
    rows: int = 0


@attrs.frozen
class CommitPartitionEpoch:
    """A writer partition committed its part of ``epoch``; ``message`` is the sink's commit message."""

    partition: int
    epoch: int
    message: Any = None


CoordinatorMessage = Union[
    IncrementAndGetEpoch, GetCurrentEpoch, SetReaderPartitions, SetWriterPartitions, StopContinuousExecutionWrites,
    ReportPartitionOffset, CommitPartitionEpoch,
]

ASKS = (IncrementAndGetEpoch, GetCurrentEpoch, SetReaderPartitions, SetWriterPartitions, StopContinuousExecutionWrites)


# -- frames --


def encode_frame(payload: bytes) -> bytes:
    """``payload`` with its length header."""
    return HEADER.pack(len(payload)) + payload


def encode_hello(token: str, partition: int, attempt: int) -> bytes:
    """The first frame of a task's connection: the run's token, its partition and attempt number."""
    return encode_frame(json.dumps({"token": token, "partition": partition, "attempt": attempt}).encode("utf-8"))


def decode_hello(payload: bytes) -> tuple[str, int, int]:
    """``(token, partition, attempt)`` of a hello frame.

    Raises:
        ValueError: not a hello frame.
    """
    try:
        hello = json.loads(payload.decode("utf-8"))
        return str(hello["token"]), int(hello["partition"]), int(hello["attempt"])
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"not a continuous-task hello frame: {payload[:60]!r}") from exc


class CoordinatorClient:
    """A task's blocking connection to the driver's coordinator (used on executors).

    Asks wait for their reply; sends do not. The driver answers a connection's asks in order,
    so the next frame read after an ask is its reply.
    """

    def __init__(self, host: str, port: int, token: str, partition: int, attempt: int, timeout_s: float = 30.0) -> None:
        """Connect and say hello.

        Raises:
            OSError: the coordinator cannot be reached.
        """
        self._sock = socket.create_connection((host, port), timeout=timeout_s)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.sendall(encode_hello(token, partition, attempt))
        self._file = self._sock.makefile("rb")

    def send(self, message: CoordinatorMessage) -> None:
        """Send a one-way message."""
        self._sock.sendall(encode_frame(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)))

    def ask(self, message: CoordinatorMessage) -> Any:
        """Send an ask and return the driver's reply.

        Raises:
            ConnectionError: the driver closed the connection (the run ended).
            RuntimeError: the driver answered with an error.
        """
        self.send(message)
        header = self._file.read(HEADER.size)
        if len(header) < HEADER.size:
            raise ConnectionError("the continuous query's coordinator closed the connection")
        (size,) = HEADER.unpack(header)
        payload = self._file.read(size)
        if len(payload) < size:
            raise ConnectionError("the continuous query's coordinator closed the connection")
        reply = pickle.loads(payload)
        if isinstance(reply, _AskError):
            raise RuntimeError(reply.message)
        return reply

    def close(self) -> None:
        """Close the connection."""
        try:
            self._file.close()
        finally:
            self._sock.close()


@attrs.frozen
class _AskError:
    message: str


def ask_error(message: str) -> object:
    """The reply frame object for an ask the driver refused."""
    return _AskError(message)
