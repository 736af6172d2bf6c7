"""Run conformance programs on aiodstream's StreamingContext, the way ``reference.run_reference`` runs them on pyspark.

Usage::

    out = run_aiodstream(prog_word_count, None, num_batches=4, batch_seconds=0.25, sc=sc)

The result has the same shape as :func:`reference.run_reference`'s (outputs keyed by name,
``(batch_index, value)`` rows, ``"stdout"`` for pprint blocks, ``"saved:<prefix>"`` for
``saveAsTextFiles``), so the two compare with ``==``: both go through
:func:`reference.run_program`, with :data:`AIODSTREAM` in place of :data:`reference.PYSPARK`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .programs import Batches, Program
from .reference import DEFAULT_BATCH_SECONDS, Engine, Results, run_program

__all__ = ["AIODSTREAM", "run_aiodstream"]


def _context(sc: Any, batch_seconds: float) -> Any:
    from streaming import StreamingContext

    # pyspark's StreamingListener subclass (the driver's batch tracker) works on both engines:
    # ours calls the camelCase callbacks with the same getters.
    return StreamingContext(sc, batch_seconds)


def _stop(ssc: Any, sc: Any) -> None:
    # An immediate stop lets the running job finish and drops queued ones;
    # it returns once every thread it started is done with Spark.
    ssc.stop(stopSparkContext=False, stopGraceFully=False)


AIODSTREAM = Engine("aiodstream", _context, _stop, lambda exc: f"{type(exc).__name__}: {exc}", start_allowance=60.0)
"""aiodstream's StreamingContext on the same SparkContext."""


def run_aiodstream(
    program: Program,
    inputs: Sequence[Batches] | None = None,
    num_batches: int = 5,
    batch_seconds: float = DEFAULT_BATCH_SECONDS,
    *,
    sc: Any,
    timeout: float | None = None,
) -> Results:
    """Run ``program`` on aiodstream for exactly ``num_batches`` batches and return its outputs.

    Same contract as :func:`reference.run_reference`: ``inputs`` replaces the data of the
    program's ``make_input`` calls, ``sc`` is the shared SparkContext (never stopped), and
    :class:`reference.ReferenceRunError` reports a failed batch, a dead context or a time-out.
    The wait is on a listener's count of completed batches, never on a fixed sleep. The
    library logs nothing unless the host configures logging, so stdout holds only what the
    program printed.
    """
    return run_program(AIODSTREAM, program, inputs, num_batches, batch_seconds, sc=sc, timeout=timeout)
