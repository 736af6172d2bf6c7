"""What every keyed stateful operator does with one partition's batch, whatever its user code.

:func:`group_by_key` drops late records and groups the rest by pickled key;
:func:`run_committed` loads the store at the batch, runs the operator's pass on it, aborts on
any error (nothing of the batch is kept) or else commits and starts a snapshot when one is due.
``flatMapGroupsWithState`` (``_groups``) and ``transformWithState`` (``_transform``) both use them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

import attrs

from ._operator_stats import StateOperatorStats
from ._processor_rows import key_bytes
from ._protocol import VersionedStore
from ._store_provider import StateStoreProvider

__all__ = ["CommittedBatch", "group_by_key", "run_committed"]

_R = TypeVar("_R")


def group_by_key(records: Iterable[tuple[Any, Any]],
                 is_late: Callable[[Any], bool] | None = None) -> tuple[dict[bytes, tuple[Any, list[Any]]], int]:
    """The ``(key, value)`` records by pickled key (values in arrival order), and how many were late.

    A record whose value ``is_late`` says is late is dropped and counted instead.
    """
    grouped: dict[bytes, tuple[Any, list[Any]]] = {}
    dropped = 0
    for key, value in records:
        if is_late is not None and is_late(value):
            dropped += 1
            continue
        encoded = key_bytes(key)
        entry = grouped.get(encoded)
        if entry is None:
            grouped[encoded] = (key, [value])
        else:
            entry[1].append(value)
    return grouped, dropped


@attrs.frozen
class CommittedBatch(Generic[_R]):
    """A partition's batch after its commit: the pass's result and the store's numbers.

    Attributes:
        loaded_from: where the store came from (``StateStore.loaded_from``: "working copy", "checkpoint", "empty").
    """

    result: _R
    num_rows_total: int
    num_rows_updated: int
    num_rows_removed: int
    memory_used_bytes: int
    commit_time_ms: int
    loaded_from: str
    partition_id: int

    def stats(self, num_rows_dropped_by_watermark: int, num_timeouts: int, custom_metrics: Mapping[str, int], *,
              num_rows_updated: int | None = None, num_rows_removed: int | None = None,
              all_updates_time_ms: int = 0, all_removals_time_ms: int = 0) -> StateOperatorStats:
        """This partition's :class:`StateOperatorStats`; the rows updated and removed are the store's unless given."""
        return StateOperatorStats(
            self.num_rows_total,
            self.num_rows_updated if num_rows_updated is None else num_rows_updated,
            self.num_rows_removed if num_rows_removed is None else num_rows_removed,
            num_rows_dropped_by_watermark, self.memory_used_bytes, self.commit_time_ms, num_timeouts, 1,
            all_updates_time_ms, all_removals_time_ms,
            int(self.loaded_from == "working copy"), int(self.loaded_from == "checkpoint"), 1 << self.partition_id, dict(custom_metrics))


def run_committed(provider: StateStoreProvider, batch_id: int,
                  run: Callable[[VersionedStore], _R]) -> CommittedBatch[_R]:
    """Load the store at ``batch_id``, ``run`` it, commit, and start a snapshot if one is due.

    If ``run`` raises, the store is aborted (nothing of the batch is kept) and the error propagates.
    """
    store = provider.load(batch_id)
    try:
        result = run(store)
        rows = len(store)
    except BaseException:
        store.abort()
        raise
    version = store.commit()
    provider.maintain_after(version)  # a snapshot, when due, in the background
    metrics = provider.last_metrics
    assert metrics is not None
    return CommittedBatch(result, rows, metrics.num_rows_updated, metrics.num_rows_removed, metrics.memory_used_bytes,
                          metrics.commit_time_ms, store.loaded_from, provider.partition_id)
