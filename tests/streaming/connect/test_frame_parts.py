"""FrameRDD's pure parts, without Spark: Spark's Murmur3 keys, pyspark's parallelize slices, and the
worker-side code shipped by value (a worker runs it without aiodstream installed)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from streaming.connect._partitioning import murmur3_hash_int, parallelize_slices, partition_keys


def test_murmur3_matches_sparks_hash_of_an_int_column() -> None:
    """``hash(col)`` of ints 0..4 as Spark computed it (seed 42)."""
    assert [murmur3_hash_int(i) for i in range(5)] == [933211791, -559580957, 1765031574, -1823081949, -397064898]


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 200])
def test_partition_keys_land_in_their_partitions(n: int) -> None:
    """Each key's hash ``pmod n`` is its partition, and the keys are the smallest such ints."""
    keys = partition_keys(n)
    assert [murmur3_hash_int(k) % n for k in keys] == list(range(n))
    assert all(murmur3_hash_int(v) % n != j for j, k in enumerate(keys) for v in range(k))


def test_partition_keys_refuse_zero_partitions() -> None:
    """No partition, no keys."""
    with pytest.raises(ValueError, match=r"^the number of partitions must be at least 1, got 0$"):
        partition_keys(0)


def test_parallelize_slices_whole_batches() -> None:
    """pyspark slices batches, not elements: 10 values in 3 slices are batches of 3 spread 1, 1, 2."""
    assert parallelize_slices(list(range(10)), 3) == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    assert parallelize_slices([1, 2, 3], 5) == [[], [1], [], [2], [3]]
    assert parallelize_slices([], 2) == [[], []]


def test_worker_code_runs_without_aiodstream(tmp_path: Path) -> None:
    """A shuffle writer pickled after ship_by_value runs in an interpreter that cannot import aiodstream."""
    from pyspark import cloudpickle
    from pyspark.core.rdd import portable_hash

    from streaming.connect import Partitioner
    from streaming.connect._codec import PartitionRunner, ShuffleWriter
    from streaming.connect._frame_context import ship_by_value
    from streaming.connect._frame_pairs import _ByKey

    ship_by_value()
    runner = PartitionRunner(None, [pickle.dumps([(1, "a"), (2, "b"), (3, "c")])])
    writer = ShuffleWriter(runner, _ByKey(Partitioner(2, portable_hash)), (0, 1), 0, True)
    (tmp_path / "writer.pkl").write_bytes(cloudpickle.dumps(writer))
    script = textwrap.dedent("""
        import pickle, sys
        import pyarrow as pa
        writer = pickle.load(open("writer.pkl", "rb"))
        marker = pa.RecordBatch.from_pydict({"p": pa.array([0], pa.int32()), "v": pa.array([None], pa.binary())})
        rows = pa.Table.from_batches(list(writer([marker])))
        print(rows.column("p").to_pylist(), sorted(m for m in sys.modules if m.split(".")[0] in ("streaming", "scheduler")))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env={"PYTHONHASHSEED": "0"},
                          capture_output=True, text=True, check=True)
    assert done.stdout.split("] ")[0] + "]" == str([0, 1, 1, 0, 1])  # the two markers, then keys 1, 2, 3 by hash % 2
    assert done.stdout.strip().endswith("[]")
