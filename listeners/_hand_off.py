"""GilHandOff: how a post lets a plain listener's thread that is starved for the GIL take it.

Flat out, the event loop's thread holds the GIL almost all the time; see ``HAND_OFF_EVENTS``.
"""

from __future__ import annotations

import threading

import anyio

__all__ = ["HAND_OFF_EVENTS", "HAND_OFF_WAIT_S", "GilHandOff"]

HAND_OFF_EVENTS = 2048
"""With this many events undelivered to a plain listener whose trip has not started, the loop hands its thread the GIL.

Flat out the loop gives up the GIL only for an instant at each selector poll, and each restarts the
5 ms a waiting thread allows the holder (CPython 3.11): on a quiet machine a trip could wait 40 ms
and more, the queue filled and under ``BLOCK`` the job runner waited while the generator ran ahead.
"""

HAND_OFF_WAIT_S = 0.001  # the longest a post sleeps for a starved trip to start, in seconds
_HAND_OFF_STEP_S = 0.0001  # its steps: each a selector wait of the loop with the GIL released

class GilHandOff:
    """The one real-time wait of the listener machinery: a posting task's sleep while a starved thread takes the GIL.

    Not a time of the engine's (no clock it is given could stand in: a manual one would never wake
    it), but a yield to the operating system's scheduler, bounded by ``HAND_OFF_WAIT_S``.
    """

    @staticmethod
    async def wait(started: threading.Event) -> None:
        """Sleep in steps of ``_HAND_OFF_STEP_S`` until ``started`` is set, at most ``HAND_OFF_WAIT_S``.

        The posting task sleeps, not the loop: other tasks run, and while none is ready the loop
        waits in its selector with the GIL released, which is when the starved thread takes it.
        """
        with anyio.move_on_after(HAND_OFF_WAIT_S):
            # Polled: the thread sets a threading.Event as its trip starts (an anyio one would cost it a call into the loop).
            while not started.is_set():  # noqa: ASYNC110
                await anyio.sleep(_HAND_OFF_STEP_S)
