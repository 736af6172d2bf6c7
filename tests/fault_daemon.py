"""Spark's Python daemon with a kill point in every Python worker it forks (``spark.python.daemon.module=tests.fault_daemon``).

With ``AIODSTREAM_KILL_AT`` in the executors' environment, the worker that is the
``AIODSTREAM_KILL_AFTER``-th on the host to reach that point SIGKILLs itself (and, with
``<point>:jvm``, its executor's JVM first): see :func:`tests.crash.install_kill_point`. The points:

- ``state-delta-temp`` / ``state-delta-linked``: a state store commit's delta file written, not
  yet renamed into place / in place, the working copy's transaction not committed;
- ``state-snapshot-temp`` / ``state-snapshot-linked``: the background snapshot of a state store
  partition written, not renamed / in place, the old files not purged;
- ``block-temp`` / ``block-linked``: an executor receiver's block written, not linked into the
  log / in the log, not reported to the driver.

Without the variable this is pyspark's daemon, unchanged.
"""

from __future__ import annotations

import os

from pyspark import daemon

from tests.crash import install_kill_point


def classify(target: str) -> str | None:
    """The kind of checkpoint file an executor puts at ``target`` (``None``: not one with a kill point)."""
    name = os.path.basename(target)
    if name.endswith(".delta"):
        return "state-delta"
    if name.endswith(".snapshot"):
        return "state-snapshot"
    if name.isdigit() and os.path.basename(os.path.dirname(os.path.dirname(target))) == "sources":
        return "block"
    return None


if __name__ == "__main__":
    install_kill_point(classify, shared_count=True)
    daemon.manager()
