"""Sources that read continuously: rate, partitioned TCP, append-only files (Spark's continuous readers).

A source is a picklable description that the driver keeps and each long-running task receives. It
names its partitions, opens a reader on an executor at a partition's offset, and turns partition
offsets into the one offsets-log line of its source and back. Readers block only up to a
deadline the task gives, so the task polls the driver's epoch on time.
"""

from __future__ import annotations

import abc
import errno
import functools
import json
import math
import os
import select
import socket
import time
from datetime import datetime
from typing import Any, Sequence

from scheduler import InvalidPipelineError

from ..network import DEFAULT_MAX_LINE_LENGTH, LineDecoder, LineTooLongError, check_max_line_length

__all__ = ["ContinuousSource", "FileSource", "PartitionReader", "RateSource", "SocketSource"]


class PartitionReader(abc.ABC):
    """Reads one partition of a source inside a task."""

    @abc.abstractmethod
    def read(self, deadline: float) -> list[Any]:
        """Records that arrived, waiting for the first until ``deadline`` (``time.monotonic()`` seconds) at most."""

    @abc.abstractmethod
    def offset(self) -> Any:
        """Where the partition stands after the records returned so far (JSON-able)."""

    def close(self) -> None:  # noqa: B027 - an optional hook
        """Release what the reader holds."""


class ContinuousSource(abc.ABC):
    """A source a continuous query reads, one long-running task per partition."""

    replayable: bool = False
    """Whether reading again from an offset gives the same records (exactly-once needs it)."""

    @property
    @abc.abstractmethod
    def num_partitions(self) -> int:
        """How many partitions (tasks) the source has."""

    @abc.abstractmethod
    def initial_offset(self, partition: int) -> Any:
        """Where a partition starts when the query has no committed epoch."""

    @abc.abstractmethod
    def open_reader(self, partition: int, offset: Any) -> PartitionReader:
        """Open partition ``partition`` at ``offset`` (on an executor)."""

    def merge_offsets(self, offsets: Sequence[Any]) -> str:
        """The offsets-log line for the partitions' offsets (Spark's ``mergeOffsets``): ``{"<p>": offset, ...}``."""
        return json.dumps({str(p): o for p, o in enumerate(offsets)}, separators=(",", ":"))

    def split_offsets(self, line: str) -> list[Any]:
        """The partitions' offsets in an offsets-log line written by :meth:`merge_offsets`.

        Raises:
            InvalidPipelineError: the line is not this source's offset.
        """
        try:
            parsed = json.loads(line)
            offsets = [parsed[str(p)] for p in range(self.num_partitions)]
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidPipelineError(
                f"the checkpoint's offset {line!r} does not fit {self!r} ({self.num_partitions} partitions); a restarted "
                "continuous query must read the same sources with the same partitions") from exc
        if len(parsed) != self.num_partitions:
            raise InvalidPipelineError(
                f"the checkpoint's offset {line!r} has {len(parsed)} partitions, {self!r} has {self.num_partitions}; a "
                "restarted continuous query must read the same sources with the same partitions")
        for partition, offset in enumerate(offsets):
            problem = self.offset_problem(partition, offset)
            if problem is not None:
                raise InvalidPipelineError(
                    f"the checkpoint's offset {line!r} does not fit {self!r}: partition {partition}'s {offset!r} "
                    f"{problem}; a restarted continuous query must read the same sources with the same partitions")
        return offsets

    def offset_problem(self, partition: int, offset: Any) -> str | None:
        """Why ``offset``, read from a checkpoint, cannot be partition ``partition``'s (``None``: it can).

        Checked on the driver at a restart, before any task opens a reader at it (default: any JSON value).
        """
        return None

    def check(self) -> None:  # noqa: B027 - an optional hook
        """Validate on the driver before the tasks start (default: nothing to check)."""


def _position_problem(offset: Any, what: str) -> str | None:
    """Why ``offset`` is not a count of ``what`` (a non-negative int), or None."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        return f"is not a {what} (a non-negative integer)"
    return None


# -- rate --


class RateSource(ContinuousSource):
    """Spark's ``rate`` source: rows ``Row(timestamp, value)`` at ``rowsPerSecond`` over ``numPartitions``.

    Partition ``p`` produces values ``p, p + n, p + 2n, ...`` with timestamps spaced
    ``n / rowsPerSecond`` seconds apart from the query's start, each emitted when its timestamp
    comes (a partition that fell behind catches up as fast as it can). The offset of a partition
    is ``{"value": next value, "runTimestampMs": next row's time}``; restarting from it gives the
    same rows, so the source is replayable.
    """

    replayable = True

    def __init__(self, rowsPerSecond: int = 1, numPartitions: int = 2) -> None:  # noqa: N803 - Spark's option names
        """Describe the source.

        Raises:
            InvalidPipelineError: a rate or partition count that is not a positive int.
        """
        for name, value in (("rowsPerSecond", rowsPerSecond), ("numPartitions", numPartitions)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidPipelineError(f"Invalid value '{value}'. The option '{name}' must be positive")
        self.rows_per_second = rowsPerSecond
        self._partitions = numPartitions
        self.start_ms: float | None = None  # set by the driver at each start (time.time based)

    @property
    def num_partitions(self) -> int:
        """``numPartitions``."""
        return self._partitions

    def initial_offset(self, partition: int) -> Any:
        """Value ``partition``, at the query's start time."""
        start = self.start_ms if self.start_ms is not None else time.time() * 1000.0
        return {"value": partition, "runTimestampMs": start}

    def check(self) -> None:
        """Fix the start time of this run's first rows (used only where no epoch was committed)."""
        self.start_ms = time.time() * 1000.0

    def offset_problem(self, partition: int, offset: Any) -> str | None:
        """A rate offset is ``{"value": v, "runTimestampMs": t}``, ``v`` one of the partition's values (``partition +
        k * numPartitions``) and ``t`` a finite number of ms."""
        if not isinstance(offset, dict) or set(offset) != {"value", "runTimestampMs"}:
            return 'is not a rate offset {"value": ..., "runTimestampMs": ...}'
        value, at = offset["value"], offset["runTimestampMs"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value % self._partitions != partition:
            return f"has a value that is not one of partition {partition}'s of {self._partitions} partitions"
        if isinstance(at, bool) or not isinstance(at, (int, float)) or abs(at) >= 2**63 or not math.isfinite(at):
            return "has a runTimestampMs that is not a finite number of milliseconds"
        return None

    def open_reader(self, partition: int, offset: Any) -> PartitionReader:
        """A reader producing the partition's rows from ``offset``."""
        return _RateReader(int(offset["value"]), float(offset["runTimestampMs"]), self._partitions,
                           1000.0 * self._partitions / self.rows_per_second)

    def __repr__(self) -> str:
        return f"RateStreamV2[rowsPerSecond={self.rows_per_second}, numPartitions={self._partitions}]"


_RATE_FIELDS = ["timestamp", "value"]


@functools.cache
def _rate_row_class() -> type:
    """pyspark's ``Row`` with the rate source's two fields as properties (made once per worker, when first needed).

    A rate row is read field by field in the tasks' hot loop: ``Row.__getattr__`` searches the
    field names in Python on every access, a property does not. It is still a ``Row`` (``repr``,
    ``asDict``, ``row["value"]``, equality) and pickles as a plain one.
    """
    from pyspark.sql import Row  # executors have pyspark; imported where rows are made

    class RateRow(Row):
        timestamp = property(lambda self: tuple.__getitem__(self, 0))
        value = property(lambda self: tuple.__getitem__(self, 1))

    return RateRow


class _RateReader(PartitionReader):
    _MAX_ROWS = 4096  # per read, so the epoch poll is never starved when behind

    def __init__(self, value: int, next_ms: float, step: int, period_ms: float) -> None:
        self._row = _rate_row_class()
        # Row k of this run is due at base + k * period: computed, not accumulated, so a float
        # epoch time in ms (~1.7e12) does not round the period away over millions of rows.
        self._base_value = value
        self._base_ms = next_ms
        self._k = 0
        self._step = step
        self._period = period_ms

    def _due_ms(self) -> float:
        return self._base_ms + self._k * self._period

    def read(self, deadline: float) -> list[Any]:
        now_ms = time.time() * 1000.0
        due = self._due_ms()
        if due > now_ms:
            wait = min((due - now_ms) / 1000.0, max(0.0, deadline - time.monotonic()))
            if wait > 0:
                time.sleep(wait)
            now_ms = time.time() * 1000.0
        rows: list[Any] = []
        make, fields, fromtimestamp, setattr_ = tuple.__new__, _RATE_FIELDS, datetime.fromtimestamp, object.__setattr__
        row_class, base_ms, base_value, period, step = self._row, self._base_ms, self._base_value, self._period, self._step
        k = self._k
        due = base_ms + k * period
        while due <= now_ms and len(rows) < self._MAX_ROWS:
            row: Any = make(row_class, (fromtimestamp(due / 1000.0), base_value + k * step))
            setattr_(row, "__fields__", fields)
            rows.append(row)
            k += 1
            due = base_ms + k * period
        self._k = k
        return rows

    def offset(self) -> Any:
        return {"value": self._base_value + self._k * self._step, "runTimestampMs": self._due_ms()}


# -- TCP --


class SocketSource(ContinuousSource):
    """Lines from TCP servers, one connection per partition (like a topic's partitions).

    Partition ``p`` connects to ``addresses[p]`` and reads UTF-8 lines as Spark's socket receiver
    reads them (``streaming.network.LineDecoder``: a line ends at ``\\n``, ``\\r`` or ``\\r\\n``,
    malformed bytes become U+FFFD, a last line without a terminator is a line when the server
    closes); its offset is the number of lines read. A socket cannot be read again, so the source
    is not replayable: after a restart the lines sent while the query was down are lost (at most
    once for what was not committed).

    A line longer than ``max_line_length`` characters fails the partition's task, and so the query,
    with a ``LineTooLongError`` naming the address (the lines completed before it are still
    read): a continuous query does not reconnect a source, and dropping the line would lose
    data. So a server that never ends a line costs a task at most that many characters.
    """

    def __init__(self, addresses: Sequence[tuple[str, int]], *, max_line_length: int = DEFAULT_MAX_LINE_LENGTH) -> None:
        """Describe the source; ``max_line_length``: the longest line, in characters (``socketTextStream`` passes
        ``spark.aiodstream.receiver.maxLineLength``).

        Raises:
            InvalidPipelineError: no address, an address that is not ``(host, port)``, or a
                ``max_line_length`` that is not a positive int.
        """
        addresses = list(addresses)
        if not addresses:
            raise InvalidPipelineError("a continuous socket source needs at least one (host, port) address")
        for address in addresses:
            if (not isinstance(address, tuple) or len(address) != 2 or not isinstance(address[0], str) or not address[0].strip()
                    or isinstance(address[1], bool) or not isinstance(address[1], int) or not 0 < address[1] < 65536):
                raise InvalidPipelineError(f"a socket address must be (host, port) with a host name or address and a port in "
                                           f"1..65535, got {address!r}")
        try:
            self.max_line_length = check_max_line_length(max_line_length, "max_line_length")
        except ValueError as exc:
            raise InvalidPipelineError(str(exc)) from None
        self.addresses = addresses

    @property
    def num_partitions(self) -> int:
        """One per address."""
        return len(self.addresses)

    def initial_offset(self, partition: int) -> Any:
        """No line read yet."""
        return 0

    def offset_problem(self, partition: int, offset: Any) -> str | None:
        """A socket offset is the number of lines read."""
        return _position_problem(offset, "number of lines")

    def open_reader(self, partition: int, offset: Any) -> PartitionReader:
        """Connect to the partition's address."""
        return _SocketReader(self.addresses[partition], int(offset), self.max_line_length)

    def __repr__(self) -> str:
        return "TextSocketContinuousStream[" + ", ".join(f"{h}:{p}" for h, p in self.addresses) + "]"


class _SocketReader(PartitionReader):
    def __init__(self, address: tuple[str, int], lines: int, max_line_length: int) -> None:
        self._sock = socket.create_connection(address, timeout=30)
        self._sock.setblocking(False)
        self._decoder = LineDecoder(max_line_length, consequence=(
            f"the continuous query reading {address[0]}:{address[1]} fails (its source is not reconnected, and dropping "
            "the line would lose data)"))
        self._lines = lines
        self._eof = False
        self._failure: LineTooLongError | None = None  # raised by the read after the one returning the lines before it

    def _decode(self, chunk: bytes) -> list[str]:
        """The lines ``chunk`` completes (``b""``: the server closed); a too-long line is kept to raise."""
        try:
            return self._decoder.feed(chunk) if chunk else self._decoder.finish()
        except LineTooLongError as exc:
            self._failure = exc
            return exc.lines

    def read(self, deadline: float) -> list[Any]:
        while True:
            if self._failure is not None:
                raise self._failure
            lines: list[str] = []
            if not self._eof:
                wait = max(0.0, deadline - time.monotonic())
                ready, _, _ = select.select([self._sock], [], [], wait)
                if ready:
                    try:
                        chunk = self._sock.recv(1 << 16)
                    except BlockingIOError:
                        chunk = None
                    if chunk == b"":
                        self._eof = True  # the server closed: no more lines, the epoch goes on
                    if chunk is not None:
                        lines = self._decode(chunk)
            else:
                time.sleep(max(0.0, deadline - time.monotonic()))
            if lines:
                self._lines += len(lines)
                return lines
            if self._failure is None and time.monotonic() >= deadline:
                return []

    def offset(self) -> Any:
        return self._lines

    def close(self) -> None:
        self._sock.close()


# -- append-only files --


class FileSource(ContinuousSource):
    """Lines appended to files, one file per partition; the offset is the byte position (replayable).

    Only whole lines are read (a line is complete at its ``\\n``); a file that does not exist yet
    reads as empty until it appears. Restarting at an offset reads the same lines again, so with
    an epoch-committing sink the query is exactly once. Files must only grow.
    """

    replayable = True
    _POLL_S = 0.0005

    def __init__(self, paths: Sequence[str | os.PathLike[str]]) -> None:
        """Describe the source.

        Raises:
            InvalidPipelineError: no path.
        """
        self.paths = [os.path.abspath(os.fspath(p)) for p in paths]
        if not self.paths:
            raise InvalidPipelineError("a continuous file source needs at least one file path")

    @property
    def num_partitions(self) -> int:
        """One per file."""
        return len(self.paths)

    def initial_offset(self, partition: int) -> Any:
        """The file's beginning."""
        return 0

    def offset_problem(self, partition: int, offset: Any) -> str | None:
        """A file offset is a byte position."""
        return _position_problem(offset, "byte position")

    def open_reader(self, partition: int, offset: Any) -> PartitionReader:
        """Read the partition's file from byte ``offset``."""
        return _FileReader(self.paths[partition], int(offset))

    def __repr__(self) -> str:
        return "AppendOnlyFileStream[" + ", ".join(self.paths) + "]"


class _FileReader(PartitionReader):
    def __init__(self, path: str, position: int) -> None:
        self._path = path
        self._position = position
        self._file: Any = None
        self._partial = b""

    def _open(self) -> bool:
        if self._file is None:
            try:
                self._file = open(self._path, "rb")
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    return False
                raise
            self._file.seek(self._position)
        return True

    def read(self, deadline: float) -> list[Any]:
        while True:
            if self._open():
                chunk = self._file.read(1 << 16)
                if chunk:
                    data = self._partial + chunk
                    end = data.rfind(b"\n")
                    if end < 0:
                        self._partial = data
                    else:
                        complete, self._partial = data[:end], data[end + 1:]
                        lines = complete.split(b"\n")
                        self._position = self._file.tell() - len(self._partial)
                        return [line.decode("utf-8", "replace") for line in lines]
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            time.sleep(min(FileSource._POLL_S, left))

    def offset(self) -> Any:
        return self._position

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
