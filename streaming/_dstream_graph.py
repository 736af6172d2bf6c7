"""DStreamGraph: the input and output streams of a StreamingContext (Spark's ``DStreamGraph``).

It is the ``JobGraph`` the scheduler drives: each batch it asks every output stream, in
registration order, for its job. Building a batch's RDDs calls into PySpark (and runs users'
``transform`` functions), so generation runs in a worker thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import anyio
import anyio.abc
import anyio.to_thread
import structlog

from scheduler import Duration, InputInfoTracker, InvalidPipelineError, Job, Time

if TYPE_CHECKING:
    from ._dstream import DStream
    from ._inputs import InputDStream

__all__ = ["DStreamGraph"]


class DStreamGraph:
    """Holds the streams of one context and generates each batch's jobs from its output streams."""

    def __init__(self, batch_duration: Duration) -> None:
        """Create an empty graph with the context's batch duration."""
        self.batch_duration = batch_duration
        self.input_streams: list[InputDStream] = []
        self.output_streams: list[DStream] = []
        self.remember_duration: Duration | None = None
        self.zero_time: Time | None = None
        self.start_time: Time | None = None
        self.input_infos: InputInfoTracker | None = None
        self._generation = anyio.CapacityLimiter(1)
        self._receivers_stop: anyio.Event | None = None
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
            raise InvalidPipelineError("No output operations registered, so nothing to execute")
        self.zero_time = zero_time
        self.start_time = zero_time
        self.input_infos = input_infos
        for stream in self.output_streams:
            stream._initialize(zero_time)
        for stream in self.output_streams:
            stream._remember(self.remember_duration)
        for stream in self.output_streams:
            stream._validate_at_start()
        for inp in self.input_streams:
            inp._start()
        self._log.info("DStream graph started", zero_time=zero_time.milliseconds,
                       inputs=len(self.input_streams), outputs=len(self.output_streams))

    async def allocate_input(self, time: Time) -> None:
        """Hand what receivers took in since the last batch to batch ``time``."""
        for inp in self.input_streams:
            await inp._allocate(time)

    async def generate_jobs(self, time: Time) -> Sequence[Job]:
        """Build the batch's RDDs and jobs in a worker thread (PySpark calls block)."""
        return await anyio.to_thread.run_sync(self._generate_jobs, time, limiter=self._generation)

    def _generate_jobs(self, time: Time) -> list[Job]:
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

    async def run_receivers(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the receivers of receiver input streams until :meth:`stop`."""
        self._receivers_stop = anyio.Event()
        receivers = [inp for inp in self.input_streams if inp._has_receiver]
        async with anyio.create_task_group() as tg:
            for inp in receivers:
                await tg.start(inp._run_receiver)
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
