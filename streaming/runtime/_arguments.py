"""The checks of a StreamingRuntime's constructor arguments: each wrong one is refused when the runtime is made, not at start."""

from __future__ import annotations

from scheduler import Clock, Duration, InvalidDurationError

__all__ = ["check_runtime_arguments"]


def check_runtime_arguments(batch_duration: object, *, clock: object, graceful_stop_timeout: object, abandon_after: object,
                            name: object, stop_on_failure: object, track_progress: object) -> None:
    """Refuse what a :class:`StreamingRuntime` cannot run with, naming the argument.

    Raises:
        InvalidDurationError: a batch duration that is not a positive :class:`Duration`, or a graceful-stop timeout or
            ``abandon_after`` that is not a non-negative one.
        TypeError: a clock that is not a :class:`Clock`, or a flag that is not a bool.
        ValueError: a name that is not a non-empty string.
    """
    if not isinstance(batch_duration, Duration):
        raise InvalidDurationError(f"batch duration must be a Duration, got {type(batch_duration).__name__} "
                                   f"{batch_duration!r}; pass e.g. Seconds(1) or Milliseconds(500)")
    if batch_duration.milliseconds <= 0:
        raise InvalidDurationError(f"batch duration must be a positive multiple of 1 ms, got {batch_duration}; "
                                   "pass e.g. Seconds(1)")
    for what, value, optional in (("graceful_stop_timeout", graceful_stop_timeout, True),
                                  ("abandon_after", abandon_after, False)):
        if (value is not None or not optional) and (not isinstance(value, Duration) or value.milliseconds < 0):
            raise InvalidDurationError(f"{what} must be a non-negative Duration, got {value!r}; pass e.g. Seconds(2)")
    if clock is not None and not isinstance(clock, Clock):
        raise TypeError(f"clock must be a Clock (SystemClock, ManualClock...), got {type(clock).__name__} {clock!r}")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ValueError(f"name must be a non-empty string or None, got {name!r}")
    if stop_on_failure is not None and not isinstance(stop_on_failure, bool):
        raise TypeError(f"stop_on_failure must be a bool or None, got {stop_on_failure!r}")
    if not isinstance(track_progress, bool):
        raise TypeError(f"track_progress must be a bool, got {track_progress!r}")
