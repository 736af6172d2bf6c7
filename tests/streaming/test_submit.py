"""spark-submit: an aiodstream program run with spark-submit gets the master and settings it was submitted with."""

from __future__ import annotations

import json
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
    assert out == {"master": "local[3]", "app": "submitted", "parallelism": 3}
