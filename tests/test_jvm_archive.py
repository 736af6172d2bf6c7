"""The test run's Spark JVMs map the class archive in (``tests/jvm_archive.py``): the saving cannot go away unnoticed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.jvm_archive import ARCHIVE_VARIABLE, QUICK_START, archive_options

pytestmark = pytest.mark.spark


def test_the_shared_spark_contexts_jvm_maps_the_archive(spark_context: Any) -> None:
    """The run's SparkContext JVM started with the archive's options and mapped it (its size counted in the mapped CDS)."""
    archive = os.environ.get(ARCHIVE_VARIABLE, "off")
    if archive == "off":
        pytest.skip(f"{ARCHIVE_VARIABLE}=off: the run starts its JVMs without the archive")
    jcmd = Path(os.path.realpath(shutil.which("java") or "java")).with_name("jcmd")
    if not jcmd.exists():
        pytest.skip(f"no jcmd beside java ({jcmd}): a JRE without the JDK's tools")
    pid = spark_context._gateway.proc.pid
    info = subprocess.run([str(jcmd), str(pid), "VM.info"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert archive_options(Path(archive)) in info  # on its command line
    assert QUICK_START not in info  # the run's long-lived JVM keeps the optimizing compiler
    mapped = re.search(r"CDS archive\(s\) mapped at: .*, size (\d+),", info)
    assert mapped, info[:2000]
    assert int(mapped.group(1)) > Path(archive).stat().st_size  # the JDK's base archive and this one
