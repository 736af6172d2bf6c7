"""Record pyspark's outputs for the conformance suites, which the default run reads (``tests/pyspark_records.py``).

Usage: ``PYTHONPATH=$PWD .venv/bin/python -m tests.streaming.conformance.record [NAME ...]``, a name
being a catalogue group (``windows``) or ``groups/<program>`` (applyInPandasWithState); every record
without arguments (a few minutes on a quiet machine, on a local[2] Spark with the test run's settings).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.pyspark_records import write_record


def spark_context() -> Any:
    """A SparkContext with the test run's settings (``tests/conftest.py``), its Python workers started."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext

    from tests.conftest import SPARK_TEST_CONF

    # A long wait for Python workers to connect back: recording on a loaded machine is fine (the outputs do not depend on it).
    conf = SparkConf().setAll(list(SPARK_TEST_CONF.items())).set("spark.python.authenticate.socketTimeout", "300s")
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("ERROR")
    sc.parallelize(range(8), 2).map(lambda x: (x % 2, x)).reduceByKey(lambda a, b: a + b).collect()
    return sc


def recorders() -> dict[str, tuple[Path, str, Callable[[Any], Any]]]:
    """Every record by name: its file, its key, and how to run pyspark for it on a SparkContext."""
    from tests.streaming.groups import test_conformance as groups

    from . import test_conformance as catalogue

    found: dict[str, tuple[Path, str, Callable[[Any], Any]]] = {}
    for group in catalogue.GROUPS:
        found[group] = (catalogue.RECORDS / f"{group}.txt", catalogue.group_key(group),
                        lambda sc, group=group: catalogue.run_pyspark(group, sc))
    for program in sorted(groups.PROGRAMS):
        found[f"groups/{program}"] = (groups.RECORDS / f"{program}.txt", groups.program_key(program),
                                      lambda sc, program=program: groups.record_pyspark(sc, program))
    return found


def main(names: list[str]) -> None:
    """Run pyspark for each record and write it; refuse a vacuous one."""
    known = recorders()
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise SystemExit(f"unknown records {unknown}; they are {sorted(known)}")
    sc = spark_context()
    try:
        for name in names or list(known):
            path, key, run = known[name]
            output = run(sc)
            if not output or (isinstance(output, dict) and not all(output.values())):
                raise SystemExit(f"{name}: pyspark gave an empty output: {output!r}")
            write_record(path, key, output)
            print(f"recorded {name}", flush=True)
    finally:
        sc.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
