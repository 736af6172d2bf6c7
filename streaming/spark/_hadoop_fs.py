"""The Hadoop FileSystem calls streams make: list a file stream's directory, save a batch as text files again.

Spark's ``FileInputDStream`` listing and ``saveAsTextFiles`` through Hadoop's ``FileSystem`` in the
driver's JVM (hdfs://, s3a://, file: ...). Every call is a py4j call: blocking.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from scheduler import check_task_file_system, library_logger, task_checkpoint_path

from ._py4j import hadoop_configuration, jvm

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext  # only for annotations: pyspark is imported when Spark is first needed

__all__ = ["list_hadoop_files", "save_text_files_once"]

_log = library_logger("aiodstream.streaming", component="DStream")


def list_hadoop_files(sc: SparkContext, directory: str) -> list[tuple[str, int, int]] | None:
    """``(uri, modification ms, size)`` of the files in the directories matching the glob ``directory``, as Spark lists them.

    ``None`` when nothing matches the glob.
    """
    view = jvm(sc)
    path = view.org.apache.hadoop.fs.Path(directory)
    fs = path.getFileSystem(hadoop_configuration(sc))
    matches = fs.globStatus(path)
    if not matches:
        return None
    files: list[tuple[str, int, int]] = []
    for match in matches:
        if not match.isDirectory():
            continue
        for status in fs.listStatus(match.getPath()):
            if status.isFile():
                files.append((status.getPath().toString(), int(status.getModificationTime()), int(status.getLen())))
    return files


def save_text_files_once(rdd: RDD[Any], path: str) -> None:
    """``rdd.saveAsTextFile(path)``, unless ``path`` already holds a complete save (Hadoop's ``_SUCCESS`` marker).

    A directory without the marker is what a crash in the middle of a save leaves: it is deleted
    and the RDD saved again, so a replayed batch's output is whole.
    """
    pyspark = sys.modules.get("pyspark")
    if pyspark is None or not isinstance(rdd, pyspark.RDD):  # a FrameRDD (Spark Connect): the server writes, no Hadoop here
        _save_frame_once(rdd, path)
        return
    from py4j.protocol import Py4JJavaError

    try:
        rdd.saveAsTextFile(path)
    except Py4JJavaError as exc:
        if "FileAlreadyExistsException" not in str(exc):
            raise
        if _remove_incomplete_save(rdd.context, path):
            rdd.saveAsTextFile(path)


def _save_frame_once(rdd: Any, path: str) -> None:
    """:func:`save_text_files_once` for a FrameRDD on Spark Connect, whose server's Python workers write the files.

    This process makes the skip-or-redo check on the same path: a local path or ``file:`` URI on
    its own disk (a local server, or a mount both see), any other URI through fsspec, as the
    workers write it. Where fsspec cannot open the URI's scheme in this process (its package is
    not installed here), the batch is saved without the check: a replayed batch whose directory
    exists then fails (the workers refuse to overwrite a part file).
    """
    if "://" in path and not path.startswith("file:"):
        _save_uri_once(rdd, path)
        return
    local = unquote(urlparse(path).path) if path.startswith("file:") else path
    if os.path.exists(os.path.join(local, "_SUCCESS")):
        return
    if os.path.exists(local):
        _log.warning("removing an incomplete save of a replayed batch before saving it again", path=path)
        shutil.rmtree(local)
    rdd.saveAsTextFile(path)


def _save_uri_once(rdd: Any, path: str) -> None:
    try:
        check_task_file_system(path)
    except ValueError:  # the workers may still reach it (their Python has the package): save as asked
        rdd.saveAsTextFile(path)
        return
    target = task_checkpoint_path(path)
    if (target / "_SUCCESS").exists():
        return
    if target.exists():
        _log.warning("removing an incomplete save of a replayed batch before saving it again", path=str(target))
        target.delete(recursive=True)
    rdd.saveAsTextFile(path)


def _remove_incomplete_save(sc: SparkContext, path: str) -> bool:
    """Delete ``path`` if it is an interrupted Hadoop save (no ``_SUCCESS`` marker); return whether it was."""
    view = jvm(sc)
    target = view.org.apache.hadoop.fs.Path(path)
    fs = target.getFileSystem(hadoop_configuration(sc))
    if fs.exists(view.org.apache.hadoop.fs.Path(target, "_SUCCESS")):
        return False
    _log.warning("removing an incomplete save of a replayed batch before saving it again", path=path)
    fs.delete(target, True)
    return True
