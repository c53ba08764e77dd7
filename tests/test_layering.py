"""The package's layers (docs/design.md §3): imports only go down, no module imports another that
imports it back, and the heavy or networked dependencies stay in their own corners.

Imports are read from the source (at any level, inside functions too), so a cycle held
together by a function-level import is caught as well.
"""

import ast
import pathlib
import subprocess
import sys

import pytest

import streamjoin

ROOT = pathlib.Path(streamjoin.__file__).parent
PKG = "streamjoin"


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = [PKG, *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """Every module ``name`` imports: streamjoin modules by their full name (``from X import
    Y`` counts X, or X.Y when Y is a module), others by their top-level package."""
    path = MODULES[name]
    is_pkg = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_pkg else name.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([base] if base else [])])
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            ]
        else:
            continue
        for t in targets:
            if t.split(".")[0] != PKG:
                found.add(t.split(".")[0])
                continue
            while t and t not in MODULES:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


IMPORTS = {m: _imports(m) for m in MODULES}


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_no_import_cycle():
    """No module reaches itself through the imports of streamjoin modules (the package face,
    which only re-exports, is not a layer)."""
    edges = {m: {t for t in ts if t in MODULES and t != PKG} for m, ts in IMPORTS.items()}
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                cycles.append(path[path.index(t) :] + [t])
            elif t not in state:
                visit(t, [*path, t])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


#: What each lower layer may import from the package (everything else is above it).
_BELOW = {
    "streamjoin.indexes": (
        "streamjoin.indexes",
        "streamjoin.query",
        "streamjoin.checks",
        "streamjoin.modes",
    ),
    "streamjoin.actors": (
        "streamjoin.actors",
        "streamjoin.indexes",
        "streamjoin.query",
        "streamjoin.validation",
        "streamjoin.event_time",
        "streamjoin.batch",
        "streamjoin.checks",
        "streamjoin.modes",
        "streamjoin.compile_ahead",
    ),
}


@pytest.mark.parametrize("layer", sorted(_BELOW))
def test_lower_layers_import_nothing_above_them(layer):
    wrong = {
        m: sorted(t for t in ts if _in(t, PKG) and not any(_in(t, ok) for ok in _BELOW[layer]))
        for m, ts in IMPORTS.items()
        if _in(m, layer)
    }
    assert not {m: ts for m, ts in wrong.items() if ts}


def test_actors_know_neither_runtime_nor_topologies():
    for m, ts in IMPORTS.items():
        if _in(m, "streamjoin.actors"):
            assert not [t for t in ts if _in(t, "streamjoin.runtime")], m
            assert not [t for t in ts if _in(t, "streamjoin.topologies")], m


@pytest.mark.parametrize(
    ("package", "allowed"),
    [
        (  # the ray backend's package, and the simulator's timing of Ray's messages
            "ray",
            lambda m: (
                _in(m, "streamjoin.runtime.ray") or m == "streamjoin.runtime.sim.ray_messages"
            ),
        ),
        ("pyspark", lambda m: _in(m, "streamjoin.spark_bridge")),
    ],
)
def test_heavy_dependencies_stay_in_their_corner(package, allowed):
    """Only ``runtime/ray/`` (and the simulator's Ray timing) imports Ray, only ``spark_bridge``
    imports PySpark."""
    importers = sorted(m for m, ts in IMPORTS.items() if package in ts)
    assert importers, f"no module imports {package}: the check would pass vacuously"
    assert [m for m in importers if not allowed(m)] == []


def test_import_streamjoin_loads_no_heavy_dependency():
    """``import streamjoin`` stays light: Ray, PySpark and SimPy load when a run needs them."""
    code = "import sys, streamjoin; print(sorted({'ray', 'pyspark', 'simpy'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
