"""Run conformance programs on aiodstream's StreamingContext over a Spark Connect session (the third engine).

The same driver as :mod:`.ours` and :mod:`.reference` (:func:`reference.run_program`), with the
test run's Connect session where they take the SparkContext: the program is unchanged, and its
batches are FrameRDDs on the Connect server. Results compare with ``==`` against pyspark's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .programs import Batches, Program
from .reference import DEFAULT_BATCH_SECONDS, Engine, Results, run_program

__all__ = ["CONNECT", "run_connect"]


def _context(session: Any, batch_seconds: float) -> Any:
    from streaming import StreamingContext

    return StreamingContext(session, batch_seconds)  # the session's kind chooses Spark Connect


def _stop(ssc: Any, session: Any) -> None:
    # As on the classic engine: the running job finishes, queued ones are dropped, the session stays.
    ssc.stop(stopSparkContext=False, stopGraceFully=False)


CONNECT = Engine("aiodstream on Spark Connect", _context, _stop, lambda exc: f"{type(exc).__name__}: {exc}", start_allowance=120.0)
"""aiodstream's StreamingContext on the test run's Spark Connect session."""


def run_connect(
    program: Program,
    inputs: Sequence[Batches] | None = None,
    num_batches: int = 5,
    batch_seconds: float = DEFAULT_BATCH_SECONDS,
    *,
    session: Any,
    timeout: float | None = None,
) -> Results:
    """Run ``program`` on aiodstream over the Connect ``session`` for exactly ``num_batches`` batches; :func:`run_aiodstream`'s contract."""
    return run_program(CONNECT, program, inputs, num_batches, batch_seconds, sc=session, timeout=timeout)
