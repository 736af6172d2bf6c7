"""DStreamGraph: the input and output streams of a StreamingContext (Spark's ``DStreamGraph``).

It is the ``JobGraph`` the scheduler drives: each batch it asks every output stream for its job, on the
graph's own thread (building RDDs calls PySpark and users' ``transform``), or on the loop when none needs py4j.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Mapping, Sequence, cast

import anyio
import anyio.abc
import anyio.to_thread

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
    Time,
    WorkerThreads,
    as_checkpoint_path,
    check_task_file_system,
    library_logger,
    redact_uri,
)

from ..state import STATE_CATCH_UP_LIMIT
from ._checkpoint_files import ReleaseQueue
from ._graph_streams import GraphStream, InputStream, StateOperatorStream, WatermarkStream
from ._snapshots import StatefulStream, StateSnapshots

__all__ = ["DStreamGraph", "GraphStream", "InputStream", "StateOperatorStream", "WatermarkStream"]

_NO_WATERMARKS = BatchWatermarks(0, 0)


class DStreamGraph:
    """Holds the streams of one context and generates each batch's jobs from its output streams.

    With a checkpoint directory (:meth:`set_checkpoint_dir`) it is a
    :class:`~scheduler.ReplayableGraph`: every input logs what each batch takes under
    ``<checkpoint>/sources/<id>/``, and every stateful stream (``updateStateByKey``, windows
    reduced with an inverse function) saves its state RDD at its checkpoint interval to
    ``<checkpoint>/state/<n>/<batchId + 1>`` before that batch is committed. A restart loads
    the newest snapshot of each and rebuilds the batches after it from the logged input.
    """

    def __init__(self, batch_duration: Duration) -> None:
        """Create an empty graph with the context's batch duration."""
        self.batch_duration = batch_duration
        self.input_streams: list[InputStream] = []
        self.output_streams: list[GraphStream] = []
        # Guards RDD generation: the generation thread builds each batch's RDDs, and a user may
        # call ``slice`` from another thread (e.g. inside a foreachRDD job) at the same time.
        # Re-entrant, because computing one stream computes its parents.
        self.generation_lock = threading.RLock()
        self.spark_context: Callable[[], Any] | None = None  # set by the context: reads state snapshots back
        self.remember_duration: Duration | None = None
        # Rebuilt by getOrCreate from the graph a checkpoint saved: what Spark does not save with its graph is gone
        # (an inverse-reduced window's inverse: it reduces from scratch).
        self.restored_from_checkpoint = False
        self.zero_time: Time | None = None
        self.start_time: Time | None = None
        self.input_infos: InputInfoTracker | None = None
        self._state_operator_streams: list[StateOperatorStream] | None = None  # set by start()
        self._watermark_streams: list[WatermarkStream] | None = None
        self._generation_thread: WorkerThreads | None = None
        self._thread_lock = threading.Lock()
        self._receivers_stop: anyio.Event | None = None
        self.checkpoint_dir: CheckpointPath | None = None
        self.task_checkpoint_dir: str | None = None  # the checkpoint as the executors' tasks name it (prepare_task_checkpoint)
        self._history: tuple[RecoveredBatch, ...] = ()
        self._snapshots: StateSnapshots | None = None
        self._newest_committed: int | None = None  # the newest batch prepared for its commit (a window reaches back from it)
        self.first_batch_time: Time | None = None  # the run's first batch (set at recover): a stateful one reaches back to it
        self._watermarks: dict[Time, BatchWatermarks] = {}
        # The newest finished batches' watermarks (a state operator may make a failed one's RDD again), and the
        # earlier batches whose state ran again in a batch's jobs (their event times count with that batch's).
        self._finished_watermarks: dict[Time, BatchWatermarks] = {}
        self._caught_up: dict[Time, list[Time]] = {}
        self._state_operators = 0
        self.releases = ReleaseQueue()  # RDDs to unpersist and checkpoint files to delete, off the loop
        self._log = library_logger("aiodstream.streaming", component="DStreamGraph")

    def next_input_id(self) -> int:
        """A new input stream id: 0, 1, 2, ... in creation order."""
        return len(self.input_streams)

    def add_input_stream(self, stream: InputStream) -> None:
        """Register an input stream (done by its constructor)."""
        self.input_streams.append(stream)

    def add_state_operator(self) -> int:
        """A new stateful operator's id (0, 1, ... in creation order: a rebuilt graph gets the same ones)."""
        self._state_operators += 1
        return self._state_operators - 1

    def add_output_stream(self, stream: GraphStream) -> None:
        """Register an output stream; job order is registration order, except that the outputs that ``run_last``
        (a stateful operator's own) stay after every other."""
        outputs = self.output_streams
        first_last = next((i for i, s in enumerate(outputs) if getattr(s, "runs_last", False)), len(outputs))
        outputs.insert(len(outputs) if getattr(stream, "runs_last", False) else first_last, stream)

    def remember(self, duration: Duration) -> None:
        """Keep every stream's RDDs for at least ``duration``; may be set once."""
        if self.remember_duration is not None:
            raise InvalidPipelineError(
                f"requirement failed: Remember duration already set as {self.remember_duration}. Cannot set it again."
            )
        self.remember_duration = duration

    # -- JobGraph --

    def start(self, zero_time: Time, input_infos: InputInfoTracker) -> None:
        """Initialise every stream at ``zero_time`` and validate the graph."""
        if not self.output_streams:
            raise InvalidPipelineError("requirement failed: No output operations registered, so nothing to execute")
        self.zero_time = zero_time
        self.start_time = zero_time
        self.input_infos = input_infos
        for stream in self.output_streams:
            stream.initialize(zero_time)
        for stream in self.output_streams:
            stream.remember(self.remember_duration)
        for stream in self.output_streams:
            stream.validate_at_start()
        for batch in self._history:
            for inp, start, end in zip(self.input_streams, batch.start, batch.end, strict=True):
                inp.set_range(batch.time, start, end)
        self._history = ()  # handed to the inputs, which forget ranges past their remember window
        # The graph is frozen now: the per-batch questions walk these lists, not the graph.
        streams = self._streams()
        self._state_operator_streams = [s for s in streams if isinstance(s, StateOperatorStream)]
        self._watermark_streams = [s for s in streams if isinstance(s, WatermarkStream)]
        for inp in self.input_streams:
            inp.start()
        self._log.info("DStream graph started", zero_time=zero_time.milliseconds,
                       inputs=len(self.input_streams), outputs=len(self.output_streams))

    def _streams(self) -> list[GraphStream]:
        """Every stream an output depends on, each once, outputs first, parents in order (a stable order)."""
        seen: dict[int, GraphStream] = {}
        stack = list(reversed(self.output_streams))
        while stack:
            stream = stack.pop()
            if id(stream) in seen:
                continue
            seen[id(stream)] = stream
            stack.extend(reversed(stream.parents))
        return list(seen.values())

    async def allocate_input(self, time: Time) -> None:
        """Hand what receivers took in since the last batch to batch ``time``."""
        for inp in self.input_streams:
            await inp.allocate(time)

    async def generate_jobs(self, time: Time) -> Sequence[Job]:
        """Build the batch's RDDs and jobs on the graph's generation thread (PySpark calls block), one batch at a time;
        on the event loop (a thread round trip fewer) when every output says its job needs no py4j call
        (``generates_on_loop``), checked and generated under the generation lock, taken only if free."""
        lock = self.generation_lock
        if (self._snapshots is None or not self._snapshots.restore_pending) and lock.acquire(blocking=False):
            try:
                if all(stream.generates_on_loop(time) for stream in self.output_streams):
                    return self._generate_jobs(time)
            finally:
                lock.release()
        with self._thread_lock:
            thread = self._generation_thread
            if thread is None:
                thread = self._generation_thread = WorkerThreads(1, "aiodstream-generate")
        return await thread.run(self._generate_jobs, time)  # a stop abandons a generation that hangs

    def release_threads(self) -> None:
        """Let the generation thread end (when its current batch, if any, is generated)."""
        with self._thread_lock:
            thread, self._generation_thread = self._generation_thread, None
        if thread is not None:
            thread.shutdown(drop_queued=False)  # an unpersist queued before still runs

    def _generate_jobs(self, time: Time) -> list[Job]:
        if self._snapshots is not None and self._snapshots.restore_pending:
            self._snapshots.load_restores()
        jobs: list[Job] = []
        for stream in self.output_streams:
            job = stream.generate_job(time)
            if job is not None:
                jobs.append(job)
        return jobs

    def counted_input_rows(self, time: Time) -> Mapping[int, int]:
        """Rows batch ``time``'s jobs read from the inputs that count while running (files, queued RDDs)."""
        counted: dict[int, int] = {}
        for inp in self.input_streams:
            rows = inp.take_counted_rows(time)
            if rows is not None:
                counted[inp.id] = rows
        return counted

    def explain(self, *, extended: bool = False) -> str:
        """Each output operation's lineage, down to its input streams (what ``StreamingContext.explain`` prints).

        ``extended`` adds each stream's storage level, checkpoint interval and remember duration.
        """
        if not self.output_streams:
            return "No output operations: nothing runs."
        lines: list[str] = []
        for index, output in enumerate(self.output_streams):
            name = getattr(output, "name", type(output).__name__)
            lines.append(f"== Output operation {index}: {name} ==")
            self._explain_node(output, "", "", extended, lines)
        return "\n".join(lines)

    def _explain_node(self, stream: GraphStream, first: str, rest: str, extended: bool, lines: list[str]) -> None:
        description = type(stream).__name__.replace("ForEachNode", "ForEachDStream")
        if stream in self.input_streams:
            description += f" {getattr(stream, 'name', '')!r}"
        description += f" [slide {stream.slide}]"
        if extended:
            level, interval, remember = stream.storage_level, stream.checkpoint_interval, stream.remember_duration
            description += (f" [storage {level if level is not None else 'none'}"
                             f" | checkpoint {interval if interval is not None else 'none'}"
                             f" | remember {remember if remember is not None else 'slide'}]")
        lines.append(first + description)
        for parent in stream.parents:
            self._explain_node(parent, rest + "+- ", rest + "   ", extended, lines)

    def clear_metadata(self, time: Time) -> None:
        """Forget RDDs that fell out of every stream's remember window (their unpersisting goes to the generation thread)."""
        for stream in self.output_streams:
            stream.clear_metadata(time)
        release = self.releases.take()
        if release is not None:
            with self._thread_lock:
                thread = self._generation_thread
            if thread is not None:
                thread.submit(release)
            else:  # stopping: a short-lived thread, so the loop still makes no py4j call
                threading.Thread(target=release, name="aiodstream-unpersist", daemon=True).start()

    def unpersist_later(self, rdd: Any) -> None:
        """Queue a cached RDD that fell out of a stream's window; :meth:`clear_metadata` unpersists it off the loop."""
        self.releases.unpersist_later(rdd)

    # -- ReplayableGraph (with a checkpoint directory) --

    def set_checkpoint_dir(self, directory: str | os.PathLike[str] | CheckpointPath | None) -> None:
        """Keep input logs and state snapshots under ``directory`` (a local path, or a path on any file manager;
        ``None``: no checkpoint); before start."""
        self.checkpoint_dir = None if directory is None else as_checkpoint_path(directory)

    def prepare_task_checkpoint(self) -> None:
        """Name the checkpoint directory as the executors' Python tasks reach it, and check that they can open it, for
        the streams whose tasks write into it; before start (blocking: a py4j call for a Hadoop path, the import of
        the scheme's fsspec implementation).

        A stream says what its tasks write there with a ``tasks_write_checkpoint`` attribute (``None``: nothing).

        Raises:
            InvalidPipelineError: fsspec cannot open the checkpoint's scheme, which such a stream needs.
        """
        self.task_checkpoint_dir = None
        if self.checkpoint_dir is None:
            return
        streams = {id(stream): stream for stream in [*self._streams(), *self.input_streams]}  # inputs run unused too
        writers = [what for stream in streams.values() if (what := getattr(stream, "tasks_write_checkpoint", None))]
        if not writers:
            return
        checkpoint = self.checkpoint_dir
        location = os.fspath(checkpoint) if checkpoint.is_local else checkpoint.uri()
        try:
            check_task_file_system(location)
        except ValueError as exc:
            raise InvalidPipelineError(f"{' and '.join(writers)} cannot be kept in {redact_uri(location)}: {exc}") from exc
        self.task_checkpoint_dir = location

    def task_path(self, path: CheckpointPath) -> str:
        """``path`` (under the checkpoint) as the executors' tasks name it: a local path, or its full URI.

        No py4j call once :meth:`prepare_task_checkpoint` named the checkpoint's URI.
        """
        if path.is_local:
            return os.fspath(path)
        base, named = self.checkpoint_dir, self.task_checkpoint_dir
        if base is not None and named is not None and (path.path + "/").startswith(base.path.rstrip("/") + "/"):
            return named.rstrip("/") + path.path[len(base.path.rstrip("/")):]
        return path.uri()

    def replayable_inputs(self) -> Sequence[ReplayableInput]:
        """Every input stream, by id (the order of the offsets log's lines)."""
        return [ReplayableInput(inp.id, inp.name, getattr(inp, "reports_latest", True)) for inp in self.input_streams]

    @property
    def is_stateful(self) -> bool:
        """Whether a stream carries state from batch to batch (``updateStateByKey``, inverse-reduced windows)."""
        return any(stream.must_checkpoint or getattr(stream, "keeps_state", False) for stream in self._streams())

    def async_unsupported_sinks(self) -> Sequence[str]:
        """The outputs that do not tolerate at-least-once batches (file outputs; see ``ForEachNode``)."""
        return [str(getattr(stream, "name", type(stream).__name__)) for stream in self.output_streams
                if not getattr(stream, "supports_async_progress_tracking", False)]

    async def latest_offsets(self) -> Sequence[Offset]:
        """Where each input ends now (their logs were opened by :meth:`recover`)."""
        return [inp.latest_offset() for inp in self.input_streams]

    def input_pending(self) -> bool:
        """Whether the batch planned last left input it saw to a later batch time (a file newer than the batch)."""
        for inp in self.input_streams:  # a loop, not any() over a generator: every batch without data asks
            if inp.input_pending:
                return True
        return False

    async def plan_offsets(self, start: Sequence[Offset], limit: Sequence[Offset], time: Time) -> Sequence[Offset]:
        """Where batch ``time``'s input ends, each input's new input made durable first.

        DStream inputs have no read limits: a batch takes everything that arrived by its time.
        """
        # One offset per input, here and below: the tracker checked each tuple (and a checkpoint its count).
        return [await inp.plan_offset(start[i], time) for i, inp in enumerate(self.input_streams)]

    def set_batch_offsets(self, time: Time, start: Sequence[Offset], end: Sequence[Offset]) -> None:
        """Batch ``time`` covers ``(start, end]`` of each input."""
        for i, inp in enumerate(self.input_streams):  # not zip(strict=True): its keyword costs ~1,000 instructions
            inp.set_range(time, start[i], end[i])

    def _watermarked(self) -> list[WatermarkStream]:
        if self._watermark_streams is not None:
            return self._watermark_streams
        return [stream for stream in self._streams() if isinstance(stream, WatermarkStream)]

    def watermark_delays(self) -> Sequence[int]:
        """The delay of every ``withWatermark`` stream an output depends on, in the graph's stable order."""
        return [stream.watermark_delay_ms for stream in self._watermarked()]

    def set_batch_watermarks(self, time: Time, watermarks: BatchWatermarks) -> None:
        """Batch ``time`` runs with ``watermarks`` (its stateful streams read them while it is generated)."""
        self._watermarks[time] = watermarks

    def set_batch_state_version(self, time: Time, version: int) -> None:
        """Refuse: a DStream program runs on the processing-time grid, so its state versions are its batch ids.

        Raises:
            CheckpointError: always (the checkpoint's versions were recorded by a Once or
                AvailableNow run of a Pipeline, whose checkpoint this is).
        """
        raise CheckpointError(
            f"cannot run batch {time} of this DStream program: its checkpoint records state version {version} for it, "
            "not its batch id, as only a Pipeline's Once or AvailableNow runs write; use the checkpoint of this program")

    @property
    def sequential_batches(self) -> bool:
        """Whether a batch may be generated only once the batch before it finished: with a state-store operator
        (``mapGroupsWithState``, ...), as Structured Streaming's batches are. Each batch's state loads the version the
        batch before committed, and a batch that failed before committing it is run again first: both need the
        batch before to have ended (with ``concurrentJobs`` above 1 too; outputs of one batch still run at once)."""
        return bool(self._state_operator_list())

    def _state_operator_list(self) -> list[StateOperatorStream]:
        """The stateful operators: the list start() keeps, or found now before it."""
        operators = self._state_operator_streams
        if operators is None:
            operators = [stream for stream in self._streams() if isinstance(stream, StateOperatorStream)]
        return operators

    def batch_watermarks(self, time: Time) -> BatchWatermarks:
        """The watermarks of batch ``time`` (0 and 0 before any watermark exists), also for one of the newest finished."""
        found = self._watermarks.get(time)
        if found is None:
            found = self._finished_watermarks.get(time, _NO_WATERMARKS)
        return found

    def caught_up(self, time: Time, earlier: Time) -> None:
        """Batch ``time``'s jobs ran the state of batch ``earlier`` again (a failed one): its event times count now."""
        if not self._watermarked():
            return  # nothing to count, and event_time_stats, which forgets it, is asked only with a watermark
        with self._thread_lock:
            self._caught_up.setdefault(time, []).append(earlier)

    def state_operators(self, time: Time) -> Sequence[StateOperatorProgress]:
        """What each stateful operator (``flatMapGroupsWithState``, ...) did in batch ``time``."""
        operators = self._state_operator_list()
        if not operators:
            return ()  # every batch asks: a graph without stateful operators answers without a generator
        found = (stream.take_state_progress(time) for stream in operators)
        return [progress for progress in found if progress is not None]

    def event_time_stats(self, time: Time) -> Sequence[EventTimeStats | None]:
        """What each ``withWatermark`` stream saw in batch ``time`` (with the failed batches whose state its jobs ran
        again); the batch's watermarks are moved to the newest finished ones."""
        watermarks = self._watermarks.pop(time, None)
        if watermarks is not None:
            kept = self._finished_watermarks
            kept[time] = watermarks
            while len(kept) > STATE_CATCH_UP_LIMIT + 1:
                del kept[next(iter(kept))]
        with self._thread_lock:
            earlier = self._caught_up.pop(time, ())
        seen = []
        for stream in self._watermarked():
            stats = stream.take_event_time_stats(time)
            for other in earlier:
                late = stream.take_event_time_stats(other)
                stats = late if stats is None else stats.merge(late)
            seen.append(stats)
        return seen

    async def commit_offsets(self, end: Sequence[Offset]) -> None:
        """Every batch up to ``end`` is committed: inputs drop log entries no batch still needs."""
        for i, inp in enumerate(self.input_streams):
            await inp.commit(end[i])

    async def recover(self, zero_time: Time, history: Sequence[RecoveredBatch], first_batch_id: int) -> None:
        """Open every input's log and plan the state restores; the committed batches rebuild windows and state.

        Raises:
            CheckpointError: the checkpoint was written by a program with other inputs or
                stateful streams, or the log no longer covers the batches a state needs.
        """
        self.first_batch_time = zero_time + self.batch_duration * (first_batch_id + 1)
        if self.checkpoint_dir is None:
            for inp in self.input_streams:
                inp.attach_log(None)  # tracked in memory: offsets and progress, nothing on disk
            return
        for inp in self.input_streams:
            inp.attach_log(self.checkpoint_dir / "sources" / str(inp.id))
        self._history = tuple(history)
        await anyio.to_thread.run_sync(self._open_logs, zero_time, first_batch_id)

    def _open_logs(self, zero_time: Time, first_batch_id: int) -> None:
        for inp in self.input_streams:
            inp.open_log()
        assert self.checkpoint_dir is not None
        # A stream that must checkpoint is a stateful one (StateDStream, ReducedWindowedDStream).
        stateful = [cast(StatefulStream, stream) for stream in self._streams() if stream.must_checkpoint]
        snapshots = StateSnapshots(self.checkpoint_dir, self.batch_duration, stateful, self._spark_context)
        snapshots.open(zero_time, first_batch_id, self._history)
        self._snapshots = snapshots

    def _spark_context(self) -> Any:
        if self.spark_context is None:
            raise RuntimeError("the graph has no SparkContext to read state snapshots with")
        return self.spark_context()

    def oldest_needed_batch(self) -> int | None:
        """The oldest batch the log keeps: past each stateful stream's snapshot, and an input's window behind the newest."""
        reach = max([self.batch_duration, *(i.remember_duration or self.batch_duration for i in self.input_streams)])
        needed = [None if self._snapshots is None else self._snapshots.oldest_needed_batch(), None if self._newest_committed
                  is None else self._newest_committed + 1 - -(-reach.milliseconds // self.batch_duration.milliseconds)]
        return min((b for b in needed if b is not None), default=None)

    async def prepare_commit(self, time: Time, batch_id: int) -> None:
        """Save the state RDD of every stateful stream whose checkpoint interval ends at ``time``."""
        self._newest_committed = max(batch_id, self._newest_committed or 0)
        snapshots = self._snapshots
        due = [] if snapshots is None else snapshots.due(time)
        if due:
            await anyio.to_thread.run_sync(snapshots.save, due, time, batch_id)  # type: ignore[union-attr]

    # -- receivers --

    async def run_receivers(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the receivers of receiver input streams (and their log writers) until :meth:`stop`."""
        self._receivers_stop = anyio.Event()
        receivers = [inp for inp in self.input_streams if inp.has_receiver]
        async with anyio.create_task_group() as tg:
            for inp in receivers:
                await tg.start(inp.run_receiver)
                if inp.writes_blocks:
                    tg.start_soon(inp.run_block_writer)
            task_status.started()
            await self._receivers_stop.wait()
            tg.cancel_scope.cancel()
        for inp in receivers:
            inp.receiver_stopped()

    async def stop(self) -> None:
        """Stop input streams (receivers first: what they received still reaches the last batch)."""
        if self._receivers_stop is not None:
            self._receivers_stop.set()
        for inp in self.input_streams:
            inp.stop()

    def __repr__(self) -> str:
        return f"<DStreamGraph [inputs: {len(self.input_streams)} | outputs: {len(self.output_streams)} | zero {self.zero_time}]>"

