"""What each task of a Kafka batch runs: read its offset range with a consumer kept per worker process (Spark's ``KafkaRDD.compute``).

The driver ships only the ranges and these settings; a task reads its range straight from
Kafka with a :class:`RangeReader`, reused by the worker's next task (Spark's executor consumer
cache), and turns each record into a decoded pair or the message handler's result.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterable, Iterator, Mapping

import attrs

from ..spark import time_string_as
from ._offsets import KafkaMessageAndMetadata, OffsetRange
from ._reader import RangeReader, executor_config

__all__ = ["POLL_MS_KEY", "ExecutorReading", "message_converter"]

POLL_MS_KEY = "spark.streaming.kafka.consumer.poll.ms"
"""How long a task waits for a range's records before failing (Spark's setting; default ``spark.network.timeout``, 120 s)."""
NETWORK_TIMEOUT_KEY = "spark.network.timeout"

# One reader per consumer configuration in each Python worker: a reused worker runs many
# tasks, and a consumer's connections outlive a range.
_readers: dict[tuple[Any, ...], RangeReader] = {}


def _shared_reader(config: Mapping[str, Any], poll_timeout_s: float) -> RangeReader:
    key = (poll_timeout_s, *sorted((name, repr(value)) for name, value in config.items() if name != "logger"))
    reader = _readers.get(key)
    if reader is None:
        try:
            reader = _readers[key] = RangeReader(config, poll_timeout_s=poll_timeout_s)
        except ImportError as error:  # say whose Python lacks it: an executor's, or a Spark Connect server's worker
            raise ImportError(f"{error} (in the Spark Python worker {sys.executable} reading a Kafka batch: the Python "
                              "that runs Spark's tasks, an executor's or a Spark Connect server's, needs "
                              "aiodstream[kafka] installed)") from error
    return reader


def message_converter(key_decoder: Callable[[bytes | None], Any], value_decoder: Callable[[bytes | None], Any],
                      message_handler: Callable[[KafkaMessageAndMetadata], Any] | None) -> Callable[[Any], Any]:
    """What each record becomes: ``(keyDecoder(key), valueDecoder(value))``, or ``messageHandler(KafkaMessageAndMetadata)``."""
    if message_handler is None:
        def pair(message: Any) -> Any:
            return key_decoder(message.key()), value_decoder(message.value())
        return pair
    handler = message_handler

    def handled(message: Any) -> Any:
        kind, stamp = message.timestamp()
        return handler(KafkaMessageAndMetadata(message.topic(), message.partition(), message.offset(), message.key(),
                                               message.value(), stamp if kind else None, key_decoder=key_decoder,
                                               value_decoder=value_decoder))
    return handled


@attrs.frozen
class ExecutorReading:
    """How tasks read their ranges: the consumer's settings, the poll timeout, and ``failOnDataLoss``.

    Attributes:
        config: the executors' consumer settings (Spark's: no auto-commit, no offset reset, the
            group ``spark-executor-<group.id>``).
        poll_timeout_s: ``spark.streaming.kafka.consumer.poll.ms`` in seconds.
        fail_on_data_loss: whether a range's lost records fail the task (else a warning).
    """

    config: dict[str, Any]
    poll_timeout_s: float
    fail_on_data_loss: bool

    @classmethod
    def from_params(cls, params: Mapping[str, Any], setting: Callable[[str], Any], *, fail_on_data_loss: bool) -> ExecutorReading:
        """The reading of a stream or RDD with Kafka parameters ``params`` and Spark settings read through ``setting``.

        Raises:
            ValueError: ``spark.streaming.kafka.consumer.poll.ms`` is not a whole number.
        """
        group = params.get("group.id") or "aiodstream"
        raw = setting(POLL_MS_KEY)
        if raw is not None and str(raw).strip():
            try:
                poll_s = int(str(raw).strip()) / 1000
            except ValueError:
                raise ValueError(f"{POLL_MS_KEY} must be a whole number of milliseconds, got {raw!r}") from None
        else:  # Spark's default: the network timeout
            poll_s = float(time_string_as(str(setting(NETWORK_TIMEOUT_KEY) or "120s"), "s", NETWORK_TIMEOUT_KEY))
        return cls(executor_config(params, group_id=f"spark-executor-{group}"), poll_s, fail_on_data_loss)

    def task(self, convert: Callable[[Any], Any]) -> Callable[[int, Iterable[OffsetRange]], Iterator[Any]]:
        """The function a task runs over its partition's ranges, converting each record with ``convert``."""
        config, poll_s, fail = dict(self.config), self.poll_timeout_s, self.fail_on_data_loss

        def read_ranges(_split: int, ranges: Iterable[OffsetRange]) -> Iterator[Any]:
            reader = _shared_reader(config, poll_s)
            for rng in ranges:
                for message in reader.read(rng, fail_on_data_loss=fail):
                    yield convert(message)

        return read_ranges
