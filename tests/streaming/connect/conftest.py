"""The Connect side of the FrameRDD tests: a FrameContext on the test run's Connect session."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def frame_context(connect_session: Any) -> Any:
    """One FrameContext for the test run, on the shared Connect session."""
    from streaming.connect import FrameContext

    return FrameContext(connect_session)
