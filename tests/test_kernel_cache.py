"""numba's disk cache keeps a caller's copy of a callee from another module: the package
drops the cached kernels that may call into a changed module (``streamjoin.kernel_cache``)."""

import os
import subprocess
import sys
import textwrap

import pytest
from numba.core import config

from streamjoin.kernel_cache import STAMPS, _cache_dir, _imports, _modules, refresh

CALL = "import pkg.a; print(pkg.a.f())"


@pytest.fixture(autouse=True)
def _in_tree_cache(monkeypatch):
    """The in-tree ``__pycache__``, whatever ``NUMBA_CACHE_DIR`` the test run has (the tests
    that check another cache directory set their own)."""
    monkeypatch.setattr(config, "CACHE_DIR", "")


def _package(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        textwrap.dedent(
            """
            from numba import njit
            from pkg.b import g

            @njit(cache=True)
            def f():
                return g() + 10
            """
        )
    )
    (pkg / "b.py").write_text(
        "from numba import njit\n\n@njit(cache=True)\ndef g():\n    return 1\n"
    )
    (pkg / "c.py").write_text("X = 1\n")
    return pkg


def _run(tmp_path, refreshed: bool) -> int:
    code = CALL
    if refreshed:
        code = "from pathlib import Path; from streamjoin.kernel_cache import refresh; "
        code += f"refresh(Path({str(tmp_path / 'pkg')!r})); {CALL}"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.split()[-1])


def _edit_callee(pkg):
    """Same size, same modification time: the check goes by content."""
    stat = (pkg / "b.py").stat()
    (pkg / "b.py").write_text(
        "from numba import njit\n\n@njit(cache=True)\ndef g():\n    return 2\n"
    )
    os.utime(pkg / "b.py", ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _cached(pkg, *stems) -> set:
    """Fake cached kernels of modules ``stems`` (what :func:`refresh` deletes); returns
    the modules that have some."""
    cache = pkg / "__pycache__"
    cache.mkdir(exist_ok=True)
    for stem in stems:
        (cache / f"{stem}.f-5.py311.nbi").write_text("")
        (cache / f"{stem}.f-5.py311.1.nbc").write_text("")
    return {f.name.split(".")[0] for f in cache.glob("*.nb[ic]")}


def test_a_changed_callee_reaches_its_cached_caller(tmp_path):
    pkg = _package(tmp_path)
    assert _run(tmp_path, refreshed=True) == 11
    _edit_callee(pkg)
    assert _run(tmp_path, refreshed=True) == 12
    assert refresh(pkg) == [], "nothing changed since the last check"


def test_without_the_check_the_cached_caller_keeps_the_old_callee(tmp_path):
    """The hazard itself (numba/numba#1833): the test above would fail without the check."""
    pkg = _package(tmp_path)
    assert _run(tmp_path, refreshed=False) == 11
    _edit_callee(pkg)
    assert _run(tmp_path, refreshed=False) == 11


def test_only_modules_that_reach_a_changed_one_are_dropped(tmp_path):
    pkg = _package(tmp_path)
    _cached(pkg, "a", "b", "c")
    assert set(refresh(pkg)) == {"pkg.a", "pkg.b", "pkg.c"}, "no stamps: every cached one"
    _cached(pkg, "a", "b", "c")
    _edit_callee(pkg)
    assert set(refresh(pkg)) == {"pkg.a", "pkg.b"}
    assert _cached(pkg) == {"c"}
    (pkg / "c.py").write_text("X = 2\n")
    assert refresh(pkg) == ["pkg.c"]


def test_a_package_importing_its_modules_does_not_tie_them_together(tmp_path):
    """``pkg/__init__`` imports every module (as ``streamjoin``'s does): an edit of ``b``
    drops ``b`` and its importer ``a``, not ``c``, though ``pkg`` imports all three (a
    kernel calls only what its own module's names refer to)."""
    pkg = _package(tmp_path)
    (pkg / "__init__.py").write_text("from pkg import a, b, c\n")
    refresh(pkg)
    _cached(pkg, "a", "b", "c")
    _edit_callee(pkg)
    assert set(refresh(pkg)) == {"pkg.a", "pkg.b"}


def test_imports_relative_absolute_and_inside_functions(tmp_path):
    pkg = _package(tmp_path)
    (pkg / "d.py").write_text(
        "from . import c\nfrom .b import g\n\ndef h():\n    import pkg.a\n    return pkg.a\n"
    )
    mods = _modules(pkg)
    assert _imports(mods["pkg.d"], "pkg.d", set(mods)) == {"pkg", "pkg.a", "pkg.b", "pkg.c"}


def test_a_cache_dir_of_its_own_is_checked_on_its_own(tmp_path, monkeypatch):
    """Stamps live beside the cache they vouch for: a check under ``NUMBA_CACHE_DIR`` leaves
    the in-tree cache alone, and the in-tree check still sees its own changes."""
    pkg = _package(tmp_path)
    refresh(pkg)
    _cached(pkg, "a")
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "elsewhere"))
    assert refresh(pkg) == [], "no stamps there yet, and nothing cached there"
    _edit_callee(pkg)
    assert refresh(pkg) == []
    assert _cached(pkg) == {"a"}, "the in-tree cache is not this check's"
    monkeypatch.setattr(config, "CACHE_DIR", "")
    assert refresh(pkg) == ["pkg.a"]


def test_a_cache_dir_not_made_yet_gets_its_stamps_at_the_first_check(tmp_path, monkeypatch):
    """A fresh ``NUMBA_CACHE_DIR`` (its parents missing too): the first check writes its
    stamps, so the kernels compiled after it survive the second check (they were all dropped,
    and a user's second run compiled everything again)."""
    pkg = _package(tmp_path)
    cache = tmp_path / "fresh" / "numba"
    monkeypatch.setattr(config, "CACHE_DIR", str(cache))
    assert refresh(pkg) == []
    kernels = _cache_dir(pkg / "a.py")
    assert (kernels / STAMPS).exists()
    (kernels / "a.f-5.py311.nbi").write_text("")  # what the run then compiles
    assert refresh(pkg) == []
    assert (kernels / "a.f-5.py311.nbi").exists()
