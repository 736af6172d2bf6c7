"""Shared fixtures: one local Spark for the whole test run (with a Spark Connect server on it when ``connect`` tests run);
every ``@pytest.mark.anyio`` test on both backends; a manual clock."""

from __future__ import annotations

import functools
import inspect
import logging
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from scheduler import LOGGER_ROOT, ManualClock
from tests import jvm_archive
from tests.anyio_support import BACKENDS, HANG_GUARD_S
from tests.cluster import APP_CONF, MASTER_VARIABLE

SPARK_TEST_CONF = {
    "spark.master": "local[2]",
    "spark.app.name": "aiodstream-tests",
    # Spark's UI on a free port: the web UI tests follow its links to the output operations' jobs.
    "spark.ui.enabled": "true",
    "spark.ui.port": "0",
    "spark.ui.showConsoleProgress": "false",
    "spark.default.parallelism": "2",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}

CONNECT_TOKEN = uuid.uuid4().hex
"""The bearer token of the test run's Spark Connect server: the server refuses a client without it."""

CONNECT_SERVER_CONF = {
    # Spark's Connect server as a plugin of the shared SparkContext: one JVM serves the classic
    # tests and the Connect ones, so each engine's batches run on the same Spark. pyspark's own
    # `remote("local")` refuses to start beside an existing SparkContext; a client on this
    # server's URL does not (tests.conftest.connect_session).
    "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
    "spark.connect.grpc.binding.address": "127.0.0.1",
    "spark.connect.grpc.binding.port": "0",  # a free port: lanes and CI runs share the machine
    "spark.connect.authenticate.token": CONNECT_TOKEN,
}

_connect_wanted = False
"""Whether a selected test is marked ``connect``: only then does the shared SparkContext carry the server."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A ``connect`` test is a Spark test too (before ``-m`` deselects); remember whether any is collected."""
    global _connect_wanted
    for item in items:
        if item.get_closest_marker("connect") is not None:
            _connect_wanted = True
            if item.get_closest_marker("spark") is None:
                item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark_context() -> Iterator[Any]:
    """The one SparkContext of the test run (starting Spark takes seconds; share it)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("Spark tests need Java 17: put 'java' on PATH or set JAVA_HOME")
    from pyspark import SparkConf, SparkContext

    # The Python workers run this interpreter (the venv's), whose environment has aiodstream's
    # packages and the test extras (pandas, pyarrow); PySpark reads only the variable.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = SparkConf()
    for key, value in SPARK_TEST_CONF.items():
        conf.set(key, value)
    master = os.environ.get(MASTER_VARIABLE)
    if master:  # a suite run on a cluster (tests/streaming/test_cluster.py starts one and sets this)
        conf.set("spark.master", master)
        for key, value in APP_CONF.items():
            conf.set(key, value)
    if _connect_wanted:
        for key, value in CONNECT_SERVER_CONF.items():
            conf.set(key, value)
    with jvm_archive.long_lived():  # the run's one long-lived JVM keeps the optimizing compiler
        sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("ERROR")
    yield sc
    sc.stop()


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Before the first Spark test: the JVM class archive every Spark JVM of the run maps in (``tests/jvm_archive.py``)."""
    if any(item.get_closest_marker("spark") is not None or "spark_context" in getattr(item, "fixturenames", ()) for item in session.items):
        line = jvm_archive.install()
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"Spark JVM class archive: {line}")


@pytest.fixture(scope="session")
def connect_address(spark_context: Any) -> str:
    """``localhost:<port>`` of the test run's Spark Connect server (its token is :data:`CONNECT_TOKEN`)."""
    return f"localhost:{_connect_port(spark_context)}"


@pytest.fixture(scope="session")
def connect_session(connect_address: str) -> Iterator[Any]:
    """The test run's Spark Connect session (a ``pyspark.sql.connect.session.SparkSession``), on the shared SparkContext's server.

    Tests that use it are marked ``connect``. The client is made with the Connect session's own
    builder, so the process stays a classic pyspark process (no ``SPARK_CONNECT_MODE_ENABLED``):
    code meant for both kinds of session imports ``pyspark.sql.connect.functions`` for Connect
    columns, since ``pyspark.sql.functions`` gives classic ones here.
    """
    from pyspark.sql.connect.session import SparkSession

    session = SparkSession.builder.remote(f"sc://{connect_address}/;token={CONNECT_TOKEN}").create()
    yield session
    session.stop()  # releases the server's session and closes the channel; the server ends with the SparkContext


@pytest.fixture(scope="module")
def isolated_connect_session() -> Iterator[Any]:
    """A Spark Connect session on a second local server whose JVM and Python workers do not see this process's /tmp
    (``tests/isolated_connect.py``: a private mount namespace), as a remote server would not; one per test module.

    Skips, saying why, where a private /tmp cannot be made (no ``unshare``, or mounting refused).
    """
    from pyspark.sql.connect.session import SparkSession

    from tests.isolated_connect import isolated_server, isolation_refused

    reason = isolation_refused()
    if reason is not None:
        pytest.skip(reason)
    with isolated_server() as server:
        session = SparkSession.builder.remote(server.url).create()
        yield session
        session.stop()


def _connect_port(sc: Any) -> int:
    """The port the shared SparkContext's Connect server listens on (it chose a free one)."""
    if sc.getConf().get("spark.plugins") != CONNECT_SERVER_CONF["spark.plugins"]:
        pytest.fail("the connect_session fixture needs its test marked @pytest.mark.connect (the shared SparkContext "
                    "carries the Connect server only when a connect test is selected)")
    service = getattr(getattr(sc._jvm.org.apache.spark.sql.connect.service, "SparkConnectService$"), "MODULE$")
    return int(service.localPort())


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """The backend of an ``@pytest.mark.anyio`` test: each runs on asyncio and on trio, and a missing trio fails, not skips."""
    backend: str = request.param
    return backend


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Iterator[object]:
    """Give ``@pytest.mark.anyio`` tests the real-time hang guard ``run()`` gives the sync ones (anyio's plugin runs them)."""
    test = pyfuncitem.obj
    if "anyio_backend" not in pyfuncitem.funcargs or not inspect.iscoroutinefunction(test):
        return (yield)

    @functools.wraps(test)
    async def guarded(**kwargs: Any) -> None:
        with anyio.fail_after(HANG_GUARD_S):
            await test(**kwargs)

    pyfuncitem.obj = guarded
    try:
        return (yield)
    finally:
        pyfuncitem.obj = test


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[object]:
    """A test not marked ``spark`` must not start Spark: the pure suites run without Java, in seconds."""
    started_before = _spark_running()
    result = yield
    if item.get_closest_marker("spark") is None and not started_before and _spark_running():
        raise AssertionError(f"{item.nodeid} started a SparkContext but is not marked @pytest.mark.spark")
    return result


def _spark_running() -> bool:
    import sys

    pyspark = sys.modules.get("pyspark")  # not imported: certainly not running (and no import here)
    return pyspark is not None and pyspark.SparkContext._active_spark_context is not None


@pytest.fixture
def clock() -> ManualClock:
    """A manual clock at 0 ms: time moves only when the test advances it (``tests.support.advance``)."""
    return ManualClock(0)


@pytest.fixture
def keep_logging_config() -> Iterator[None]:
    """For tests of the command line, which configures the library's logger for itself: the test run's configuration is
    put back after each (``pytestmark = pytest.mark.usefixtures("keep_logging_config")``)."""
    logger = logging.getLogger(LOGGER_ROOT)
    level, handlers = logger.level, list(logger.handlers)
    yield
    logger.setLevel(level)
    logger.handlers[:] = handlers


@pytest.fixture
def ftp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An FTP server on 127.0.0.1 serving a fresh directory (``tests.ftp.FtpServer``)."""
    from tests.ftp import FtpServer

    with FtpServer(tmp_path_factory.mktemp("ftp")) as server:
        yield server


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[Any]:
    """One Kafka cluster for the whole test run (librdkafka's mock cluster, :mod:`streaming.kafka.testing`)."""
    from streaming.kafka.testing import MockKafkaCluster

    with MockKafkaCluster(brokers=1) as cluster:
        yield cluster


@pytest.fixture
def kafka_topic(kafka_cluster: Any, request: pytest.FixtureRequest) -> str:
    """A fresh topic name for this test (tests share one cluster); created by the test itself."""
    import re
    import uuid

    return re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:60] + "-" + uuid.uuid4().hex[:8]
