"""A class-data-sharing archive of Spark's JVM classes for the test run: each Spark JVM the tests start maps them in.

A Spark JVM spends most of its start loading and verifying some ten thousand classes (Scala,
Spark, Netty, Jetty, Hadoop). The default run starts dozens of them: the shared SparkContext, every
crash child and example, the cluster's master, workers, drivers and executors. JDK 17's
application class-data sharing (a dynamic archive, ``-XX:ArchiveClassesAtExit``) records the
classes one short Spark run loaded; a JVM started with ``-XX:SharedArchiveFile`` maps them instead
of loading them (measured here: a local SparkContext's JVM used 3.5 s of CPU to start instead of
7, and its first job 1.4 s instead of 2.2). The short-lived JVMs also compile with the quick JIT
compiler only (:data:`QUICK_START`): with both, a child's Spark starts and runs its first job on
3 s of CPU instead of 9. Nothing else changes: the same classes, the same bytecode; a JVM that
finds the archive unusable (another JDK, other jars) loads its classes as before, silently.

:func:`install` makes the archive once per machine and user, in the temporary directory (keyed by
the JDK and the installed pyspark's jars, so an upgrade of either makes a new one; making it takes
about one JVM start), and puts the option in this process's environment, where every Spark JVM
started from it, or from a child it starts, finds it: ``SPARK_SUBMIT_OPTS`` (drivers, through
``spark-submit``), ``SPARK_DAEMON_JAVA_OPTS`` (the test cluster's master and workers) and
:data:`ARCHIVE_VARIABLE` (read by :data:`tests.cluster.APP_CONF` for the cluster's executors).
``AIODSTREAM_JVM_ARCHIVE=off`` leaves it out.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["ARCHIVE_VARIABLE", "QUICK_START", "archive_options", "install", "java_options", "long_lived"]

ARCHIVE_VARIABLE = "AIODSTREAM_JVM_ARCHIVE"
"""The archive's path once :func:`install` made or found it; ``off`` (set by hand) leaves the archive out."""

MAKE_TIMEOUT_S = 300.0

# The run whose classes the archive records: a local SparkContext's start, a shuffle job through
# Python workers, and its stop; then the JVM's own exit, where the archive is written.
_RECORD = """
import os, sys
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark import SparkConf, SparkContext
conf = (SparkConf().setMaster("local[2]").setAppName("aiodstream-jvm-archive").set("spark.ui.showConsoleProgress", "false")
        .set("spark.driver.host", "127.0.0.1").set("spark.driver.bindAddress", "127.0.0.1"))
sc = SparkContext(conf=conf)
sc.setLogLevel("ERROR")
sc.parallelize(range(100), 2).map(lambda x: (x % 7, x)).reduceByKey(lambda a, b: a + b).collect()
jvm = sc._gateway.proc
sc.stop()
jvm.stdin.close()  # the gateway JVM exits on end of input, and writes the archive as it exits
sys.exit(jvm.wait(timeout=float(sys.argv[1])))
"""


QUICK_START = "-XX:TieredStopAtLevel=1"
"""Compile with the quick JIT compiler only: a JVM that lives seconds to a minute (a child program, an example, the
cluster's processes) spends half its start CPU in the optimizing compiler otherwise (measured here: start and first
job 3.1 s of CPU instead of 5.6 with the archive). The run's shared SparkContext lives for the whole run and keeps
both compilers."""


def archive_options(archive: Path) -> str:
    """The JVM options that map ``archive`` in (and keep the JVM quiet about an unusable one: its warnings go to stdout)."""
    return f"-XX:SharedArchiveFile={archive} -Xlog:cds*=off"


def java_options(archive: Path) -> str:
    """The options of the run's short-lived Spark JVMs: the archive, and the quick compiler only."""
    return f"{archive_options(archive)} {QUICK_START}"


@contextmanager
def long_lived() -> Iterator[None]:
    """Around the start of a JVM that lives for the whole run (the shared SparkContext): the archive, both compilers."""
    archive = os.environ.get(ARCHIVE_VARIABLE, "off")
    before = os.environ.get("SPARK_SUBMIT_OPTS")
    if archive == "off" or before is None:
        yield
        return
    os.environ["SPARK_SUBMIT_OPTS"] = before.replace(java_options(Path(archive)), archive_options(Path(archive)))
    try:
        yield
    finally:
        os.environ["SPARK_SUBMIT_OPTS"] = before


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def _archive_path(java: Path) -> Path | None:
    """Where this JDK's archive of the installed pyspark's jars lives (in the virtualenv), or None without pyspark."""
    try:
        import pyspark
    except ImportError:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    key = hashlib.sha256()
    for path in [java, *sorted(jars.glob("*.jar"))]:
        stat = path.stat()
        key.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return _directory() / f"spark-{key.hexdigest()[:16]}.jsa"


def _directory() -> Path:
    """This user's own directory for archives, in the temporary directory (a JVM maps in what it finds there: nobody
    else may write to it)."""
    directory = Path(tempfile.gettempdir()) / f"aiodstream-jvm-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    stat = directory.lstat()
    if not directory.is_dir() or directory.is_symlink() or stat.st_uid != os.getuid() or stat.st_mode & 0o022:
        raise OSError(f"{directory} is not this user's own directory")
    return directory


def _make(archive: Path) -> bool:
    """Record the archive (written under a temporary name, then moved into place whole); whether it worked."""
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={partial} -Xlog:cds*=off {QUICK_START}"}
    try:
        result = subprocess.run([sys.executable, "-c", _RECORD, str(MAKE_TIMEOUT_S)], env=env, capture_output=True,
                                timeout=MAKE_TIMEOUT_S + 60, check=False)
        if result.returncode != 0 or not partial.exists() or partial.stat().st_size == 0:
            return False
        os.replace(partial, archive)  # two runs making it at once each move a whole archive
        return True
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        partial.unlink(missing_ok=True)


def install() -> str:
    """Make (or find) the archive and put its options in the environment of every Spark JVM to come; what was done, in a line."""
    if os.environ.get(ARCHIVE_VARIABLE) == "off":
        return f"off ({ARCHIVE_VARIABLE}=off)"
    java = _java()
    try:
        archive = _archive_path(java) if java is not None else None
    except OSError as exc:
        return f"off ({exc})"
    if archive is None:
        return "off (no java or no pyspark)"
    made = ""
    if not archive.exists():
        started = time.monotonic()
        if not _make(archive):
            return "off (the recording run failed)"
        made = f", made in {time.monotonic() - started:.1f} s"
    options = java_options(archive)
    for variable in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
        current = os.environ.get(variable, "")
        if options not in current:  # a child test run inherits its parent's
            os.environ[variable] = f"{current} {options}".strip()
    os.environ[ARCHIVE_VARIABLE] = str(archive)
    return f"{archive}{made}"
