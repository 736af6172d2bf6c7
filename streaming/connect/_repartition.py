"""Where ``repartition(n)`` sends each element: Spark's ``RDD.coalesce(n, shuffle=True)`` deals pyspark's
batches of 10 round-robin from a start drawn by ``XORShiftRandom(partition index).nextInt(n)``."""

from __future__ import annotations

import struct
from typing import Any, Iterable, Iterator

__all__ = ["RoundRobin", "xorshift_next_int"]

_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF
_SCALA_ARRAY_SEED = 0x3C074A61
_BATCH = 10  # pyspark's repartition reserializes in batches of min(10, batch size) elements


def _rotl32(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _M32


def _mix_last(h: int, k: int) -> int:
    k = k * 0xCC9E2D51 & _M32
    k = _rotl32(k, 15) * 0x1B873593 & _M32
    return h ^ k


def _scala_bytes_hash(data: bytes, seed: int) -> int:
    """Scala's ``MurmurHash3.bytesHash`` (unsigned 32-bit result)."""
    h = seed & _M32
    whole = len(data) - len(data) % 4
    for i in range(0, whole, 4):
        h = _mix_last(h, int.from_bytes(data[i : i + 4], "little"))
        h = (_rotl32(h, 13) * 5 + 0xE6546B64) & _M32
    tail = data[whole:]
    if tail:
        h = _mix_last(h, int.from_bytes(tail, "little"))
    h ^= len(data)
    h ^= h >> 16
    h = h * 0x85EBCA6B & _M32
    h ^= h >> 13
    h = h * 0xC2B2AE35 & _M32
    h ^= h >> 16
    return h


def _signed32(value: int) -> int:
    value &= _M32
    return value - (1 << 32) if value & 0x80000000 else value


class _XorShift:
    """Spark's ``XORShiftRandom``: a seed hashed by Murmur3, then xorshift steps under Java's ``Random``."""

    def __init__(self, seed: int) -> None:
        data = struct.pack(">q", seed)
        low = _scala_bytes_hash(data, _SCALA_ARRAY_SEED)
        high = _scala_bytes_hash(data, low)
        self.seed = ((high << 32) | low) & _M64

    def next(self, bits: int) -> int:
        seed = self.seed
        seed ^= (seed << 21) & _M64
        seed ^= seed >> 35
        seed ^= (seed << 4) & _M64
        self.seed = seed
        return _signed32(seed & ((1 << bits) - 1))

    def next_int(self, bound: int) -> int:
        """Java's ``Random.nextInt(bound)`` over this generator's ``next``."""
        r = self.next(31)
        m = bound - 1
        if bound & m == 0:
            return (bound * r) >> 31
        u = r
        while True:
            r = u % bound
            if _signed32(u - r + m) >= 0:
                return r
            u = self.next(31)


def xorshift_next_int(seed: int, bound: int) -> int:
    """``new XORShiftRandom(seed).nextInt(bound)``."""
    return _XorShift(seed).next_int(bound)


class RoundRobin:
    """The route of ``repartition(n)``: chunk ``c`` of partition ``i`` (10 elements each) goes to
    ``(start + 1 + c) % n`` where ``start = XORShiftRandom(i).nextInt(n)``."""

    def __init__(self, num_partitions: int) -> None:
        self.num_partitions = num_partitions

    def __call__(self, index: int, values: Iterator[Any]) -> Iterable[tuple[int, Any]]:
        n = self.num_partitions
        position = xorshift_next_int(index, n)
        for count, value in enumerate(values):
            if count % _BATCH == 0:
                position += 1
            yield position % n, value
