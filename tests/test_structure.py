"""Structural rules: the injected clock is the only clock, public surfaces match __all__, imports flow one way,
classes and modules stay small, no module reaches into another's privates, py4j stays in streaming/spark/."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import itertools
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["scheduler", "listeners", "streaming"]
ENGINE_PACKAGES = ["scheduler", "listeners"]  # the runtime proper: no wall clock, no user API


def modules_of(package: str) -> list[Path]:
    """Every Python module of a top-level package, recursively."""
    return sorted((ROOT / package).rglob("*.py"))


@functools.cache
def parsed(path: Path) -> ast.Module:
    """The syntax tree of a module (parsed once per run)."""
    return ast.parse(path.read_text())


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def engine_module_ids() -> list[str]:
    return [str(p.relative_to(ROOT)) for package in ENGINE_PACKAGES for p in modules_of(package)]


# -- (1) nothing but SystemClock reads the wall clock or sleeps --

# Fully qualified names that read a real clock or sleep on one. Deadlines of fail_after /
# move_on_after and loop timers are on the event loop's clock, which a manual clock does not move.
WALL_CLOCK_NAMES = frozenset(
    {
        *(f"time.{n}" for n in (
            "time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
            "process_time", "process_time_ns", "thread_time", "thread_time_ns", "clock_gettime",
            "clock_gettime_ns", "sleep", "localtime", "gmtime", "ctime", "asctime", "strftime",
        )),
        "datetime.datetime.now", "datetime.datetime.utcnow", "datetime.datetime.today", "datetime.date.today",
        *(f"anyio.{n}" for n in ("sleep", "sleep_until", "current_time", "fail_after", "move_on_after")),
        *(f"asyncio.{n}" for n in ("sleep", "wait_for", "timeout", "timeout_at")),
        *(f"trio.{n}" for n in ("sleep", "sleep_until", "current_time", "fail_after", "fail_at", "move_on_after", "move_on_at")),
        "threading.Timer",
    }
)
# Methods that read or schedule on an event loop's clock whatever the receiver is called.
LOOP_CLOCK_METHODS = frozenset({"call_later", "call_at"})

# The one place allowed to read the wall clock: (module, enclosing class).
ALLOWED = {("scheduler/_clock.py", "SystemClock")}


class WallClockScanner(ast.NodeVisitor):
    """Collects (line, description) of every wall-clock read or real sleep in one module."""

    def __init__(self, allowed_classes: frozenset[str] = frozenset()) -> None:
        self.aliases: dict[str, str] = {}
        self.allowed_classes = allowed_classes
        self.scope: list[str] = []
        self.found: list[tuple[int, str]] = []

    def scan(self, source: str) -> list[tuple[int, str]]:
        tree = ast.parse(source)
        for node in ast.walk(tree):  # imports anywhere (also inside functions) bind names
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        self.visit(tree)
        return sorted(set(self.found))

    def _report(self, node: ast.AST, what: str) -> None:
        if not self.allowed_classes.intersection(self.scope):
            self.found.append((node.lineno, what))  # type: ignore[attr-defined]

    def _qualified(self, node: ast.expr) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        head = self.aliases.get(node.id, node.id)
        return ".".join([head, *reversed(parts)])

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if f"{node.module}.{alias.name}" in WALL_CLOCK_NAMES:
                self._report(node, f"from {node.module} import {alias.name}")

    def visit_Name(self, node: ast.Name) -> None:
        qualified = self.aliases.get(node.id)
        if qualified in WALL_CLOCK_NAMES:
            self._report(node, qualified)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        qualified = self._qualified(node)
        if qualified in WALL_CLOCK_NAMES:
            self._report(node, qualified)
        elif node.attr in LOOP_CLOCK_METHODS:
            self._report(node, f"<loop>.{node.attr}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        # loop.time(), self._loop.time(): a zero-argument .time() call on something that is not a
        # known module is an event loop's clock.
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "time" and not node.args and not node.keywords:
            qualified = self._qualified(func)
            if qualified is None or qualified.split(".")[0] not in ("time", "datetime"):
                self._report(node, f"{qualified or '<expr>'}() (an event loop clock)")
        self.generic_visit(node)


def scan(source: str, allowed_classes: frozenset[str] = frozenset()) -> list[tuple[int, str]]:
    return WallClockScanner(allowed_classes).scan(textwrap.dedent(source))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import time\ntime.time()", "time.time"),
        ("import time as _t\n_t.monotonic_ns()", "time.monotonic_ns"),
        ("from time import sleep\nsleep(1)", "time.sleep"),
        ("from time import perf_counter as pc\npc()", "time.perf_counter"),
        ("from datetime import datetime\ndatetime.now()", "datetime.datetime.now"),
        ("import datetime\ndatetime.date.today()", "datetime.date.today"),
        ("import anyio\nasync def f():\n    await anyio.sleep(1)", "anyio.sleep"),
        ("import anyio.lowlevel\nanyio.current_time()", "anyio.current_time"),
        ("import anyio\nwith anyio.fail_after(1):\n    pass", "anyio.fail_after"),
        ("import asyncio\nasync def f():\n    await asyncio.sleep(0)", "asyncio.sleep"),
        ("import trio\nasync def f():\n    await trio.sleep(1)", "trio.sleep"),
        ("def f(loop):\n    return loop.time()", "loop.time() (an event loop clock)"),
        ("def f(self):\n    return self._loop.time()", "self._loop.time() (an event loop clock)"),
        ("import asyncio\nasyncio.get_running_loop().call_later(1, print)", "<loop>.call_later"),
        ("def f():\n    import time\n    return time.time_ns()", "time.time_ns"),
    ],
)
def test_the_scanner_finds_each_kind_of_wall_clock_use(source: str, expected: str) -> None:
    """The scanner flags direct, aliased, from-imported and loop-clock reads and sleeps."""
    assert expected in [what for _, what in scan(source)]


@pytest.mark.parametrize(
    "source",
    [
        "import anyio.lowlevel\nasync def f():\n    await anyio.lowlevel.checkpoint()",
        "def f(clock):\n    return clock.now()",
        "def f(job):\n    return job.time, job.time.milliseconds",
        "def f(clock, t):\n    return clock.sleep_until(t)",
        "import anyio\nasync def f(e):\n    await e.wait()\n    anyio.Event()",
        "from scheduler import Time\nTime(5)",
    ],
)
def test_the_scanner_accepts_clock_free_code(source: str) -> None:
    """Checkpoints, the injected clock and attributes named time are not wall-clock reads."""
    assert scan(source) == []


@pytest.mark.parametrize(("module", "allowed"), sorted(ALLOWED))
def test_each_wall_clock_allowance_is_needed_and_narrow(module: str, allowed: str) -> None:
    """Each allowed module reads the wall clock or sleeps only inside its allowed class: without the allowance it is
    flagged there, and only there."""
    source = (ROOT / module).read_text()
    without = scan(source)
    assert without, f"{allowed} should read the wall clock or sleep; the allowance would be dead"
    assert scan(source, frozenset({allowed})) == []
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == allowed)
    assert all(cls.lineno <= line <= (cls.end_lineno or 0) for line, _ in without)


@pytest.mark.parametrize("module", engine_module_ids())
def test_nothing_in_the_engine_reads_the_wall_clock_or_sleeps(module: str) -> None:
    """No module under scheduler/ or listeners/ reads a real clock or sleeps on one, except SystemClock."""
    allowed = frozenset(cls for path, cls in ALLOWED if path == module)
    assert scan((ROOT / module).read_text(), allowed) == []


# -- (2) public surfaces --


def _is_submodule(obj: object, package: str) -> bool:
    return isinstance(obj, types.ModuleType) and obj.__name__.startswith(f"{package}.")


@pytest.mark.parametrize("package", PACKAGES)
def test_the_public_surface_is_exactly_all(package: str) -> None:
    """Every public name of the package is in __all__ and every name in __all__ exists, once."""
    pkg = importlib.import_module(package)
    exported = list(pkg.__all__)
    assert len(exported) == len(set(exported)), "duplicates in __all__"
    public = {
        name
        for name, obj in vars(pkg).items()
        if not name.startswith("_")
        and not _is_submodule(obj, package)  # subpackages are surfaces of their own
        and type(obj).__module__ != "__future__"  # `from __future__ import annotations`
    }
    assert public == set(exported)


def _attribute_docstring(package: str, name: str) -> str | None:
    """The string literal right after a module-level assignment to ``name`` in the package."""
    for path in modules_of(package):
        body = parsed(path).body
        for node, after in itertools.pairwise(body):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
                    return after.value.value
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_has_a_docstring(package: str) -> None:
    """Each name in __all__ is documented: classes and functions by their own docstring, aliases by an attribute docstring."""
    pkg = importlib.import_module(package)
    undocumented = []
    for name in pkg.__all__:
        obj = getattr(pkg, name)
        if inspect.isclass(obj) or inspect.isroutine(obj):
            doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
        else:
            doc = _attribute_docstring(package, name)
        if not (doc and doc.strip()):
            undocumented.append(name)
    assert undocumented == []


@pytest.mark.parametrize("package", PACKAGES)
def test_public_methods_of_exported_classes_have_docstrings(package: str) -> None:
    """Public methods and properties of every exported class carry a docstring."""
    pkg = importlib.import_module(package)
    undocumented = []
    for name in pkg.__all__:
        cls = getattr(pkg, name)
        if not inspect.isclass(cls):
            continue
        for attr, value in vars(cls).items():
            if attr.startswith("_"):
                continue
            func = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
            if inspect.isroutine(func) and not (func.__doc__ or "").strip():
                undocumented.append(f"{name}.{attr}")
    assert undocumented == []


@pytest.mark.parametrize("path", [str(p.relative_to(ROOT)) for package in PACKAGES for p in modules_of(package)])
def test_every_module_has_a_docstring_and_a_consistent_all(path: str) -> None:
    """Each module states its role in a docstring; every name in its __all__ exists."""
    module = importlib.import_module(module_name(ROOT / path))
    assert (module.__doc__ or "").strip(), f"{path} has no module docstring"
    missing = [name for name in getattr(module, "__all__", []) if not hasattr(module, name)]
    assert missing == []


# -- (3) and (4) imports flow one way, with no cycles --

IMPORT_CHECK = """
import importlib, sys
importlib.import_module({package!r})
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & {{"streaming", "listeners", "scheduler", "pyspark", "py4j"}})
print(" ".join(loaded))
"""

# What importing each package may pull in among the project's packages and PySpark.
EXPECTED_LOADED = {
    "scheduler": "scheduler",
    "listeners": "listeners scheduler",
    "streaming": "listeners scheduler streaming",
}


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_first_in_a_fresh_interpreter(package: str) -> None:
    """Importing a package first in a fresh interpreter works (no import cycle) and loads only what it may: never PySpark, never upwards."""
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_CHECK.format(package=package)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == EXPECTED_LOADED[package].split()


# Layering: (importing package, package it must not import).
FORBIDDEN_IMPORTS = [
    ("scheduler", "streaming"),
    ("listeners", "streaming"),
    ("scheduler", "listeners"),
    ("scheduler", "pyspark"),
    ("listeners", "pyspark"),
    ("scheduler", "py4j"),
    ("listeners", "py4j"),
]


def imported_top_levels(path: Path, package: str) -> set[str]:
    """Top-level packages a module imports, anywhere in it (relative imports resolved)."""
    tops: set[str] = set()
    depth = len(path.relative_to(ROOT / package).parts)  # 1 for package/x.py
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            tops.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                tops.add(node.module.split(".")[0])
            elif node.level > depth:  # climbs out of the package: from ..x import y
                tops.add((node.module or "").split(".")[0] or "<outside>")
            elif node.level:
                tops.add(package)
    return tops


@pytest.mark.parametrize(("importer", "forbidden"), FORBIDDEN_IMPORTS)
def test_imports_flow_one_way(importer: str, forbidden: str) -> None:
    """scheduler and listeners never import streaming (nor scheduler listeners), and neither imports PySpark."""
    offenders = [str(p.relative_to(ROOT)) for p in modules_of(importer) if forbidden in imported_top_levels(p, importer)]
    assert offenders == []


# -- (5) inside each package: no import cycle, and packages meet through public names --


def _package_of(name: str, path: Path) -> str:
    """The package a module belongs to: itself for an ``__init__``, else its parent."""
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


@functools.cache
def module_imports(path: Path) -> frozenset[str]:
    """Every module a module imports, anywhere in it (function-level and ``TYPE_CHECKING`` imports included).

    Relative imports are resolved; ``from pkg import name`` counts as importing ``pkg.name``
    when that is a module of this project, else ``pkg``. Computed once per module and run: the
    three import tests of each package ask for the same graph.
    """
    name = module_name(path)
    package = _package_of(name, path)
    found: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                candidate = f"{source}.{alias.name}"
                is_module = (ROOT / candidate.replace(".", "/")).with_suffix(".py").exists() or \
                    (ROOT / candidate.replace(".", "/") / "__init__.py").exists()
                found.add(candidate if is_module else source)
    return frozenset(found)


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same top-level package it imports."""
    graph = {}
    for path in modules_of(package):
        graph[module_name(path)] = {m for m in module_imports(path) if m == package or m.startswith(f"{package}.")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (or a self-loop), each sorted (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = itertools.count()

    def visit(node: str) -> None:
        index[node] = low[node] = next(counter)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def unit_graph(package: str, graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between the parts of a package: each subpackage is one node, each module directly in it another.

    ``__init__`` modules only re-export their part's names, so their imports are left out.
    """

    def unit(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2]) if len(parts) > 1 else module

    units: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if (ROOT / module.replace(".", "/") / "__init__.py").exists():
            continue
        source = unit(module)
        units.setdefault(source, set()).update(unit(t) for t in targets if unit(t) != source and t != package)
    return units


def private_imports(package: str, graph: dict[str, set[str]]) -> list[str]:
    """Imports of a private module (``_name``) from outside the package that holds it (or its subpackages)."""
    offenders = []
    for module, _ in graph.items():
        path = ROOT / module.replace(".", "/")
        path = path / "__init__.py" if (path / "__init__.py").exists() else path.with_suffix(".py")
        own = _package_of(module, path)
        for target in sorted(module_imports(path)):
            parts = target.split(".")
            private = next((i for i, part in enumerate(parts) if part.startswith("_") and not part.startswith("__")), None)
            if private is None:
                continue
            holder = ".".join(parts[:private])
            if not (own == holder or own.startswith(f"{holder}.")):
                offenders.append(f"{module} imports {target}")
    return offenders


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_between_the_modules_of_a_package(package: str) -> None:
    """Within each package, modules import each other one way: no cycle, not even through TYPE_CHECKING or function-level imports."""
    graph = import_graph(package)
    assert len(graph) > 3
    assert cycles(graph) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_between_the_parts_of_a_package(package: str) -> None:
    """The subpackages (and top-level modules) of each package form layers: no two import each other, directly or around."""
    assert cycles(unit_graph(package, import_graph(package))) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_meet_through_public_names(package: str) -> None:
    """No module imports a private module of another package or of a sibling subpackage: only its own and its ancestors'."""
    assert private_imports(package, import_graph(package)) == []


def test_the_cycle_finder_finds_cycles_and_only_cycles() -> None:
    """cycles() reports a two-module and a three-module cycle and a self-import, and nothing in a layered graph."""
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_layer_and_privacy_checks_see_real_imports(tmp_path: Path) -> None:
    """The import scanner resolves relative, function-level and TYPE_CHECKING imports, so a dodged cycle is still seen."""
    source = textwrap.dedent('''
        from typing import TYPE_CHECKING
        from ..dstream import DStream
        if TYPE_CHECKING:
            from .._context import StreamingContext
        def later():
            from ..spark._bridge import run_spark
    ''')
    module = ROOT / "streaming" / "inputs" / "_probe_for_structure_test.py"
    module.write_text(source)
    try:
        parsed.cache_clear()
        module_imports.cache_clear()
        found = module_imports(module)
        assert {"streaming.dstream", "streaming._context", "streaming.spark._bridge"} <= found
        graph = {"streaming.inputs._probe_for_structure_test": found}
        assert private_imports("streaming", graph) == [
            "streaming.inputs._probe_for_structure_test imports streaming.spark._bridge"]
    finally:
        module.unlink()
        parsed.cache_clear()
        module_imports.cache_clear()


# -- (6) sizes: no class over 500 lines, no module over 600 --

MAX_CLASS_LINES = 500
MAX_MODULE_LINES = 600


def oversized(source: str, path: str, tree: ast.Module | None = None) -> list[str]:
    """``path (n lines)`` if the module is too long, ``path:Class (n lines)`` for each class that is (nested ones too)."""
    found = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{path} ({lines} lines)")
    for node in ast.walk(tree or ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            if size > MAX_CLASS_LINES:
                found.append(f"{path}:{node.name} ({size} lines)")
    return found


def test_the_size_check_measures_classes_and_modules() -> None:
    """oversized() reports a long module and a long (nested) class with their sizes, and nothing for small ones."""
    nested = "class Outer:\n    class Inner:\n" + "".join(f"        x{i} = {i}\n" for i in range(MAX_CLASS_LINES))
    assert oversized(nested, "m.py") == ["m.py:Outer (502 lines)", "m.py:Inner (501 lines)"]
    assert oversized("x = 1\n" * (MAX_MODULE_LINES + 1), "m.py") == [f"m.py ({MAX_MODULE_LINES + 1} lines)"]
    assert oversized("class Small:\n    pass\n" + "x = 1\n" * (MAX_MODULE_LINES - 2), "m.py") == []


def test_no_class_over_500_lines_and_no_module_over_600() -> None:
    """Every module of scheduler/, listeners/ and streaming/ has at most 600 lines and each of its classes at most 500."""
    checked = [p for package in PACKAGES for p in modules_of(package)]
    assert len(checked) > 100
    offenders = [found for p in checked for found in oversized(p.read_text(), str(p.relative_to(ROOT)), parsed(p))]
    assert offenders == [], "too long:\n" + "\n".join(offenders)


# -- (7) no reach into another module's private attributes --


def _stored_names(target: ast.expr) -> Iterator[ast.expr]:
    """The single targets of an assignment target (tuples and starred ones unpacked)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _stored_names(element)
    elif isinstance(target, ast.Starred):
        yield from _stored_names(target.value)
    else:
        yield target


def _assigned(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return [n for t in node.targets for n in _stored_names(t)]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        return list(_stored_names(node.target))
    return []


def names_defined_in(tree: ast.Module) -> set[str]:
    """The names a module defines: top-level ones, class-body ones, and ``self.x``/``cls.x`` stores (not locals or arguments)."""
    defined: set[str] = set()
    bodies: list[list[ast.stmt]] = [tree.body] + [n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    for body in bodies:
        for statement in body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(statement.name)
            defined.update(t.id for t in _assigned(statement) if isinstance(t, ast.Name))
    for node in ast.walk(tree):
        defined.update(t.attr for t in _assigned(node)
                       if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in ("self", "cls"))
    return defined


def _is_own(receiver: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()``: the object's own attributes, whatever module defined them."""
    if isinstance(receiver, ast.Name):
        return receiver.id in ("self", "cls")
    return isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super"


def private_reaches(source: str | ast.Module) -> list[tuple[int, str]]:
    """``(line, "receiver._name")`` for every private attribute of another module the source reads or writes."""
    tree = ast.parse(textwrap.dedent(source)) if isinstance(source, str) else source
    defined = names_defined_in(tree)
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and not _is_own(node.value) and node.attr not in defined):
            found.append((node.lineno, f"{ast.unparse(node.value)}.{node.attr}"))
    return sorted(found)


# (module, attribute, why it cannot be public). Keep it short (< 15) and free of streaming/_context.py;
# an entry no longer needed fails the test.
PRIVATE_REACH_ALLOWLIST = [
    ("scheduler/_streams.py", "_get_running_loop", "asyncio's non-raising running-loop lookup (in asyncio.events.__all__)"),
    ("scheduler/_worker_threads.py", "_register_atexit", "threading: run before the interpreter joins non-daemon threads "
     "(concurrent.futures' own exit hook; atexit runs too late)"),
    ("scheduler/query/_fsspec_files.py", "_strip_protocol", "fsspec's path form of one file system (no public twin)"),
    ("streaming/simulation/_loop.py", "_format_callback_source", "asyncio's words for a failed callback, as Handle._run reports it"),
    ("streaming/spark/_py4j.py", "_active_spark_context", "pyspark: the running SparkContext (no public getter that does not create one)"),
    ("streaming/spark/_py4j.py", "_ensure_initialized", "pyspark: launch the JVM gateway without a SparkContext (spark-submit's settings)"),
    ("streaming/spark/_py4j.py", "_jvm", "pyspark: the JVM view, for Hadoop's FileSystem and Spark's status store"),
    ("streaming/spark/_py4j.py", "_jsc", "pyspark: the Java SparkContext (Hadoop configuration, clearJobGroup)"),
    ("streaming/spark/_py4j.py", "_gateway", "pyspark: the py4j gateway (Java arrays)"),
    ("streaming/spark/_py4j.py", "_gateway_client", "py4j: the client whose send_command the job-group hook wraps"),
    ("streaming/spark/_py4j.py", "_conf", "pyspark: one setting per py4j call (getConf() copies the whole conf)"),
]


def _print_allowlist() -> None:
    print(f"\nprivate reaches allowed ({len(PRIVATE_REACH_ALLOWLIST)}):")
    for module, attribute, reason in PRIVATE_REACH_ALLOWLIST:
        print(f"  {module}: .{attribute} -- {reason}")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f(node):\n    return node._parents", ["node._parents"]),
        ("def f(job):\n    job._output_op_id = 3", ["job._output_op_id"]),
        ("def f(sc):\n    return sc._jsc.hadoopConfiguration()", ["sc._jsc"]),
        ("class A:\n    def f(self, other):\n        return self.x._y", ["self.x._y"]),
        ("def f(a):\n    _local = 1\n    return a._local", ["a._local"]),  # a local variable defines nothing
        ("def f(_arg, b):\n    return b._arg", ["b._arg"]),  # nor does an argument
        ("import asyncio\nasyncio._get_running_loop()", ["asyncio._get_running_loop"]),
    ],
)
def test_the_private_reach_scanner_finds_reaches(source: str, expected: list[str]) -> None:
    """A private attribute read or written on anything but self/cls/super() is found unless this module defines it."""
    assert [what for _, what in private_reaches(source)] == expected


@pytest.mark.parametrize(
    "source",
    [
        "class A:\n    def __init__(self):\n        self._x = 1\n    def f(self, other):\n        return other._x",
        "class A:\n    _count = 0\n    def f(self, other):\n        return other._count",
        "class A:\n    def _hook(self):\n        pass\n    def f(self, other):\n        other._hook()",
        "class P:\n    _slide: int\ndef f(p):\n    return p._slide",
        "_registry = {}\ndef f(module):\n    return module._registry",
        "class A:\n    def f(self):\n        return self._x, super()._y, type(self).__name__",
        "class A:\n    @classmethod\n    def f(cls):\n        cls._made = True\n        return cls._made",
        "class A:\n    def __init__(self):\n        self._a, (self._b, *self._c) = 1, (2, 3)\n"
        "    def f(self, o):\n        return o._a, o._b, o._c",
    ],
)
def test_the_private_reach_scanner_accepts_this_modules_names(source: str) -> None:
    """Own attributes and names defined in the module (class body, self/cls stores, top level) are not reaches."""
    assert private_reaches(source) == []


def test_no_module_reaches_into_another_modules_privates() -> None:
    """x._name (x not self/cls/super()) only for a _name the module defines, else in the short printed allowlist, never stale."""
    _print_allowlist()
    assert len(PRIVATE_REACH_ALLOWLIST) < 15
    assert not any(module == "streaming/_context.py" for module, _, _ in PRIVATE_REACH_ALLOWLIST)
    allowed = {(module, attribute) for module, attribute, _ in PRIVATE_REACH_ALLOWLIST}
    used: set[tuple[str, str]] = set()
    offenders = []
    for package in PACKAGES:
        for path in modules_of(package):
            module = str(path.relative_to(ROOT))
            for line, what in private_reaches(parsed(path)):
                key = (module, what.rpartition(".")[2])
                if key in allowed:
                    used.add(key)
                else:
                    offenders.append(f"{module}:{line}: {what}")
    assert offenders == []
    assert sorted(allowed - used) == [], "stale allowlist entries: remove them"


# -- (8) py4j only in streaming/spark/ --

PY4J_ATTRIBUTES = frozenset({"_jvm", "_jsc", "_jrdd", "_gateway", "_gateway_client", "hadoopConfiguration", "getFileSystem"})


def py4j_uses(source: str | ast.Module) -> list[tuple[int, str]]:
    """``(line, what)`` for every py4j import, pyspark py4j handle (``_jvm``, ``_jsc``, ...), Hadoop FileSystem call or JVM class path."""
    found = []
    for node in ast.walk(ast.parse(textwrap.dedent(source)) if isinstance(source, str) else source):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if a.name.split(".")[0] == "py4j"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "py4j":
            found.append((node.lineno, f"from {node.module} import"))
        elif isinstance(node, ast.Attribute):
            if node.attr in PY4J_ATTRIBUTES:
                found.append((node.lineno, f".{node.attr}"))
            elif node.attr == "apache" and isinstance(node.value, ast.Attribute) and node.value.attr == "org":
                found.append((node.lineno, ".org.apache (a JVM class)"))
    return sorted(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from py4j.protocol import Py4JJavaError", "from py4j.protocol import"),
        ("def f():\n    import py4j.java_gateway", "import py4j.java_gateway"),
        ("def f(sc):\n    return sc._jvm.java.lang.System", "._jvm"),
        ("def f(rdd):\n    return rdd._jrdd", "._jrdd"),
        ("def f(sc):\n    return sc._gateway", "._gateway"),
        ("def f(jsc):\n    return jsc.hadoopConfiguration()", ".hadoopConfiguration"),
        ("def f(path, conf):\n    return path.getFileSystem(conf)", ".getFileSystem"),
        ("def f(jvm):\n    return jvm.org.apache.hadoop.fs.Path('/')", ".org.apache (a JVM class)"),
    ],
)
def test_the_py4j_scanner_finds_each_kind_of_py4j_use(source: str, expected: str) -> None:
    """py4j imports, pyspark's py4j handles, Hadoop FileSystem calls and JVM class paths are all found."""
    assert expected in [what for _, what in py4j_uses(source)]


def test_the_py4j_scanner_accepts_plain_pyspark() -> None:
    """Public pyspark calls are not py4j uses."""
    assert py4j_uses("from pyspark import SparkContext\ndef f(sc):\n    return sc.parallelize([1]).collect(), sc.getConf()") == []


def test_py4j_only_in_the_spark_subpackage() -> None:
    """py4j, pyspark's JVM handles and Hadoop's FileSystem appear only under streaming/spark/."""
    inside = [p for p in modules_of("streaming") if p.is_relative_to(ROOT / "streaming" / "spark")]
    assert any(py4j_uses(parsed(p)) for p in inside), "the scanner should see streaming/spark/'s py4j calls"
    offenders = [f"{p.relative_to(ROOT)}:{line}: {what}"
                 for package in PACKAGES for p in modules_of(package) if p not in inside
                 for line, what in py4j_uses(parsed(p))]
    assert offenders == [], "py4j outside streaming/spark/:\n" + "\n".join(offenders)
