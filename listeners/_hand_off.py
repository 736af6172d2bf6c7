"""GilHandOff: how a post lets a plain listener's thread that is starved for the GIL take it.

Flat out, the event loop's thread holds the GIL almost all the time; see ``HAND_OFF_EVENTS``.
"""

from __future__ import annotations

import threading

__all__ = ["HAND_OFF_EVENTS", "HAND_OFF_WAIT_S", "GilHandOff"]

HAND_OFF_EVENTS = 2048
"""With this many events undelivered to a plain listener whose trip has not started, the loop hands its thread the GIL.

Flat out the loop gives up the GIL only for an instant at each selector poll, and each restarts the
5 ms a waiting thread allows the holder (CPython 3.11): on a quiet machine a trip could wait 40 ms
and more, the queue filled and under ``BLOCK`` the job runner waited while the generator ran ahead.
"""

HAND_OFF_WAIT_S = 0.001  # the longest the loop's thread waits for a starved trip to start, in seconds


class GilHandOff:
    """How the loop's thread hands the GIL to a plain listener's thread that is starved of it.

    It waits, with the GIL released, until that thread starts its trip (it sets ``started`` once it
    holds the GIL), at most ``HAND_OFF_WAIT_S`` and once per trip. That is the switch the
    interpreter itself forces every 5 ms between threads that want the GIL, made at the moment it
    failed to happen: the loop's thread stops for the time the other thread takes to wake and take
    the GIL, as it would at a forced switch. Sleeping the posting task instead (the loop free) was
    tried and did not work: flat out the loop always has another task ready, so it never waits in
    its selector and the thread stays starved (docs/ui.md, "History and cost").
    """

    @staticmethod
    def wait(started: threading.Event) -> None:
        """Block until ``started`` is set, at most ``HAND_OFF_WAIT_S``, the GIL released."""
        started.wait(HAND_OFF_WAIT_S)
