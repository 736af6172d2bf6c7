"""ReadyProbe: what an event loop may tell the engine about its ready queue, for speed; optional.

The engine runs on anyio's public API. "Is any other callback ready to run?" has no public
answer, yet it lets a consumer skip an empty loop iteration and lets a virtual clock jump exactly
when every task is blocked. A loop that can answer it advertises a probe as its
``aiodstream_ready_probe`` attribute (the simulator's event loops do: ``streaming.simulation``);
on any other loop (stock asyncio, uvloop, trio) the engine takes the public path: it yields.
"""

from __future__ import annotations

import asyncio
from typing import Collection, Protocol, runtime_checkable

__all__ = ["PROBE_ATTRIBUTE", "ReadyProbe", "ready_probe"]

PROBE_ATTRIBUTE = "aiodstream_ready_probe"
"""The attribute under which an asyncio event loop advertises its :class:`ReadyProbe`."""


@runtime_checkable
class ReadyProbe(Protocol):
    """Answers questions about the ready queue of the event loop that advertises it."""

    def others_ready(self, ignore: Collection[object] = ()) -> bool:
        """Whether any callback other than those of the tasks in ``ignore`` is ready to run now.

        Called from a task of that loop; the calling task itself is not ready while it runs.
        """
        ...


def ready_probe() -> ReadyProbe | None:
    """The running event loop's probe, or ``None`` when it offers none (or no asyncio loop runs)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no asyncio loop runs in this thread (trio, or no loop at all)
        return None
    probe = getattr(loop, PROBE_ATTRIBUTE, None)
    return probe if isinstance(probe, ReadyProbe) else None
