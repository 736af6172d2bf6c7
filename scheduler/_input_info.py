"""Per-batch input bookkeeping (Spark's ``StreamInputInfo`` and ``InputInfoTracker``)."""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from ._errors import StreamingStateError
from ._time import Time, TimeOrderedDict

__all__ = ["InputInfoTracker", "StreamInputInfo"]

METADATA_KEY_DESCRIPTION = "Description"


def _non_negative(_: object, __: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ValueError(f"numRecords must not be negative, got {value}")


@attrs.frozen
class StreamInputInfo:
    """What one input stream contributed to one batch."""

    input_stream_id: int
    num_records: int = attrs.field(validator=_non_negative)
    metadata: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def metadata_description(self) -> str | None:
        """The ``"Description"`` metadata entry as text, if any."""
        value = self.metadata.get(METADATA_KEY_DESCRIPTION)
        return None if value is None else str(value)


class InputInfoTracker:
    """Collects the input infos that input streams report while a batch is generated."""

    def __init__(self) -> None:
        """Create an empty tracker."""
        self._infos: TimeOrderedDict[dict[int, StreamInputInfo]] = TimeOrderedDict()

    def report_info(self, batch_time: Time, info: StreamInputInfo) -> None:
        """Record ``info`` for ``batch_time``; each stream may report once per batch."""
        per_batch = self._infos.setdefault(batch_time, {})
        if info.input_stream_id in per_batch:
            raise StreamingStateError(
                f"Input stream {info.input_stream_id} for batch {batch_time} is already added into "
                "InputInfoTracker, this is an illegal state"
            )
        per_batch[info.input_stream_id] = info

    def get_info(self, batch_time: Time) -> Mapping[int, StreamInputInfo]:
        """A copy of what was reported for ``batch_time`` (empty if nothing)."""
        return dict(self._infos.get(batch_time, {}))

    def cleanup(self, threshold: Time) -> None:
        """Forget batches strictly before ``threshold``."""
        self._infos.pop_through(threshold.milliseconds - 1)

    def __len__(self) -> int:
        return len(self._infos)
