"""Recorded pyspark outputs for the conformance suites: the oracle's answers, kept with the key of everything that made them.

A conformance test runs a program on pyspark (the oracle) and on aiodstream and compares the
outputs. pyspark's half gives the same answer every time while the program, its inputs, the
harness, the Spark settings and pyspark's version stay the same: it is recorded once
(``python -m tests.streaming.conformance.record``) and read back, so a default run spends its
time on aiodstream's half. A record is used only when its key, a hash of all of those, is the
one the test computes now; otherwise (a program edited, pyspark upgraded) the test runs pyspark
live as before, and ``test_every_recording_is_current`` fails, naming the command that records
them again. ``AIODSTREAM_PYSPARK_REFERENCE=live`` runs pyspark live every time; so does a test
run on the test cluster (``AIODSTREAM_TEST_SPARK_MASTER``), whose oracle is pyspark on the
cluster.

A record is a text file: a ``# key:`` line, then the output as a Python literal (read back with
:func:`ast.literal_eval`, so tuples stay tuples).
"""

from __future__ import annotations

import ast
import hashlib
import os
import pprint
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.cluster import MASTER_VARIABLE

__all__ = ["LIVE_VARIABLE", "live", "read_record", "record_key", "recorded_key", "write_record"]

LIVE_VARIABLE = "AIODSTREAM_PYSPARK_REFERENCE"
"""``live``: every conformance test runs pyspark itself instead of reading its record."""

_KEY_LINE = "# key: "


def live() -> bool:
    """Whether this run asks for pyspark live (by the variable, or by running on the test cluster)."""
    return os.environ.get(LIVE_VARIABLE) == "live" or bool(os.environ.get(MASTER_VARIABLE))


def record_key(files: Iterable[Path], *parts: object) -> str:
    """A hash of the files' text, the parts' ``repr`` and pyspark's version: what decides pyspark's output."""
    import pyspark

    digest = hashlib.sha256(f"pyspark {pyspark.__version__}\n".encode())
    for path in files:
        digest.update(f"{path.name}\n".encode())
        digest.update(path.read_bytes())
    for part in parts:
        digest.update(f"\n{part!r}".encode())
    return digest.hexdigest()[:20]


def read_record(path: Path, key: str) -> Any | None:
    """The recorded output if ``path`` holds one made under ``key``; None when there is none or it is stale."""
    if not path.exists():
        return None
    header, _, body = path.read_text(encoding="utf-8").partition("\n")
    if header != f"{_KEY_LINE}{key}":
        return None
    return ast.literal_eval(body)


def recorded_key(path: Path) -> str | None:
    """The key a record was made under (None without a record)."""
    if not path.exists():
        return None
    header = path.read_text(encoding="utf-8").partition("\n")[0]
    return header.removeprefix(_KEY_LINE) if header.startswith(_KEY_LINE) else None


def write_record(path: Path, key: str, output: Any) -> None:
    """Write ``output`` under ``key``; it must read back equal (plain values only: no objects a literal cannot spell)."""
    body = pprint.pformat(output, width=120, sort_dicts=False)
    if ast.literal_eval(body) != output:
        raise ValueError(f"{path.name}: the output does not read back equal from its text")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{_KEY_LINE}{key}\n{body}\n", encoding="utf-8")
