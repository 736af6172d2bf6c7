"""When a post hands a plain listener's thread the GIL: ``HAND_OFF_EVENTS`` and ``HAND_OFF_WAIT_S``.

Flat out, the event loop's thread holds the GIL almost all the time: it lets go of it only for an
instant at each selector poll, and each such release restarts the 5 ms a waiting thread allows
the holder (CPython 3.11's switch interval). A plain listener's thread woken for a trip then
waits for the GIL as long as the loop stays busy, woken and put back to sleep at every poll, and
once its trip is done it waits again to finish waking the loop. Those wake-ups, thousands a
second from one core to the other, cost the loop's thread more than the trips themselves (issue
28, eighth pass: the loop's thread spent 30% more CPU a batch beside a starved listener thread
than beside none, on one core 8%).

So while a trip a listener asked for has not started, a post that finds ``HAND_OFF_EVENTS``
events undelivered to it (the trip's and those posted since) blocks the loop's thread, the GIL
released, until the trip has run (``scheduler.Handover``), at most ``HAND_OFF_WAIT_S``. A trip
that ends within the wait is settled on the loop's thread, and the listener's thread goes back to
waiting without waking the loop; one that has not even started by then (its thread was not
scheduled in time) is handed over again ``HAND_OFF_EVENTS`` events later, else the busy loop
would starve it until its queue filled. An idle loop never gets there: its thread takes the
GIL while the loop waits in its selector, and the trip has started before the next post. A
lingering listener's trips carry hundreds of events, so the first post after the ask hands over;
a listener that does not linger (``linger=False``) asks for a trip per event, and the threshold
keeps each handover for a run of them.
"""

from __future__ import annotations

__all__ = ["HAND_OFF_EVENTS", "HAND_OFF_WAIT_S"]

HAND_OFF_EVENTS = 256
"""Events undelivered to a plain listener whose trip has not started at which a post hands its thread the GIL."""

HAND_OFF_WAIT_S = 0.001
"""The longest a post waits for a handed-over trip to run, in seconds (the loop's thread stands still meanwhile)."""
