"""Progress records of a checkpointed query (Structured Streaming's ``StreamingQueryProgress`` family).

Frozen records with snake_case attributes; ``json()`` and ``pretty_json()`` render them with
Spark's keys, key order and number formatting (rates with one decimal, NaN and infinities and
empty maps left out), so tools that read Spark's progress JSON read ours.
"""

from __future__ import annotations

import datetime
import json
import uuid
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Mapping

import attrs

from .._state_progress import StateOperatorProgress

__all__ = [
    "SinkProgress",
    "SourceProgress",
    "StreamingQueryProgress",
    "StreamingQueryStatus",
    "format_timestamp",
]

_NAIVE_EPOCH = datetime.datetime(1970, 1, 1)


def format_timestamp(ms: int) -> str:
    """``ms`` since the epoch as Spark prints progress times: ``2016-12-14T18:45:24.873Z`` (UTC).

    Any int is printed, as Spark prints any long: beyond ``datetime``'s years 1 to 9999 (an event time in
    microseconds taken for milliseconds, say) the year has as many digits as it needs.
    """
    try:  # isoformat on a naive UTC moment: a fraction of strftime's cost (this runs for every batch)
        return (_NAIVE_EPOCH + datetime.timedelta(milliseconds=ms)).isoformat(timespec="milliseconds") + "Z"
    except OverflowError:
        return _format_any_timestamp(ms)


def _format_any_timestamp(ms: int) -> str:
    """The proleptic Gregorian date of any ``ms``, by whole-number arithmetic (the civil date of a day count)."""
    days, rest = divmod(ms, 86_400_000)
    era, day_of_era = divmod(days + 719_468, 146_097)  # 400-year eras counted from 0000-03-01
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted_month = (5 * day_of_year + 2) // 153  # 0 is March
    day = day_of_year - (153 * shifted_month + 2) // 5 + 1
    month = shifted_month + 3 if shifted_month < 10 else shifted_month - 9
    year = year_of_era + era * 400 + (month <= 2)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    sign = "-" if year < 0 else ""
    return f"{sign}{abs(year):04d}-{month:02d}-{day:02d}T{hours:02d}:{minutes:02d}:{seconds:02d}.{millis:03d}Z"


# -- JSON rendering: compact like json4s' compact(), pretty like Jackson's default pretty printer --


def _rate(value: float) -> Decimal | None:
    """A rate as Spark renders it: one decimal, rounded half up; NaN and infinities are left out.

    Spark rounds the double's shortest decimal form (Scala's ``BigDecimal(d)`` reads ``Double.toString``), not its
    exact binary value: 0.15 is 0.2, where the exact 0.1499999... would give 0.1.
    """
    if value != value or value in (float("inf"), float("-inf")):
        return None
    return Decimal(repr(float(value))).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)


def _scalar(value: Any) -> str:
    if isinstance(value, Decimal):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def render_compact(value: Any) -> str:
    """Render a tree of dicts, lists and scalars (``Decimal`` as written) without whitespace."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{_scalar(k)}:{render_compact(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(render_compact(v) for v in value) + "]"
    return _scalar(value)


def render_pretty(value: Any, level: int = 0) -> str:
    """Render like Jackson's default pretty printer: objects indented by two, arrays inline (``[ {``)."""
    if isinstance(value, dict):
        if not value:
            return "{ }"
        inner = "  " * (level + 1)
        fields = ",".join(f"\n{inner}{_scalar(k)} : {render_pretty(v, level + 1)}" for k, v in value.items())
        return "{" + fields + "\n" + "  " * level + "}"
    if isinstance(value, list):
        if not value:
            return "[ ]"
        return "[ " + ", ".join(render_pretty(v, level) for v in value) + " ]"
    return _scalar(value)


def _put_map(out: dict[str, Any], key: str, mapping: Mapping[str, Any]) -> None:
    if mapping:  # empty maps are left out, and keys are sorted, as in Spark
        out[key] = {k: mapping[k] for k in sorted(mapping)}


def _put_rate(out: dict[str, Any], key: str, value: float) -> None:
    rendered = _rate(value)
    if rendered is not None:
        out[key] = rendered


def _offset_value(offset: str | None) -> Any:
    if offset is None:
        return None
    try:
        return json.loads(offset, parse_float=Decimal)
    except ValueError:
        return offset


class _Json:
    def json_value(self) -> dict[str, Any]:
        raise NotImplementedError

    def json(self) -> str:
        """The compact JSON text, as Spark's ``json``."""
        return render_compact(self.json_value())

    def pretty_json(self) -> str:
        """The indented JSON text, as Spark's ``prettyJson``."""
        return render_pretty(self.json_value())


@attrs.frozen
class StreamingQueryStatus(_Json):
    """What the query is doing now (Spark's ``StreamingQueryStatus``)."""

    message: str
    is_data_available: bool
    is_trigger_active: bool

    def json_value(self) -> dict[str, Any]:
        """The JSON tree: ``message``, ``isDataAvailable``, ``isTriggerActive``."""
        return {"message": self.message, "isDataAvailable": self.is_data_available, "isTriggerActive": self.is_trigger_active}


@attrs.frozen
class SourceProgress(_Json):
    """What one source contributed to a batch (Spark's ``SourceProgress``).

    Offsets are the source's JSON text (rendered as parsed JSON) or ``None``.
    """

    description: str
    start_offset: str | None
    end_offset: str | None
    latest_offset: str | None
    num_input_rows: int
    input_rows_per_second: float
    processed_rows_per_second: float
    metrics: Mapping[str, str] = attrs.field(factory=dict)

    def json_value(self) -> dict[str, Any]:
        """The JSON tree in Spark's key order."""
        out: dict[str, Any] = {
            "description": self.description,
            "startOffset": _offset_value(self.start_offset),
            "endOffset": _offset_value(self.end_offset),
            "latestOffset": _offset_value(self.latest_offset),
            "numInputRows": self.num_input_rows,
        }
        _put_rate(out, "inputRowsPerSecond", self.input_rows_per_second)
        _put_rate(out, "processedRowsPerSecond", self.processed_rows_per_second)
        _put_map(out, "metrics", self.metrics)
        return out


@attrs.frozen
class SinkProgress(_Json):
    """The batch's output (Spark's ``SinkProgress``); ``num_output_rows`` is -1 when unknown."""

    description: str
    num_output_rows: int = -1
    metrics: Mapping[str, str] = attrs.field(factory=dict)

    def json_value(self) -> dict[str, Any]:
        """The JSON tree in Spark's key order."""
        out: dict[str, Any] = {"description": self.description, "numOutputRows": self.num_output_rows}
        _put_map(out, "metrics", self.metrics)
        return out


@attrs.frozen
class StreamingQueryProgress(_Json):
    """One trigger of a checkpointed query: the batch it ran, how long each phase took, what it read.

    ``duration_ms`` holds the phases measured: ``latestOffset`` (asking the sources where they
    end), ``walCommit`` (writing the offsets log), ``addBatch`` (running the batch's jobs),
    ``commitOffsets`` (writing the commits log) and ``triggerExecution`` (from the trigger's
    start until the batch was committed). A re-run batch has no ``latestOffset`` or
    ``walCommit``, as in Spark; an idle trigger (no batch) has only ``latestOffset`` and
    ``triggerExecution``.

    Attributes:
        id: the query id (kept across restarts).
        run_id: this run's id.
        name: the query name, or ``None``.
        timestamp: when the trigger started, as ``2016-12-14T18:45:24.873Z``.
        batch_id: the batch that ran (for an idle trigger, the next one).
        batch_duration: trigger end minus trigger start, in ms.
        duration_ms: phase -> ms.
        sources: one entry per source, in offset-log order.
        sink: the output.
        event_time: Spark's event-time statistics (``avg``, ``max``, ``min`` of the batch's event times,
            ``watermark`` the batch ran with), empty without watermarks.
        batch_time_ms: the batch's time on the grid (not part of Spark's JSON).
        state_operators: what each stateful operator did.
    """

    id: uuid.UUID
    run_id: uuid.UUID
    name: str | None
    timestamp: str
    batch_id: int
    batch_duration: int
    duration_ms: Mapping[str, int]
    sources: tuple[SourceProgress, ...]
    sink: SinkProgress
    event_time: Mapping[str, str] = attrs.field(factory=dict)
    batch_time_ms: int | None = None
    state_operators: tuple[StateOperatorProgress, ...] = ()

    @property
    def num_input_rows(self) -> int:
        """Rows read in this trigger, over all sources."""
        return sum(s.num_input_rows for s in self.sources)

    @property
    def input_rows_per_second(self) -> float:
        """Arrival rate over all sources (rows over the time since the previous trigger started)."""
        return sum(s.input_rows_per_second for s in self.sources)

    @property
    def processed_rows_per_second(self) -> float:
        """Processing rate over all sources (rows over this trigger's duration)."""
        return sum(s.processed_rows_per_second for s in self.sources)

    def json_value(self) -> dict[str, Any]:
        """The JSON tree in Spark's key order: NaN rates and empty maps left out, map keys sorted."""
        out: dict[str, Any] = {
            "id": str(self.id),
            "runId": str(self.run_id),
            "name": self.name,
            "timestamp": self.timestamp,
            "batchId": self.batch_id,
            "batchDuration": self.batch_duration,
            "numInputRows": self.num_input_rows,
        }
        _put_rate(out, "inputRowsPerSecond", self.input_rows_per_second)
        _put_rate(out, "processedRowsPerSecond", self.processed_rows_per_second)
        _put_map(out, "durationMs", self.duration_ms)
        _put_map(out, "eventTime", self.event_time)
        out["stateOperators"] = [operator.json_value() for operator in self.state_operators]
        out["sources"] = [s.json_value() for s in self.sources]
        out["sink"] = self.sink.json_value()
        return out
