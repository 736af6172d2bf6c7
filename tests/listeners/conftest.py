"""Fixtures of the listener tests."""

from __future__ import annotations

import pytest

from listeners import BatchInfo, BatchRecord


@pytest.fixture
def built_batch_infos(monkeypatch: pytest.MonkeyPatch) -> list[BatchInfo]:
    """Every BatchInfo a BatchRecord builds during the test, in order (the record's builder wrapped to keep them)."""
    built: list[BatchInfo] = []
    original = BatchRecord.batch_info

    def counting(self: BatchRecord) -> BatchInfo:
        built.append(original(self))
        return built[-1]

    monkeypatch.setattr(BatchRecord, "batch_info", counting)
    return built
