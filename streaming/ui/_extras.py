"""The ``ui`` extra's packages, imported when first needed, with the install hint when missing."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["require"]


def require(module: str, purpose: str) -> Any:
    """Import ``module`` (from the ``ui`` extra); a missing one raises ImportError saying what needs it and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - the extra is part of the test setup
        raise ImportError(f"{purpose} needs {module.split('.')[0]}: pip install 'aiodstream[ui]'") from exc
