"""Compiling a first run's slowest kernels in a second process (``streamjoin.compile_ahead``):
the helper fills numba's disk cache with the job's kernel, starts only when the cache lacks
it, and an index's jobs have the types its runs call them with."""

import subprocess
import sys
import textwrap

import numpy as np

import streamjoin as sj
from streamjoin import compile_ahead
from streamjoin.actors.join_core import JoinCore
from streamjoin.indexes.panjoin import bisort

KERNEL = """
import numpy as np
from numba import njit

@njit(cache=True)
def twice(x):
    return 2 * x

def jobs():
    return [(twice, (np.int64(3),))]
"""


def test_the_helper_compiles_into_the_disk_cache_once(tmp_path, monkeypatch):
    (tmp_path / "ahead_kernel.py").write_text(textwrap.dedent(KERNEL))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(compile_ahead, "_started", set())
    import ahead_kernel

    assert not compile_ahead.cached(ahead_kernel.twice, (np.int64(3),))
    helper = compile_ahead.start("ahead_kernel:jobs")
    assert helper is not None
    assert helper.wait(timeout=120) == 0
    # compiled in the other process, loaded here from the disk
    assert compile_ahead.cached(ahead_kernel.twice, (np.int64(3),))
    assert not ahead_kernel.twice.signatures  # (nothing compiled in this one)
    assert compile_ahead.start("ahead_kernel:jobs") is None  # once per process
    compile_ahead._started.clear()
    assert compile_ahead.start("ahead_kernel:jobs") is None  # cached: nothing to start
    # a second helper while one holds the target exits at once, compiling nothing
    with open(compile_ahead._lock_path("ahead_kernel:jobs"), "w") as lock:
        import fcntl

        fcntl.flock(lock, fcntl.LOCK_EX)
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "from streamjoin import compile_ahead as c; "
                "print(c.compile_jobs('ahead_kernel:jobs'))",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.stdout.strip() == "0", out.stderr


def test_off_when_asked_or_when_there_is_no_target(monkeypatch):
    monkeypatch.setattr(compile_ahead, "_started", set())
    assert compile_ahead.start(None) is None
    monkeypatch.setenv("STREAMJOIN_COMPILE_AHEAD", "0")
    assert not compile_ahead.enabled()
    assert compile_ahead.start(f"{bisort.__name__}:packed_probe_jobs") is None


def test_bisort_jobs_have_the_types_a_run_calls_them_with():
    """A job whose example arguments drifted from the run's types would compile a kernel no
    run uses: the warm-up of a compact BI-Sort core must call exactly the job's signature."""
    query = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(4096))
    core = JoinCore(query, "bisort")
    assert [p.index.compile_ahead() for p in core.parts.values()] == [
        f"{bisort.__name__}:packed_probe_jobs"
    ] * 2
    core.warm()
    for dispatcher, args in bisort.packed_probe_jobs():
        sig = tuple(compile_ahead._signature(args))
        assert sig in [tuple(s) for s in dispatcher.signatures]
    wide = JoinCore(query, "bisort", {"layout": "wide"})
    assert {p.index.compile_ahead() for p in wide.parts.values()} == {None}


def test_shared_pim_tree_jobs_have_the_state_types_a_core_runs_with():
    """T_I's insert and the merge's pending updates are compiled ahead for the state type of
    a default shared PIM-Tree: the one a shared-index core's indexes hand its kernels."""
    import numba

    from streamjoin.actors.shared_index.core import SharedIndexCore
    from streamjoin.indexes.pim import shared

    query = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(4096))
    core = SharedIndexCore(query, "pim_tree", {}, threads=1)
    target = f"{shared.__name__}:late_kernel_jobs"
    assert {ix.compile_ahead() for ix in core.indexes.values()} == {target}
    for _, args in shared.late_kernel_jobs():
        assert numba.typeof(args[0]) == numba.typeof(core.indexes[0].state)
    compact = SharedIndexCore(query, "pim_tree", {"layout": "compact"}, threads=1)
    assert {ix.compile_ahead() for ix in compact.indexes.values()} == {None}
    core.close()
    compact.close()


def test_the_task_kernels_callees_are_compiled_ahead_for_the_types_a_run_calls():
    """The shared core's task kernel loads its two largest callees from the cache only if the
    helper compiled them for the exact types it passes: numba's type inference of the task
    kernel (its typing alone: a compile of it took ten times as long) for a two-way and a
    self-join core's step calls each job's callee with the job's argument types."""
    import numba
    from numba.core import compiler, typed_passes

    from streamjoin.actors.shared_index import kernels
    from streamjoin.actors.shared_index.core import TASK_KERNEL_JOBS, SharedIndexCore

    task = kernels.run_tasks
    called: dict[str, set] = {}  # callee -> the argument types the task kernel calls it with
    for self_join in (False, True):
        query = sj.Query(sj.band("x", 2.0), window=sj.CountWindow(100), self_join=self_join)
        core = SharedIndexCore(query, "pim_tree", {}, threads=1)
        core._open(8)
        sig = compile_ahead._signature((0, 0, 0, *core._flight.args))
        core.close()
        ir = compiler.run_frontend(task.py_func)
        typemap, _, calltypes, _ = typed_passes.type_inference_stage(
            task.typingctx, task.targetctx, ir, sig, None
        )
        for expr, call in calltypes.items():
            callee = typemap.get(expr.func.name) if getattr(expr, "op", None) == "call" else None
            if isinstance(callee, numba.types.Dispatcher):
                called.setdefault(callee.dispatcher.py_func.__name__, set()).add(call.args)
    jobs = compile_ahead.jobs_of(TASK_KERNEL_JOBS)
    assert {d.py_func.__name__ for d, _ in jobs} == {"_join_tuples", "_join_tail"}
    for dispatcher, args in jobs:
        name = dispatcher.py_func.__name__
        assert compile_ahead._signature(args) in called[name], name
