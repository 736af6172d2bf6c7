"""examples/exactly_once_files.py runs: a SIGKILLed first run, a restart that re-runs the logged batch, exactly-once output."""

from __future__ import annotations

import re
from pathlib import Path

from tests.crash import ROOT, run_python


# asyncio only: it runs the example as shipped, and the example calls anyio.run with its default backend.
def test_the_exactly_once_example_recovers_from_its_crash(tmp_path: Path) -> None:
    """The example's first run dies by SIGKILL, the second re-runs batch 0 then takes the new files, and the output is exact."""
    result = run_python([str(ROOT / "examples" / "exactly_once_files.py"), "--dir", str(tmp_path)], timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "exit status -9" in out
    assert re.search(r"batch 0: 12 lines \(re-run of a logged batch, commitOffsets \d+ ms\)", out), out
    assert re.search(r"batch \d+: 8 lines \(walCommit \d+ ms, commitOffsets \d+ ms\)", out), out
    assert out.strip().splitlines()[-1] == "output: 20 lines in 2 files, each exactly once"
