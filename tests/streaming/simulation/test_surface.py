"""streaming.simulation's public surface is exactly __all__, every name documented."""

from __future__ import annotations

import inspect
import types

import streaming.simulation as simulation


def test_the_public_surface_is_exactly_all() -> None:
    """Every public name of streaming.simulation is in __all__ and every name in __all__ exists, once."""
    exported = list(simulation.__all__)
    assert len(exported) == len(set(exported))
    public = {
        name for name, obj in vars(simulation).items()
        if not name.startswith("_") and not isinstance(obj, types.ModuleType) and type(obj).__module__ != "__future__"
    }
    assert public == set(exported)


def test_every_exported_class_and_function_is_documented() -> None:
    """Classes, functions, and the public methods of exported classes carry docstrings."""
    undocumented = []
    for name in simulation.__all__:
        obj = getattr(simulation, name)
        if inspect.isclass(obj) or inspect.isroutine(obj):
            doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
            if not (doc or "").strip():
                undocumented.append(name)
        if inspect.isclass(obj):
            for attr, value in vars(obj).items():
                func = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
                if not attr.startswith("_") and inspect.isroutine(func) and not (func.__doc__ or "").strip():
                    undocumented.append(f"{name}.{attr}")
    assert undocumented == []


def test_importing_the_package_does_not_import_matplotlib() -> None:
    """matplotlib is loaded only when a plot is drawn (it takes a while to import)."""
    import subprocess
    import sys

    code = "import sys, streaming.simulation; print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "False"
