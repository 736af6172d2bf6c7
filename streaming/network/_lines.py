"""LineDecoder: bytes from a TCP source into text lines, as Spark's ``SocketReceiver`` reads them, with a bounded line length.

Used by the socket receivers (``streaming.inputs``) and the continuous ``SocketSource``.
"""

from __future__ import annotations

import codecs
import io
from typing import TYPE_CHECKING

from scheduler import StreamingError

if TYPE_CHECKING:
    from typing_extensions import Buffer  # typeshed's type for IncrementalDecoder.decode's input (not a runtime dependency)

__all__ = [
    "DEFAULT_MAX_LINE_LENGTH",
    "MAX_LINE_LENGTH_KEY",
    "RECONNECT_CONSEQUENCE",
    "JavaUtf8Decoder",
    "LineDecoder",
    "LineTooLongError",
    "check_max_line_length",
    "max_line_length",
]

MAX_LINE_LENGTH_KEY = "spark.aiodstream.receiver.maxLineLength"
"""The longest line, in characters, a socket source takes (a longer one fails the connection, or a continuous query)."""

DEFAULT_MAX_LINE_LENGTH = 1 << 20
"""The default of :data:`MAX_LINE_LENGTH_KEY`: 1,048,576 characters."""

RECONNECT_CONSEQUENCE = "the connection is dropped and made again after the restart delay"
"""What a too-long line does to a receiver (:class:`LineDecoder`'s default wording of :class:`LineTooLongError`)."""


def max_line_length(value: str | None) -> int:
    """The line bound a :data:`MAX_LINE_LENGTH_KEY` setting asks for (unset or blank: the default).

    Raises:
        ValueError: not a positive whole number.
    """
    if value is None or not value.strip():
        return DEFAULT_MAX_LINE_LENGTH
    text = value.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 18 or int(text) < 1:
        raise ValueError(f"{MAX_LINE_LENGTH_KEY} must be a positive number of characters, got {value!r}; "
                         f"pass e.g. {DEFAULT_MAX_LINE_LENGTH}")
    return int(text)


def check_max_line_length(value: object, name: str = MAX_LINE_LENGTH_KEY) -> int:
    """``value`` if it is a line bound (a positive int, not a bool); ``name`` is what the message calls it.

    Raises:
        ValueError: anything else.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive number of characters, got {value!r}; pass e.g. {DEFAULT_MAX_LINE_LENGTH}")
    return value


class LineTooLongError(StreamingError, ValueError):
    """A line from the source is longer than :data:`MAX_LINE_LENGTH_KEY` allows.

    Attributes:
        lines: the lines the same read completed before the long one, in order (the receiver
            stores them before it drops the connection).
    """

    def __init__(self, message: str, lines: list[str]) -> None:
        """The error with its ``message`` and the complete ``lines`` that came before the long one."""
        super().__init__(message)
        self.lines = lines


class JavaUtf8Decoder(codecs.IncrementalDecoder):
    """UTF-8 as Java's decoder reads it with malformed input replaced (``InputStreamReader``), incrementally.

    Python's ``errors="replace"`` agrees with Java for every malformed sequence but one: an
    encoded surrogate, ``ED`` followed by ``A0``-``BF``. Python replaces each of its bytes
    (``ED A0 80`` gives three U+FFFD); Java decodes the sequence, finds a surrogate and replaces
    it whole (one U+FFFD), or replaces ``ED A0``-``BF`` as one when the third byte is not a
    continuation or the input ends there. This decoder takes those sequences itself and hands
    the rest to Python's.
    """

    def __init__(self, errors: str = "replace") -> None:
        """A decoder that replaces malformed input (``errors`` is accepted for the codec protocol; only "replace")."""
        super().__init__(errors)
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = b""  # from an ED whose sequence's length is not known yet (the next read tells)

    def decode(self, input: Buffer, final: bool = False) -> str:
        """The text of ``input`` after what came before; ``final``: the input ends here."""
        data = self._held + bytes(input)
        self._held = b""
        parts: list[str] = []
        start = 0
        at = data.find(b"\xed")
        while at != -1:
            surrogate = at + 1 < len(data) and 0xA0 <= data[at + 1] <= 0xBF
            if at + 1 == len(data) or (surrogate and at + 2 == len(data)):
                if not final:
                    self._held = data[at:]
                    data = data[:at]
                elif surrogate:  # ED A0-BF at the end of the input: one replacement for both, as Java's
                    parts.append(self._utf8.decode(data[start:at], True))
                    parts.append("\ufffd")
                    start = len(data)
                break  # (a lone ED at the end: Python's replacement is Java's)
            if surrogate:
                # Whatever was pending before the ED was cut short by it: flushed (one U+FFFD, as in Java).
                parts.append(self._utf8.decode(data[start:at], True))
                parts.append("\ufffd")
                start = at + (3 if 0x80 <= data[at + 2] <= 0xBF else 2)
            at = data.find(b"\xed", max(at + 1, start))
        parts.append(self._utf8.decode(data[start:], final))
        return "".join(parts)

    def reset(self) -> None:
        """Forget pending bytes."""
        self._utf8.reset()
        self._held = b""

    def getstate(self) -> tuple[bytes, int]:
        """The pending bytes (Python's decoder's, then the held ones) and its flag."""
        pending, flag = self._utf8.getstate()
        return pending + self._held, flag

    def setstate(self, state: tuple[bytes, int]) -> None:
        """Resume from :meth:`getstate`'s state: the pending bytes are decoded again with the next input."""
        self._utf8.reset()
        self._held = state[0]


class LineDecoder:
    """Turns a byte stream into text lines the way Spark's socket receiver reads them.

    Bytes are UTF-8, malformed sequences become U+FFFD as Java's decoder replaces them
    (:class:`JavaUtf8Decoder`); a line ends at ``\\n``, ``\\r`` or
    ``\\r\\n`` (Java's ``readLine``, also when a ``\\r\\n`` pair is split across two reads), and
    nothing else (``\\x0b`` or U+2028 stay in the line). A last line without a terminator is
    returned by :meth:`finish`.

    Linear in the bytes fed: a line that spans many reads is accumulated, never rescanned or
    re-copied. A line longer than ``max_line_length`` characters raises :class:`LineTooLongError`
    as soon as it is known to be too long (before its end arrives), so a source that never sends
    a line end holds at most ``max_line_length`` characters here. After the error the decoder is
    spent: the stream it decodes has to be dropped (Java's ``readLine`` has no limit; Spark's
    receiver restarts on an error of its stream, and so does ours).
    """

    def __init__(self, max_line_length: int | None = DEFAULT_MAX_LINE_LENGTH, *,
                 consequence: str = RECONNECT_CONSEQUENCE) -> None:
        """Start with no pending bytes; ``max_line_length`` ``None`` means no limit.

        ``consequence`` is what :class:`LineTooLongError`'s message says happens next (default: a
        receiver's reconnect, :data:`RECONNECT_CONSEQUENCE`).

        Raises:
            ValueError: ``max_line_length`` is not a positive int.
        """
        if max_line_length is not None:
            check_max_line_length(max_line_length)
        self.max_line_length = max_line_length
        self.consequence = consequence
        self._decoder = io.IncrementalNewlineDecoder(JavaUtf8Decoder(), translate=True)
        # The unterminated line so far: appended to (amortised linear, compact), read once at its end.
        self._partial = io.StringIO()
        self._partial_length = 0

    @property
    def pending_length(self) -> int:
        """Characters of the unterminated line held so far (never more than ``max_line_length``)."""
        return self._partial_length

    def feed(self, data: bytes) -> list[str]:
        """The lines completed by ``data``.

        Raises:
            LineTooLongError: a line (complete or not) is longer than the limit; its ``lines``
                are the ones completed before it.
        """
        text = self._decoder.decode(data)
        if "\n" not in text:  # only the new text is scanned: where the last scan stopped is kept
            self._extend(text, [])
            return []
        lines = text.split("\n")
        if self._partial_length:
            self._partial.write(lines[0])
            lines[0] = self._partial.getvalue()
            self._partial = io.StringIO()
            self._partial_length = 0
        rest = lines.pop()
        self._check(lines)
        self._extend(rest, lines)
        return lines

    def _check(self, lines: list[str]) -> None:
        """Raise :class:`LineTooLongError` for the first complete line over the limit."""
        limit = self.max_line_length
        if limit is not None:
            for index, line in enumerate(lines):
                if len(line) > limit:
                    raise self._too_long(len(line), lines[:index])

    def _extend(self, text: str, complete: list[str]) -> None:
        """Add ``text`` to the unterminated line, checking the limit (``complete``: this read's lines before it)."""
        if not text:
            return
        self._partial_length += len(text)
        if self.max_line_length is not None and self._partial_length > self.max_line_length:
            raise self._too_long(self._partial_length, complete, unfinished=True)
        self._partial.write(text)

    def _too_long(self, length: int, complete: list[str], *, unfinished: bool = False) -> LineTooLongError:
        self._partial = io.StringIO()
        self._partial_length = 0
        what = f"at least {length}" if unfinished else str(length)
        return LineTooLongError(
            f"a line of {what} characters is longer than {MAX_LINE_LENGTH_KEY} ({self.max_line_length}): "
            f"{self.consequence}; raise {MAX_LINE_LENGTH_KEY} if such lines are expected, or make the source end its lines",
            complete,
        )

    def finish(self) -> list[str]:
        """The unterminated last line, if any, once the stream has ended.

        Raises:
            LineTooLongError: the last line is longer than the limit.
        """
        text = self._partial.getvalue() + self._decoder.decode(b"", final=True)  # a held-back "\r" ends a line
        self._partial = io.StringIO()
        self._partial_length = 0
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        self._check(lines)
        return lines
