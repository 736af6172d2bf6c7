"""Simulation tests run many batches: keep the engine's per-batch info logs out of the way."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture(autouse=True)
def _quiet_engine_logs() -> Iterator[None]:
    """Filter the engine's structlog output to warnings for the test, then restore the configuration."""
    previous = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        yield
    finally:
        structlog.configure(**previous)
