"""The user's call site: where a program called into the streaming package (Spark's ``CallSite``)."""

from __future__ import annotations

import inspect
import os

__all__ = ["user_frame"]

# streaming/ (this file is streaming/spark/_call_site.py): every frame under it is ours.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def user_frame() -> inspect.FrameInfo | None:
    """The innermost stack frame outside the streaming package: where the user's code called in (Spark's call site)."""
    for frame in inspect.stack(context=0)[1:]:
        if not frame.filename.startswith(_PACKAGE_DIR):
            return frame
    return None
