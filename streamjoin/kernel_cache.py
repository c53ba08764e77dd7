"""Keep numba's disk cache of the package's kernels in step with their sources.

numba keys a cached kernel on its own source file only: a kernel compiled with the kernels it
calls in other modules keeps their old code when only those modules change (numba's
documented limitation, numba/numba#1833). With an editable install, a ``git pull`` that
touches a callee's module and not its caller's would run the old callee from the cache, and a
join could silently lose pairs. So at import the package checks its sources: if a module
changed since the last check, every module that imports it, directly or through other
modules of the package (``from a.b import c`` counts ``a.b`` and ``a.b.c``, not the parent
packages), has its cached kernels deleted, and numba compiles them again on their next call.

A check that finds nothing changed reads and hashes the sources (about 5 ms); one that finds
a change parses only the changed modules' imports. The stamps live beside the cache they vouch
for (the in-tree ``__pycache__``, or ``NUMBA_CACHE_DIR``). Not covered: a process that imported
the package before an edit and compiles afterwards writes kernels with the old callees under
the new stamps (restart long-lived processes after pulling), and an install whose package
directory is read-only (a wheel: an upgrade replaces every file, which numba notices itself).
Bookkeeping failures never fail the import.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from pathlib import Path

from numba.core import config

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
    """The package's modules that ``path`` (module ``name``) imports, anywhere in it: for
    ``import a.b`` and ``from a.b import c``, ``a.b`` (and ``a.b.c`` if it is a module); the
    parent packages run too, but a kernel can only call what its module's names refer to."""
    tree = ast.parse(path.read_bytes())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package ``level - 1`` above this one
                parts = package.split(".")
                up = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{up}.{base}" if base else up
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return (found & known) - {name}


def _cache_dir(path: Path) -> Path:
    """Where numba keeps the cached kernels of module file ``path``: under its cache
    directory if one is set (numba's own sub-path for the file's directory), else in the
    file's ``__pycache__``."""
    cache_dir = config.CACHE_DIR  # type: ignore[attr-defined]  # numba sets its config at run time
    if not cache_dir:
        return path.parent / "__pycache__"
    parent = os.path.dirname(os.path.abspath(path))
    digest = hashlib.sha1(parent.encode()).hexdigest()
    return Path(cache_dir) / f"{os.path.basename(parent)}_{digest}"


def _stamp_file(package: Path) -> Path:
    """The stamps of the last check, kept beside the cache they vouch for: one per cache
    directory (a check under one says nothing of another's kernels)."""
    return _cache_dir(package / "__init__.py") / STAMPS


def _drop_cached(path: Path) -> bool:
    """Delete the cached kernels of module file ``path``; whether it had any."""
    files = [f for ext in ("nbi", "nbc") for f in _cache_dir(path).glob(f"{path.stem}.*.{ext}")]
    for f in files:
        f.unlink(missing_ok=True)
    return bool(files)


def _load(stamp_file: Path) -> dict:
    try:
        old = json.loads(stamp_file.read_text())
    except (OSError, ValueError):
        return {}
    return old if isinstance(old, dict) else {}


def refresh(package: Path) -> list[str]:
    """Delete the cached kernels of every module of ``package`` whose source, or the source
    of a package module it imports (transitively), changed since the last call; returns the
    names of the modules that had cached kernels to delete. The first call, with no stamps
    yet, drops every cached kernel; a package whose cache directory cannot be written is
    left alone."""
    stamp_file = _stamp_file(package)
    cache_root = stamp_file.parent
    # a cache directory not made yet (a fresh NUMBA_CACHE_DIR) is made below, as numba would:
    # checking only its parent left the stamps unwritten, and the next run, finding none,
    # dropped every kernel the first had compiled
    exists = cache_root
    while not exists.exists() and exists != exists.parent:
        exists = exists.parent
    if not os.access(exists, os.W_OK):
        return []  # nothing is cached there either (numba falls back elsewhere)
    mods = _modules(package)
    own = {m: hashlib.sha256(p.read_bytes()).hexdigest() for m, p in mods.items()}
    old = _load(stamp_file)
    if old.get("own") == own:
        return []
    old_own, old_imports = old.get("own", {}), old.get("imports", {})
    known = set(mods)
    imports = {}
    for m, p in mods.items():
        kept = old_own.get(m) == own[m] and m in old_imports
        imports[m] = set(old_imports[m]) & known if kept else _imports(p, m, known)
    changed = {m for m in mods if old_own.get(m) != own[m]}
    dropped = []
    for m in mods:  # m's kernels are stale if it reaches a changed module
        seen, todo = {m}, [m]
        while todo and not seen & changed:
            for dep in imports[todo.pop()] - seen:
                seen.add(dep)
                todo.append(dep)
        if seen & changed and _drop_cached(mods[m]):
            dropped.append(m)
    cache_root.mkdir(parents=True, exist_ok=True)
    tmp = stamp_file.with_name(f"{STAMPS}.{os.getpid()}")
    stamps = {"own": own, "imports": {m: sorted(d) for m, d in imports.items()}}
    tmp.write_text(json.dumps(stamps))
    tmp.replace(stamp_file)  # atomic: processes importing at once each write whole stamps
    return dropped
