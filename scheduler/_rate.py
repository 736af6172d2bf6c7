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

from ._clock import Clock
from ._errors import InvalidPipelineError
from ._logging import library_logger
from ._time import Time

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

    :meth:`acquire` pays for its records at once and makes the *next* caller wait until they
    are paid off, so records flow at ``rate`` per second on average; up to one second's worth
    of unused permits is stored for a burst. With no rate (``None``) nothing ever waits.

    Args:
        clock: the clock to wait on.
        rate: records per second, or ``None`` for unlimited.
        max_rate: a cap on every rate set later (``spark.streaming.receiver.maxRate``), or ``None``.
    """

    def __init__(self, clock: Clock, rate: float | None = None, *, max_rate: float | None = None) -> None:
        """Create a limiter at ``rate`` (capped by ``max_rate``)."""
        if max_rate is not None and not max_rate > 0:
            raise ValueError(f"max_rate must be a positive number of records per second or None, got {max_rate!r}")
        self._clock = clock
        self.max_rate = max_rate
        self._rate: float | None = None
        self._next_free = -math.inf  # ms: when the records paid for so far are paid off
        self._stored = 0.0
        self.waits = 0
        self.update(rate if rate is not None else max_rate)

    @property
    def rate(self) -> float | None:
        """The current rate in records per second (``None``: unlimited)."""
        return self._rate

    def update(self, rate: float | None) -> None:
        """Set a new rate, capped by ``max_rate``; a rate that is not positive is ignored (Spark's rule)."""
        if rate is None:
            self._rate = self.max_rate
            return
        if not rate > 0:
            return
        self._rate = rate if self.max_rate is None else min(rate, self.max_rate)

    def _refill(self, now: float) -> None:
        rate = self._rate
        if rate is not None and now > self._next_free:
            if self._next_free > -math.inf:
                self._stored = min(rate, self._stored + (now - self._next_free) * rate / 1000)
            self._next_free = now

    async def acquire(self, permits: int = 1) -> None:
        """Take ``permits`` records' worth; wait first while earlier records are not paid off.

        Cancellable; a cancelled wait has still paid (as Guava's reservation).
        """
        rate = self._rate
        if rate is None or permits <= 0:
            return
        now = float(self._clock.now().milliseconds)
        self._refill(now)
        ready_at = self._next_free
        from_stored = min(float(permits), self._stored)
        self._stored -= from_stored
        self._next_free += (permits - from_stored) * 1000 / rate
        if ready_at > now:
            self.waits += 1
            await self._clock.sleep_until(Time(math.ceil(ready_at)))

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
