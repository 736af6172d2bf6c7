"""Helpers of the transformWithState partition tests: batches of one partition on a real store, without Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streaming.state import (
    StateOperatorStats,
    StateStoreProvider,
    TransformWithStateSpec,
    initial_rows_by_key,
    run_transform_batch,
)


class Batches:
    """Runs batches of one partition of one operator, each on the version the previous one committed."""

    def __init__(self, root: Path, spec: TransformWithStateSpec) -> None:
        """A fresh checkpoint under ``root``."""
        self.provider = StateStoreProvider(root / "ck", 0, 0, local_dir=root / "local")
        self.spec = spec
        self.batch = 0
        self.stats: StateOperatorStats | None = None

    def run(self, records: list[tuple[Any, Any]], batch_ms: int = 0, watermark: int = -1, late: int = -1,
            initial: list[tuple[Any, Any]] | None = None) -> list[Any]:
        """One batch: its outputs (the numbers are kept in ``stats``); the batch counter moves only on success."""
        outputs, self.stats = run_transform_batch(self.provider, self.batch, records, self.spec, batch_ms, watermark,
                                                  late, initial_rows_by_key(initial) if initial else None)
        self.batch += 1
        return outputs

    @property
    def metrics(self) -> dict[str, int]:
        """The last batch's custom metrics."""
        assert self.stats is not None
        return dict(self.stats.custom_metrics)

    def rows(self) -> list[tuple[bytes, tuple[bytes | None, int]]]:
        """Every row the last committed version holds."""
        store = self.provider.load(self.batch)
        try:
            return list(store)
        finally:
            store.abort()
