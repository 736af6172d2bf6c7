"""Which batch times a stream's RDDs are read at: each of its times, unless a window shorter than its slide skips some.

An input that decides each batch's input when the batch is planned (a file stream lists its directory then) would
otherwise take input at times no output reads: ``window(1, 2)`` over it reads every second batch, and the files of the
others were never read. Spark's file stream lists only when its RDD is computed, so the next window takes them; the
file stream plans nothing at the times this says are not read, for the same result. A queue stream, which pyspark
dequeues only when its RDD is computed, dequeues nothing at those times either.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from scheduler import Time

from ._node import StreamNode
from ._windowed import ReducedWindowedNode, WindowedNode

_WINDOWS = (WindowedNode, ReducedWindowedNode)  # the streams that read their parent over (t - window, t] at their times t

__all__ = ["times_read"]


def times_read(stream: StreamNode, outputs: Sequence[Any]) -> Callable[[Time], bool] | None:
    """Whether an output reads ``stream``'s RDD of a time, as a function; ``None`` when every time of its grid is read.

    Every stream between ``stream`` and an output reads its parents at its own times but a window, which reads its
    parent's times in ``(t - window, t]`` at its own times ``t``: only a window shorter than its slide leaves some out.
    (A user function that slices a stream itself is not followed.)
    """
    children: dict[int, list[StreamNode]] = {}
    seen: set[int] = set()
    pending: list[StreamNode] = list(outputs)
    short_window = False
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        short_window = short_window or (isinstance(node, _WINDOWS) and node.window_length < node.slide)
        for parent in node.parents:
            children.setdefault(id(parent), []).append(node)
            pending.append(parent)
    if not short_window or id(stream) not in seen:
        return None
    ends = {id(output) for output in outputs}

    def read(node: StreamNode, time: Time) -> bool:
        if not node.is_time_valid(time):
            return False
        if id(node) in ends:
            return True
        for child in children.get(id(node), ()):
            if not isinstance(child, _WINDOWS):
                if read(child, time):
                    return True
                continue
            # The child's times whose window (t - window, t] holds ``time``: on this stream's grid, from ``time`` on.
            for end in range(time.milliseconds, time.milliseconds + child.window_length.milliseconds, node.slide.milliseconds):
                if read(child, Time(end)):
                    return True
        return False

    return lambda time: read(stream, time)

