"""The options of Spark's Kafka source read once for every engine: ``subscribe``, ``startingOffsets``, ``failOnDataLoss``.

Structured Streaming's ``KafkaSourceProvider`` (option parsing) and ``KafkaOffsetReader``
(``fetchSpecificOffsets``): their rules and messages.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

import attrs

from scheduler import InvalidPipelineError

from ._client import KafkaClusterView
from ._data_loss import scala_set
from ._offsets import TopicAndPartition

__all__ = ["EARLIEST", "LATEST", "StartingOffsets", "option_flag", "subscribe_topics"]

LATEST = -1  # in a startingOffsets JSON: this partition's end when the query starts (Spark's value)
EARLIEST = -2  # in a startingOffsets JSON: this partition's first record still held
JSON_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'


def subscribe_topics(value: Any) -> tuple[str, ...]:
    """The topics of Spark's ``subscribe`` option: comma-separated text (or a list of names), trimmed, empty ones dropped, once each.

    Raises:
        TypeError: neither text nor a list of names.
        InvalidPipelineError: no topic is left (Spark's message; also a ``ValueError``).
    """
    if isinstance(value, str):
        names, shown = value.split(","), value
    elif isinstance(value, (list, tuple)) and all(isinstance(t, str) for t in value):
        names, shown = list(value), ",".join(value)  # a list reads as the text it joins to
    else:
        raise TypeError(f"subscribe must be a comma-separated str or a list of topic names, got {value!r}")
    topics = tuple(dict.fromkeys(t.strip() for t in names if t.strip()))
    if not topics:
        raise InvalidPipelineError(f"No topics to subscribe to as specified value for option 'subscribe' is '{shown}'")
    return topics


def option_flag(value: object) -> bool | None:
    """A true/false source option as Spark reads it: a bool, or ``"true"``/``"false"`` in any case; ``None`` for anything else.

    Callers raise their own message for ``None``: where the option was given differs (a source
    option, or a key of ``kafkaParams``).
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


@attrs.frozen
class StartingOffsets:
    """Where a new query starts (Spark's ``startingOffsets``): ``"earliest"``, ``"latest"`` or given offsets per partition.

    ``offsets`` holds the given ones (``-1``: latest, ``-2``: earliest), only for ``"specific"``.
    """

    kind: str
    offsets: Mapping[TopicAndPartition, int] = attrs.field(factory=dict)

    @classmethod
    def parse(cls, value: Any) -> StartingOffsets:
        """Read the option: ``"earliest"``/``"latest"`` (any case), Spark's JSON text, or a dict shaped like that JSON.

        Raises:
            InvalidPipelineError: anything else, with Spark's message naming the expected shape (also a ``ValueError``).
        """
        if isinstance(value, str):
            word = value.strip().lower()
            if word in ("earliest", "latest"):
                return cls(word)
            try:
                raw = json.loads(value)
            except ValueError:
                raise InvalidPipelineError(f"Expected e.g. {JSON_EXAMPLE}, got {value}") from None
        else:
            raw = value
        shown = value if isinstance(value, str) else json.dumps(value, default=repr)
        bad = InvalidPipelineError(f"Expected e.g. {JSON_EXAMPLE}, got {shown}")
        if not isinstance(raw, Mapping):
            raise bad
        offsets: dict[TopicAndPartition, int] = {}
        for topic, parts in raw.items():
            if not isinstance(topic, str) or not topic or not isinstance(parts, Mapping):
                raise bad
            for part, offset in parts.items():
                number = int(part) if isinstance(part, str) and part.isascii() and part.isdigit() else part  # not '²'
                if type(number) is not int or number < 0 or type(offset) is not int or offset < EARLIEST:
                    raise bad
                offsets[TopicAndPartition(topic, number)] = offset
        return cls("specific", offsets)

    def check_partitions(self, assigned: Iterable[TopicAndPartition]) -> None:
        """Given offsets must name exactly the subscribed topics' partitions (Spark's rule and message).

        Raises:
            InvalidPipelineError: they name others, or leave some out (also a ``ValueError``).
        """
        have = set(assigned)
        if self.kind == "specific" and set(self.offsets) != have:
            raise InvalidPipelineError(
                "If startingOffsets contains specific offsets, you must specify all TopicPartitions.\n"
                "Use -1 for latest, -2 for earliest, if you don't care.\n"
                f"Specified: {scala_set(self.offsets)} Assigned: {scala_set(have)}")

    def resolve(self, view: KafkaClusterView, assigned: Iterable[TopicAndPartition], *,
                committed_only: bool) -> dict[TopicAndPartition, int]:
        """Each partition's starting offset now: ``-2`` and ``"earliest"`` its log start, ``-1`` and ``"latest"`` its end.

        Blocking (asks ``view``). ``committed_only``: a partition's end is its last stable offset.

        Raises:
            InvalidPipelineError: given offsets that do not name exactly ``assigned`` (:meth:`check_partitions`).
        """
        tps = list(assigned)
        if self.kind == "earliest":
            return view.earliest_offsets(tps)
        if self.kind == "latest":
            return view.latest_offsets(tps, committed_only=committed_only)
        self.check_partitions(tps)
        given = dict(self.offsets)
        earliest = view.earliest_offsets([tp for tp, o in given.items() if o == EARLIEST])
        latest = view.latest_offsets([tp for tp, o in given.items() if o == LATEST], committed_only=committed_only)
        return {tp: earliest[tp] if o == EARLIEST else latest[tp] if o == LATEST else o for tp, o in given.items()}

    def __str__(self) -> str:
        if self.kind != "specific":
            return self.kind
        by_topic: dict[str, dict[str, int]] = {}
        for tp in sorted(self.offsets):
            by_topic.setdefault(tp.topic, {})[str(tp.partition)] = self.offsets[tp]
        return json.dumps(by_topic, separators=(",", ":"))
