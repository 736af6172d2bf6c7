"""LineDecoder: bytes from a socket into text lines, as Spark's ``SocketReceiver`` reads them."""

from __future__ import annotations

import codecs
import io

__all__ = ["LineDecoder"]


class LineDecoder:
    """Turns a byte stream into text lines the way Spark's socket receiver reads them.

    Bytes are UTF-8, malformed sequences become U+FFFD; a line ends at ``\\n``, ``\\r`` or
    ``\\r\\n`` (Java's ``readLine``, also when a ``\\r\\n`` pair is split across two reads), and
    nothing else (``\\x0b`` or U+2028 stay in the line). A last line without a terminator is
    returned by :meth:`finish`.
    """

    def __init__(self) -> None:
        """Start with no pending bytes."""
        utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._decoder = io.IncrementalNewlineDecoder(utf8, translate=True)
        self._partial = ""

    def feed(self, data: bytes) -> list[str]:
        """The lines completed by ``data``."""
        text = self._decoder.decode(data)
        if "\n" not in text:
            self._partial += text
            return []
        lines = text.split("\n")
        if self._partial:
            lines[0] = self._partial + lines[0]
        self._partial = lines.pop()
        return lines

    def finish(self) -> list[str]:
        """The unterminated last line, if any, once the stream has ended."""
        rest = self._partial + self._decoder.decode(b"", final=True)
        self._partial = ""
        lines = rest.split("\n")
        if lines[-1] == "":
            lines.pop()
        return lines
