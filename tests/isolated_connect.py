"""A second local Spark Connect server that does not share this process's temporary directory, for tests.

The test run's own Connect server lives in the test process's JVM and sees its disk, as a local
server does: what a task writes into the driver's ``/tmp`` the driver reads back. A server on a
cluster sees none of it. This one is started in a mount namespace of its own (``unshare --mount
--propagation private``) whose ``/tmp`` is a fresh ``tmpfs``: its JVM and its Python workers see
every other directory of this machine, but not the driver's ``/tmp``. Run as a module, this file
is the server's side: a SparkContext carrying the Connect plugin, its port written to stdout, and
a stop when its stdin closes. Needs ``unshare`` and the right to mount (root here); a test skips
with the reason where they are refused (:func:`isolation_refused`).
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["IsolatedServer", "isolated_server", "isolation_refused", "shared_directory"]

_UNSHARE = ["unshare", "--mount", "--propagation", "private", "--"]
_MOUNT_PRIVATE_TMP = 'mount -t tmpfs none /tmp && exec "$@"'
_START_TIMEOUT_S = 600.0
"""A hang guard for the server's start (a JVM start at a load of 50 takes a minute or two), not a timing."""


class IsolatedServer:
    """A running isolated server: ``url`` for ``SparkSession.builder.remote``."""

    def __init__(self, process: subprocess.Popen[str], port: int, token: str) -> None:
        self.process = process
        self.port = port
        self.token = token

    @property
    def url(self) -> str:
        """The ``sc://`` URL with the server's token."""
        return f"sc://localhost:{self.port}/;token={self.token}"


def isolation_refused() -> str | None:
    """Why a private ``/tmp`` cannot be made here (``None``: it can): no ``unshare``, or the mount is refused."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run([*_UNSHARE, "sh", "-c", "mount -t tmpfs none /tmp"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"a mount namespace with a private /tmp is refused here (unshare --mount, mount -t tmpfs): {probe.stderr.strip()}"
    return None


@contextmanager
def shared_directory() -> Iterator[Path]:
    """A fresh directory that this process and the isolated server both see: not under ``/tmp`` (``/var/tmp``, else
    under the current directory), removed afterwards."""
    base = Path("/var/tmp")
    if not (base.is_dir() and os.access(base, os.W_OK)):
        base = Path.cwd()
    directory = Path(tempfile.mkdtemp(prefix="aiodstream-isolated-", dir=base))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def isolated_server() -> Iterator[IsolatedServer]:
    """Start the server (one JVM, ``local[2,2]``: two cores, a failed task tried twice) and stop it afterwards.

    Raises:
        RuntimeError: the server did not start, or it sees this process's ``/tmp`` (the isolation failed).
    """
    token = uuid.uuid4().hex
    marker = Path(tempfile.mkdtemp(prefix="aiodstream-isolation-probe-"))  # in this process's /tmp: the server must not see it
    env = {key: value for key, value in os.environ.items() if key not in ("SPARK_SUBMIT_OPTS", "PYSPARK_SUBMIT_ARGS")}
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON", sys.executable)
    env["AIODSTREAM_JVM_ARCHIVE"] = "off"  # the class archive lives in this process's /tmp
    command = [*_UNSHARE, "sh", "-c", _MOUNT_PRIVATE_TMP, "sh", sys.executable, "-m", "tests.isolated_connect", token, str(marker)]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        words = _handshake(process)
        if words[3] != "False":
            raise RuntimeError(f"the isolated Spark Connect server sees this process's /tmp ({marker}): no isolation")
        yield IsolatedServer(process, int(words[1]), token)
    finally:
        shutil.rmtree(marker, ignore_errors=True)
        if process.stdin is not None:
            process.stdin.close()  # the server stops its SparkContext and exits
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _handshake(process: subprocess.Popen[str]) -> list[str]:
    """The server's ``port <n> sees-driver-tmp <bool>`` line (other lines on its stdout are skipped)."""
    assert process.stdout is not None
    seen: list[str] = []
    while True:
        ready, _, _ = select.select([process.stdout], [], [], _START_TIMEOUT_S)
        line = process.stdout.readline() if ready else ""
        if not line:
            raise RuntimeError(f"the isolated Spark Connect server did not start (exit code {process.poll()}): {seen!r}")
        words = line.split()
        if len(words) == 4 and words[0] == "port":
            return words
        seen.append(line)


def _serve(token: str, marker: str) -> None:
    """The server's side: a SparkContext with the Connect plugin until stdin closes."""
    from pyspark import SparkConf, SparkContext

    from tests.conftest import CONNECT_SERVER_CONF, SPARK_TEST_CONF

    conf = SparkConf()
    for key, value in {**SPARK_TEST_CONF, **CONNECT_SERVER_CONF}.items():
        conf.set(key, value)
    conf.set("spark.master", "local[2,2]")  # a failed task is tried once more, as on a cluster (local mode never retries)
    conf.set("spark.connect.authenticate.token", token)
    conf.set("spark.ui.enabled", "false")
    conf.set("spark.app.name", "aiodstream-isolated-connect-server")
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    service = getattr(getattr(sc._jvm.org.apache.spark.sql.connect.service, "SparkConnectService$"), "MODULE$")
    print(f"port {int(service.localPort())} sees-driver-tmp {os.path.exists(marker)}", flush=True)
    sys.stdin.read()
    sc.stop()


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])
