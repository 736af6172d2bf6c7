"""File streams: each batch reads the files that newly appeared in a directory (Spark's ``FileInputDStream``).

Backs ``textFileStream`` and ``binaryRecordsStream``. Listing the directory is blocking I/O; it
happens in ``_compute``, which runs in the batch-generation worker thread, never on the loop. On Spark
Connect a URI's directory is listed here through fsspec, and its files read by the server's Python
workers through fsspec too (``_fsspec_listing``).
"""

from __future__ import annotations

import glob
import math
import os
import time as _time
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable
from urllib.parse import unquote, urlparse

import anyio.to_thread
import attrs

from scheduler import (
    CorruptCheckpointError,
    Duration,
    Offset,
    StreamInputInfo,
    SystemClock,
    Time,
    concurrent_log_update_error,
    library_logger,
)

from ..dstream import StreamEnvironment, times_read
from ..recovery import FileSelection, FileSelectionLog, format_log_offset
from ..spark import list_hadoop_files, time_string_as
from ._base import InputDStream
from ._counting import RowCounter
from ._fsspec_listing import FileDecoder, check_fsspec_scheme, list_fsspec_files, read_fsspec_file

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext  # only for annotations: pyspark is imported when Spark is first needed

    from ..connect import ObservedRows

__all__ = ["FileEntry", "FileInputDStream", "files_pending", "is_new_file", "list_local_files", "select_new_files"]

DEFAULT_MIN_REMEMBER = "60s"


@attrs.frozen
class FileEntry:
    """One file seen in a directory listing: its path as Spark will read it, mod time and size."""

    path: str
    mod_time_ms: int
    size: int

    @property
    def name(self) -> str:
        """The last path component."""
        return self.path.rstrip("/").rsplit("/", 1)[-1]


def is_new_file(entry: FileEntry, *, threshold_ms: int, time_ms: int, already_selected: Collection[str]) -> bool:
    """FileInputDStream's test for batch ``time_ms``: not hidden, modified in ``(threshold, time]``, not yet selected."""
    return (
        not entry.name.startswith(".")
        and threshold_ms < entry.mod_time_ms <= time_ms
        and entry.path not in already_selected
    )


def files_pending(entries: Iterable[FileEntry], *, threshold_ms: int, after_ms: int | None, now_ms: int,
                  already_selected: Collection[str]) -> bool:
    """Whether a later batch time will take one of ``entries``: not hidden, not yet selected, modified after the
    threshold and at or before ``now_ms`` (a file dated ahead of the clock is not yet there, as far as anyone waiting
    can tell), and after ``after_ms``, the time of the batch that listed them, if that batch reads the stream."""
    return any(
        (after_ms is None or after_ms < e.mod_time_ms)
        and is_new_file(e, threshold_ms=threshold_ms, time_ms=now_ms, already_selected=already_selected)  # new at now
        for e in entries
    )


def select_new_files(entries: Iterable[FileEntry], *, threshold_ms: int, time_ms: int,
                     already_selected: Collection[str]) -> list[FileEntry]:
    """The entries that :func:`is_new_file` accepts, ordered by path (as HDFS lists them)."""
    chosen = [e for e in entries if is_new_file(e, threshold_ms=threshold_ms, time_ms=time_ms, already_selected=already_selected)]
    chosen.sort(key=lambda e: e.path)
    return chosen


def _is_local(directory: str) -> bool:
    return "://" not in directory and not directory.startswith("file:")


def _is_file_uri(directory: str) -> bool:
    return directory.startswith("file:")


def list_local_files(directory: str) -> list[FileEntry] | None:
    """Files directly in the directories matching ``directory`` (a glob); None if none matches."""
    pattern = os.path.abspath(directory)
    dirs = [d for d in glob.glob(pattern) if os.path.isdir(d)] if glob.has_magic(pattern) else \
        ([pattern] if os.path.isdir(pattern) else [])
    if not dirs:
        return None
    entries: list[FileEntry] = []
    for d in dirs:
        with os.scandir(d) as it:
            for item in it:
                try:
                    if not item.is_file():
                        continue
                    st = item.stat()
                except FileNotFoundError:  # removed between listing and stat
                    continue
                entries.append(FileEntry("file:" + item.path, st.st_mtime_ns // 1_000_000, st.st_size))
    return entries


def _list_hadoop(sc: SparkContext, directory: str) -> list[FileEntry] | None:
    """The same through Hadoop's FileSystem (hdfs://, s3a://, file: URIs ...), as Spark lists them."""
    files = list_hadoop_files(sc, directory)
    return None if files is None else [FileEntry(uri, mtime_ms, size) for uri, mtime_ms, size in files]


class _ReadFile:
    """Runs in the server's Python worker: one file's records, read through fsspec."""

    def __init__(self, decode: FileDecoder) -> None:
        self.decode = decode

    def __call__(self, path: str) -> Iterable[Any]:
        return self.decode(read_fsspec_file(path), path)


class FileInputDStream(InputDStream):
    """The files that appear in ``directory``, read by ``read_file`` and united per batch.

    Batch ``t`` takes every file directly in the directory (``directory`` may be a glob matching
    several) that is not hidden (name starting with ``.``), was modified after
    ``max(creation time, t - remember window)`` and at or before ``t``, and was not taken by an
    earlier batch. The remember window is ``ceil(minRememberDuration / batch)`` batches
    (``spark.streaming.fileStream.minRememberDuration``, default 60 s). So only files created
    after the stream are read, each once; write a file elsewhere (or under a hidden name) and
    move it in, since a file still being written may be read half-done. A missing directory is a
    warning and an empty batch. Each batch reports its files in its ``StreamInputInfo``
    (``metadata["files"]``), with 0 records, as Spark does.

    With a checkpoint, the files of each batch that found any are logged (Structured
    Streaming's ``FileStreamSourceLog`` format, ``sources/<id>/<N>``) before the batch's offsets
    entry, so a re-run batch reads exactly its files, and a restart keeps the creation-time
    threshold of the first run: files that arrived while the program was down go to the
    down-time batches by modification time, as far back as the remember window reaches.
    """

    reports_latest = False  # its data is found while a batch is planned: progress shows latestOffset null, as Spark's file source

    _input_kind = "file"
    _whole_files_on_connect = False  # the default for a graph saved before the setting existed

    def __init__(self, env: StreamEnvironment, directory: str | os.PathLike[str],
                 read_file: Callable[[SparkContext, str], RDD[Any]], decode: FileDecoder, *,
                 whole_files_on_connect: bool = False) -> None:
        """Watch ``directory``; ``read_file(sc, path)`` makes one file's RDD; on Spark Connect, for a URI (and for any
        directory with ``whole_files_on_connect``: a reader Connect has no form of), the server's Python workers read
        each file whole through fsspec and ``decode`` makes its records of its bytes."""
        if not isinstance(directory, (str, os.PathLike)):
            raise TypeError(f"directory must be a path (str or os.PathLike), got {type(directory).__name__} {directory!r}")
        super().__init__(env)
        self.directory = os.fspath(directory)
        self._read_file = read_file
        self._decode = decode
        # On Connect there is no Hadoop here: a URI is listed through fsspec in this process (checked now).
        self._through_fsspec = (env.spark.kind == "connect" and not _is_local(self.directory)
                                and not _is_file_uri(self.directory))
        if self._through_fsspec:
            check_fsspec_scheme(self.directory)
        self._whole_files_on_connect = whole_files_on_connect
        settings = env.spark.settings()
        key = "spark.streaming.fileStream.minRememberDuration"
        spec = settings.get(key)
        if spec is None:
            key = "spark.streaming.minRememberDuration"
            spec = settings.get(key, DEFAULT_MIN_REMEMBER) or DEFAULT_MIN_REMEMBER
        min_remember_ms = 1000 * time_string_as(spec, "s", key)
        batch = env.batch_duration
        self.batches_to_remember = max(1, math.ceil(min_remember_ms / batch.milliseconds))
        self.duration_to_remember: Duration = batch * self.batches_to_remember
        self._remember_duration = self.duration_to_remember
        self._clock = env.clock if env.clock is not None else SystemClock()
        self.initial_threshold: Time = self._clock.now()
        # The files taken within the remember window, with their modification times (ms): older ones can never be
        # taken again under that time (the window's threshold excludes them), so they go; a file made again goes in anew.
        self._recent: dict[str, int] = {}
        # With a checkpoint: the selection log, its newest entry, and the entries in memory.
        self._file_log: FileSelectionLog | None = None
        self._last_entry = -1
        self._entries: dict[int, FileSelection] = {}
        # Whether an output reads this stream's RDD of a time (None: every time), known once the graph starts.
        self._times_read: Callable[[Time], bool] | None = None
        self._row_counter = RowCounter()
        self._observed: ObservedRows | None = None  # on Connect
        self._log = library_logger("aiodstream.streaming", component="FileInputDStream", stream=self.id,
                                                                     directory=self.directory)

    def _list(self) -> list[FileEntry] | None:
        # A bare path is on fs.defaultFS, as Spark resolves it: the driver's disk only when that is file:.
        if _is_local(self.directory) and self._env.spark.settings().default_fs.startswith("file:"):
            return list_local_files(self.directory)
        if self._through_fsspec:
            files = list_fsspec_files(self.directory)
            return None if files is None else [FileEntry(uri, mtime_ms, size) for uri, mtime_ms, size in files]
        if self._env.spark.kind == "connect":  # no Hadoop here: a local path or file: URI on the driver's disk
            return list_local_files(unquote(urlparse(self.directory).path) if _is_file_uri(self.directory) else self.directory)
        return _list_hadoop(self._env.spark_context, self.directory)

    def _find_new_files(self, time: Time, *, read: bool = True) -> list[FileEntry]:
        # The files batch ``time`` takes (none unless it ``read``s the stream); sets input_pending from the same listing.
        initial = self.initial_threshold.milliseconds
        if self._through_fsspec:
            # Many stores list whole seconds (FTP's MLSD, S3's LastModified): a file written in the second the stream
            # began would seem older than it and be lost, so that whole second counts as after the stream's start.
            initial -= initial % 1000 + 1
        threshold = max(initial, time.milliseconds - self.duration_to_remember.milliseconds)
        began = _time.perf_counter()
        self.input_pending = False
        try:
            entries = self._list()
        except Exception as exc:
            self._log.warning("cannot list the directory; no files this batch", batch=time.milliseconds, error=repr(exc))
            self.input_pending = True  # files may wait all the same: only a batch that lists can say none does
            return []
        if entries is None:
            self._log.warning("no directory to scan; no files this batch", batch=time.milliseconds)
            return []
        elapsed_ms = (_time.perf_counter() - began) * 1000
        if elapsed_ms > self._slide.milliseconds:
            self._log.warning("listing the directory took longer than a batch", elapsed_ms=round(elapsed_ms),
                              batch_ms=self._slide.milliseconds)
        time_ms = time.milliseconds
        # A late batch (its time before now) leaves the files modified since to a later batch; a batch that does not
        # read the stream leaves every file to the next one that does.
        self.input_pending = files_pending(entries, threshold_ms=threshold, after_ms=time_ms if read else None,
                                           now_ms=self._clock.now().milliseconds, already_selected=self._recent)
        if not read:
            return []
        return select_new_files(entries, threshold_ms=threshold, time_ms=time_ms, already_selected=self._recent)

    def _compute(self, time: Time) -> RDD[Any] | None:
        # Runs in the generation worker thread; clear_metadata runs on the loop, but the
        # JobGenerator never does both at once, so the bookkeeping needs no lock.
        if self.replaying:
            paths = self._logged_files(time)
        else:
            new = self._find_new_files(time)
            self._warn_empty(new)
            paths = [e.path for e in new]
            self._recent.update((e.path, e.mod_time_ms) for e in new)
        tracker = self._env.graph.input_infos
        if tracker is not None:
            tracker.report_info(time, StreamInputInfo(self.id, 0, {"files": paths, "Description": "\n".join(paths)}))
        sc = self._env.spark_context
        if not paths:
            return sc.emptyRDD()
        # One partition per file, read whole by a server's Python worker: a URI, or a reader Connect has no form of.
        if self._through_fsspec or (self._whole_files_on_connect and self._env.spark.kind == "connect"):
            rdd = sc.parallelize(paths, len(paths)).flatMap(_ReadFile(self._decode))
        else:
            rdds = [self._read_file(sc, p) for p in paths]
            rdd = rdds[0] if len(rdds) == 1 else sc.union(rdds)
        if tracker is None:
            return rdd  # a graph that is not running: nobody reads the counts
        if self._env.spark.kind == "connect":  # no accumulators on Connect: observed metrics count the rows
            if self._observed is None:
                from ..connect import ObservedRows

                self._observed = ObservedRows()
            counted: RDD[Any] = self._observed.wrap(rdd, time.milliseconds)
            return counted
        return self._row_counter.wrap(sc, rdd, time.milliseconds)  # rows counted as the batch reads them

    def take_counted_rows(self, time: Time) -> int | None:
        """The rows batch ``time`` read from its files, once its jobs ended."""
        if self._observed is not None:
            return self._observed.take(time.milliseconds)
        return self._row_counter.take(time.milliseconds)

    def _warn_empty(self, entries: list[FileEntry]) -> None:
        for e in entries:
            if e.size == 0:
                self._log.error("file is empty: write files elsewhere and move them into the directory, "
                                "or they may be read before their data is written", file=e.path)

    # -- replay (with a checkpoint) --

    def _descriptor(self) -> tuple[dict[str, Any], tuple[str, ...]]:
        return ({"kind": self._input_kind, "name": self.name, "directory": self.directory,
                 "initialModTimeIgnoreThreshold": self.initial_threshold.milliseconds}, ("kind", "directory"))

    def _load_log(self, recorded: dict[str, Any]) -> None:
        assert self._log_dir is not None
        threshold = recorded.get("initialModTimeIgnoreThreshold")
        if isinstance(threshold, int):
            self.initial_threshold = Time(threshold)
        log = self._file_log = FileSelectionLog(self._log_dir)
        for entry in log.batch_ids():
            files = log.get(entry)
            if files is None:
                continue
            self._entries[entry] = files
            self._recent.update(files)
            self._last_entry = max(self._last_entry, entry)

    def latest_offset(self) -> Offset:
        return format_log_offset(self._last_entry) if self._last_entry >= 0 else None

    async def plan_offset(self, start: Offset, time: Time) -> Offset:
        return await anyio.to_thread.run_sync(self._plan_sync, time)

    def start(self) -> None:
        """Called once when the context starts: the graph is complete, so the times its outputs read this stream at are known."""
        super().start()
        self._times_read = times_read(self, self._env.graph.output_streams)

    def _plan_sync(self, time: Time) -> Offset:
        if self._times_read is not None and not self._times_read(time):
            # No output reads this time (a window shorter than its slide): nothing is taken, and the next time read
            # takes what came meanwhile, as Spark's file stream, which lists only when its RDD is computed. The listing
            # here only tells a processAllAvailable whether a file waits for that time.
            self._find_new_files(time, read=False)
            return self.latest_offset()
        new = self._find_new_files(time)
        if new:
            entry = self._last_entry + 1
            files = FileSelection((e.path, e.mod_time_ms) for e in new)
            if self._file_log is not None and not self._file_log.add(entry, files):
                raise concurrent_log_update_error(entry, self._file_log.path_of(entry))  # another writer got there first
            self._warn_empty(new)
            self._entries[entry] = files
            self._recent.update(files)
            self._last_entry = entry
        # The newest entry, not just this batch's: an entry logged just before a crash (its
        # batch never reached the offsets log) is taken by the next batch, never lost.
        return self.latest_offset()

    def _logged_files(self, time: Time) -> list[str]:
        paths: list[str] = []
        for entry in self._logged_entry_ids(time):
            files = self._entries.get(entry)
            if files is None and self._file_log is None:
                continue  # in memory only: a range no remembered batch covers any more
            if files is None:
                assert self._file_log is not None
                files = self._file_log.get(entry)
                if files is None:
                    path = self._file_log.path_of(entry)
                    raise CorruptCheckpointError(
                        f"{path} is missing: batch {time} is being replayed and took its files from this entry; restore it, "
                        "or start over with a new checkpoint directory",
                        path=str(path),
                    )
                self._entries[entry] = files
            paths.extend(path for path, _ in files)
        return paths

    async def commit(self, end: Offset) -> None:
        # Entries before every remembered batch's range are needed neither to replay a batch
        # nor to rebuild a window; their files stay in the seen set, so none is taken twice.
        # The newest entry always stays: a restart numbers its entries after the newest one on disk (see the receivers').
        below = min(self._first_entry_needed(end), self._last_entry)
        stale = [e for e in self._entries if e < below]
        if stale:
            for entry in stale:
                del self._entries[entry]
            if self._file_log is not None:
                await anyio.to_thread.run_sync(self._file_log.purge, below)

    def clear_metadata(self, time: Time) -> None:
        """The graph's hook (not for users): also forget the files taken that were modified before the remember window."""
        super().clear_metadata(time)
        remember = self._remember_duration or self.duration_to_remember
        cutoff = time.milliseconds - remember.milliseconds
        recent = self._recent
        for path in [path for path, mod_time in recent.items() if mod_time <= cutoff]:
            del recent[path]

    def __repr__(self) -> str:
        return f"<FileInputDStream {self.name} [{self.directory!r} | remembering {len(self._recent)} files]>"
