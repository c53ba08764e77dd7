"""Warming a join core reaches every kernel a run will call, so no run compiles in its timed
part (a compile costs 1-7 s; the first expiry of a B+-tree window once compiled its delete
path inside the run)."""

import subprocess
import sys
import textwrap

import pytest

# In a fresh process: warm a core, note how many signatures each numba dispatcher of the
# package holds (compiled or loaded from the disk cache), then run batches of several sizes
# through a window that fills, expires and, for subwindow indexes, rolls over. Print the
# dispatchers that gained a signature.
SCRIPT = textwrap.dedent(
    """
    import sys
    from numba.core.dispatcher import Dispatcher
    import streamjoin as sj
    from streamjoin.actors.emitter import Emitter
    from streamjoin.actors.join_core import JoinCore
    from streamjoin.validation import validate

    def dispatchers():
        found = {}
        for name, mod in list(sys.modules.items()):
            if name.startswith("streamjoin"):
                for attr, obj in vars(mod).items():
                    if isinstance(obj, Dispatcher):
                        found[f"{name}.{attr}"] = len(obj.signatures)
        return found

    index = sys.argv[1]
    pred = sj.equal("x") if index == "hash" else sj.band("x", 3)
    query = sj.Query(pred, window=sj.CountWindow(300))
    options = {"subwindow_size": 128} if index in ("bisort", "rap_table", "wib_tree") else {}
    data = sj.sources.synthetic(6000, low=0, high=3000, seed=1)
    emitter, batches = Emitter(query, batch_size=512), []
    for start, size in ((0, 3000), (3000, 37), (3037, 1), (3038, 2962)):
        cols = validate(data.slice(start, size), query, row_offset=start)
        batches += [b for _, b in emitter.on_chunk(cols) + emitter.on_eof()]
    core = JoinCore(query, index, options)
    core.warm()
    before = dispatchers()
    for batch in batches:
        core.on_batch("in", batch)
    after = dispatchers()
    print(" ".join(k for k, n in after.items() if n > before.get(k, 0)))
    """
)


@pytest.mark.slow  # 10 s: a process per index; run it after changing a kernel or a warm()
def test_warm_reaches_every_kernel():
    from streamjoin import indexes

    missed = {}
    for index in indexes.names():
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT, index], capture_output=True, text=True, timeout=600
        )
        assert out.returncode == 0, out.stderr[-2000:]
        if out.stdout.strip():
            missed[index] = out.stdout.split()
    assert not missed, f"kernels compiled after JoinCore.warm(): {missed}"


# The same for SPO-Join's stages: built through their configs (which warm them), then fed a
# two-inequality stream that merges, ships pieces early and late, probes and expires.
SPO_SCRIPT = textwrap.dedent(
    """
    import sys
    from numba.core.dispatcher import Dispatcher
    import streamjoin as sj
    from streamjoin.actors.base import RunSettings
    from streamjoin.actors.emitter import Emitter
    from streamjoin.validation import validate

    def dispatchers():
        found = {}
        for name, mod in list(sys.modules.items()):
            if name.startswith("streamjoin"):
                for attr, obj in vars(mod).items():
                    if isinstance(obj, Dispatcher):
                        found[f"{name}.{attr}"] = len(obj.signatures)
        return found

    self_join = sys.argv[1] == "self"
    query = sj.Query(sj.less("a") & sj.greater("b"), sj.CountWindow(3000), self_join=self_join)
    data = sj.sources.inequality_workload(12000, 3000, self_join=self_join, seed=1)
    topo = sj.topologies.spo(2, merge_every=1000, subintervals=2)
    stage = topo.config("mutable").build(query, RunSettings(), None)
    workers = [topo.config(f"worker{k}").build(query, RunSettings(), None) for k in range(2)]
    emitter = Emitter(query, batch_size=512)
    batches = [b for _, b in emitter.on_chunk(validate(data, query)) + emitter.on_eof()]
    before = dispatchers()
    for i, batch in enumerate(batches):
        runs = [(p, m) for p, m in stage.on_batch("in", batch) if p != "out"]
        for k, worker in enumerate(workers):
            if i % 2:
                worker.on_batch("in", batch)
            for port, run in runs:
                if port == f"w{k}":
                    worker.on_batch("runs", run)
            if not i % 2:
                worker.on_batch("in", batch)
    after = dispatchers()
    print(" ".join(k for k, n in after.items() if n > before.get(k, 0)))
    """
)


def test_spo_stages_warm_every_kernel():
    for kind in ("two_way", "self"):
        out = subprocess.run(
            [sys.executable, "-c", SPO_SCRIPT, kind], capture_output=True, text=True, timeout=600
        )
        assert out.returncode == 0, out.stderr[-2000:]
        assert not out.stdout.strip(), (
            f"compiled after the SPO stages warmed ({kind}): {out.stdout}"
        )
