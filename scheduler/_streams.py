"""Receiving from memory object streams without paying a loop iteration per item.

``MemoryObjectReceiveStream.receive`` always yields to the event loop first. The runtime's
consumers take what is already queued directly and yield every :data:`YIELD_EVERY` items
instead, so a backlog is cleared quickly while other tasks (the host application's too) still
get to run.
"""

from __future__ import annotations

from typing import TypeVar

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

__all__ = ["YIELD_EVERY", "receive_fast"]

T = TypeVar("T")

YIELD_EVERY = 64


async def receive_fast(stream: MemoryObjectReceiveStream[T]) -> T:
    """Return the next item: at once if one is queued, else wait for one.

    Raises ``anyio.EndOfStream`` once the stream is closed and empty. Not a checkpoint when an
    item is queued: callers that loop must yield now and then themselves.
    """
    try:
        return stream.receive_nowait()
    except anyio.WouldBlock:
        return await stream.receive()
