"""Histogram: one Prometheus histogram's state, observed in whole milliseconds and shown in seconds.

prometheus_client's ``Histogram`` takes a lock and a label lookup per observation; the metrics observe on the event loop.
"""

from __future__ import annotations

import bisect
import math

__all__ = ["Histogram", "ms_limits"]


def ms_limits(bounds: tuple[float, ...]) -> tuple[int, ...]:
    """For each bound in seconds, the most whole milliseconds at or under it: ``ms <= limit`` exactly when
    ``ms / 1000 <= bound``, so a bisect of whole milliseconds among these finds the bucket of ``ms / 1000``."""
    limits = []
    for bound in bounds:
        ms = math.floor(bound * 1000)
        while (ms + 1) / 1000 <= bound:
            ms += 1
        while ms / 1000 > bound:
            ms -= 1
        limits.append(ms)
    return tuple(limits)


class Histogram:
    """One histogram's state, updated on the event loop with plain int arithmetic (no locks, no label lookups).

    Every value observed is a whole number of milliseconds (the clock's unit): the bucket is found
    among the bounds in whole milliseconds and the sum kept in them, exactly; seconds are made
    when the registry is scraped.
    """

    __slots__ = ("bounds", "counts", "limits", "sum_ms")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.limits = ms_limits(bounds)
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum_ms = 0

    def observe_ms(self, ms: int) -> None:
        self.counts[bisect.bisect_left(self.limits, ms)] += 1
        self.sum_ms += ms

    @property
    def sum(self) -> float:
        """The sum of the observations, in seconds."""
        return self.sum_ms / 1000

    def buckets(self) -> list[tuple[str, int]]:
        cumulative, out = 0, []
        for bound, count in zip((*(repr(float(b)) for b in self.bounds), "+Inf"), self.counts, strict=True):
            cumulative += count
            out.append((bound, cumulative))
        return out
