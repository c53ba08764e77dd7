"""Keep numba's disk cache of the package's kernels in step with their sources.

numba keys a cached kernel on its own source file only: a kernel compiled with the kernels it
calls in other modules keeps their old code when only those modules change (numba's
documented limitation, numba/numba#1833). With an editable install, a ``git pull`` that
touches a callee's module and not its caller's would run the old callee from the cache, and a
join could silently lose pairs. So at import the package checks its sources: if any module
changed since the last check, every module whose kernels may call into a changed one (itself
or anything it imports, transitively, within the package) has its cached kernels deleted, and
numba compiles them again on their next call.

A check that finds nothing changed costs one ``stat`` per module. Bookkeeping failures (a
read-only install) never fail the import: then nothing is cached in-tree either.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from pathlib import Path

#: The stamps of the last check, in the package's cache directory (:func:`_stamp_file`).
STAMPS = "kernel_sources.json"


def _modules(package: Path) -> dict[str, Path]:
    """Dotted name of every module of ``package`` (a directory) -> its file."""
    root = package.parent
    mods = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The package's modules that ``path`` (module ``name``) imports, anywhere in it."""
    tree = ast.parse(path.read_bytes())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package ``level - 1`` above this one
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    # a module imports its parents' ``__init__`` too
    deps = set()
    for mod in found:
        parts = mod.split(".")
        deps.update(".".join(parts[:k]) for k in range(1, len(parts) + 1))
    return (deps & known) - {name}


def _deep_hashes(mods: dict[str, Path]) -> dict[str, str]:
    """Per module, a hash of its source and of every package module it reaches by imports."""
    own = {m: hashlib.sha256(p.read_bytes()).hexdigest() for m, p in mods.items()}
    known = set(mods)
    graph = {m: _imports(p, m, known) for m, p in mods.items()}
    deep = {}
    for m in mods:
        seen, todo = {m}, [m]
        while todo:
            for dep in graph[todo.pop()] - seen:
                seen.add(dep)
                todo.append(dep)
        deep[m] = hashlib.sha256("".join(own[d] for d in sorted(seen)).encode()).hexdigest()
    return deep


def _cache_dir(path: Path) -> Path:
    """Where numba keeps the cached kernels of module file ``path``: under
    ``NUMBA_CACHE_DIR`` if set (numba's own sub-path for the file's directory), else in the
    file's ``__pycache__``."""
    cache_dir = os.environ.get("NUMBA_CACHE_DIR")
    if not cache_dir:
        return path.parent / "__pycache__"
    parent = os.path.dirname(os.path.abspath(path))
    digest = hashlib.sha1(parent.encode()).hexdigest()
    return Path(cache_dir) / f"{os.path.basename(parent)}_{digest}"


def _stamp_file(package: Path) -> Path:
    """The stamps of the last check, kept beside the cache they vouch for: one per
    ``NUMBA_CACHE_DIR`` (a check under one says nothing of another's kernels)."""
    return _cache_dir(package / "__init__.py") / STAMPS


def _drop_cached(path: Path) -> int:
    """Delete the cached kernels of module file ``path``; returns how many files went."""
    gone = 0
    for pattern in (f"{path.stem}.*.nbi", f"{path.stem}.*.nbc"):
        for f in _cache_dir(path).glob(pattern):
            f.unlink(missing_ok=True)
            gone += 1
    return gone


def refresh(package: Path) -> list[str]:
    """Delete the cached kernels of every module of ``package`` whose source, or the source
    of a package module it imports (transitively), changed since the last call; returns
    those modules' names. The first call, with no stamps yet, drops every cached kernel."""
    mods = _modules(package)
    stamp_file = _stamp_file(package)
    try:
        old = json.loads(stamp_file.read_text())
    except (OSError, ValueError):
        old = {}
    stats = {m: [p.stat().st_mtime_ns, p.stat().st_size] for m, p in mods.items()}
    if old.get("stats") == stats:
        return []
    deep = _deep_hashes(mods)
    before = old.get("deep", {})
    stale = [m for m in mods if before.get(m) != deep[m]]
    for m in stale:
        _drop_cached(mods[m])
    stamp_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = stamp_file.with_name(f"{STAMPS}.{os.getpid()}")
    tmp.write_text(json.dumps({"stats": stats, "deep": deep}))
    tmp.replace(stamp_file)  # atomic: processes importing at once each write whole stamps
    return stale
