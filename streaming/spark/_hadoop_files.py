"""Checkpoint files through Hadoop's FileSystem API, and where a checkpoint directory lives.

Spark's counterparts are ``FileContextBasedCheckpointFileManager`` (atomic rename that never
replaces: HDFS, local, and every file system with a ``FileContext`` binding),
``FileSystemBasedCheckpointFileManager`` (the fallback) and
``AbortableStreamBasedCheckpointFileManager`` (object stores, whose files appear whole when
closed). Every call is a py4j call into the driver's JVM: blocking, made off the event loop.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import unquote, urlparse

from scheduler import (
    LOCAL_FILES,
    LOCK_FILE,
    CheckpointError,
    CheckpointFileManager,
    CheckpointLock,
    CheckpointPath,
    detect_only,
    lease_file_lock,
    lock_local_directory,
    redact_uri,
    temp_name,
    uri_scheme,
)

from ._py4j import active_spark_context, gateway, hadoop_configuration, jvm, launched_gateway

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["CHECKPOINT_FILE_MANAGER_KEY", "HadoopFileManager", "resolve_checkpoint_path"]

CHECKPOINT_FILE_MANAGER_KEY = "spark.aiodstream.checkpoint.fileManager"
"""``auto`` (default: local paths and ``file:`` on the driver's disk, anything else through
Hadoop), ``hadoop`` (every path through Hadoop, ``file:`` included) or ``local``."""

_ABORTABLE_STREAM = "fs.capability.outputstream.abortable"  # Hadoop's CommonPathCapabilities.ABORTABLE_STREAM
_NOT_FOUND = "java.io.FileNotFoundException"
_EXISTS = "org.apache.hadoop.fs.FileAlreadyExistsException"
_UNSUPPORTED = "org.apache.hadoop.fs.UnsupportedFileSystemException"


def _java_class(exc: BaseException) -> str | None:
    java = getattr(exc, "java_exception", None)
    if java is None:
        return None
    name: str = java.getClass().getName()
    return name


def _unless_missing(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, or ``None`` when Hadoop answers that the path does not exist."""
    try:
        return call(*args)
    except Exception as exc:
        if _java_class(exc) == _NOT_FOUND:
            return None
        raise


def _unopenable(path: str, scheme: str, exc: BaseException) -> CheckpointError:
    """What to say of a path whose Hadoop file system cannot be opened: no implementation for its
    scheme (``UnsupportedFileSystemException``), its connector not on the classpath (``s3a://``
    without hadoop-aws: ``ClassNotFoundException``), or a file system that refused to start."""
    cause = getattr(exc, "java_exception", None)
    while cause is not None and cause.getCause() is not None:
        cause = cause.getCause()
    why = str(exc) if cause is None else f"{cause.getClass().getName()}: {cause.getMessage()}"
    where = f"its {scheme}:// file system" if scheme else "the default file system (fs.defaultFS)"
    return CheckpointError(
        f"cannot open checkpoint directory {redact_uri(path)}: Hadoop cannot open {where} ({redact_uri(why)}); put "
        "the file system's connector on Spark's classpath (spark.jars.packages, e.g. org.apache.hadoop:hadoop-aws "
        "for s3a://) with its spark.hadoop.fs.* settings, or use a scheme Spark reaches",
        path=path,
    )


def _hadoop_configuration(source: SparkContext | Callable[[], SparkContext] | None) -> tuple[Any, Any, Any]:
    """The JVM, the Hadoop configuration to start from, and the py4j gateway."""
    if source is None:
        sc = active_spark_context()
        if sc is None:
            view, gw = launched_gateway()
            util = view.org.apache.spark.deploy.SparkHadoopUtil.get()
            return view, util.newConfiguration(view.org.apache.spark.SparkConf()), gw
    else:
        sc = source() if callable(source) else source
    return jvm(sc), hadoop_configuration(sc), gateway(sc)


class _FileSystem:
    """One Hadoop file system as this manager uses it: the FileSystem, its FileContext (or none), what it guarantees."""

    __slots__ = ("abortable", "context", "fs", "scheme")

    def __init__(self, fs: Any, context: Any, abortable: bool, scheme: str) -> None:
        self.fs = fs
        self.context = context
        self.abortable = abortable
        self.scheme = scheme


class HadoopFileManager:
    """A :class:`~scheduler.CheckpointFileManager` over Hadoop's FileSystem API in the driver's JVM.

    Paths are resolved as Spark resolves them: a bare path against ``fs.defaultFS``, a URI by
    its scheme, with the SparkContext's Hadoop configuration (``spark.hadoop.*``). How an entry
    is created depends on what the file system guarantees:

    * with a ``FileContext`` binding (HDFS, ABFS, ...): written to a hidden temporary file,
      flushed with ``hsync`` when durable, then renamed with ``Rename.NONE``, which is atomic
      and fails if the entry exists;
    * object stores that advertise abortable output streams (S3A): written straight to its
      name, which appears whole when the stream closes (aborted on failure), after a check
      that it does not exist yet;
    * ``file:``, and file systems without a ``FileContext``: the temporary file renamed by
      ``FileSystem.rename`` after an existence check. Readers see whole entries where that
      rename is atomic (POSIX, HDFS); the check and the rename are two steps, so it is
      write-once for one writer per checkpoint, which Spark asks too. (Hadoop's local
      ``FileContext`` would fork a ``stat`` process for every rename, about 40 ms.)

    Args:
        spark_context: the SparkContext whose Hadoop configuration and JVM to use, or a
            callable giving it (called on first use, off the event loop). ``None``: the
            active SparkContext at first use or, without one, the JVM alone with the Hadoop
            configuration Spark would build from its settings (``spark.hadoop.*``), as
            Spark reads a checkpoint before any SparkContext exists.
        conf: Hadoop settings laid over the SparkContext's for this manager only.

    Raises:
        CheckpointError: from any operation on a path whose file system Hadoop cannot open (no
            implementation for its scheme, or its connector not on the classpath), naming the
            path and Hadoop's reason.
    """

    name = "hadoop"

    def __init__(self, spark_context: SparkContext | Callable[[], SparkContext] | None = None, *,
                 conf: dict[str, str] | None = None) -> None:
        """A manager on ``spark_context``'s JVM; no py4j call until the first operation."""
        self._source = spark_context
        self._extra = dict(conf or {})
        self._lock = threading.Lock()
        self._state: tuple[Any, Any, Any] | None = None  # (jvm, Configuration, gateway)
        self._systems: dict[str, _FileSystem] = {}  # by the path's scheme://authority ("" for bare paths)
        self._rename_none: Any = None
        self._rename_overwrite: Any = None

    def _jvm(self) -> tuple[Any, Any, Any]:
        with self._lock:
            if self._state is None:
                jvm, base, gateway = _hadoop_configuration(self._source)
                conf = jvm.org.apache.hadoop.conf.Configuration(base)
                for key, value in self._extra.items():
                    conf.set(key, value)
                rename = getattr(jvm.org.apache.hadoop.fs, "Options$Rename")
                self._rename_none, self._rename_overwrite = (
                    self._options(gateway, rename, name) for name in ("NONE", "OVERWRITE"))
                self._state = (jvm, conf, gateway)
            return self._state

    @staticmethod
    def _options(gateway: Any, rename: Any, name: str) -> Any:
        options = gateway.new_array(rename, 1)
        options[0] = getattr(rename, name)
        return options

    def _path(self, path: str) -> tuple[Any, _FileSystem]:
        jvm, conf, _ = self._jvm()
        jpath = jvm.org.apache.hadoop.fs.Path(path)
        parsed = urlparse(path)
        key = f"{parsed.scheme}://{parsed.netloc}" if parsed.scheme else ""
        system = self._systems.get(key)
        if system is None:
            try:
                fs = jpath.getFileSystem(conf)
            except Exception as exc:
                if _java_class(exc) is None:
                    raise
                raise _unopenable(path, parsed.scheme, exc) from exc
            scheme = str(fs.getUri().getScheme())
            context = None
            if scheme != "file":
                try:
                    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(fs.getUri(), conf)
                except Exception as exc:
                    if _java_class(exc) != _UNSUPPORTED:
                        raise
            system = _FileSystem(fs, context, bool(fs.hasPathCapability(jpath, _ABORTABLE_STREAM)), scheme)
            with self._lock:
                self._systems[key] = system
        return jpath, system

    # -- the CheckpointFileManager contract --

    def list_names(self, directory: str) -> list[str] | None:
        """The names in ``directory``, or ``None`` if it does not exist (four py4j calls, whatever the count)."""
        jvm, _, _ = self._jvm()
        jpath, system = self._path(directory)
        statuses = _unless_missing(system.fs.listStatus, jpath)
        if statuses is None:
            return None
        paths = jvm.org.apache.hadoop.fs.FileUtil.stat2Paths(statuses)
        joined = str(jvm.scala.collection.immutable.ArraySeq.unsafeWrapArray(paths).mkString("\n"))
        return [line.rsplit("/", 1)[-1] for line in joined.split("\n")] if joined else []

    def kind(self, path: str) -> str | None:
        """``"file"``, ``"dir"`` or ``None``."""
        jpath, system = self._path(path)
        status = _unless_missing(system.fs.getFileStatus, jpath)
        if status is None:
            return None
        return "dir" if status.isDirectory() else "file"

    def mkdirs(self, directory: str) -> None:
        """``FileSystem.mkdirs``."""
        jpath, system = self._path(directory)
        if not system.fs.mkdirs(jpath):
            raise OSError(f"cannot create directory {redact_uri(directory)} through Hadoop's {system.scheme} file system")

    def read_bytes(self, path: str) -> bytes | None:
        """The whole file, or ``None``."""
        jpath, system = self._path(path)
        stream = _unless_missing(system.fs.open, jpath)
        if stream is None:
            return None
        try:
            return bytes(stream.readAllBytes())
        finally:
            stream.close()

    @staticmethod
    def _write(system: _FileSystem, jpath: Any, data: bytes, *, durable: bool) -> None:
        stream = system.fs.create(jpath, False)
        try:
            if data:
                stream.write(bytearray(data))
            if durable:
                stream.hsync()
        except BaseException:
            if system.abortable:
                stream.abort()
            else:
                stream.close()
                system.fs.delete(jpath, False)
            raise
        stream.close()

    def _temp_for(self, path: str) -> Any:
        jvm, _, _ = self._jvm()
        head, _, name = path.rpartition("/")
        return jvm.org.apache.hadoop.fs.Path(f"{head}/{temp_name(name)}" if head else temp_name(name))

    def create_new(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        """Create ``path`` whole and only if absent; see the class docstring for how, per file system."""
        target, system = self._path(path)
        if system.abortable:
            if system.fs.exists(target):
                return False
            try:
                self._write(system, target, data, durable=durable)
            except Exception as exc:
                if _java_class(exc) == _EXISTS:
                    return False
                raise
            return True
        return self._write_and_rename(path, target, system, data, durable=durable, replace=False)

    def _write_and_rename(self, path: str, target: Any, system: _FileSystem, data: bytes, *, durable: bool,
                          replace: bool) -> bool:
        # A hidden temporary file beside the target, renamed into place; removed if the rename did not happen.
        temp = self._temp_for(path)
        self._write(system, temp, data, durable=durable)
        renamed = False
        try:
            renamed = self._rename(system, temp, target, replace=replace)
        finally:
            if not renamed:
                system.fs.delete(temp, False)
        return renamed

    def _rename(self, system: _FileSystem, source: Any, target: Any, *, replace: bool) -> bool:
        if system.context is not None:
            try:
                system.context.rename(source, target, self._rename_overwrite if replace else self._rename_none)
            except Exception as exc:
                if _java_class(exc) == _EXISTS:
                    return False
                raise
            return True
        if system.fs.exists(target):
            if not replace:
                return False
            system.fs.delete(target, False)
        return bool(system.fs.rename(source, target))

    def write_replacing(self, path: str, data: bytes) -> None:
        """Write ``path`` whole, replacing a previous file (a temporary file renamed over it)."""
        target, system = self._path(path)
        if not self._write_and_rename(path, target, system, data, durable=True, replace=True):
            raise OSError(f"cannot write {redact_uri(path)}: Hadoop's {system.scheme} file system refused to rename the new file "
                          "into place")

    def rename_new(self, source: str, target: str) -> bool:
        """Rename a file or directory unless ``target`` exists."""
        src, system = self._path(source)
        dst, _ = self._path(target)
        return self._rename(system, src, dst, replace=False)

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        """``FileSystem.delete``."""
        jpath, system = self._path(path)
        return bool(system.fs.delete(jpath, recursive))

    def uri(self, path: str) -> str:
        """The fully qualified URI (``hdfs://namenode:8020/...``, ``file:/...``)."""
        jpath, system = self._path(path)
        return str(system.fs.makeQualified(jpath).toString())

    def lock(self, directory: str, holder: bytes) -> CheckpointLock | None:
        """Hold ``directory`` for this process, as far as the file system allows.

        * ``file:``: an OS file lock on the driver's disk (as :class:`~scheduler.LocalFileManager`);
        * with a ``FileContext`` binding (HDFS, ABFS, ...): a lease file, created exclusively
          by the rename that never replaces (see :func:`~scheduler.lease_file_lock`);
        * otherwise (object stores, whose creation is a check then a write): nothing
          (``"detect"``); a second writer is found at its first entry that already exists.
        """
        jpath, system = self._path(directory)
        if system.scheme == "file":
            return lock_local_directory(unquote(urlparse(str(system.fs.makeQualified(jpath).toString())).path), holder)
        if system.context is not None:
            return lease_file_lock(CheckpointPath(self, f"{directory.rstrip('/')}/{LOCK_FILE}"), holder)
        return detect_only()

    def __repr__(self) -> str:
        return f"<HadoopFileManager{' ' + repr(self._extra) if self._extra else ''}>"


def resolve_checkpoint_path(directory: str | os.PathLike[str], *, mode: str | None, default_fs: str | None,
                            hadoop: Callable[[], CheckpointFileManager]) -> CheckpointPath:
    """Where a checkpoint directory lives, and through which file manager, as Spark resolves it.

    A URI goes by its scheme: ``file:`` to the driver's disk, anything else through Hadoop. A
    bare path is on ``fs.defaultFS`` (the driver's disk when that is ``file:``, the default),
    made absolute as the driver sees it. ``mode`` (:data:`CHECKPOINT_FILE_MANAGER_KEY`) forces
    ``hadoop`` for every path (``file:`` through Hadoop's local file system) or ``local``.

    Raises:
        CheckpointError: an unknown mode, or ``local`` for a path that is not on the driver's disk.
    """
    text = os.fspath(directory)
    choice = (mode or "auto").strip().lower()
    if choice not in ("auto", "hadoop", "local"):
        raise CheckpointError(f"{CHECKPOINT_FILE_MANAGER_KEY} must be auto, hadoop or local, got {mode!r}")
    scheme = uri_scheme(text)
    on_default = (default_fs or "file:///").strip()
    local = scheme == "file" or (scheme == "" and on_default.startswith("file:"))
    if choice == "hadoop" or (choice == "auto" and not local):
        return CheckpointPath(hadoop(), text)
    if not local:
        raise CheckpointError(f"checkpoint directory {redact_uri(text)!r} is not on the driver's disk (its file system is "
                              f"{scheme or on_default!r}), and {CHECKPOINT_FILE_MANAGER_KEY} is 'local'; set it to "
                              "auto or hadoop")
    return CheckpointPath(LOCAL_FILES, os.path.abspath(unquote(urlparse(text).path) if scheme == "file" else text))
