"""Pipeline: a job graph of plain Python sources and outputs, for runs without Spark.

The smallest useful ``JobGraph``: each batch asks every source for its records and gives them to
every output operation. With replayable sources it is a ``ReplayableGraph``: each batch reads an
offset range, so a checkpointed runtime can re-run a batch with the same input after a restart.
The DStream graph plays the same role for Spark programs.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any, Awaitable, Callable, Iterable, Mapping, Sequence, Union

import anyio.to_thread
import attrs

from scheduler import (
    BatchWatermarks,
    CheckpointError,
    CheckpointPath,
    Duration,
    EventTimeStats,
    InputInfoTracker,
    InvalidPipelineError,
    Job,
    Offset,
    RecoveredBatch,
    ReplayableInput,
    StateOperatorProgress,
    StreamingStateError,
    StreamInputInfo,
    Time,
    as_checkpoint_path,
    is_async_callable,
    library_logger,
)

from ..recovery import InputDescriptor, checkpoint_has_offsets
from ..state import StateBehind, TransformWithStateSpec, parse_delay_threshold
from ._sources import ReplayableSource
from ._stateful import GroupsOperator, StatefulOperator, StateRerun, Watermark, check_timeout, seen_event_times
from ._transform import TransformOperator

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
    fn: SourceFn | None
    replayable: ReplayableSource | None


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


def _identity(source: ReplayableSource) -> dict[str, Any]:
    extra = getattr(source, "checkpoint_identity", None)
    return {**(dict(extra) if isinstance(extra, Mapping) else {}), "kind": type(source).__qualname__,
            "description": source.description}


def _predates_identities(checkpoint: CheckpointPath) -> bool:
    """Whether ``checkpoint`` was written before pipelines recorded their sources (blocking I/O).

    Releases before ``sources/<n>/stream.json`` existed for pipelines made no ``sources/`` at all, so
    offsets entries without that directory are such a checkpoint; looked at before this start writes
    anything under it. A ``sources/`` without a source's file is a lost file, refused by
    :meth:`InputDescriptor.ensure`.
    """
    return not (checkpoint / "sources").exists() and checkpoint_has_offsets(checkpoint)


def _check_identity(checkpoint: CheckpointPath, position: int, name: str, source: ReplayableSource, *,
                    predates: bool = False) -> None:
    """Record ``source``'s identity under ``checkpoint`` (a first start, or ``predates``: a checkpoint written before
    identities were recorded), or check it against the recorded one (blocking I/O)."""
    expected = _identity(source)
    descriptor = InputDescriptor(checkpoint / "sources" / str(position))
    recorded = descriptor.ensure(expected, compare=(), checkpoint=None if predates else checkpoint)
    differs = [key for key in expected if key != "description" and recorded.get(key) != expected[key]]
    if differs:
        def shown(identity: Mapping[str, Any]) -> str:
            keys = ("kind", *(k for k in differs if k != "kind"))
            return ", ".join(f"{key} {identity[key]!r}" for key in keys if key in identity)

        raise CheckpointError(
            f"cannot resume from {checkpoint}: source {name!r} (source {position} of the offsets log) was "
            f"{recorded.get('description')!r} ({shown(recorded)}) when the checkpoint was written and is "
            f"{source.description!r} ({shown(expected)}) now; its logged offsets belong to that source: restart with the "
            "same sources in the same order, or use a new checkpoint directory",
            path=str(descriptor.path),
        )


class Pipeline:
    """Sources and output operations of plain Python callables.

    A source is either a function or a :class:`ReplayableSource`. A function is called with the
    batch time and returns that batch's records (an ``async def`` one is awaited; a plain one
    must be quick, it runs on the event loop); it cannot give a batch's records again after a
    restart. A replayable source (:class:`ListSource`, :class:`DirectorySource`) is read by
    offset range, which is what checkpointing needs. Output operations are called with a
    :class:`Batch`: an ``async def`` one runs on the event loop, a plain one in a worker thread.
    Sources and outputs can only be added before the runtime starts.
    """

    def __init__(self) -> None:
        """Create an empty pipeline."""
        self._sources: list[_Source] = []
        self._outputs: list[_Output] = []
        self._watermarks: list[Watermark] = []
        self._operators: list[StatefulOperator] = []
        self._checkpoint: CheckpointPath | None = None
        self._batch_duration: Duration | None = None
        self._zero_time: Time | None = None
        self._batch_watermarks: dict[Time, BatchWatermarks] = {}
        self._state_versions: dict[Time, int] = {}  # the batches whose state version is not their batch id
        self._seen: dict[Time, list[EventTimeStats | None]] = {}
        self._state_progress: dict[Time, list[StateOperatorProgress]] = {}
        self._behind: StateBehind[StateRerun] = StateBehind("the pipeline's stateful operators")
        self._started = False
        self._ranges: dict[Time, tuple[tuple[Offset, ...], tuple[Offset, ...]]] = {}
        self._ends: list[Offset] = []  # where each replayable source's last batch ended, when no engine plans

    def add_source(self, fn: SourceFn | ReplayableSource, *, name: str | None = None) -> str:
        """Register a source; returns its name, the key of its records in :attr:`Batch.inputs`.

        The default name is a function's ``__name__`` or a replayable source's description.
        """
        self._check_not_started()
        replayable = fn if isinstance(fn, ReplayableSource) else None
        if replayable is None and not callable(fn):
            raise TypeError(f"a source must be a ReplayableSource or callable with the batch time, got {fn!r}")
        default = replayable.description if replayable is not None else getattr(fn, "__name__", None)
        name = name or str(default or f"source{len(self._sources)}")
        if any(s.name == name for s in self._sources):
            raise InvalidPipelineError(f"a source named {name!r} is already registered; pass a unique name=")
        function = None if replayable is not None else fn
        self._sources.append(_Source(len(self._sources), name, function, replayable))  # type: ignore[arg-type]
        self._ends.append(None)
        return name

    def add_watermark(self, source: str, eventTime: Callable[[Any], Any], delayThreshold: str) -> None:  # noqa: N803
        """``withWatermark`` on ``source``: ``eventTime(record)`` is a ``datetime`` or epoch ms; the delay an interval string.

        The watermark advances, is logged and restored as for DStreams; it filters nothing by
        itself. Needs a runtime with a checkpoint location.

        Raises:
            InvalidPipelineError: no such source, or it already has a watermark.
            ValueError: a delay Spark does not read, or a negative one.
        """
        self._check_not_started()
        self._source_named(source)
        if any(w.source == source for w in self._watermarks):
            raise InvalidPipelineError(f"source {source!r} already has a watermark")
        if not callable(eventTime):
            raise InvalidPipelineError(f"eventTime must be a function of a record, got {eventTime!r}")
        self._watermarks.append(Watermark(source, eventTime, parse_delay_threshold(delayThreshold)))

    def add_groups_with_state(self, source: str, func: Callable[..., Any], *, key: Callable[[Any], Any],
                              timeout: str = "NoTimeout", flat: bool = True,
                              initial_state: Iterable[tuple[Any, Any]] | None = None, name: str | None = None) -> str:
        """``flatMapGroupsWithState`` (``flat=False``: ``mapGroupsWithState``) over ``source``'s records keyed by ``key``.

        ``func(key, records, state)`` as for DStreams (see ``DStream.flatMapGroupsWithState``);
        its outputs reach the output operations as ``batch.inputs[name]``, which is returned
        (default ``"<source>.state"``). The state lives in a state store under the runtime's
        checkpoint location, so the runtime needs one. Late records (event-time timeouts only)
        are found with the source's watermark.

        Raises:
            InvalidPipelineError: no such source, a name in use, or ``func``/``key`` not callable.
            PySparkValueError: an unknown timeout kind.
        """
        if not callable(func) or not callable(key):
            raise InvalidPipelineError("func and key must be functions")
        name = self._operator_name(source, name)
        initial = None if initial_state is None else list(initial_state)
        self._operators.append(GroupsOperator(len(self._operators), name, source, key, func, flat,
                                              check_timeout(timeout), initial))
        return name

    def add_transform_with_state(self, source: str, statefulProcessor: Any, outputMode: str, timeMode: str, *,  # noqa: N803
                                 key: Callable[[Any], Any], initialState: Iterable[tuple[Any, Any]] | None = None,  # noqa: N803
                                 eventTime: Callable[[Any], Any] | None = None, name: str | None = None) -> str:  # noqa: N803
        """``transformWithState`` over ``source``'s records keyed by ``key``, as for DStreams (``DStream.transformWithState``).

        The processor's rows are the source's records; its outputs reach the output operations
        as ``batch.inputs[name]``, which is returned (default ``"<source>.state"``). The state
        lives in a state store under the runtime's checkpoint location, so the runtime needs
        one. In ``"EventTime"`` mode the source's watermark drives the timers and late records
        (by ``eventTime(record)``, else the watermark's function) are dropped.

        Raises:
            InvalidPipelineError: no such source, a name in use, ``key`` not callable, or not a StatefulProcessor.
            TransformWithStateError: an unknown output mode or time mode (Spark's error classes).
        """
        if not callable(key):
            raise InvalidPipelineError(f"key must be a function of a record, got {key!r}")
        name = self._operator_name(source, name)
        spec = TransformWithStateSpec(statefulProcessor, outputMode, timeMode, False)  # the watermark is known at start
        initial = None if initialState is None else list(initialState)
        self._operators.append(TransformOperator(len(self._operators), name, source, key, spec, initial, eventTime))
        return name

    def _operator_name(self, source: str, name: str | None) -> str:
        """A new operator's name (default ``"<source>.state"``), checked: before start, an existing source, unused."""
        self._check_not_started()
        self._source_named(source)
        name = name or f"{source}.state"
        if any(s.name == name for s in self._sources) or any(o.name == name for o in self._operators):
            raise InvalidPipelineError(f"an input named {name!r} is already registered; pass a unique name=")
        return name

    def _source_named(self, name: str) -> _Source:
        for source in self._sources:
            if source.name == name:
                return source
        raise InvalidPipelineError(f"no source named {name!r}; the sources are {[s.name for s in self._sources]}")

    def bind_checkpoint(self, location: str | os.PathLike[str] | CheckpointPath | None, batch_duration: Duration) -> None:
        """Where stateful operators keep their stores (on any file manager), and the batch interval (set by the runtime
        before start)."""
        self._checkpoint = None if location is None else as_checkpoint_path(location)
        self._batch_duration = batch_duration

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

    def output_names(self) -> list[str]:
        """The output operations' names, as their jobs carry them (an idle trigger's sink before any batch)."""
        return [out.name for out in self._outputs]

    def _check_not_started(self) -> None:
        if self._started:
            raise StreamingStateError(ADD_AFTER_START)

    # -- JobGraph --

    def start(self, zero_time: Time, input_infos: InputInfoTracker) -> None:
        """Freeze the pipeline; refuses to start without output operations."""
        if not self._outputs:
            raise InvalidPipelineError("No output operations registered, so nothing to execute")
        if (self._operators or self._watermarks) and self._checkpoint is None:
            raise InvalidPipelineError("watermarks and stateful operators need a runtime with a checkpoint location "
                                       "(StreamingRuntime(..., checkpoint_location=...)): their state and watermark live there")
        watermarked = {w.source for w in self._watermarks}
        for operator in self._operators:
            operator.check_at_start(operator.source in watermarked)
        self._zero_time = zero_time
        self._behind.clear()
        self._started = True
        self._input_infos = input_infos

    async def allocate_input(self, time: Time) -> None:
        """Nothing to allocate: sources are pulled when the batch is generated."""

    async def generate_jobs(self, time: Time) -> Sequence[Job]:
        """Read every source for ``time`` and make one job per output operation.

        A replayable source reads the range the engine set for ``time``; without one (no
        checkpointing) it reads everything new, within its read limit.
        """
        assigned = self._ranges.pop(time, None)
        inputs: dict[str, Sequence[Any]] | None = None
        try:
            inputs = await self._read_inputs(time, assigned)
            if self._watermarks:
                self._seen[time] = [seen_event_times(w, inputs[w.source]) for w in self._watermarks]
        except Exception:
            # No state ran: the next batch runs it first, over these inputs (or their ranges, read again).
            if self._operators and (inputs is not None or assigned is not None):
                version, watermarks = self._state_version_of(time), self._batch_watermarks.get(time, BatchWatermarks(0, 0))
                self._behind.note(time, StateRerun(version, watermarks, inputs, 0, assigned))
            raise
        if self._operators:
            await self._run_operators(time, inputs)
        batch = Batch(time, inputs)
        jobs = []
        for out in self._outputs:
            jobs.append(Job(time, functools.partial(out.fn, batch), name=out.name, description=out.description,
                            is_async=out.is_async))
        return jobs

    async def _read_inputs(self, time: Time, assigned: tuple[tuple[Offset, ...], tuple[Offset, ...]] | None,
                           *, report: bool = True) -> dict[str, Sequence[Any]]:
        inputs: dict[str, Sequence[Any]] = {}
        for source in self._sources:
            if source.replayable is not None:
                materialised = list(await self._read(source, source.replayable, assigned))
            else:
                assert source.fn is not None
                records = source.fn(time)
                if inspect.isawaitable(records):
                    records = await records
                materialised = list(records)
            inputs[source.name] = materialised
            if report:
                self._input_infos.report_info(time, StreamInputInfo(source.id, len(materialised)))
        return inputs

    def _state_version_of(self, time: Time) -> int:
        """The state version batch ``time`` loads: the engine's record for it, else its batch id (forgotten once asked)."""
        assert self._zero_time is not None and self._batch_duration is not None
        version = self._state_versions.pop(time, None)
        if version is None:
            version = (time.milliseconds - self._zero_time.milliseconds) // self._batch_duration.milliseconds - 1
        return version

    async def _run_operators(self, time: Time, inputs: dict[str, Sequence[Any]]) -> None:
        assert self._checkpoint is not None
        version = self._state_version_of(time)
        watermarks = self._batch_watermarks.get(time, BatchWatermarks(0, 0))
        progress = []
        first = 0
        try:
            if self._behind:
                await self._catch_up(time)
            for operator in self._operators:
                outputs, numbers = await self._run_operator(operator, time, version, inputs, watermarks)
                inputs[operator.name] = outputs
                progress.append(numbers)
                first += 1
        except Exception:
            # Its state version (and the later operators') was not committed: the next batch runs it again first.
            self._behind.note(time, StateRerun(version, watermarks, dict(inputs), first, None))
            raise
        self._state_progress[time] = progress

    def _count_event_times(self, time: Time, inputs: Mapping[str, Sequence[Any]] | None) -> None:
        """Add what ``inputs`` (an earlier batch's, read again) saw to batch ``time``'s event-time statistics."""
        seen = self._seen.get(time)
        if inputs is None or seen is None:
            return
        late = [seen_event_times(w, inputs[w.source]) for w in self._watermarks]
        self._seen[time] = [b if a is None else a.merge(b) for a, b in zip(seen, late, strict=True)]

    async def _run_operator(self, operator: StatefulOperator, time: Time, version: int, inputs: Mapping[str, Sequence[Any]],
                            watermarks: BatchWatermarks) -> tuple[list[Any], StateOperatorProgress]:
        assert self._checkpoint is not None
        watermark = next((w for w in self._watermarks if w.source == operator.source), None)
        return await operator.run(self._checkpoint, version, time, inputs[operator.source], watermarks, watermark)

    async def _catch_up(self, time: Time) -> None:
        """Run again, oldest first, the operators of the batches before ``time`` that failed before committing their
        state (see :class:`streaming.state.StateBehind`); their outputs are dropped.

        Raises:
            StateCatchUpError: one of them failed again (every later batch then fails, until one catches up).
        """
        for behind, rerun in self._behind.before(time):
            try:
                if rerun.inputs is None:  # its input could not be read: read its range again, its event times count now
                    rerun = attrs.evolve(rerun, inputs=await self._read_inputs(behind, rerun.ranges, report=False))
                    self._behind.note(behind, rerun)
                    self._count_event_times(time, rerun.inputs)
                inputs = rerun.inputs
                assert inputs is not None
                for index in range(rerun.first_operator, len(self._operators)):
                    await self._run_operator(self._operators[index], behind, rerun.version, inputs, rerun.watermarks)
                    rerun = attrs.evolve(rerun, first_operator=index + 1)
            except Exception as exc:
                self._behind.note(behind, rerun)  # what did run stays done
                raise self._behind.failed(behind, time, exc) from exc
            self._behind.caught_up(behind)

    async def _read(self, source: _Source, replayable: ReplayableSource,
                    assigned: tuple[tuple[Offset, ...], tuple[Offset, ...]] | None) -> Sequence[Any]:
        if assigned is not None:
            return await replayable.read(assigned[0][source.id], assigned[1][source.id])
        start = self._ends[source.id]
        end = await replayable.plan_offset(start, await replayable.latest_offset())
        records = await replayable.read(start, end)
        self._ends[source.id] = end
        return records

    def clear_metadata(self, time: Time) -> None:
        """A pipeline keeps no per-batch state."""

    async def stop(self) -> None:
        """Close the sources that hold clients: each one's optional ``aclose()`` (see :class:`ReplayableSource`)."""
        for source in self._replayables():
            close = getattr(source, "aclose", None)
            if close is not None:
                await close()

    async def close_state_stores(self) -> None:
        """Once the run's last batch ended: delete the stateful operators' working copies (their checkpoint keeps the
        state; a later run rebuilds them), so a service running stateful queries one after another keeps no file of the
        finished ones. A store still held (an abandoned batch's function runs on in its thread) is left as it is: the stop
        must not wait for it."""
        for operator in self._operators:
            provider, operator.provider = operator.provider, None
            if provider is not None:
                await anyio.to_thread.run_sync(functools.partial(provider.discard, wait=False))

    # -- ReplayableGraph --

    def replayable_inputs(self) -> Sequence[ReplayableInput]:
        """Every source, in registration order (the order of the offsets log's lines).

        Raises:
            InvalidPipelineError: a source is a plain function, which cannot be replayed.
        """
        for source in self._sources:
            if source.replayable is None:
                raise InvalidPipelineError(
                    f"source {source.name!r} is a function, which cannot give a batch's records again after a restart; "
                    "checkpointing, triggers and progress need replayable sources such as ListSource or DirectorySource"
                )
        return [ReplayableInput(s.id, s.replayable.description) for s in self._sources if s.replayable is not None]

    @property
    def is_stateful(self) -> bool:
        """Whether a stateful operator keeps state between batches."""
        return bool(self._operators)

    @property
    def evicts_on_watermark(self) -> bool:
        """Whether a stateful operator times out by the watermark: an AvailableNow run whose watermark moved past its last
        batch's then ends with a batch without data, as Spark's no-data batch (``MicroBatchTracker.check_for_new_data``)."""
        return any(operator.evicts_on_watermark for operator in self._operators)

    def async_unsupported_sinks(self) -> Sequence[str]:
        """Outputs without a truthy ``supports_async_progress_tracking`` attribute (FileSink has one)."""
        return [o.name for o in self._outputs if not getattr(o.fn, "supports_async_progress_tracking", False)]

    def _replayables(self) -> list[ReplayableSource]:
        return [s.replayable for s in self._sources if s.replayable is not None]

    async def latest_offsets(self) -> Sequence[Offset]:
        """Each source's latest offset."""
        return [await source.latest_offset() for source in self._replayables()]

    async def plan_offsets(self, start: Sequence[Offset], limit: Sequence[Offset], time: Time) -> Sequence[Offset]:
        """Each source's end offset for the next batch (sources decide by offset, not by time)."""
        return [await source.plan_offset(s, lim) for source, s, lim in zip(self._replayables(), start, limit, strict=True)]

    def set_batch_offsets(self, time: Time, start: Sequence[Offset], end: Sequence[Offset]) -> None:
        """Batch ``time`` reads ``(start, end]`` of each source."""
        self._ranges[time] = (tuple(start), tuple(end))

    async def commit_offsets(self, end: Sequence[Offset]) -> None:
        """Tell each source that everything up to ``end`` is committed."""
        for source, offset in zip(self._replayables(), end, strict=True):
            await source.commit(offset)

    async def recover(self, zero_time: Time, history: Sequence[RecoveredBatch], first_batch_id: int) -> None:
        """Record each source's identity in the checkpoint, or check it against what the first start recorded.

        Nothing to rebuild: a pipeline's batches do not depend on earlier ones. The identities
        live in ``<checkpoint>/sources/<n>/stream.json``, as a DStream input's do. A checkpoint
        written before pipelines recorded them (offsets entries, no ``sources/`` directory) has
        this run's recorded, with one warning naming it. A source with an ``attach_checkpoint``
        method is then given that directory for its own files.

        Raises:
            CheckpointError: a source is not the one the checkpoint was written with (another
                class, or another directory), naming both.
            CorruptCheckpointError: a recorded identity cannot be read.
        """
        if self._checkpoint is None:
            return
        checkpoint = self._checkpoint
        sources = [(position, s.name, s.replayable) for position, s in enumerate(self._sources) if s.replayable is not None]

        def check_all() -> bool:
            predates = _predates_identities(checkpoint)  # before anything below writes under sources/
            for position, name, source in sources:
                _check_identity(checkpoint, position, name, source, predates=predates)
            return predates

        if await anyio.to_thread.run_sync(check_all):
            library_logger("aiodstream.streaming", component="Pipeline").warning(
                "the checkpoint has offsets but no sources/ directory: it predates its sources' identity records "
                "(sources/<n>/stream.json, written since 2026-11-25), or the directory was deleted; this run's sources "
                "were recorded as its own, so they must be the ones that wrote the checkpoint (a source that reads "
                "elsewhere would take the logged offsets as its own)", checkpoint=str(checkpoint),
                sources=[name for _position, name, _source in sources])
        for position, _name, source in sources:
            attach = getattr(source, "attach_checkpoint", None)
            if attach is not None:
                await attach(checkpoint / "sources" / str(position))

    def oldest_needed_batch(self) -> int | None:
        """None: no state to rebuild."""
        return None

    async def prepare_commit(self, time: Time, batch_id: int) -> None:
        """No state to save."""

    def watermark_delays(self) -> Sequence[int]:
        """The delay of each watermarked source, in the order they were added."""
        return [w.delay_ms for w in self._watermarks]

    def set_batch_watermarks(self, time: Time, watermarks: BatchWatermarks) -> None:
        """Batch ``time``'s stateful operators run with these."""
        self._batch_watermarks[time] = watermarks

    def set_batch_state_version(self, time: Time, version: int) -> None:
        """Batch ``time``'s stateful operators load state version ``version`` (recorded by the engine), not its batch id."""
        self._state_versions[time] = version

    def event_time_stats(self, time: Time) -> Sequence[EventTimeStats | None]:
        """What each watermarked source saw in batch ``time`` (then forgotten, with the batch's watermarks)."""
        self._batch_watermarks.pop(time, None)
        return self._seen.pop(time, [None] * len(self._watermarks))

    def state_operators(self, time: Time) -> Sequence[StateOperatorProgress]:
        """What each stateful operator did in batch ``time`` (then forgotten)."""
        return self._state_progress.pop(time, [])

    def __repr__(self) -> str:
        return f"<Pipeline [sources: {len(self._sources)} | outputs: {len(self._outputs)}{' | started' if self._started else ''}]>"
