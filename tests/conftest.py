"""Shared fixtures: one local Spark for the whole test run."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

SPARK_TEST_CONF = {
    "spark.master": "local[2]",
    "spark.app.name": "aiodstream-tests",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.default.parallelism": "2",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}


@pytest.fixture(scope="session")
def spark_context() -> Iterator[Any]:
    """The one SparkContext of the test run (starting Spark takes seconds; share it)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("Spark tests need Java 17: put 'java' on PATH or set JAVA_HOME")
    from pyspark import SparkConf, SparkContext

    conf = SparkConf()
    for key, value in SPARK_TEST_CONF.items():
        conf.set(key, value)
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("ERROR")
    yield sc
    sc.stop()
