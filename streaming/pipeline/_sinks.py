"""FileSink: an output operation that writes each batch to one file named by its batch time, exactly once.

The documented exactly-once pattern for sinks, as Spark's ``saveAsTextFiles`` names output by
batch time: a re-run batch has the same time and (from a replayable source) the same input, so
a sink that writes under a name derived from the batch time, atomically, and skips a name that
already exists, holds every batch once however often it runs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable

from scheduler import Time, library_logger, parse_long, write_new_file

from ._pipeline import Batch

__all__ = ["FileSink"]


def _all_records(batch: Batch) -> Iterable[Any]:
    for records in batch.inputs.values():
        yield from records


class FileSink:
    """Writes each batch's records, one line each, to ``<path>/<prefix><batch time ms><suffix>``.

    Use it as a pipeline output: ``pipeline.add_output(FileSink("out"))``. It runs in a worker
    thread. For each batch it:

    1. skips the batch if its file exists (the batch ran before a restart);
    2. writes the lines to a hidden temporary file in ``path`` and flushes it to disk;
    3. links it to the final name, never replacing an existing file, and flushes the directory.

    A crash at any point leaves either no file for the batch (it is written when the batch
    re-runs) or the complete file (the re-run skips it). Together with a replayable source and
    a checkpoint this gives exactly-once output. With async progress tracking a batch may re-run
    with a different range after a crash, so the pattern then gives no such guarantee.

    Args:
        path: the output directory (created if missing).
        format: turns a record into its line (default ``str``); must not add newlines.
        select: which records to write (default: every input of the batch in order: each source's records, then each
            stateful operator's outputs; pass a function of the Batch to write fewer).
        skip_empty: write no file for a batch without records.
        prefix: file name prefix.
        suffix: file name suffix.
        durable: flush to disk (``fsync``); off, files still survive a crash of the process.
    """

    supports_async_progress_tracking = True
    """A re-run batch rewrites its own file: allowed with async progress tracking (at least once)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        format: Callable[[Any], str] = str,
        select: Callable[[Batch], Iterable[Any]] = _all_records,
        skip_empty: bool = True,
        prefix: str = "batch-",
        suffix: str = ".txt",
        durable: bool = True,
    ) -> None:
        """Create a sink writing into ``path``."""
        self.path = Path(path)
        self._format = format
        self._select = select
        self.skip_empty = skip_empty
        self.prefix = prefix
        self.suffix = suffix
        self.durable = durable
        self.written = 0
        self.skipped = 0
        self._cleaned = False
        self._log = library_logger("aiodstream.streaming", component="FileSink", path=str(self.path))

    def file_for(self, time: Time) -> Path:
        """Where the batch at ``time`` is written."""
        return self.path / f"{self.prefix}{time.milliseconds}{self.suffix}"

    def batch_times(self) -> list[Time]:
        """The batch times that have a file, ascending."""
        times = []
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return []
        for name in names:
            middle = name[len(self.prefix): len(name) - len(self.suffix)] if self.suffix else name[len(self.prefix):]
            ms = parse_long(middle) if name.startswith(self.prefix) and name.endswith(self.suffix) else None
            if ms is not None and ms >= 0:
                times.append(Time(ms))
        return sorted(times)

    def _remove_leftovers(self) -> None:
        # Temp files of a killed earlier run (this sink's own are always removed): one query
        # writes to a sink directory at a time, so nothing else can be writing these.
        leftover = re.compile(rf"\.{re.escape(self.prefix)}[0-9]+{re.escape(self.suffix)}\.[0-9a-f]+\.tmp")
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return
        for name in names:
            if leftover.fullmatch(name):
                try:
                    os.unlink(self.path / name)
                except FileNotFoundError:
                    pass

    def __call__(self, batch: Batch) -> None:
        """Write ``batch`` unless its file exists (blocking: the pipeline runs it in a worker thread).

        The first call also removes temporary files that a killed earlier run left behind.
        """
        if not self._cleaned:
            self._remove_leftovers()
            self._cleaned = True
        target = self.file_for(batch.time)
        if target.exists():
            self.skipped += 1
            self._log.info("batch already written; skipped", batch_time=batch.time.milliseconds)
            return
        lines = [self._format(record) for record in self._select(batch)]
        if not lines and self.skip_empty:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        if write_new_file(target, data, durable=self.durable):
            self.written += 1
        else:
            self.skipped += 1

    def __repr__(self) -> str:
        return f"<FileSink {str(self.path)!r} [{self.written} written, {self.skipped} skipped]>"
