"""Exact partition placement on Spark Connect: pyspark's ``parallelize`` slices, and the int column
values whose Spark Murmur3 hash puts a row in a chosen shuffle partition (``repartition(n, col)``)."""

from __future__ import annotations

import functools
from typing import Any, Sequence

__all__ = ["coalesce_ranges", "murmur3_hash_int", "parallelize_slices", "partition_keys"]

_MASK = 0xFFFFFFFF
_SPARK_HASH_SEED = 42  # the seed of Spark's HashPartitioning (Murmur3Hash over the columns)


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def murmur3_hash_int(value: int, seed: int = _SPARK_HASH_SEED) -> int:
    """Spark's ``Murmur3_x86_32.hashInt`` of a 32-bit int: what ``hash(col)`` gives for an int column."""
    k1 = (value & _MASK) * 0xCC9E2D51 & _MASK
    k1 = _rotl(k1, 15) * 0x1B873593 & _MASK
    h1 = (seed & _MASK) ^ k1
    h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4  # the input's length in bytes
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


@functools.lru_cache(maxsize=256)
def partition_keys(num_partitions: int) -> tuple[int, ...]:
    """For each partition ``j < n``, the smallest int ``v >= 0`` whose hash ``pmod n`` is ``j``.

    ``df.repartition(n, col)`` sends a row whose ``col`` is ``partition_keys(n)[j]`` to partition
    ``j`` exactly; computed once per ``n``.
    """
    if num_partitions < 1:
        raise ValueError(f"the number of partitions must be at least 1, got {num_partitions}")
    keys: list[int | None] = [None] * num_partitions
    missing = num_partitions
    value = 0
    while missing:
        target = murmur3_hash_int(value) % num_partitions  # Python's % is Spark's pmod for n > 0
        if keys[target] is None:
            keys[target] = value
            missing -= 1
        value += 1
    return tuple(k for k in keys if k is not None)


def parallelize_slices(data: Sequence[Any], num_slices: int, batch_size: int = 1024) -> list[list[Any]]:
    """The partitions pyspark's ``SparkContext.parallelize(data, num_slices)`` makes of a list.

    pyspark groups the elements into batches of ``max(1, min(len // n, 1024))`` and the JVM then
    slices the *batches* evenly (``ParallelCollectionRDD``: slice ``i`` holds batches
    ``i * b // n`` to ``(i + 1) * b // n``), so a partition holds whole batches.
    """
    size = max(1, min(len(data) // num_slices, batch_size))
    batches = [list(data[i : i + size]) for i in range(0, len(data), size)]
    count = len(batches)
    slices: list[list[Any]] = []
    for i in range(num_slices):
        start, end = i * count // num_slices, (i + 1) * count // num_slices
        slices.append([value for batch in batches[start:end] for value in batch])
    return slices


def coalesce_ranges(parents: int, num_partitions: int) -> list[range]:
    """Which parent partitions each partition of ``coalesce(n)`` (no shuffle) reads, as Spark's
    coalescer groups partitions without preferred locations: consecutive, evenly sized runs."""
    if num_partitions >= parents:
        return [range(i, i + 1) for i in range(parents)]
    return [range(i * parents // num_partitions, (i + 1) * parents // num_partitions) for i in range(num_partitions)]
