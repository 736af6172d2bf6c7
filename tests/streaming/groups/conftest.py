"""Fixtures of the state store's tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest


@pytest.fixture(params=["local", "fsspec"])
def ck(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Where the durable files go: a local directory, or a ``memory://`` URI (fsspec)."""
    if request.param == "local":
        yield str(tmp_path / "ck")
        return
    root = f"/aiodstream-test-{uuid.uuid4().hex}"
    yield f"memory://{root}/ck"
    memory = fsspec.filesystem("memory")
    if memory.exists(root):
        memory.rm(root, recursive=True)
