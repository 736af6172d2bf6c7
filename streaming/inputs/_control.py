"""The control channel between a receiver task on an executor and the driver: its role, bounds and reports, without I/O.

The task connects to the driver's front door (:mod:`streaming.network`) as role ``receiver``,
proving the token of the receiver's launch, then sends one report per line; the driver parses
each with :func:`parse_report` before anything it says is believed (Spark's ``ReceiverTracker``
trusts its RPC endpoint instead). A report that breaks the rules is a
:class:`ReceiverProtocolError`: the driver drops the connection and restarts the receiver, and
the report never reaches the offsets log.
"""

from __future__ import annotations

import math
import re
from typing import Mapping

import attrs

from scheduler import StreamingError

__all__ = [
    "MAX_BLOCK_RECORDS",
    "MAX_REPORT_BYTES",
    "MAX_REPORT_MESSAGE",
    "RECEIVER_ROLE",
    "ReceiverProtocolError",
    "Report",
    "parse_report",
    "receiver_roles",
]

RECEIVER_ROLE = "receiver"
"""The role a receiver task proves in its hello; its one field is ``stream``, the input stream's id."""

MAX_REPORT_BYTES = 1 << 16
"""The longest report line the driver reads (64 KiB); a longer one drops the connection."""

MAX_REPORT_MESSAGE = 8000
"""The longest error message a task puts in an ``E`` report, in characters (well under :data:`MAX_REPORT_BYTES`)."""

MAX_BLOCK_RECORDS = 2**31 - 1
"""The most records one reported block may hold (a Java int, as Spark's counts)."""

_BLOCK = re.compile(r"B ([0-9]{1,18}) ([0-9]{1,10})")
_HOST = re.compile(r"H ([!-~]{1,255})(?: ([0-9]{1,10}) ([0-9]{1,18}))?")
_RATE = re.compile(r"R (none|[0-9][0-9.eE+-]{0,40})")


class ReceiverProtocolError(StreamingError, ValueError):
    """A receiver task's report breaks the control channel's rules: the connection is dropped, the receiver restarts."""


@attrs.frozen
class Report:
    """One parsed report of a receiver task.

    Attributes:
        kind: ``H`` (hello: its host, and its Spark stage and task ids), ``S`` (connected to the
            source), ``B`` (a block written), ``R`` (a rate applied), ``E`` (an error), ``P``
            (nothing new: a heartbeat), ``X`` (stopped).
        entry: ``B``: the block's number in the write-ahead log.
        count: ``B``: its records.
        host: ``H``: the task's host.
        task: ``H``: the task's stage id and task attempt id, if it runs in Spark.
        rate: ``R``: the rate the task applied (``None``: no limit).
        message: ``E``: what went wrong.
    """

    kind: str
    entry: int = 0
    count: int = 0
    host: str = ""
    task: tuple[int, int] | None = None
    rate: float | None = None
    message: str = ""


def receiver_roles(stream_id: int) -> Mapping[str, Mapping[str, range]]:
    """The front door's roles for the receiver of input stream ``stream_id``: one task, of that stream."""
    return {RECEIVER_ROLE: {"stream": range(stream_id, stream_id + 1)}}


def _refuse(rule: str, line: bytes) -> ReceiverProtocolError:
    return ReceiverProtocolError(f"a receiver task's report breaks the control protocol: {rule}; got {line[:80]!r}")


def parse_report(line: bytes, next_entry: int) -> Report:
    """Check one report line (without its newline); ``next_entry`` is the block the task must report next.

    Blocks are reported once each, in order: ``B`` must name ``next_entry``, with a count in
    ``[0, MAX_BLOCK_RECORDS]``; numbers are ASCII digits of bounded length; a rate is finite and
    not negative; the line is UTF-8.

    Raises:
        ReceiverProtocolError: anything else (the message names the rule and quotes the line's start).
    """
    if len(line) > MAX_REPORT_BYTES:
        raise _refuse(f"a report is at most {MAX_REPORT_BYTES} bytes, this one is {len(line)}", line)
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise _refuse("a report is UTF-8 text", line) from None
    kind = text[:1]
    if kind == "B":
        block = _BLOCK.fullmatch(text)
        if block is None:
            raise _refuse("a block report is 'B <entry> <count>' in decimal digits", line)
        entry, count = int(block[1]), int(block[2])
        if entry != next_entry:
            raise _refuse(f"blocks are reported once each and in order: block {next_entry} was next, not {entry}", line)
        if count > MAX_BLOCK_RECORDS:
            raise _refuse(f"a block holds at most {MAX_BLOCK_RECORDS} records, this one claims {count}", line)
        return Report("B", entry=entry, count=count)
    if kind == "H":
        hello = _HOST.fullmatch(text)
        if hello is None:
            raise _refuse("a task's first report is 'H <host> [<stage> <task>]'", line)
        task = None if hello[2] is None else (int(hello[2]), int(hello[3]))
        return Report("H", host=hello[1], task=task)
    if kind == "R":
        found = _RATE.fullmatch(text)
        rate: float | None = None
        if found is not None and found[1] != "none":
            try:
                rate = float(found[1])
            except ValueError:
                found = None
        if found is None or (rate is not None and not (math.isfinite(rate) and rate >= 0)):
            raise _refuse("a rate report is 'R none' or 'R <records per second>', finite and not negative", line)
        return Report("R", rate=rate)
    if kind == "E" and text.startswith("E "):
        return Report("E", message=text[2:])
    if text in ("S", "P", "X"):
        return Report(text)
    raise _refuse("a report is one of H, S, B, R, E, P, X", line)
