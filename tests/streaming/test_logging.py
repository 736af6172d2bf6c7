"""A real pyspark-style program on real Spark: quiet until the host configures logging, then one INFO line per batch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.crash import run_python

CHILD = Path(__file__).with_name("logging_child.py")

LIFECYCLE = {
    "DStream graph started",
    "job scheduler started",
    "StreamingContext started",
    "query opened",
    "stopping job scheduler gracefully",
    "job scheduler stopped",
    "StreamingContext stopped successfully",
}


@pytest.mark.spark
def test_stdout_holds_only_the_programs_output_and_logging_follows_the_host() -> None:
    """Unconfigured, the library prints nothing; with basicConfig(INFO), each batch has exactly one INFO line."""
    result = run_python([str(CHILD)], timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout.splitlines()

    # stdout: pprint's blocks and the program's own marker, nothing else.
    items = [line for line in out if line and not line.startswith(("-" * 43, "Time: ")) and line != "== logging on =="]
    assert items == [f"{label}-{i}-{x}" for label in ("QUIET", "LOGGED") for i in range(3) for x in "AB"]
    assert out.count("== logging on ==") == 1
    for line in out:
        assert line == "" or line == "-" * 43 or line == "== logging on ==" or line in items \
            or re.fullmatch(r"Time: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?", line), line
    headers_after = sum(1 for line in out[out.index("== logging on =="):] if line.startswith("Time: "))

    # stderr: the library's lines only through the host's handler (the child's "LOG " format).
    ours = [line for line in result.stderr.splitlines() if "aiodstream" in line or "component=" in line]
    assert ours and all(line.startswith("LOG ") for line in ours), ours
    info = [line.split(" ", 3)[3] for line in ours if line.startswith("LOG INFO aiodstream.")]
    per_batch = [line for line in info if line.startswith("batch completed ")]
    assert len(per_batch) == headers_after  # one canonical line for each batch of the logged phase
    assert all(re.search(r"scheduling_delay_ms=\d+ processing_delay_ms=\d+ total_delay_ms=\d+", line) for line in per_batch)
    others = [line.split(" component=")[0] for line in info if not line.startswith("batch completed ")]
    assert sorted(others) == sorted(LIFECYCLE)  # each lifecycle line once, for the one logged context
    assert not [line for line in ours if line.startswith("LOG DEBUG")]
