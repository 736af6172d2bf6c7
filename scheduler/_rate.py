"""Rate control: Spark Streaming's backpressure (PID rate estimator, rate controller) and the receiver rate limiter.

With backpressure on, a :class:`RateController` per receiver input listens to completed
batches, asks a :class:`PIDRateEstimator` for the rate the pipeline can sustain, and hands it
to the receiver's :class:`RateLimiter`, which makes the receiver wait before storing more
records than that per second (``spark.streaming.receiver.maxRate`` caps it either way). All of
it runs on the injected clock, so a simulation or a test sees exactly the same rates.
"""

from __future__ import annotations

import math
from typing import Callable

import anyio

from ._clock import Clock
from ._errors import InvalidPipelineError
from ._logging import library_logger
from ._time import Duration, Time

__all__ = ["PIDRateEstimator", "RateController", "RateLimiter"]


class PIDRateEstimator:
    """Spark's ``PIDRateEstimator``: the ingestion rate (records/s) that keeps batches within the interval.

    From each completed batch it measures the processing rate and the backlog (the scheduling
    delay's worth of records) and corrects the previous rate with a proportional, an integral
    (the backlog) and a derivative term, never going below ``min_rate``. The first batch only
    calibrates: :meth:`compute` returns ``None`` for it, as for batches without records or
    without processing time, or out of order.

    Args:
        batch_interval_ms: the batch interval.
        proportional: ``spark.streaming.backpressure.pid.proportional`` (1.0).
        integral: ``spark.streaming.backpressure.pid.integral`` (0.2).
        derivative: ``spark.streaming.backpressure.pid.derived`` (0.0).
        min_rate: ``spark.streaming.backpressure.pid.minRate`` (100).

    Raises:
        InvalidPipelineError: a parameter out of range, with Spark's message.
    """

    def __init__(self, batch_interval_ms: int, proportional: float = 1.0, integral: float = 0.2, derivative: float = 0.0,
                 min_rate: float = 100.0) -> None:
        """Check the parameters (Spark's ``require`` messages)."""
        checks = [
            (batch_interval_ms > 0, f"Specified batch interval {batch_interval_ms} in PIDRateEstimator is invalid."),
            (proportional >= 0, f"Proportional term {proportional} in PIDRateEstimator should be >= 0."),
            (integral >= 0, f"Integral term {integral} in PIDRateEstimator should be >= 0."),
            (derivative >= 0, f"Derivative term {derivative} in PIDRateEstimator should be >= 0."),
            (min_rate > 0, "Minimum rate in PIDRateEstimator should be > 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise InvalidPipelineError(f"requirement failed: {message}")
        self.batch_interval_ms = batch_interval_ms
        self.proportional = proportional
        self.integral = integral
        self.derivative = derivative
        self.min_rate = min_rate
        self._latest_time = -1
        self._latest_rate = -1.0
        self._latest_error = -1.0
        self._first_run = True

    def compute(self, time_ms: int, elements: int, processing_delay_ms: int, scheduling_delay_ms: int) -> float | None:
        """The new rate after a batch that ended at ``time_ms`` with ``elements`` records, or ``None``."""
        if not (time_ms > self._latest_time and elements > 0 and processing_delay_ms > 0):
            return None
        delay_since_update = (time_ms - self._latest_time) / 1000
        processing_rate = elements / processing_delay_ms * 1000
        error = self._latest_rate - processing_rate
        historical_error = scheduling_delay_ms * processing_rate / self.batch_interval_ms
        d_error = (error - self._latest_error) / delay_since_update
        new_rate = max(self._latest_rate - self.proportional * error - self.integral * historical_error
                       - self.derivative * d_error, self.min_rate)
        self._latest_time = time_ms
        if self._first_run:
            self._latest_rate = processing_rate
            self._latest_error = 0.0
            self._first_run = False
            return None
        self._latest_rate = new_rate
        self._latest_error = error
        return new_rate


class RateLimiter:
    """A token bucket on the injected clock (Guava's ``RateLimiter``, which Spark's receivers use).

    :meth:`acquire` waits until the records paid for so far are paid off, then pays for its own
    at once (the *next* caller waits for them), so records flow at ``rate`` per second on
    average; up to one second's worth of unused permits is stored for a burst. A receiver
    storing many records takes them in slices (:meth:`acquire_slice`; Spark acquires one
    permit per record), so no single acquire runs far ahead of the rate. A new rate
    (:meth:`update`) applies at once: what is still owed is repriced at it and a waiting
    :meth:`acquire` wakes to recompute. With no rate (``None``) nothing ever waits.

    Args:
        clock: the clock to wait on.
        rate: records per second, or ``None`` for unlimited.
        max_rate: a cap on every rate set later (``spark.streaming.receiver.maxRate``), or ``None``.
    """

    def __init__(self, clock: Clock, rate: float | None = None, *, max_rate: float | None = None) -> None:
        """Create a limiter at ``rate`` (capped by ``max_rate``)."""
        if max_rate is not None and not 0 < max_rate < math.inf:
            raise ValueError(f"max_rate must be a positive number of records per second or None, got {max_rate!r}")
        if rate is not None and not rate < math.inf:  # an infinite rate cannot size a slice; None is "no limit"
            raise ValueError(f"rate must be a finite number of records per second or None, got {rate!r}")
        self._clock = clock
        self.max_rate = max_rate
        self._rate: float | None = None
        self._next_free = -math.inf  # ms: when the records paid for so far are paid off
        self._stored = 0.0
        self._changed: anyio.Event | None = None  # set (and dropped) when the rate changes: waiters recompute
        self.waits = 0
        self.update(rate if rate is not None else max_rate)

    @property
    def rate(self) -> float | None:
        """The current rate in records per second (``None``: unlimited)."""
        return self._rate

    def update(self, rate: float | None) -> None:
        """Set a new rate, capped by ``max_rate``; a rate that is not positive is ignored (Spark's rule).

        It applies at once: the records paid for and not yet paid off are repriced at the new rate
        (a higher rate shortens the wait, a lower one lengthens it), stored permits scale with it
        (as Guava's ``setRate``), and a waiting :meth:`acquire` wakes to wait for the new time.
        From no rate, pacing starts afresh. Call it on the event loop the acquirers run on.
        """
        if rate is None:
            new = self.max_rate
        elif not rate > 0:
            return
        else:
            new = rate if self.max_rate is None else min(rate, self.max_rate)
        old = self._rate
        if new == old:
            return
        if old is None or new is None:
            self._next_free, self._stored = -math.inf, 0.0
        else:
            now = float(self._clock.now().milliseconds)
            self._refill(now)
            self._stored *= new / old
            if self._next_free > now:
                self._next_free = now + (self._next_free - now) * old / new
        self._rate = new
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def slice_size(self, period: Duration) -> int | None:
        """The most records one :meth:`acquire_slice` takes: ``period``'s worth at the rate, at least 1 (``None``: any)."""
        rate = self._rate
        return None if rate is None else max(1, int(rate * period.milliseconds / 1000))

    def _refill(self, now: float) -> None:
        rate = self._rate
        if rate is not None and now > self._next_free:
            if self._next_free > -math.inf:
                self._stored = min(rate, self._stored + (now - self._next_free) * rate / 1000)
            self._next_free = now

    async def acquire(self, permits: int = 1) -> None:
        """Take ``permits`` records' worth; wait first while earlier records are not paid off.

        A rate change while waiting takes effect at once. Cancellable; a cancelled wait has paid
        nothing.
        """
        if permits > 0:
            await self._wait_free()
            self._pay(permits)

    async def acquire_slice(self, wanted: int, period: Duration) -> int:
        """Wait until earlier records are paid off, then take up to ``wanted``: at most ``period``'s worth at the rate then.

        Returns how many were taken (at least 1 when ``wanted`` is; all of them with no rate).
        The slice is sized after the wait, so a rate that changed meanwhile sizes it. A
        receiver passes its block interval, so it stores at most a block's worth at a time.
        Cancellable; a cancelled wait has paid nothing.
        """
        if wanted <= 0:
            return 0
        await self._wait_free()
        size = self.slice_size(period)
        taken = wanted if size is None else min(wanted, size)
        self._pay(taken)
        return taken

    async def _wait_free(self) -> None:
        """Return once the records paid for so far are paid off (at once with no rate), at the rate of each moment."""
        waited = False
        while True:
            rate = self._rate
            if rate is None:
                return
            now = float(self._clock.now().milliseconds)
            self._refill(now)
            if self._next_free <= now:
                return
            if not waited:
                self.waits += 1
                waited = True
            await self._wait_until(Time(math.ceil(self._next_free)))

    def _pay(self, permits: int) -> None:
        """Pay for ``permits`` records: from stored permits first, the rest owed at the rate (the next caller waits)."""
        rate = self._rate
        if rate is None:
            return
        from_stored = min(float(permits), self._stored)
        self._stored -= from_stored
        self._next_free += (permits - from_stored) * 1000 / rate

    async def _wait_until(self, deadline: Time) -> None:
        """Sleep until ``deadline`` on the clock, or until the rate changes (whichever is first)."""
        if self._changed is None:
            self._changed = anyio.Event()
        changed = self._changed
        async with anyio.create_task_group() as tg:

            async def wake_on_change() -> None:
                await changed.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(wake_on_change)
            await self._clock.sleep_until(deadline)
            tg.cancel_scope.cancel()

    def __repr__(self) -> str:
        return f"<RateLimiter [{'unlimited' if self._rate is None else f'{self._rate:.1f}/s'} | waited {self.waits}x]>"


class RateController:
    """Spark's ``RateController`` for one input stream: after each batch, a new rate from the estimator.

    Register it as a listener (it takes :class:`~listeners.BatchCompleted` events duck-typed, so
    this package does not import the bus). Batches without this stream's input info, or without
    processing and scheduling delays, are skipped.

    Args:
        stream_id: the input stream whose records count.
        estimator: computes the rate.
        publish: receives each new rate (the receiver's :meth:`RateLimiter.update`).
    """

    run_on_loop = True
    """Quick, and ``publish`` updates a limiter that tasks of the loop read: runs on the event loop."""

    def __init__(self, stream_id: int, estimator: PIDRateEstimator, publish: Callable[[float], None]) -> None:
        """Wire a controller."""
        self.stream_id = stream_id
        self.estimator = estimator
        self._publish = publish
        self.latest_rate = -1.0
        self._log = library_logger("aiodstream.scheduler", component="RateController", stream=stream_id)

    def on_batch_completed(self, event: object) -> None:
        """Estimate a new rate from the batch's records and delays, and publish it."""
        info = getattr(event, "batch_info", None)
        if info is None:
            return
        end, processing, scheduling = info.processing_end_time, info.processing_delay, info.scheduling_delay
        inputs = info.stream_id_to_input_info
        if end is None or processing is None or scheduling is None or self.stream_id not in inputs:
            return
        rate = self.estimator.compute(end.milliseconds, inputs[self.stream_id].num_records, processing.milliseconds,
                                      scheduling.milliseconds)
        if rate is not None:
            self.latest_rate = rate
            self._publish(rate)
            self._log.debug("new rate", rate=round(rate, 1), batch=info.batch_time.milliseconds)
