"""The RDD checkpoint files of a stream, deleted once no remembered RDD needs them (the file bookkeeping of Spark's
``DStreamCheckpointData``), and the queue that unpersists and deletes off the event loop.

Recovery never reads these files (a restart loads the state snapshots under ``state/``): they only cut the
lineage of a running program's RDDs, so what one still needs is what its remembered RDDs' lineage reaches.
"""

from __future__ import annotations

from typing import Any, Callable

from scheduler import CheckpointPath, library_logger, redact_uri, task_checkpoint_path

__all__ = ["CheckpointFiles", "ReleaseQueue"]

_log = library_logger("aiodstream.streaming", component="CheckpointFiles")


class CheckpointFiles:
    """The RDDs one stream marked for checkpointing, and the files they were saved to.

    Spark deletes, after each graph checkpoint, the files of the RDDs older than the oldest checkpointed RDD it
    still remembers. This keeps one more: the newest saved RDD at or before the oldest remembered time, where the
    lineage of every remembered RDD ends (a stream's RDD derives from its earlier ones through it, or not at all).
    On Spark Connect that matters: a remembered frame's plan names the files it was read from, and the server
    analyzes such a plan again (to derive from it, or to unpersist it), which fails once they are gone.

    :meth:`mark` runs where RDDs are generated, :meth:`clean` in the generation thread (py4j calls, file I/O).
    """

    def __init__(self, spark_context: Callable[[], Any]) -> None:
        """No RDD marked yet; ``spark_context`` gives the SparkContext whose Hadoop file system deletes classic files."""
        self._spark_context = spark_context
        self._hadoop: Any = None  # the HadoopFileManager deleting classic Spark's files, made on first need
        self._marked: dict[int, Any] = {}  # batch time (ms) -> an RDD marked, whose file is not known yet
        self._files: dict[int, tuple[str, bool]] = {}  # batch time (ms) -> (its RDD's file, whether classic Spark's)

    def mark(self, time_ms: int, rdd: Any) -> None:
        """Remember that ``rdd``, the stream's RDD of ``time_ms``, is marked for checkpointing."""
        self._marked[time_ms] = rdd

    @property
    def files(self) -> dict[int, str]:
        """The checkpoint files known and not deleted yet, by batch time (ms)."""
        return {ms: file for ms, (file, _) in sorted(self._files.items())}

    def clean(self, oldest_remembered_ms: int) -> None:
        """Delete the files no remembered RDD (those from ``oldest_remembered_ms`` on) can read (blocking I/O).

        A file that cannot be deleted is logged and tried again next time, as Spark does.
        """
        for ms, rdd in sorted(self._marked.items()):
            file = rdd.getCheckpointFile()  # classic Spark: a py4j call, set once the RDD's first job saved it
            if file:
                del self._marked[ms]
                self._files[ms] = (file, _is_classic(rdd))
        anchors = [ms for ms in self._files if ms <= oldest_remembered_ms]
        if not anchors:
            return
        anchor = max(anchors)
        for ms in [ms for ms in self._marked if ms < anchor]:
            del self._marked[ms]  # never saved, and now never will be: everything remembered derives from the anchor
        kept = {file for ms, (file, _) in self._files.items() if ms >= anchor}  # a state carried over keeps its RDD
        for ms, (file, classic) in sorted(self._files.items()):
            if ms >= anchor:
                break
            if file not in kept and not self._delete(file, classic):
                continue
            del self._files[ms]

    def _delete(self, file: str, classic: bool) -> bool:
        try:
            self._path(file, classic).delete(recursive=True)
        except Exception as exc:  # a file system error: the next clean tries again
            _log.warning("cannot delete an old RDD checkpoint file", file=redact_uri(file), error=f"{type(exc).__name__}: {exc}")
            return False
        _log.debug("old RDD checkpoint file deleted", file=redact_uri(file))
        return True

    def _path(self, file: str, classic: bool) -> CheckpointPath:
        if classic:  # Spark wrote it through Hadoop's FileSystem: delete it the same way (any scheme Spark reaches)
            if self._hadoop is None:
                from ..spark import HadoopFileManager

                self._hadoop = HadoopFileManager(self._spark_context)
            return CheckpointPath(self._hadoop, file)
        return task_checkpoint_path(file)  # Spark Connect: a local path, or a URI the server reaches, through fsspec

    def __repr__(self) -> str:
        return f"<CheckpointFiles [{len(self._files)} saved | {len(self._marked)} marked]>"


class ReleaseQueue:
    """What streams let go of at a batch's end (cached RDDs to unpersist, checkpoint files to clean), queued on the
    event loop and released together in one call off it (:meth:`take`)."""

    def __init__(self) -> None:
        """Nothing queued."""
        self._rdds: list[Any] = []
        self._cleans: list[tuple[CheckpointFiles, int]] = []

    def unpersist_later(self, rdd: Any) -> None:
        """Queue a cached RDD to unpersist."""
        self._rdds.append(rdd)

    def clean_later(self, files: CheckpointFiles, oldest_remembered_ms: int) -> None:
        """Queue a stream's checkpoint files to clean, once its RDDs before ``oldest_remembered_ms`` are forgotten."""
        self._cleans.append((files, oldest_remembered_ms))

    def take(self) -> Callable[[], None] | None:
        """A call that releases everything queued so far (blocking: py4j calls, file I/O), or ``None`` if nothing is.

        Unpersisting comes first: on Spark Connect an RDD's frame names the files it read, and the server analyzes
        it again to unpersist it.
        """
        if not self._rdds and not self._cleans:
            return None
        rdds, self._rdds = self._rdds, []
        cleans, self._cleans = self._cleans, []

        def release() -> None:
            for rdd in rdds:
                rdd.unpersist(blocking=False)
            for files, oldest in cleans:
                try:
                    files.clean(oldest)
                except Exception as exc:  # e.g. the SparkContext stopped meanwhile: the files stay, as Spark leaves them
                    _log.warning("cannot clean old RDD checkpoint files", error=f"{type(exc).__name__}: {exc}")
        return release


def _is_classic(rdd: Any) -> bool:
    from pyspark import RDD

    return isinstance(rdd, RDD)
