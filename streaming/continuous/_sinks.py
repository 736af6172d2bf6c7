"""Sinks of a continuous query: ForeachWriter, epoch-committing files, console, memory (Spark's streaming writes).

A sink has two halves, as Spark's ``StreamingWrite``: a writer per partition and epoch inside the
tasks (``write`` each row, ``commit`` returns a message), and ``commit_epoch`` on the driver, run
by the epoch coordinator with every partition's message once the whole epoch is in, strictly in
epoch order and before the epoch's entry in the commits log.
"""

from __future__ import annotations

import abc
import copy
import os
import re
import threading
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

from scheduler import InvalidPipelineError, fsync_directory, parse_batch_file_name, remove_temp_files, write_new_file

__all__ = ["ConsoleSink", "ContinuousSink", "FileSink", "ForeachSink", "MemorySink", "PartitionWriter"]


class PartitionWriter(abc.ABC):
    """Writes one partition's rows of one epoch, inside a task."""

    @abc.abstractmethod
    def write(self, row: Any) -> None:
        """Take one row."""

    @abc.abstractmethod
    def commit(self) -> Any:
        """The epoch's rows are all written: make them ready and return the commit message (picklable)."""

    def abort(self, error: BaseException) -> None:  # noqa: B027 - an optional hook
        """The epoch failed in this task (default: nothing to undo)."""


class ContinuousSink(abc.ABC):
    """Where a continuous query's rows go."""

    exactly_once: bool = False
    """Whether the driver's epoch commit is atomic and idempotent, so a replayable source gives exactly once."""

    @abc.abstractmethod
    def open_writer(self, partition: int, epoch: int) -> PartitionWriter:
        """A writer for ``partition``'s rows of ``epoch`` (on an executor)."""

    def commit_epoch(self, epoch: int, messages: dict[int, Any]) -> None:  # noqa: B027 - an optional hook
        """Commit ``epoch`` on the driver with each partition's message (blocking; default: nothing to do)."""

    def latest_committed_epoch(self) -> int | None:
        """The newest epoch the sink itself recorded as committed (for sinks that keep such a log)."""
        return None

    def prepare(self, last_committed_epoch: int) -> None:  # noqa: B027 - an optional hook
        """Before the tasks start: clear what epochs after ``last_committed_epoch`` left behind (blocking)."""

    def description(self) -> str:
        """The sink's description in progress reports."""
        return type(self).__name__


# -- foreach --


class ForeachSink(ContinuousSink):
    """pyspark's ``foreach`` contract: ``open(partition_id, epoch_id)``, ``process(row)``, ``close(error)``.

    Takes a ``pyspark.sql.ForeachWriter``-like object (``process`` required, ``open`` and ``close``
    optional, as pyspark checks) or a function called with each row. Each task gets its own copy;
    ``open`` is called at the start of every epoch of the partition (rows are skipped when it
    returns False) and ``close`` at its end, with the error if the epoch failed. At least once.
    """

    def __init__(self, writer: Any) -> None:
        """Wrap ``writer``.

        Raises:
            InvalidPipelineError: neither a function nor an object with a callable ``process``.
        """
        if not callable(writer) and not callable(getattr(writer, "process", None)):
            raise InvalidPipelineError("Provided object does not have a 'process' method")
        for name in ("open", "close"):
            if hasattr(writer, name) and not callable(getattr(writer, name)):
                raise InvalidPipelineError(f"Attribute '{name}' in provided object is not callable")
        self.writer = writer
        self._copies: dict[int, Any] = {}  # a writer object's copy per partition's task (made at its first epoch)

    def open_writer(self, partition: int, epoch: int) -> PartitionWriter:
        """Open the user's writer for this partition and epoch: a writer object's own copy for the partition's task.

        Spark pickles the writer to each task; tasks on threads (``ThreadTaskLauncher``) shared the driver's
        object, so one partition's ``open`` reset what another had buffered (rows lost, duplicated, mislabelled).
        A plain function is shared, as its closure is on threads.

        Raises:
            InvalidPipelineError: the writer object cannot be copied (it holds a lock, a socket, a file).
        """
        writer = self.writer
        if callable(getattr(writer, "process", None)):
            copied = self._copies.get(partition)
            if copied is None:
                copied = self._copies[partition] = _task_copy(writer)
            writer = copied
        return _ForeachWriter(writer, partition, epoch)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_copies": {}}  # a task makes its own

    def description(self) -> str:
        """Spark's description of a foreach sink."""
        return "ForeachWriterTable"


def _task_copy(writer: Any) -> Any:
    try:
        return copy.deepcopy(writer)
    except Exception as exc:
        raise InvalidPipelineError(
            f"the foreach writer {type(writer).__name__} cannot be copied for each task ({type(exc).__name__}: {exc}); "
            "as Spark pickles it to every task, make its locks, connections and files in open()") from exc


class _ForeachWriter(PartitionWriter):
    def __init__(self, writer: Any, partition: int, epoch: int) -> None:
        self._writer = writer
        process = getattr(writer, "process", None)
        self._process: Callable[[Any], Any] = process if callable(process) else writer
        opener = getattr(writer, "open", None)
        self._open = bool(opener(partition, epoch)) if callable(opener) and process is not None else True

    def write(self, row: Any) -> None:
        if self._open:
            self._process(row)

    def _close(self, error: BaseException | None) -> None:
        closer = getattr(self._writer, "close", None)
        if callable(closer) and callable(getattr(self._writer, "process", None)):
            closer(error)

    def commit(self) -> Any:
        self._close(None)
        return None

    def abort(self, error: BaseException) -> None:
        self._close(error)


# -- memory and console --


class MemorySink(ContinuousSink):
    """Keeps every committed row on the driver, in epoch order (Spark's memory sink; for tests).

    Each partition's rows of an epoch travel to the driver in its commit message and are added
    when the epoch commits, so :meth:`rows` holds exactly the committed epochs.
    """

    def __init__(self) -> None:
        """An empty sink."""
        self._lock = threading.Lock()
        self._epochs: dict[int, list[Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {}  # tasks need no state: their rows come back in commit messages

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._lock = threading.Lock()
        self._epochs = {}

    def open_writer(self, partition: int, epoch: int) -> PartitionWriter:
        """Collect the partition's rows."""
        return _CollectingWriter(None)

    def commit_epoch(self, epoch: int, messages: dict[int, Any]) -> None:
        """Add the epoch's rows, partition by partition."""
        rows = [row for partition in sorted(messages) for row in (messages[partition] or ())]
        with self._lock:
            self._epochs[epoch] = rows

    def latest_committed_epoch(self) -> int | None:
        """The newest epoch committed to it: a run starts after it (the epoch and its rows are added at once, so the
        sink's record is exact, as a ``FileSink``'s), and a run of another query, or one without a checkpoint, is
        refused instead of replacing its rows."""
        with self._lock:
            return max(self._epochs, default=None)

    def rows(self) -> list[Any]:
        """Every committed row, epoch by epoch."""
        with self._lock:
            return [row for epoch in sorted(self._epochs) for row in self._epochs[epoch]]

    def epochs(self) -> dict[int, list[Any]]:
        """Committed epoch -> its rows."""
        with self._lock:
            return {epoch: list(rows) for epoch, rows in sorted(self._epochs.items())}

    def description(self) -> str:
        """Spark's name for its memory sink."""
        return "MemorySink"


class _CollectingWriter(PartitionWriter):
    def __init__(self, limit: int | None) -> None:
        self._rows: list[Any] = []
        self._limit = limit
        self._count = 0

    def write(self, row: Any) -> None:
        self._count += 1
        if self._limit is None or len(self._rows) < self._limit:
            self._rows.append(row)

    def commit(self) -> Any:
        return self._rows if self._limit is None else (self._rows, self._count)


class ConsoleSink(ContinuousSink):
    """Prints each committed epoch as ``pprint`` prints a batch: a header with the epoch, then up to ``num`` rows.

    Only the first ``num`` rows of each partition travel to the driver.
    """

    def __init__(self, num: int = 10, out: Callable[[str], None] = print) -> None:
        """Print up to ``num`` rows per epoch with ``out``."""
        if isinstance(num, bool) or not isinstance(num, int) or num < 0:
            raise InvalidPipelineError(f"num must be a non-negative int, got {num!r}")
        self.num = num
        self._out = out

    def __getstate__(self) -> dict[str, Any]:
        return {"num": self.num}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.num = state["num"]
        self._out = print

    def open_writer(self, partition: int, epoch: int) -> PartitionWriter:
        """Keep the first ``num + 1`` rows (one more tells whether there were more)."""
        return _CollectingWriter(self.num + 1)

    def commit_epoch(self, epoch: int, messages: dict[int, Any]) -> None:
        """Print the epoch."""
        rows: list[Any] = []
        for partition in sorted(messages):
            taken, _ = messages[partition]
            rows.extend(taken)
        lines = ["-------------------------------------------", f"Epoch: {epoch}", "-------------------------------------------"]
        lines.extend(str(row) for row in rows[: self.num])
        if len(rows) > self.num:
            lines.append("...")
        lines.append("")
        self._out("\n".join(lines))

    def description(self) -> str:
        """Spark's name for its console sink."""
        return "ConsoleTable"


# -- files --

_PART = re.compile(r"^part-(\d+)-(\d+)$")
_EPOCHS_DIR = "_epochs"
_COMPACT = ".compact"
_COMPACT_EVERY = 10  # as Spark's file sink compacts its log (spark.sql.streaming.fileSink.log.compactInterval)


class FileSink(ContinuousSink):
    """Text files, committed atomically per epoch: ``<path>/part-<epoch>-<partition>`` and a log ``<path>/_epochs/<epoch>``.

    Each task writes its rows (``str(row)`` per line) to a hidden temporary file and flushes it to
    disk at the end of the epoch (a partition without rows writes no file); the driver's epoch
    commit renames every partition's file into place and then writes the epoch's entry in
    ``_epochs`` (write-once), which is the commit point: only files listed there are output
    (:meth:`read_committed`). Every 10th epoch the entries so far are compacted into one
    ``_epochs/<epoch>.compact`` listing every committed file, and the entries it covers are
    removed, so the log stays a few files however long the query runs. A restart clears files of
    epochs after the last logged one, and an epoch the sink logged but the query did not is taken
    as committed, so with a replayable source every row is written exactly once.
    """

    exactly_once = True

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Write under directory ``path`` (created if needed)."""
        self.path = os.path.abspath(os.fspath(path))
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise InvalidPipelineError(f"the file sink's path {self.path} is a file; pass a directory")

    def open_writer(self, partition: int, epoch: int) -> PartitionWriter:
        """A temporary file for the partition's rows of the epoch."""
        return _FileWriter(self.path, partition, epoch)

    def _log_dir(self) -> Path:
        return Path(self.path) / _EPOCHS_DIR

    def has_committed(self, epoch: int) -> bool:
        """Whether ``epoch`` is logged, by its own entry or in a compaction."""
        if (self._log_dir() / str(epoch)).exists():
            return True
        compacted = _log_ids(self._log_dir())[1]
        return bool(compacted) and epoch <= compacted[-1]

    def commit_epoch(self, epoch: int, messages: dict[int, Any]) -> None:
        """Rename the epoch's files into place, then log the epoch (idempotent: a logged epoch is left as it is)."""
        log = self._log_dir()
        if self.has_committed(epoch):
            return
        names = []
        for partition in sorted(messages):
            temp, final = messages[partition]
            if temp is None:  # the partition had no rows: no file
                continue
            target = os.path.join(self.path, final)
            if os.path.exists(os.path.join(self.path, temp)):
                os.replace(os.path.join(self.path, temp), target)
            elif not os.path.exists(target):
                raise InvalidPipelineError(f"the file sink lost partition {partition}'s file of epoch {epoch}: neither "
                                           f"{temp} nor {final} is in {self.path}")
            names.append(final)
        if names:
            fsync_directory(self.path)
        log.mkdir(parents=True, exist_ok=True)
        write_new_file(log / str(epoch), ("\n".join(names)).encode("utf-8"))
        if (epoch + 1) % _COMPACT_EVERY == 0:
            self._compact(epoch)

    def _compact(self, epoch: int) -> None:
        """List every file committed up to ``epoch`` in ``<epoch>.compact``, then remove the entries it covers.

        A crash between the two leaves both, which readers take as the compaction (entries it covers are ignored).
        """
        log = self._log_dir()
        names = _committed_files(log, upto=epoch)
        write_new_file(log / f"{epoch}{_COMPACT}", "".join(f"{name}\n" for name in names).encode("utf-8"))
        plain, compacted = _log_ids(log)
        for old in plain:
            if old <= epoch:
                (log / str(old)).unlink(missing_ok=True)
        for old in compacted:
            if old < epoch:
                (log / f"{old}{_COMPACT}").unlink(missing_ok=True)

    def latest_committed_epoch(self) -> int | None:
        """The newest epoch in ``_epochs`` (its own entry, or the newest compaction)."""
        plain, compacted = _log_ids(self._log_dir())
        ids = plain[-1:] + compacted[-1:]
        return max(ids) if ids else None

    def prepare(self, last_committed_epoch: int) -> None:
        """Remove temporary files and the files of epochs after ``last_committed_epoch``."""
        os.makedirs(self.path, exist_ok=True)
        remove_temp_files(self.path)
        remove_temp_files(self._log_dir())
        for name in os.listdir(self.path):
            match = _PART.match(name)
            if match and int(match.group(1)) > last_committed_epoch:
                os.unlink(os.path.join(self.path, name))

    @staticmethod
    def read_committed(path: str | os.PathLike[str]) -> Iterator[str]:
        """The lines of every committed epoch, in epoch and partition order."""
        log = Path(path) / _EPOCHS_DIR
        for attempt in range(3):
            try:
                names = _committed_files(log)
                break
            except FileNotFoundError:  # a compaction removed an entry between the listing and its read: list again
                if attempt == 2:
                    raise
        for name in names:
            with open(os.path.join(path, name), encoding="utf-8") as f:
                for line in f:
                    yield line.rstrip("\n")

    def description(self) -> str:
        """Spark's file sink description."""
        return f"FileSink[{self.path}]"


def _log_ids(log: Path) -> tuple[list[int], list[int]]:
    """The epochs of the log's own entries and of its compactions, each sorted (empty lists without a log)."""
    plain: list[int] = []
    compacted: list[int] = []
    try:
        names = os.listdir(log)
    except FileNotFoundError:
        return plain, compacted
    for name in names:
        if name.endswith(_COMPACT):
            epoch = parse_batch_file_name(name[: -len(_COMPACT)])
            if epoch is not None:
                compacted.append(epoch)
        else:
            epoch = parse_batch_file_name(name)
            if epoch is not None:
                plain.append(epoch)
    return sorted(plain), sorted(compacted)


def _committed_files(log: Path, upto: int | None = None) -> list[str]:
    """The files of every committed epoch (up to ``upto``), in epoch and partition order: the newest compaction's, then
    the entries after it."""
    plain, compacted = _log_ids(log)
    names: list[str] = []
    base = -1
    if compacted:
        base = compacted[-1]
        names.extend(filter(None, (log / f"{base}{_COMPACT}").read_text(encoding="utf-8").split("\n")))
    for epoch in plain:
        if base < epoch and (upto is None or epoch <= upto):
            names.extend(filter(None, (log / str(epoch)).read_text(encoding="utf-8").split("\n")))
    return names


class _FileWriter(PartitionWriter):
    """One partition's file of one epoch, opened at its first row (a partition without rows writes none)."""

    def __init__(self, directory: str, partition: int, epoch: int) -> None:
        os.makedirs(directory, exist_ok=True)
        self._final = f"part-{epoch:05d}-{partition:05d}"
        self._temp = f".{self._final}.{uuid.uuid4().hex}.tmp"
        self._path = os.path.join(directory, self._temp)
        self._file: Any = None

    def write(self, row: Any) -> None:
        if self._file is None:
            self._file = open(self._path, "w", encoding="utf-8")
        self._file.write(f"{row}\n")

    def commit(self) -> Any:
        if self._file is None:
            return (None, self._final)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        return (self._temp, self._final)

    def abort(self, error: BaseException) -> None:
        if self._file is None:
            return
        self._file.close()
        try:
            os.unlink(self._path)
        except FileNotFoundError:
            pass
