"""The epoch coordinator's messages and their wire format (Spark's ``EpochCoordinatorMessage`` set).

The driver's coordinator and the long-running tasks talk over TCP in length-prefixed frames,
behind a front door (``streaming.network``): a task first proves the run's token in a small hello
(role ``task``, its partition and attempt), then sends pickled message records. Nothing a peer
sends is unpickled before its hello proved the token, and a task may send only a task's
messages, for its own partition (:func:`task_message_error`).
"""

from __future__ import annotations

import pickle
import socket
from typing import Any, Union

import attrs

from ..network import FRAME_HEADER, MAX_FIELD, RoleSchema, connect

__all__ = [
    "CommitPartitionEpoch",
    "CoordinatorClient",
    "CoordinatorMessage",
    "CurrentEpoch",
    "DEFAULT_MAX_FRAME_MIB",
    "DRIVER_MESSAGES",
    "GetCurrentEpoch",
    "HEADER",
    "IncrementAndGetEpoch",
    "MAX_FRAME_KEY",
    "ReportPartitionOffset",
    "SetReaderPartitions",
    "SetWriterPartitions",
    "StopContinuousExecutionWrites",
    "TASK_MESSAGES",
    "TASK_ROLE",
    "encode_frame",
    "task_message_error",
    "task_roles",
]

HEADER = FRAME_HEADER
"""A frame is a 4-byte big-endian length, then that many bytes (the front door's frame, after the hello too)."""

MAX_FRAME_KEY = "spark.rpc.message.maxSize"
"""Spark's bound on a control-plane message, in MiB; here the bound on a task's frame after its hello."""

DEFAULT_MAX_FRAME_MIB = 128
"""Spark's default for :data:`MAX_FRAME_KEY`."""

TASK_ROLE = "task"
"""The front-door role of a continuous task's connection."""


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

TASK_MESSAGES = (GetCurrentEpoch, ReportPartitionOffset, CommitPartitionEpoch)
"""What a task's connection may send: its epoch poll, its partition's offsets and commits."""

DRIVER_MESSAGES = (IncrementAndGetEpoch, SetReaderPartitions, SetWriterPartitions, StopContinuousExecutionWrites)
"""Spark's driver-only messages: the driver applies them to its coordinator directly, never over a connection."""


def task_roles(num_partitions: int) -> RoleSchema:
    """The coordinator's front-door roles: a task of one of the run's ``num_partitions`` partitions, any attempt number."""
    return {TASK_ROLE: {"partition": range(num_partitions), "attempt": range(MAX_FIELD + 1)}}


def task_message_error(message: object, partition: int, current_epoch: int) -> str | None:
    """Why the task of ``partition`` may not send ``message`` now, or ``None`` when it may.

    A task sends only :data:`TASK_MESSAGES`; its reports and commits name its own partition and an
    epoch it can have closed: an integer from 0 to below the driver's ``current_epoch`` (a task
    closes an epoch only after the driver moved past it). Spark's coordinator trusts its RPC
    peers; these ones proved only that they hold the run's token.
    """
    if isinstance(message, DRIVER_MESSAGES):
        return f"{type(message).__name__} is a driver-only message; a task may send only {_names(TASK_MESSAGES)}"
    if not isinstance(message, TASK_MESSAGES):
        return f"a task may send only {_names(TASK_MESSAGES)}, got {type(message).__name__}"
    if isinstance(message, GetCurrentEpoch):
        return None
    # getattr: an unpickled record was not built by its __init__ and may lack a field.
    name, claimed = type(message).__name__, getattr(message, "partition", None)
    if type(claimed) is not int or claimed != partition:
        return f"the task of partition {partition} sent {name} for partition {claimed!r:.40}"
    epoch = getattr(message, "epoch", None)
    if type(epoch) is not int or not 0 <= epoch < current_epoch:
        return (f"{name} for epoch {epoch!r:.40}: a task closes only epochs from 0 to "
                f"{current_epoch - 1} (the driver is in epoch {current_epoch})")
    if isinstance(message, ReportPartitionOffset):
        rows = getattr(message, "rows", None)
        if type(rows) is not int or rows < 0:
            return f"ReportPartitionOffset with {rows!r:.40} rows: a row count is a non-negative integer"
        if not hasattr(message, "offset"):
            return "ReportPartitionOffset without an offset"
    elif not hasattr(message, "message"):
        return "CommitPartitionEpoch without a commit message"
    return None


def _names(types: tuple[type, ...]) -> str:
    return ", ".join(t.__name__ for t in types)


# -- frames --


def encode_frame(payload: bytes) -> bytes:
    """``payload`` with its length header."""
    return HEADER.pack(len(payload)) + payload


class CoordinatorClient:
    """A task's blocking connection to the driver's coordinator (used on executors).

    Asks wait for their reply; sends do not. The driver answers a connection's asks in order,
    so the next frame read after an ask is its reply.
    """

    def __init__(self, host: str, port: int, token: str, partition: int, attempt: int, timeout_s: float = 30.0) -> None:
        """Connect and prove the run's token (the front door's handshake, role ``task``).

        Raises:
            HelloRefusedError: the coordinator refused the hello (a task of another run).
            OSError: the coordinator cannot be reached.
        """
        self._sock = connect(host, port, token, TASK_ROLE, {"partition": partition, "attempt": attempt}, timeout_s=timeout_s)
        self._file = self._sock.makefile("rb")

    def send(self, message: CoordinatorMessage) -> None:
        """Send a one-way message."""
        self._sock.sendall(encode_frame(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)))

    def ask(self, message: CoordinatorMessage) -> Any:
        """Send an ask and return the driver's reply.

        Raises:
            ConnectionError: the driver closed the connection (the run ended, or it refused the message).
        """
        self.send(message)
        header = self._file.read(HEADER.size)
        if len(header) < HEADER.size:
            raise ConnectionError("the continuous query's coordinator closed the connection")
        (size,) = HEADER.unpack(header)
        payload = self._file.read(size)
        if len(payload) < size:
            raise ConnectionError("the continuous query's coordinator closed the connection")
        return pickle.loads(payload)

    def abort(self) -> None:
        """From another thread: end the connection so that the task's next (or current) call to the driver fails."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # closed already

    def close(self) -> None:
        """Close the connection."""
        try:
            self._file.close()
        finally:
            self._sock.close()

