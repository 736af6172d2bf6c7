"""serve: how the bus hands one event to its listeners' queues, in order (the per-event path of every post)."""

from __future__ import annotations

from typing import Any

import anyio

from ._events import BatchCompleted, StreamingEvent, of_succeeded_values
from ._listener_queue import LINGER_EVENTS, SUCCEEDED, ListenerQueue

__all__ = ["serve"]


def serve(event: StreamingEvent | None, slots: list[ListenerQueue], values: tuple[object, ...] | None, capacity: int,
           block: bool) -> list[ListenerQueue] | None:
    """Hand ``event`` to each of ``slots`` in order; stop at a full queue if ``block`` (BLOCK) and return it and the rest.

    ``values``: a succeeded batch's (``succeeded_values``), for a plain listener's queue (``SUCCEEDED``, see
    ``ListenerQueue.flat``); ``event`` is then its ``BatchCompleted``, or ``None`` until another listener needs it.
    """
    kind = type(event) if values is None else BatchCompleted
    for slot in slots:  # no enumerate: the index is looked up only when a queue is full under BLOCK
        if slot.inline:
            if event is None:
                event = of_succeeded_values(values)  # type: ignore[arg-type]
            slot.deliver_inline(event)
            continue
        if kind not in slot.handlers:
            slot.skipped += 1  # nothing to call: counted as delivered, never queued
            continue
        item: Any = SUCCEEDED if values is not None and slot.flat else event
        if item is None:
            item = event = of_succeeded_values(values)  # type: ignore[arg-type]
        queued: Any = slot.pending
        if queued is not None:
            # A plain listener's trip is in flight and nothing else is queued for it: the event
            # joins the next trip's run in a plain list (no mailbox put; see ListenerQueue.pending).
            if len(queued) >= capacity:
                slot.drop(item)  # only under DROP: the dispatcher never gathers a run under BLOCK
                continue
            queued.append(item)
        else:
            queued = slot.queue
            try:
                queued.put_nowait(item)
            except anyio.WouldBlock:
                if block:
                    return slots[slots.index(slot):]
                slot.drop(item)
                continue
            except anyio.ClosedResourceError:
                continue  # removed meanwhile, or its dispatcher is gone
        if item is SUCCEEDED:
            slot.values.extend(values)  # type: ignore[arg-type]
        slot.accepted += 1
        filled = slot.filled
        if filled is not None and len(queued) >= LINGER_EVENTS:
            filled.set()  # it lingers for a run this long: the trip starts
        elif not slot.handover.started and slot.accepted - slot.processed >= slot.hand_off_at:
            slot.hand_off()  # a trip asked for has not started and posts go on: its thread is starved
    return None
