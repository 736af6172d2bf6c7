"""Pipeline: a job graph of plain Python sources and outputs, for runs without Spark.

The smallest useful ``JobGraph``: each batch asks every source for its records and gives them to
every output operation. The DStream graph plays the same role for Spark programs.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Awaitable, Callable, Iterable, Mapping, Sequence, Union

import attrs

from scheduler import (
    InputInfoTracker,
    InvalidPipelineError,
    Job,
    StreamingStateError,
    StreamInputInfo,
    Time,
    is_async_callable,
)

__all__ = ["Batch", "Pipeline"]

SourceFn = Callable[[Time], Union[Iterable[Any], Awaitable[Iterable[Any]]]]
OutputFn = Callable[["Batch"], Any]

ADD_AFTER_START = "Adding new inputs, transformations, and output operations after starting a context is not supported"


@attrs.frozen
class Batch:
    """What an output operation receives: the batch time and each source's records for it."""

    time: Time
    inputs: Mapping[str, Sequence[Any]]

    @property
    def num_records(self) -> int:
        """Records across all sources."""
        return sum(len(records) for records in self.inputs.values())


@attrs.frozen
class _Source:
    id: int
    name: str
    fn: SourceFn


@attrs.frozen
class _Output:
    name: str
    description: str
    fn: OutputFn
    is_async: bool


def _call_site(fn: Callable[..., Any], kind: str) -> tuple[str, str]:
    name = getattr(fn, "__qualname__", type(fn).__qualname__)
    try:
        target = inspect.unwrap(fn.func if isinstance(fn, functools.partial) else fn)
        file = inspect.getsourcefile(target) or "?"
        line = inspect.getsourcelines(target)[1]
        where = f"{file.rsplit('/', 1)[-1]}:{line}"
    except (TypeError, OSError):
        where = "?"
    return f"{kind} at {where}", f"{kind} {name} at {where}"


class Pipeline:
    """Sources and output operations of plain Python callables.

    Sources are called with the batch time and return that batch's records (an ``async def``
    source is awaited; a plain one must be quick, it runs on the event loop). Output operations
    are called with a :class:`Batch`: an ``async def`` one runs on the event loop, a plain one in
    a worker thread. Sources and outputs can only be added before the runtime starts.
    """

    def __init__(self) -> None:
        """Create an empty pipeline."""
        self._sources: list[_Source] = []
        self._outputs: list[_Output] = []
        self._started = False

    def add_source(self, fn: SourceFn, *, name: str | None = None) -> str:
        """Register a source; returns its name, the key of its records in :attr:`Batch.inputs`."""
        self._check_not_started()
        if not callable(fn):
            raise TypeError(f"a source must be callable with the batch time, got {fn!r}")
        name = name or str(getattr(fn, "__name__", f"source{len(self._sources)}"))
        if any(s.name == name for s in self._sources):
            raise InvalidPipelineError(f"a source named {name!r} is already registered; pass a unique name=")
        self._sources.append(_Source(len(self._sources), name, fn))
        return name

    def add_output(self, fn: OutputFn, *, name: str | None = None) -> None:
        """Register an output operation; each batch runs it once, as one job."""
        self._check_not_started()
        if not callable(fn):
            raise TypeError(f"an output operation must be callable with a Batch, got {fn!r}")
        short, long = _call_site(fn, name or "output")
        self._outputs.append(_Output(short, long, fn, is_async_callable(fn)))

    @property
    def num_outputs(self) -> int:
        """How many output operations are registered."""
        return len(self._outputs)

    def _check_not_started(self) -> None:
        if self._started:
            raise StreamingStateError(ADD_AFTER_START)

    # -- JobGraph --

    def start(self, zero_time: Time, input_infos: InputInfoTracker) -> None:
        """Freeze the pipeline; refuses to start without output operations."""
        if not self._outputs:
            raise InvalidPipelineError("No output operations registered, so nothing to execute")
        self._started = True
        self._input_infos = input_infos

    async def allocate_input(self, time: Time) -> None:
        """Nothing to allocate: sources are pulled when the batch is generated."""

    async def generate_jobs(self, time: Time) -> Sequence[Job]:
        """Pull every source for ``time`` and make one job per output operation."""
        inputs: dict[str, Sequence[Any]] = {}
        for source in self._sources:
            records = source.fn(time)
            if inspect.isawaitable(records):
                records = await records
            materialised = list(records)
            inputs[source.name] = materialised
            self._input_infos.report_info(time, StreamInputInfo(source.id, len(materialised)))
        batch = Batch(time, inputs)
        jobs = []
        for out in self._outputs:
            jobs.append(Job(time, functools.partial(out.fn, batch), name=out.name, description=out.description,
                            is_async=out.is_async))
        return jobs

    def clear_metadata(self, time: Time) -> None:
        """A pipeline keeps no per-batch state."""

    async def stop(self) -> None:
        """Nothing to stop."""

    def __repr__(self) -> str:
        return f"<Pipeline [sources: {len(self._sources)} | outputs: {len(self._outputs)}{' | started' if self._started else ''}]>"
