"""Run conformance programs on aiodstream's StreamingContext, the way ``reference.run_reference`` runs them on pyspark.

Usage::

    out = run_aiodstream(prog_word_count, None, num_batches=4, batch_seconds=0.25, sc=sc)

The result has the same shape as :func:`reference.run_reference`'s (outputs keyed by name,
``(batch_index, value)`` rows, ``"stdout"`` for pprint blocks, ``"saved:<prefix>"`` for
``saveAsTextFiles``), so the two compare with ``==``.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Sequence
from contextlib import redirect_stdout
from typing import Any

from .programs import Batches, Program, Sink, recording
from .reference import (
    DEFAULT_BATCH_SECONDS,
    ReferenceRunError,
    Results,
    _batch_ms,
    _collect_results,
    _failure,
    _input_factory,
    _make_tracker,
    _program_kwargs,
    _wait_for_batches,
)

__all__ = ["run_aiodstream"]


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
    from streaming import StreamingContext

    if num_batches < 1:
        raise ValueError("num_batches must be at least 1")
    batch_ms = _batch_ms(batch_seconds)
    if timeout is None:
        timeout = 60.0 + 3.0 * num_batches * batch_seconds

    with tempfile.TemporaryDirectory(prefix="aiodstream-ours-", ignore_cleanup_errors=True) as tmp_dir:
        ssc = StreamingContext(sc, batch_seconds)
        # pyspark's StreamingListener subclass works on both engines: ours calls the
        # camelCase callbacks with the same getters.
        tracker = _make_tracker()
        ssc.addStreamingListener(tracker)
        sink = Sink()
        make_input = _input_factory(ssc, inputs)
        stdout = io.StringIO()
        try:
            with recording(sink):
                program(ssc, make_input, **_program_kwargs(program, tmp_dir, batch_seconds))
            with redirect_stdout(stdout):
                try:
                    ssc.start()
                    _wait_for_batches(ssc, tracker, num_batches, timeout)
                finally:
                    sink.close()
                    # An immediate stop lets the running job finish and drops queued ones;
                    # it returns once every thread it started is done with Spark.
                    ssc.stop(stopSparkContext=False, stopGraceFully=False)
        except ReferenceRunError:
            raise
        except Exception as exc:
            raise _failure(f"{program.__name__} failed on aiodstream", f"{type(exc).__name__}: {exc}") from exc

        return _collect_results(program, "aiodstream", tracker, sink, stdout.getvalue(), tmp_dir, batch_ms, num_batches)
