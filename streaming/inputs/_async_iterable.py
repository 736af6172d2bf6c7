"""AsyncIterableInputDStream: the items of an async iterable, received on the event loop (aiodstream's ``asyncIterableStream``)."""

from __future__ import annotations

from typing import Any, AsyncIterable, AsyncIterator, Callable, Union

import anyio
import anyio.lowlevel

from scheduler import Duration

from ..dstream import StreamEnvironment
from ._receiver import ReceiverInputDStream, ReceiverOutcome

__all__ = ["AsyncIterableInputDStream", "AsyncSource"]

AsyncSource = Union[AsyncIterable[Any], Callable[[], AsyncIterable[Any]]]
"""What ``asyncIterableStream`` takes: an async iterable, or a function returning a fresh one."""

# An async source that never awaits would hold the event loop for as long as the buffer has
# room; yielding every so many records keeps the timer and the host's tasks running.
_YIELD_EVERY = 512


class AsyncIterableInputDStream(ReceiverInputDStream):
    """Records from an async iterable, one record per item (aiodstream's ``asyncIterableStream``).

    The iterable is pulled only while the buffer has room, so a fast source waits for the batches
    (backpressure). When it is exhausted the receiver stops for good (later batches are empty).
    When it raises, the error is posted as ``ReceiverError``; the receiver then restarts after the
    restart delay if the source can be iterated afresh (a factory function, or an iterable whose
    ``__aiter__`` returns a new iterator), and stops otherwise (an async generator object cannot
    be resumed after raising). On stop, an iterator with ``aclose`` is closed, so an async
    generator's ``finally`` blocks run.
    """

    _receiver_class = "AsyncIterableReceiver"

    def __init__(self, env: StreamEnvironment, source: AsyncSource, *, restart_delay: Duration | None,
                 max_buffered_records: int) -> None:
        """A stream of the items of ``source``."""
        if not callable(source) and not hasattr(source, "__aiter__"):
            raise TypeError(
                f"asyncIterableStream needs an async iterable or a function returning one, got {type(source).__name__}; "
                "pass e.g. an async generator"
            )
        super().__init__(env, restart_delay=restart_delay, max_buffered_records=max_buffered_records)
        self._source = source

    def _iterator(self) -> tuple[AsyncIterator[Any], bool]:
        source = self._source
        iterable = source() if callable(source) and not hasattr(source, "__aiter__") else source
        if not hasattr(iterable, "__aiter__"):
            raise TypeError(f"the asyncIterableStream factory must return an async iterable, got {type(iterable).__name__}")
        iterator = iterable.__aiter__()
        return iterator, iterator is not source  # restartable unless the source is itself the iterator

    async def _receive(self) -> ReceiverOutcome:
        try:
            iterator, restartable = self._iterator()
        except Exception as exc:
            return ReceiverOutcome(False, "Error creating the async iterator", exc)
        put = self._store
        count = 0
        try:
            while True:
                try:
                    item = await iterator.__anext__()
                except StopAsyncIteration:
                    return ReceiverOutcome(False, "Async source exhausted")
                except Exception as exc:
                    return ReceiverOutcome(restartable, "Error receiving data from the async source", exc)
                await put(item)
                count += 1
                if count % _YIELD_EVERY == 0:
                    await anyio.lowlevel.checkpoint()
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    try:
                        await aclose()
                    except Exception as exc:
                        self._log.warning("closing the async source failed", error=repr(exc))
