"""DStreamGraph: the input and output streams of a StreamingContext (Spark's ``DStreamGraph``).

It is the ``JobGraph`` the scheduler drives: each batch it asks every output stream, in
registration order, for its job. Building a batch's RDDs calls into PySpark (and runs users'
``transform`` functions), so generation runs in a worker thread.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import anyio
import anyio.abc
import anyio.to_thread
import attrs
import structlog

from scheduler import (
    CheckpointError,
    Duration,
    InputInfoTracker,
    InvalidPipelineError,
    Job,
    Offset,
    RecoveredBatch,
    ReplayableInput,
    Time,
)
from scheduler._metadata_log import fsync_directory

from ._source_logs import InputDescriptor
from ._spark import wait_for_thread

if TYPE_CHECKING:
    from ._dstream import DStream
    from ._inputs import InputDStream

__all__ = ["DStreamGraph"]

# State snapshots kept per stateful stream: the newest, and the one before it in case the
# newest belongs to a batch that a restart runs again.
_SNAPSHOTS_KEPT = 2


@attrs.frozen
class _Restore:
    """What a restart loads into one stateful stream: the snapshot of ``time`` (``None``: start from nothing)."""

    index: int
    time: Time
    path: Path | None


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
        self.input_streams: list[InputDStream] = []
        self.output_streams: list[DStream] = []
        self.remember_duration: Duration | None = None
        self.zero_time: Time | None = None
        self.start_time: Time | None = None
        self.input_infos: InputInfoTracker | None = None
        self._generation_thread: ThreadPoolExecutor | None = None
        self._thread_lock = threading.Lock()
        self._receivers_stop: anyio.Event | None = None
        self.checkpoint_dir: Path | None = None
        self._history: tuple[RecoveredBatch, ...] = ()
        self._stateful: list[DStream] = []
        self._restores: list[_Restore] = []
        self._snapshot_versions: dict[int, int] = {}  # per stateful stream: its newest snapshot (batch id + 1)
        self._log = structlog.get_logger("aiodstream.streaming").bind(component="DStreamGraph")

    def next_input_id(self) -> int:
        """A new input stream id: 0, 1, 2, ... in creation order."""
        return len(self.input_streams)

    def add_input_stream(self, stream: InputDStream) -> None:
        """Register an input stream (done by its constructor)."""
        self.input_streams.append(stream)

    def add_output_stream(self, stream: DStream) -> None:
        """Register an output stream; job order is registration order."""
        self.output_streams.append(stream)

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
            stream._initialize(zero_time)
        for stream in self.output_streams:
            stream._remember(self.remember_duration)
        for stream in self.output_streams:
            stream._validate_at_start()
        for batch in self._history:
            for inp, start, end in zip(self.input_streams, batch.start, batch.end, strict=True):
                inp._set_range(batch.time, start, end)
        self._history = ()  # handed to the inputs, which forget ranges past their remember window
        for inp in self.input_streams:
            inp._start()
        self._log.info("DStream graph started", zero_time=zero_time.milliseconds,
                       inputs=len(self.input_streams), outputs=len(self.output_streams))

    def _streams(self) -> list[DStream]:
        """Every stream an output depends on, each once, outputs first, parents in order (a stable order)."""
        seen: dict[int, DStream] = {}
        stack = list(reversed(self.output_streams))
        while stack:
            stream = stack.pop()
            if id(stream) in seen:
                continue
            seen[id(stream)] = stream
            stack.extend(reversed(stream._parents))
        return list(seen.values())

    async def allocate_input(self, time: Time) -> None:
        """Hand what receivers took in since the last batch to batch ``time``."""
        for inp in self.input_streams:
            await inp._allocate(time)

    async def generate_jobs(self, time: Time) -> Sequence[Job]:
        """Build the batch's RDDs and jobs on the graph's generation thread (PySpark calls block), one batch at a time."""
        with self._thread_lock:
            thread = self._generation_thread
            if thread is None:
                thread = self._generation_thread = ThreadPoolExecutor(1, thread_name_prefix="aiodstream-generate")
        return await wait_for_thread(thread.submit(self._generate_jobs, time), abandon_on_cancel=False)

    def release_threads(self) -> None:
        """Let the generation thread end (when its current batch, if any, is generated)."""
        with self._thread_lock:
            thread, self._generation_thread = self._generation_thread, None
        if thread is not None:
            thread.shutdown(wait=False)

    def _generate_jobs(self, time: Time) -> list[Job]:
        if self._restores:
            self._load_restores()
        jobs: list[Job] = []
        for stream in self.output_streams:
            job = stream._generate_job(time)
            if job is not None:
                jobs.append(job)
        return jobs

    def clear_metadata(self, time: Time) -> None:
        """Forget RDDs that fell out of every stream's remember window."""
        for stream in self.output_streams:
            stream._clear_metadata(time)

    # -- ReplayableGraph (with a checkpoint directory) --

    def set_checkpoint_dir(self, directory: str | os.PathLike[str] | None) -> None:
        """Keep input logs and state snapshots under ``directory`` (``None``: no checkpoint); before start."""
        self.checkpoint_dir = None if directory is None else Path(directory)

    def replayable_inputs(self) -> Sequence[ReplayableInput]:
        """Every input stream, by id (the order of the offsets log's lines)."""
        return [ReplayableInput(inp.id, inp.name) for inp in self.input_streams]

    @property
    def is_stateful(self) -> bool:
        """Whether a stream carries state from batch to batch (``updateStateByKey``, inverse-reduced windows)."""
        return any(stream._must_checkpoint for stream in self._streams())

    def async_unsupported_sinks(self) -> Sequence[str]:
        """Every output operation: they run user functions, which make no at-least-once promise."""
        return [str(getattr(stream, "_name", type(stream).__name__)) for stream in self.output_streams]

    async def latest_offsets(self) -> Sequence[Offset]:
        """Where each input ends now (their logs were opened by :meth:`recover`)."""
        return [inp._latest_offset() for inp in self.input_streams]

    async def plan_offsets(self, start: Sequence[Offset], limit: Sequence[Offset], time: Time) -> Sequence[Offset]:
        """Where batch ``time``'s input ends, each input's new input made durable first.

        DStream inputs have no read limits: a batch takes everything that arrived by its time.
        """
        return [await inp._plan_offset(s, time) for inp, s in zip(self.input_streams, start, strict=True)]

    def set_batch_offsets(self, time: Time, start: Sequence[Offset], end: Sequence[Offset]) -> None:
        """Batch ``time`` covers ``(start, end]`` of each input."""
        for inp, s, e in zip(self.input_streams, start, end, strict=True):
            inp._set_range(time, s, e)

    async def commit_offsets(self, end: Sequence[Offset]) -> None:
        """Every batch up to ``end`` is committed: inputs drop log entries no batch still needs."""
        for inp, e in zip(self.input_streams, end, strict=True):
            await inp._commit(e)

    async def recover(self, zero_time: Time, history: Sequence[RecoveredBatch], first_batch_id: int) -> None:
        """Open every input's log and plan the state restores; the committed batches rebuild windows and state.

        Raises:
            CheckpointError: the checkpoint was written by a program with other inputs or
                stateful streams, or the log no longer covers the batches a state needs.
        """
        if self.checkpoint_dir is None:
            return
        for inp in self.input_streams:
            inp._attach_log(self.checkpoint_dir / "sources" / str(inp.id))
        self._history = tuple(history)
        await anyio.to_thread.run_sync(self._open_logs, zero_time, first_batch_id)

    def _open_logs(self, zero_time: Time, first_batch_id: int) -> None:
        for inp in self.input_streams:
            inp._open_log()
        self._stateful = [stream for stream in self._streams() if stream._must_checkpoint]
        for index in range(len(self._stateful)):
            self._remove_unfinished_snapshots(index)
        self._restores = self._plan_restores(zero_time, first_batch_id)

    def _remove_unfinished_snapshots(self, index: int) -> None:
        """Delete the hidden temporary snapshots a save killed midway left (they are never read)."""
        try:
            names = os.listdir(self._state_dir(index))
        except FileNotFoundError:
            return
        for name in names:
            if name.startswith(".") and name.endswith(".tmp"):
                shutil.rmtree(self._state_dir(index) / name, ignore_errors=True)

    def oldest_needed_batch(self) -> int | None:
        """The first batch after each stateful stream's newest snapshot (less its window): the log must keep it."""
        if self.checkpoint_dir is None or not self._stateful:
            return None
        batch = self.batch_duration.milliseconds
        needed = []
        for index, stream in enumerate(self._stateful):
            reach = getattr(stream, "_window", None)
            needed.append(self._snapshot_versions.get(index, 0) - (0 if reach is None else reach.milliseconds // batch))
        return max(0, min(needed))

    async def prepare_commit(self, time: Time, batch_id: int) -> None:
        """Save the state RDD of every stateful stream whose checkpoint interval ends at ``time``."""
        if self.checkpoint_dir is None or not self._stateful:
            return
        due = [(index, stream) for index, stream in enumerate(self._stateful)
               if stream._is_checkpoint_time(time) and time in stream._generated]
        if due:
            await anyio.to_thread.run_sync(self._save_states, due, time, batch_id)

    def _state_dir(self, index: int) -> Path:
        assert self.checkpoint_dir is not None
        return self.checkpoint_dir / "state" / str(index)

    def _describe_state(self, index: int, stream: DStream) -> None:
        InputDescriptor(self._state_dir(index)).ensure(
            {"kind": type(stream).__name__, "slide": stream._slide.milliseconds}, compare=("kind", "slide"))

    def _save_states(self, due: list[tuple[int, DStream]], time: Time, batch_id: int) -> None:
        # A worker thread; each save is a Spark job over the (cached) state RDD. The snapshot is
        # written under a hidden name and renamed, so a reader sees all of it or none.
        for index, stream in due:
            directory = self._state_dir(index)
            self._describe_state(index, stream)
            target = directory / str(batch_id + 1)
            if target.exists():
                self._snapshot_versions[index] = batch_id + 1
                continue  # a re-run batch: the same input gave the same state
            temp = directory / f".{batch_id + 1}.{uuid.uuid4().hex}.tmp"
            stream._generated[time].saveAsPickleFile(temp.as_uri())
            os.rename(temp, target)
            fsync_directory(directory)
            self._snapshot_versions[index] = batch_id + 1
            self._log.info("state saved", stream=type(stream).__name__, index=index, batch=time.milliseconds, path=str(target))
            for old in self._snapshots(index)[:-_SNAPSHOTS_KEPT]:
                shutil.rmtree(directory / str(old), ignore_errors=True)

    def _snapshots(self, index: int) -> list[int]:
        try:
            names = os.listdir(self._state_dir(index))
        except FileNotFoundError:
            return []
        return sorted(int(n) for n in names if n.isdigit())

    def _plan_restores(self, zero_time: Time, first_batch_id: int) -> list[_Restore]:
        """At a restart: which snapshot each stateful stream starts from; the logged input must cover the rest.

        Raises:
            CheckpointError: a stateful stream changed, or batches between its newest snapshot
                and the first batch to run are no longer in the offsets log (their input
                cannot be read, so the state cannot be rebuilt).
        """
        if first_batch_id == 0 or not self._stateful:
            return []
        batch = self.batch_duration.milliseconds
        zero = zero_time.milliseconds
        last_done = zero + first_batch_id * batch  # the batch before the first one to run
        logged = {b.time for b in self._history}
        restores = []
        for index, stream in enumerate(self._stateful):
            self._describe_state(index, stream)
            usable = [v for v in self._snapshots(index) if v <= first_batch_id]
            version = usable[-1] if usable else 0
            self._snapshot_versions[index] = version
            snapshot_ms = zero + version * batch
            reach = getattr(stream, "_window", None)
            first_needed = max(snapshot_ms - (reach.milliseconds if reach is not None else 0) + batch, zero + batch)
            missing = [ms for ms in range(first_needed, last_done + 1, batch) if Time(ms) not in logged]
            if missing:
                raise CheckpointError(
                    f"cannot restore the state of {type(stream).__name__} from {self._state_dir(index)}: "
                    + (f"its newest usable snapshot is at {snapshot_ms} ms" if usable else "it has no snapshot yet")
                    + f" and the input of {len(missing)} later batch(es) (from {missing[0]} ms) is no longer in the offsets "
                    "log; the state cannot be rebuilt without it. Start over with a new checkpoint directory",
                    path=str(self._state_dir(index)),
                )
            restores.append(_Restore(index, Time(snapshot_ms), self._state_dir(index) / str(version) if usable else None))
        return restores

    def _load_restores(self) -> None:
        # In the generation worker thread, before the first batch of a restarted run: the state
        # RDDs are read lazily by Spark, like any other input.
        restores, self._restores = self._restores, []
        sc = None
        for restore in restores:
            stream = self._stateful[restore.index]
            if restore.path is None:
                continue  # no snapshot yet: the state is rebuilt from the first batch's input
            if sc is None:
                sc = stream._ssc.sparkContext
            rdd: Any = sc.pickleFile(restore.path.as_uri())
            if stream._storage_level is not None:
                rdd.persist(stream._storage_level)
            stream._generated[restore.time] = rdd
            self._log.info("state restored", stream=type(stream).__name__, index=restore.index,
                           snapshot=restore.time.milliseconds, path=str(restore.path))

    # -- receivers --

    async def run_receivers(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the receivers of receiver input streams (and their log writers) until :meth:`stop`."""
        self._receivers_stop = anyio.Event()
        receivers = [inp for inp in self.input_streams if inp._has_receiver]
        async with anyio.create_task_group() as tg:
            for inp in receivers:
                await tg.start(inp._run_receiver)
                if inp._replaying:
                    tg.start_soon(inp._run_block_writer)  # type: ignore[attr-defined]
            task_status.started()
            await self._receivers_stop.wait()
            tg.cancel_scope.cancel()
        for inp in receivers:
            inp._receiver_stopped()

    async def stop(self) -> None:
        """Stop input streams (receivers first: what they received still reaches the last batch)."""
        if self._receivers_stop is not None:
            self._receivers_stop.set()
        for inp in self.input_streams:
            inp._stop()

    def __repr__(self) -> str:
        return f"<DStreamGraph [inputs: {len(self.input_streams)} | outputs: {len(self.output_streams)} | zero {self.zero_time}]>"
