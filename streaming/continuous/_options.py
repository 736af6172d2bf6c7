"""ContinuousOptions: a continuous query's settings by Spark's names, with Spark's defaults and ranges (Spark's ``SQLConf`` entries)."""

from __future__ import annotations

from typing import Mapping

from scheduler import InvalidPipelineError, whole_number_option

from ..network import HELLO_TIMEOUT_KEY, IDLE_TIMEOUT_KEY, MAX_UNAUTHENTICATED_KEY, FrontDoorSettings
from ._protocol import DEFAULT_MAX_FRAME_MIB, MAX_FRAME_KEY

__all__ = ["BACKLOG", "DEFAULT_BACKLOG", "MIN_BATCHES_TO_RETAIN", "NUM_RECENT_PROGRESS", "POLL_INTERVAL", "ContinuousOptions"]

BACKLOG = "spark.sql.streaming.continuous.epochBacklogQueueSize"
POLL_INTERVAL = "spark.sql.streaming.continuous.executorPollIntervalMs"
MIN_BATCHES_TO_RETAIN = "spark.sql.streaming.minBatchesToRetain"
NUM_RECENT_PROGRESS = "spark.sql.streaming.numRecentProgressUpdates"
DEFAULT_BACKLOG = 10_000
"""The default of ``epochBacklogQueueSize`` (Spark's)."""
_OPTIONS = {BACKLOG: DEFAULT_BACKLOG, POLL_INTERVAL: 100, MIN_BATCHES_TO_RETAIN: 100, NUM_RECENT_PROGRESS: 100}
# The coordinator's front door and frame bound: Spark's names where Spark has the setting.
_NETWORK_OPTIONS = (HELLO_TIMEOUT_KEY, IDLE_TIMEOUT_KEY, MAX_UNAUTHENTICATED_KEY, MAX_FRAME_KEY)
_MAX_FRAME_MIB = 2047  # Spark's RpcUtils.MAX_MESSAGE_SIZE_IN_MB


class ContinuousOptions:
    """A continuous query's settings, by Spark's names (case-insensitive), with Spark's defaults.

    Attributes:
        network: the coordinator's front door (``spark.network.auth.rpcTimeout``,
            ``spark.network.timeout``, ``spark.aiodstream.network.maxUnauthenticatedConnections``).
        max_frame_bytes: the largest frame a task may send after its hello (``spark.rpc.message.maxSize``, MiB).
    """

    def __init__(self, options: Mapping[str, object] | None = None) -> None:
        """Read ``options``.

        Raises:
            InvalidPipelineError: an unknown name, or a value out of its range.
        """
        known = {k.lower(): k for k in (*_OPTIONS, *_NETWORK_OPTIONS)}
        values = dict(_OPTIONS)
        network: dict[str, object] = {}
        for key, value in (options or {}).items():
            name = known.get(str(key).lower())
            if name is None:
                raise InvalidPipelineError(f"unknown option {key!r} for a continuous query; the options are "
                                           f"{', '.join((*_OPTIONS, *_NETWORK_OPTIONS))}")
            if name in _NETWORK_OPTIONS:
                network[name] = value
                continue
            values[name] = whole_number_option(name, value)
        self.epoch_backlog_queue_size = values[BACKLOG]
        self.executor_poll_interval_ms = values[POLL_INTERVAL]
        self.min_batches_to_retain = values[MIN_BATCHES_TO_RETAIN]
        self.num_recent_progress_updates = values[NUM_RECENT_PROGRESS]
        frame_mib = DEFAULT_MAX_FRAME_MIB
        if MAX_FRAME_KEY in network:
            frame_mib = whole_number_option(MAX_FRAME_KEY, network.pop(MAX_FRAME_KEY))
            if frame_mib > _MAX_FRAME_MIB:
                raise InvalidPipelineError(f"{MAX_FRAME_KEY} should not be greater than {_MAX_FRAME_MIB} MB, got {frame_mib}")
        self.max_frame_bytes = frame_mib * 1024 * 1024
        try:
            self.network = FrontDoorSettings.from_conf(network)
        except ValueError as exc:
            raise InvalidPipelineError(str(exc)) from exc
        if self.executor_poll_interval_ms >= self.network.idle_timeout_s * 1000:
            raise InvalidPipelineError(
                f"{POLL_INTERVAL} ({self.executor_poll_interval_ms} ms) must be shorter than {IDLE_TIMEOUT_KEY} "
                f"({self.network.idle_timeout_s:g} s): the coordinator closes a task's connection once it was silent that "
                "long; shorten the poll interval or lengthen the timeout")
