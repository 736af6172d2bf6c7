"""Run a program as if none of aiodstream's optional dependencies were installed: ``python -m tests.without_extras
[--allow NAME,...] SCRIPT ARGS...``.

A plain ``pip install aiodstream`` brings none of the extras (``ui``, ``kafka``, ``connect``, ``plot``) and no pandas or
pyarrow, while the test environment has them all; a classic-Spark program must still run there. Importing any of them
then raises ``ModuleNotFoundError``, as a missing package does (``--allow`` keeps some, for a program that needs them).
"""

from __future__ import annotations

import runpy
import sys

OPTIONAL = ("pyarrow", "pandas", "grpc", "google.protobuf", "prometheus_client", "starlette", "hypercorn",
            "confluent_kafka", "matplotlib", "trio")
"""Top-level modules no required dependency brings (what the extras and the test environment add)."""


def main(argv: list[str]) -> None:
    """Block the optional modules not allowed, then run the script as ``__main__`` with the rest as its arguments."""
    allowed: set[str] = set()
    if argv[:1] == ["--allow"]:
        allowed = set(argv[1].split(","))
        argv = argv[2:]
    for name in OPTIONAL:
        if name not in allowed:
            sys.modules[name] = None  # type: ignore[assignment]  # `import name` raises ModuleNotFoundError
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
