"""spark-submit: an aiodstream program run with spark-submit gets the master and settings it was submitted with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.crash import ROOT, child_env

pytestmark = pytest.mark.spark


@pytest.mark.timeout(180)
def test_spark_submit_s_master_and_settings_reach_the_embedded_spark_context() -> None:
    """--master local[3] and --conf spark.app.name are kept (the embedded defaults would say local[2] and aiodstream)."""
    submit = Path(sys.executable).with_name("spark-submit")
    env = child_env({"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable})
    result = subprocess.run([str(submit), "--master", "local[3]", "--conf", "spark.app.name=submitted",
                             "--conf", "spark.ui.enabled=false", str(ROOT / "tests" / "streaming" / "submit_child.py")],
                            capture_output=True, text=True, timeout=150, cwd=ROOT, env=env, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out == {"master": "local[3]", "app": "submitted", "parallelism": 3, "progress": "false"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("submit_args", "expected"), [
    (None, {"master": "local[2]", "app": "aiodstream", "parallelism": 2, "progress": "false"}),
    ("--master local[3] --conf spark.ui.showConsoleProgress=true pyspark-shell",
     {"master": "local[3]", "app": "aiodstream", "parallelism": 3, "progress": "true"}),
    ("--master=local[*] pyspark-shell",  # spark-submit's own default, named by the program: kept
     {"master": "local[*]", "app": "aiodstream", "parallelism": os.cpu_count(), "progress": "false"}),
    ("conf-dir",  # the same two in spark-defaults.conf
     {"master": "local[*]", "app": "aiodstream", "parallelism": os.cpu_count(), "progress": "true"}),
], ids=["plain", "submit-args", "master=", "spark-defaults.conf"])
def test_a_plain_python_program_gets_the_embedded_defaults_over_pyspark_shell_s(
        submit_args: str | None, expected: dict[str, object], tmp_path: Path) -> None:
    """Run with plain ``python``, pyspark launches its JVM as spark-submit's ``pyspark-shell``, which sets local[*], the
    app name pyspark-shell and the console progress bar (printed on the service's stderr): those were taken as the
    program's choice, so the embedded local[2] defaults never applied (lane K2). What PYSPARK_SUBMIT_ARGS names stays."""
    env = child_env({"PYSPARK_PYTHON": sys.executable})
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    env.pop("SPARK_CONF_DIR", None)
    if submit_args == "conf-dir":
        (tmp_path / "spark-defaults.conf").write_text("# a comment\nspark.master  local[*]\nspark.ui.showConsoleProgress=true\n")
        env["SPARK_CONF_DIR"] = str(tmp_path)
    elif submit_args is not None:
        env["PYSPARK_SUBMIT_ARGS"] = submit_args
    result = subprocess.run([sys.executable, str(ROOT / "tests" / "streaming" / "submit_child.py")], capture_output=True,
                            text=True, timeout=240, cwd=ROOT, env=env, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected
