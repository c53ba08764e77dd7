"""Compile a first run's slowest kernels in a second process while the run compiles the rest.

On an empty numba cache a join waits for its kernels to compile, one after another, in the
order the run first calls them, on one processor. Some of them are large and are reached late:
BI-Sort's probe of a packed subwindow (:func:`~streamjoin.indexes.panjoin.bisort.
append_bisort` over compact items, a quarter of the default job's compiling) comes only once a subwindow
has filled, after the wide probe and the insert path. An index names such *jobs*
(:meth:`~streamjoin.indexes.base.WindowIndex.compile_ahead`: ``"module:function"``, the
function returning ``[(dispatcher, example_args), …]``); when its join core warms up and the
disk cache lacks one of them, :func:`start` runs ``python -m streamjoin.compile_ahead
module:function`` in the background, which compiles each job for the types of its example
arguments into numba's disk cache. When the run reaches that kernel, numba finds it there
(it looks in the disk cache before it compiles) instead of compiling it again; if the helper
has not finished, the run compiles it itself, as it would have: the answer never depends on
the helper. A shared-index core names the task kernel's largest callees the same way
(:func:`~streamjoin.actors.shared_index.core.task_kernel_jobs`) and, while a helper compiles
them, compiles its index's late kernels itself (:func:`compile_now`) before its warm-up
reaches the task kernel: each process then compiles a part of the critical path.

Once per process and target; a helper already compiling the same target (another actor of a
Ray run) makes the next one exit at once (a lock file). ``STREAMJOIN_COMPILE_AHEAD=0`` turns
it off (timing what it buys: ``benchmarks/first_run.py``).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import numba

#: What an index's job function returns: ``(dispatcher, example_args)`` pairs (numba
#: dispatchers, ``@njit(cache=True)`` functions).
Jobs = Sequence[tuple[Any, tuple]]

_started: set[str] = set()
_helpers: list[subprocess.Popen] = []


def enabled() -> bool:
    """Whether first runs compile ahead (``STREAMJOIN_COMPILE_AHEAD``, default on)."""
    return os.environ.get("STREAMJOIN_COMPILE_AHEAD", "1") not in ("0", "", "false", "no")


def jobs_of(target: str) -> Jobs:
    """The jobs ``"module:function"`` names."""
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)()


def _signature(args: tuple) -> tuple:
    return tuple(numba.typeof(a) for a in args)


def cached(dispatcher, args: tuple) -> bool:
    """Whether ``dispatcher`` has a kernel for ``args``' types, in memory or on disk."""
    sig = _signature(args)
    if any(tuple(s) == sig for s in dispatcher.signatures):
        return True
    cache = getattr(dispatcher, "_cache", None)
    if cache is None:  # (a numba without the attribute: say cached, start nothing)
        return True
    return cache.load_overload(sig, dispatcher.targetctx) is not None


def start(target: str | None) -> subprocess.Popen | None:
    """Compile ``target``'s jobs in a background process if the disk cache lacks one of
    them; returns the process (None when nothing was started)."""
    if target is None or target in _started or not enabled():
        return None
    _started.add(target)
    try:
        if all(cached(d, args) for d, args in jobs_of(target)):
            return None
        helper = subprocess.Popen(
            [sys.executable, "-m", "streamjoin.compile_ahead", target],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except Exception:  # a helper is an optimisation: the run compiles what it needs itself
        return None
    _helpers.append(helper)
    return helper


def compile_now(target: str) -> None:
    """Compile (or load) ``target``'s jobs in this process: what a run does first while a
    helper compiles another target that the run reaches soon after (a kernel's callees)."""
    for dispatcher, args in jobs_of(target):
        if not cached(dispatcher, args):
            dispatcher.compile(_signature(args))


def _lock_path(target: str) -> str:
    name = "".join(c if c.isalnum() else "_" for c in target)
    return os.path.join(tempfile.gettempdir(), f"streamjoin-compile-ahead-{os.getuid()}-{name}")


def compile_jobs(target: str) -> int:
    """Compile ``target``'s jobs into the disk cache (the helper's work); returns how many
    it compiled (0 if another helper holds the target)."""
    with open(_lock_path(target), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0
        done = 0
        for dispatcher, args in jobs_of(target):
            if not cached(dispatcher, args):
                dispatcher.compile(_signature(args))
                done += 1
        return done


@atexit.register
def _reap() -> None:
    """Collect helpers that have ended (one still compiling goes on: its kernels land in the
    cache for the next run)."""
    for helper in _helpers:
        with contextlib.suppress(Exception):
            helper.poll()


if __name__ == "__main__":
    compile_jobs(sys.argv[1])
