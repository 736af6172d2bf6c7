"""A real Spark standalone cluster on 127.0.0.1 for tests: a Master and workers, from the installed pyspark.

Started with pyspark's own ``bin/spark-class`` and Spark's ``Master`` and ``Worker`` classes, as
``sbin/start-master.sh`` and ``start-worker.sh`` would; ready once the master has logged every
worker's registration; torn down (workers, then the master, then their directories) on close.
Programs run against it in child processes (a process has one SparkContext, and the test run's
own is local).
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

from tests.jvm_archive import ARCHIVE_VARIABLE, java_options

__all__ = ["APP_CONF", "MASTER_VARIABLE", "ClusterError", "StandaloneCluster", "app_conf"]

MASTER_VARIABLE = "AIODSTREAM_TEST_SPARK_MASTER"
"""When set (``spark://host:port``), a test run's SparkContext (and a crash child's) is on that cluster."""

APP_CONF = {
    "spark.executor.memory": "512m",
    "spark.driver.host": "127.0.0.1",
    # The first job waits until every executor registered: the work is spread over the workers.
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
}
"""The settings of an application run on the test cluster."""
if os.environ.get(ARCHIVE_VARIABLE, "off") != "off":
    # The executors map the test run's JVM class archive in too (tests/jvm_archive.py): the programs on the
    # cluster run in child processes, which import this module after their parent set the variable.
    APP_CONF["spark.executor.extraJavaOptions"] = java_options(Path(os.environ[ARCHIVE_VARIABLE]))


def app_conf(master: str, app_name: str) -> Any:
    """The SparkConf of a child program on the test cluster: two cores, the driver on 127.0.0.1, no UI."""
    from pyspark import SparkConf

    return (SparkConf().setMaster(master).setAppName(app_name).setAll(list(APP_CONF.items()))
            .set("spark.cores.max", "2").set("spark.driver.bindAddress", "127.0.0.1")
            .set("spark.ui.enabled", "false").set("spark.ui.showConsoleProgress", "false"))

_MASTER_URL = re.compile(r"Starting Spark master at (spark://[\w.]+:\d+)")
_REGISTERED = re.compile(r"Registering worker [\w.]+:\d+ with (\d+) cores")
_APP = re.compile(r"Registering app (.+)$")


class ClusterError(RuntimeError):
    """The cluster did not come up (the message carries the log's tail)."""


def spark_home() -> Path:
    """The installed pyspark's Spark home (it ships ``bin/spark-class`` and the jars)."""
    import pyspark

    return Path(pyspark.__file__).parent


class _LogTail:
    """Reads a process's output on a thread: keeps the tail, hands every line to a queue."""

    def __init__(self, stream: IO[str], name: str) -> None:
        self.lines: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.tail: list[str] = []
        self.apps: list[str] = []  # applications the master registered (its log says so)
        self._thread = threading.Thread(target=self._read, args=(stream,), name=f"cluster-log-{name}", daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.tail = [*self.tail[-40:], line.rstrip()]
            app = _APP.search(line.rstrip())
            if app is not None:
                self.apps.append(app.group(1))
            self.lines.put(line)
        self.lines.put("")  # end of output

    def wait_for(self, pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
        """The first line matching ``pattern``, waiting at most ``timeout`` seconds for it."""
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise ClusterError(f"no line matching {pattern.pattern!r} within {timeout} s; log tail:\n"
                                   + "\n".join(self.tail)) from None
            if line == "":
                raise ClusterError(f"the process ended before logging {pattern.pattern!r}; log tail:\n" + "\n".join(self.tail))
            found = pattern.search(line)
            if found is not None:
                return found


class StandaloneCluster:
    """A standalone Master and ``workers`` Workers (``cores`` each) on 127.0.0.1; use as a context manager."""

    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g", startup_timeout: float = 120) -> None:
        """Describe the cluster; :meth:`start` (or ``with``) launches it."""
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.startup_timeout = startup_timeout
        self.master_url = ""
        self._processes: list[subprocess.Popen[str]] = []
        self._directory: Path | None = None
        self._master_log: _LogTail | None = None

    def _launch(self, name: str, main_class: str, *args: str) -> tuple[subprocess.Popen[str], _LogTail]:
        assert self._directory is not None
        env = dict(os.environ)
        env.update({
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_NO_DAEMONIZE": "1",
            "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON", sys.executable),
            "SPARK_LOG_DIR": str(self._directory / "logs"),
        })
        command = [str(spark_home() / "bin" / "spark-class"), main_class, *args]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                   cwd=self._directory, start_new_session=True)
        self._processes.append(process)
        assert process.stdout is not None
        return process, _LogTail(process.stdout, name)

    def start(self) -> StandaloneCluster:
        """Launch the master and the workers; return once every worker is registered.

        Raises:
            ClusterError: a process failed or did not come up within ``startup_timeout``.
        """
        self._directory = Path(tempfile.mkdtemp(prefix="aiodstream-cluster-"))
        try:
            _, master_log = self._launch("master", "org.apache.spark.deploy.master.Master",
                                         "--host", "127.0.0.1", "--port", "0", "--webui-port", "0")
            self._master_log = master_log
            self.master_url = master_log.wait_for(_MASTER_URL, self.startup_timeout).group(1)
            for i in range(self.workers):
                work = self._directory / f"worker-{i}"
                work.mkdir()
                self._launch(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.master_url,
                             "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                             "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(work))
            for _ in range(self.workers):
                master_log.wait_for(_REGISTERED, self.startup_timeout)
        except BaseException:
            self.close()
            raise
        return self

    def registered_apps(self) -> list[str]:
        """The names of the applications the master has registered so far, oldest first."""
        return [] if self._master_log is None else list(self._master_log.apps)

    def close(self) -> None:
        """Stop the workers, then the master (SIGTERM, then SIGKILL after 10 s), and remove their directories."""
        for process in reversed(self._processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self._processes):
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._processes.clear()
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
