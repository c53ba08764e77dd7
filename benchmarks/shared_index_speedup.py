"""Throughput of one join core: ``shared_index(threads)`` vs ``single("pim_tree")``, and the
share of a step spent outside the task kernels (Python orchestration, expiry, merges).

    python benchmarks/shared_index_speedup.py CONFIG [LOG2_WINDOW] [BATCH] [TIMED_TUPLES] [TASK_SIZE] [STEP_TUPLES]

CONFIG: ``single``, ``shared1``, ``shared2`` (threads), ``shared2b`` (blocking merge),
``shared2c`` (T_S in 8-byte items, ``layout="compact"``; ``shared1c``, ``shared2bc`` too);
``compact`` (``single`` with PIM-Tree's ``layout="compact"``) and ``bplus`` (``single`` with
a B+-tree) for one-thread comparisons with the compact layout; ``bisort`` (``single``
with BI-Sort, a band join's default index, its default options). ``ceiling`` joins nothing:
it prints what two threads at once deliver on this machine against one
(:func:`streamjoin.roofline.two_thread_speedup`, dependent misses and arithmetic), the bound of
``shared2 / shared1``; alternate it with the configurations, since it varies on a shared host.
Band join, count window 2^LOG2_WINDOW per stream, match rate 2 (band width set so a probe
finds 2 partners on average), keys uniform. The windows are filled untimed (5 · 2^LOG2_WINDOW
tuples, 2.5 windows per stream) so the tuple stores are in their steady state: a store grows to
twice its window, and its tail then advances into memory never touched before until it first
compacts, one window of appends later. A fill of 3 windows (1.5 per stream) left that first
touch to the timed phase: 0.6 page faults per store append and about half of shared(1)'s
time outside the kernels at W = 2^20. Then TIMED_TUPLES (default one window) are joined,
timed (STEP_TUPLES: the most tuples a step of the shared core gathers across batches, 0 for
one batch a step; default the core's), and the pairs of tasks still running at the end are
waited for inside the timed phase; prints one line ``config window tuples seconds tuples/s outside_kernel_fraction pairs
cpu/wall kernel_s_per_thread faults``: the fraction is the core's own thread's time outside
the task kernel (store appends, staging, draining pairs, merges, expiry, Python); ``faults`` the minor page faults of
the timed phase per 1,000 tuples (near 0 in a steady state); ``steal`` the share of the
machine's processor time its host took during the timed phase (a virtual machine's; a run with
a few percent of steal is not comparable with a quiet one). A one-core configuration then prints
the nanoseconds a tuple its window parts spent probing (the index's search and the candidates'
refinement), inserting and expiring. Run the configurations side by side
(A B A B) and quote ratios with the load.
"""

from __future__ import annotations

import resource
import sys
import time

import streamjoin as sj
import streamjoin.actors.shared_index.core as si
from streamjoin.actors.emitter import Emitter
from streamjoin.actors.join_core import JoinCore
from streamjoin.actors.window_part import WindowPart
from streamjoin.roofline import cpu_times, steal_share
from streamjoin.validation import validate

config = sys.argv[1]
if config == "ceiling":
    from streamjoin.roofline import two_thread_speedup

    chase, arith = two_thread_speedup("chase"), two_thread_speedup("arith")
    print(f"ceiling two_threads/one: chase={chase:.2f} arith={arith:.2f}")
    sys.exit(0)
log2w = int(sys.argv[2]) if len(sys.argv) > 2 else 18
batch_size = int(sys.argv[3]) if len(sys.argv) > 3 else 1024
w = 1 << log2w
# integer keys uniform on [0, 1.5 w): a band of ±1 spans 3 of its values, which a w-tuple
# window holds 2 tuples of (the match rate of PIM-Tree §5)
high = 1.5 * w
query = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(w))
n_fill, n_timed = 5 * w, int(sys.argv[4]) if len(sys.argv) > 4 else w
data = sj.sources.synthetic(n_fill + n_timed, low=0, high=high, seed=1)
cols = validate(data, query)
batches = [b for _, b in Emitter(query, batch_size).on_chunk(cols, 0)]

if config == "single":
    core = JoinCore(query, "pim_tree")
elif config == "compact":  # one thread, T_S in 8-byte items
    core = JoinCore(query, "pim_tree", {"layout": "compact"})
elif config == "bplus":
    core = JoinCore(query, "bplus_tree")
elif config == "bisort":  # a band join's default index, with its defaults
    core = JoinCore(query, "bisort")
else:
    threads = int(config[len("shared")])
    merge = "blocking" if "b" in config[len("shared") :] else "nonblocking"
    options = {"layout": "compact"} if config.endswith("c") else {}
    task_size = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[5] != "-" else si.TASK_SIZE
    step_tuples = int(sys.argv[6]) if len(sys.argv) > 6 else si.STEP_TUPLES
    core = si.SharedIndexCore(
        query,
        "pim_tree",
        options,
        threads=threads,
        merge=merge,
        task_size=task_size,
        step_tuples=step_tuples,
    )
core.warm()

kernel_spans: list[tuple[int, float, float]] = []
real = si.run_tasks


def timed_run_tasks(k, *args):
    t0 = time.perf_counter()
    out = real(k, *args)
    kernel_spans.append((k, t0, time.perf_counter()))
    return out


si.run_tasks = timed_run_tasks

# one core's phases (single, compact, bplus, bisort): seconds inside its window parts' probes
# (the index's search and the candidates' refinement), inserts and expiries, timed phase only
phases = {"probe": 0.0, "insert": 0.0, "expire": 0.0}
timing = [False]


def timed_phase(name):
    real = getattr(WindowPart, name)

    def timed(self, *args, **kwargs):
        t0 = time.perf_counter()
        out = real(self, *args, **kwargs)
        if timing[0]:
            phases[name] += time.perf_counter() - t0
        return out

    return timed


for name in phases:
    setattr(WindowPart, name, timed_phase(name))
filled = 0
k = 0
while filled < n_fill:
    filled += len(batches[k])
    core.on_batch("in", batches[k])
    k += 1
core.on_idle()  # the fill's pairs still held
kernel_spans.clear()
timing[0] = True
pairs = tuples = 0
outside = 0.0
faults_start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
ticks_start = cpu_times()
t_start, cpu_start = time.perf_counter(), time.process_time()
for batch in batches[k:]:
    t0 = time.perf_counter()
    mark = len(kernel_spans)
    for _, p in core.on_batch("in", batch):
        pairs += len(p)
    t1 = time.perf_counter()
    # the core's own thread (thread 0; the pool's threads run on across calls)
    spans = [(s, e) for k, s, e in kernel_spans[mark:] if k == 0]
    inside = sum(e - s for s, e in spans)
    outside += (t1 - t0) - inside
    tuples += len(batch)
for _, p in core.on_idle():  # the pairs of tasks still running
    pairs += len(p)
elapsed = time.perf_counter() - t_start
cpu = time.process_time() - cpu_start
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_start
stolen = steal_share(ticks_start, cpu_times())
busy = [round(sum(e - s for k, s, e in kernel_spans if k == t), 3) for t in range(4)]
frac = outside / elapsed if config.startswith("shared") else float("nan")
print(
    f"{config} 2^{log2w} {tuples} {elapsed:.3f} {tuples / elapsed:.0f} {frac:.3f} {pairs} "
    f"cpu/wall={cpu / elapsed:.2f} kernel_s_per_thread={busy} "
    f"faults={1000 * faults / tuples:.2f} steal={stolen:.1%}"
)
# the window parts' phases (one core), and the window indexes' memory per item they hold
if isinstance(core, JoinCore):
    print(" ".join(f"{name}_ns_per_tuple={1e9 * t / tuples:.0f}" for name, t in phases.items()))
    held = [p.index for p in core.parts.values()]
else:
    held = [ix for ix in core.indexes.values() if ix is not None]
if held:
    per_item = sum(ix.nbytes for ix in held) / max(1, sum(len(ix) for ix in held))
    print(f"index_bytes_per_item={per_item:.1f}")
if hasattr(core, "close"):
    core.close()
