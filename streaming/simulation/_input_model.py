"""InputModel: one simulated input stream, its arrivals and how it is throttled (a rate cap, backpressure).

Spark's ``spark.streaming.receiver.maxRate`` and its backpressure ``RateController`` (a PID estimator), as settings.
"""

from __future__ import annotations

import attrs

from ._input_rates import InputRate
from ._model_checks import ModelError, finite

__all__ = [
    "Backpressure",
    "InputModel",
]


@attrs.frozen
class Backpressure:
    """Spark's backpressure in a simulation: a PID rate estimator sets the ingestion rate after each batch.

    Attributes:
        proportional: ``spark.streaming.backpressure.pid.proportional``.
        integral: ``spark.streaming.backpressure.pid.integral``.
        derivative: ``spark.streaming.backpressure.pid.derived``.
        min_rate: ``spark.streaming.backpressure.pid.minRate`` (records per second).
        initial_rate: ``spark.streaming.backpressure.initialRate``: the rate before the first
            estimate (``None``: the model's ``max_rate``, else unlimited).
    """

    proportional: float = 1.0
    integral: float = 0.2
    derivative: float = 0.0
    min_rate: float = 100.0
    initial_rate: float | None = None

    def __attrs_post_init__(self) -> None:
        finite("backpressure.proportional", self.proportional)
        finite("backpressure.integral", self.integral)
        finite("backpressure.derivative", self.derivative)
        finite("backpressure.min_rate", self.min_rate, strict=True)
        if self.initial_rate is not None:
            finite("backpressure.initial_rate", self.initial_rate, strict=True)


@attrs.frozen
class InputModel:
    """One input stream: its arrivals, and how it is throttled.

    Attributes:
        rate: when records arrive.
        name: a name for reports (default ``input-<id>``).
        max_rate: ``spark.streaming.receiver.maxRate`` for this input (records per second;
            ``None``: no cap).
        backpressure: this input's backpressure controller (``None``: off).
    """

    rate: InputRate
    name: str | None = None
    max_rate: float | None = None
    backpressure: Backpressure | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.rate, InputRate):
            raise ModelError("rate", f"must be an input-rate model (with cumulative()), got {self.rate!r}")
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise ModelError("name", f"must be a non-empty string, got {self.name!r}")
        if self.max_rate is not None:
            finite("max_rate", self.max_rate, strict=True)
        if self.backpressure is not None and not isinstance(self.backpressure, Backpressure):
            raise ModelError("backpressure", f"must be a Backpressure or None, got {self.backpressure!r}")

    @property
    def rate_controlled(self) -> bool:
        """Whether this input is taken at a limited rate (a cap or backpressure)."""
        return self.max_rate is not None or self.backpressure is not None
