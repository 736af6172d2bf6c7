"""What the web UI says of a failure: its type and message, without the stack traces a failure text carries.

A failure reaches the UI as text (Spark's ``failureReason``, a query's exception, a receiver's
last error): Python's formatted traceback, often with a JVM stack trace or a Python worker's
traceback inside the message. Pages show the summary unless the UI is told to show tracebacks.
"""

from __future__ import annotations

import re

__all__ = ["error_summary", "headline"]

_TRACEBACK = "Traceback (most recent call last):"
_CHAINS = ("The above exception was the direct cause of the following exception:",
           "During handling of the above exception, another exception occurred:")
_JAVA_FRAME = re.compile(r"\s+(at \S+\(.*\)|\.\.\. \d+ more)\s*")
_GROUP_FRAME = re.compile(r"\s*\+-[-+\s\d.]*-\s*|\s*\+-+\s*")  # an exception group's "+-+---- 1 ----" rulers
_GROUP_PREFIX = re.compile(r"\s*[|+] ?")  # its "| " and "+ " margins
_EXCEPTION_LINE = re.compile(  # "ValueError: ...", ": java.lang.NumberFormatException: ..."
    r"(?::\s*)?((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Warning|Group|Failure))\b(?::.*)?")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def error_summary(text: str) -> str:
    """The failure's type and message: ``text`` without its stack traces.

    Drops every Python traceback's frames (also those inside a message, such as a Python
    worker's), the exceptions an error was chained from, JVM stack frames (``at ...``,
    ``... N more``) and exception groups' margins; keeps every exception line and message.
    """
    lines = text.splitlines()
    # Only the last exception of a chain is the failure; its causes are part of the traceback.
    for i in range(len(lines) - 1, -1, -1):
        if lines[i] in _CHAINS:
            lines = lines[i + 1:]
            break
    out: list[str] = []
    skip_deeper_than: int | None = None  # inside a traceback's frames: lines indented deeper than its header
    for raw in lines:
        if _GROUP_FRAME.fullmatch(raw):
            continue
        margin = _GROUP_PREFIX.match(raw)
        line = (raw[margin.end():] if margin else raw).rstrip()
        if skip_deeper_than is not None:
            if not line.strip() or _indent(line) > skip_deeper_than:
                continue
            skip_deeper_than = None
        if line.endswith(_TRACEBACK):
            head = line[: line.rfind("Traceback")].rstrip()
            head = head.removesuffix("Exception Group").rstrip()
            if head:
                out.append(head)
            skip_deeper_than = _indent(line)
            continue
        if _JAVA_FRAME.fullmatch(line) or line.strip() in _CHAINS:
            continue
        out.append(line)
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    squeezed: list[str] = []
    for line in out:
        if line.strip() or (squeezed and squeezed[-1].strip()):
            squeezed.append(line)
    return "\n".join(squeezed) if squeezed else text.strip()


def headline(reason: str) -> str:
    """The one line that names a failure: the innermost exception line of its summary, else its first line."""
    lines = [line.strip() for line in error_summary(reason).splitlines() if line.strip()]
    if not lines:
        return reason.strip()
    for line in reversed(lines):
        match = _EXCEPTION_LINE.fullmatch(line)
        if match is not None:
            return line[line.index(match.group(1)):]
    return lines[0]
