"""Smoke tests for the reference harness: a few catalogue programs on real pyspark, hand-computed expectations."""

from __future__ import annotations

import operator
from typing import Any

import pytest

pytest.importorskip("pyspark")

from . import programs as p
from .reference import ReferenceRunError, run_reference

pytestmark = pytest.mark.spark

FAST = 0.25
"""Batch interval for the light programs (pyspark keeps up with these)."""

STEADY = 0.5
"""Batch interval for programs whose outputs run several jobs per batch (pprint, saveAsTextFiles).

If pyspark falls behind, batches queue up and ``stop()`` waits up to 2 s for them.
"""


def test_word_count(spark_context: Any) -> None:
    """The word count gives hand-computed counts per batch, including empty ones."""
    out = run_reference(p.prog_word_count, None, num_batches=5, batch_seconds=FAST, sc=spark_context)
    assert out == {
        "word_count": [
            (0, [("a", 3), ("b", 1), ("c", 1)]),
            (1, [("b", 2)]),
            (2, []),
            (3, [("a", 1), ("c", 1), ("d", 2)]),
            (4, []),  # the queue has run dry: an empty batch, still reported
        ]
    }


def test_inputs_override_program_data(spark_context: Any) -> None:
    """inputs= replaces the data of the program's queue streams."""
    out = run_reference(p.prog_word_count, [[["x y x"], [], ["y"]]], num_batches=3, batch_seconds=FAST, sc=spark_context)
    assert out == {"word_count": [(0, [("x", 2), ("y", 1)]), (1, []), (2, [("y", 1)])]}


def test_raw_order_exposes_partitioning(spark_context: Any) -> None:
    """Raw collect order shows how queueStream slices each batch into partitions."""
    out = run_reference(p.prog_map_partitions_with_index, None, num_batches=5, batch_seconds=FAST, sc=spark_context)
    # queueStream parallelizes each batch list into 2 slices; a dry queue yields 1 empty partition.
    assert out == {
        "mapPartitionsWithIndex": [
            (0, [(0, [1]), (1, [2, 3])]),
            (1, [(0, [4]), (1, [5])]),
            (2, [(0, []), (1, [])]),
            (3, [(0, [6, 7]), (1, [8, 9])]),
            (4, [(0, [])]),
        ]
    }


def test_empty_batches(spark_context: Any) -> None:
    """Empty and dry-queue batches: count emits 0, reduce emits nothing."""
    out = run_reference(p.prog_empty_batches, None, num_batches=5, batch_seconds=FAST, sc=spark_context)
    assert out["identity"] == [(0, []), (1, [1, 2]), (2, []), (3, []), (4, [])]
    assert out["glom"] == [(0, [[], []]), (1, [[1], [2]]), (2, [[], []]), (3, [[], []]), (4, [[]])]
    # count() emits 0 for an empty batch; reduce() emits nothing.
    assert out["count"] == [(0, [0]), (1, [2]), (2, [0]), (3, [0]), (4, [0])]
    assert out["reduce"] == [(0, []), (1, [3]), (2, []), (3, []), (4, [])]


def test_windows_and_slide_alignment(spark_context: Any) -> None:
    """Windows cover the last batches; a 2-batch slide fires at odd batch indices."""
    out = run_reference(p.prog_window, None, num_batches=6, batch_seconds=FAST, sc=spark_context)
    window_3 = [
        (0, [1, 2, 3]),
        (1, [1, 2, 3, 4, 5]),
        (2, [1, 2, 3, 4, 5]),
        (3, [4, 5, 6, 7, 8, 9]),
        (4, [6, 7, 8, 9]),
        (5, [6, 7, 8, 9]),
    ]
    assert out["window_3"] == window_3
    assert out["window_3_1"] == window_3
    # A 2-batch slide fires when (time - zeroTime) is a multiple of the slide, and zeroTime
    # is one interval before the first batch: so at batch indices 1, 3, 5.
    assert out["window_2_2"] == [(1, [1, 2, 3, 4, 5]), (3, [6, 7, 8, 9]), (5, [])]


def test_update_state_by_key(spark_context: Any) -> None:
    """updateStateByKey keeps running sums and drops a key whose update returns None."""
    out = run_reference(p.prog_update_state_by_key, None, num_batches=5, batch_seconds=FAST, sc=spark_context)
    # Running sums of PAIRS; "a" reaches 10 in batch 3 and is dropped (update returns None).
    assert out == {
        "updateStateByKey": [
            (0, [("a", 4), ("b", 2)]),
            (1, [("a", 4), ("b", 6)]),
            (2, [("a", 4), ("b", 6)]),
            (3, [("b", 6)]),
            (4, [("b", 6)]),
        ]
    }


def _block(lines: list[str]) -> str:
    rule = "-" * 43
    return "\n".join([rule, "Time: {time}", rule, *lines, "", ""])


def test_pprint_stdout(spark_context: Any) -> None:
    """pprint output is captured per batch with the time placeholder."""
    out = run_reference(p.prog_pprint, None, num_batches=3, batch_seconds=STEADY, sc=spark_context)
    assert out == {
        "stdout": [
            (0, _block(["1", "2", "3"]) + _block(["('k', 1)", "('k', 2)", "..."])),
            (1, _block(["4", "5"]) + _block(["('k', 4)", "('k', 5)"])),
            (2, _block([]) + _block([])),
        ]
    }


def test_save_as_text_files(spark_context: Any) -> None:
    """saveAsTextFiles output is read back part file by part file."""
    out = run_reference(p.prog_save_as_text_files, None, num_batches=3, batch_seconds=STEADY, sc=spark_context)
    assert out == {
        "saved:nums": [(0, [["1"], ["2", "3"]]), (1, [["4"], ["5"]]), (2, [[], []])],
        "saved:pairs.txt": [
            (0, [["('k', 1)"], ["('k', 2)", "('k', 3)"]]),
            (1, [["('k', 4)"], ["('k', 5)"]]),
            (2, [[], []]),
        ],
    }


def prog_failing(ssc: Any, make_input: p.MakeInput) -> None:
    """A worker-side ZeroDivisionError in the second batch."""
    p.collect(make_input([[1], [0]]).map(lambda x: operator.floordiv(1, x)), "inverse")


def test_job_failure_is_reported(spark_context: Any) -> None:
    """A worker-side exception in a batch surfaces as ReferenceRunError naming it."""
    with pytest.raises(ReferenceRunError, match="ZeroDivisionError"):
        run_reference(prog_failing, None, num_batches=3, batch_seconds=FAST, sc=spark_context, timeout=30)
