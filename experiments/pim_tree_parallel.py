"""PIM-Tree §4 and §5's parallel experiments: the shared-index join core
(``sj.topologies.shared_index``) against the single-threaded cores and round-robin
partitioning, on this machine's 2 cores, and simulated past them.

Workload (as ``pim_tree_paper.py``): band join ``|r.x - s.x| <= eps`` of two streams of
integer keys uniform on ``[0, 2^31)``, ``eps`` chosen for match rate 2 (a probe finds 2
partners on average in a window; :func:`~streamjoin.sources.band_for_match_rate`), count
window W per stream, batches of 1,024; a self-join (Fig. 12) keeps W tuples of one
stream. Throughput is the steady state's: the first ``FILL_WINDOWS`` W = 5 W tuples fill the
windows untimed (2.5 windows per stream: the tuple stores are then in their steady state, see
:data:`FILL_WINDOWS`), the next ``max(W, 2^19)`` (``--quick``: ``max(W, 2^15)``) are timed,
wall clock.

Parts (``--only`` takes a comma-separated list):

- ``fig13c``: the five implementations at W = 2^16 … 2^22 (quick 2^12 … 2^14): single-thread
  B+-tree, single-thread PIM-Tree, ``shared_index(2)`` with blocking and with nonblocking merge
  (these four cores driven directly, outside ``sj.run``, as the benchmark does), and
  ``split(2)`` with ``pim_tree`` (round-robin partitioning, §2.2.3) through
  ``sj.run(backend="local")``, timed as the difference between a run of the fill and a run
  of the whole input. The configurations run in alternation (A B C D E, repeated), median
  of the rounds. Beside them, ``split(2)`` and ``shared_index(2)`` on the simulator (two
  simulated processors each), the round-robin comparison on 2 cores that ``local`` cannot
  give;
- ``fig10``: task size 1 … 1,024 for ``shared_index(1)`` and ``shared_index(2)`` at W = 2^20
  (quick 2^14), measured, in alternation (Fig. 10c; Fig. 10d's latency is not swept);
- ``fig12``: scalability, two-way join and self-join: ``single("pim_tree")`` (no concurrency
  control) and ``shared_index(1)``, ``shared_index(2)`` measured; ``shared_index(1, 2, 4, 8,
  16)`` and ``single`` simulated (``backend="sim"``, input arriving faster than any
  configuration takes it, steady state from two runs as above), at batches of 1,024 and
  8,192, with the core's own throughput beside the end-to-end one (:func:`via_run`), and
  again with the batches received free (:data:`FREE`: as the paper's threads take tuples
  from memory);
- ``fig14``: merge cost per window and merge mode: the shared indexes' ``merges``,
  ``merged``, ``merge_seconds`` (thread time), ``lock_waits`` over the timed phase, and
  throughput blocking against nonblocking (taken from ``fig13c``'s runs when both run);
- ``latency``: per-pair latency (``sj.run(backend="local", pace=...)``) of ``shared_index(2)``
  with blocking and nonblocking merge at W = 2^20 (quick 2^14), input paced at half the
  nonblocking core's measured throughput, pairs of tuples after the fill only; CDF, p50, p99,
  max.

Writes ``pim_tree_parallel{_quick}.{csv,md,png}`` and ``pim_tree_parallel_latency{_quick}.png``
(``pim_tree_parallel_<parts>{_quick}.*`` for a run of some parts) into the results folder (``$STREAMJOIN_RESULTS``, else ``experiments/results``).

Run: ``python experiments/pim_tree_parallel.py`` on a quiet machine (33 minutes on 2
cores); ``--quick`` for a smoke run (about a minute), ``--only fig13c,fig14`` for some parts.

The script is over 600 lines because its five parts share one workload, one alternation of
configurations and one report; :func:`write` (the markdown, with each figure's paper value
and the parallel join's speed targets) is a third of it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import statistics
import sys
import time

import numpy as np
import report
from tqdm import tqdm

import streamjoin as sj
from streamjoin import viz
from streamjoin.actors.emitter import Emitter
from streamjoin.actors.join_core import JoinCore
from streamjoin.actors.shared_index.core import TASK_SIZE, SharedIndexCore
from streamjoin.runtime.sim.host_profile import as_profile
from streamjoin.validation import validate

BATCH = 1024
PARTS = ("fig13c", "fig10", "fig12", "fig14", "latency")
SCALES = {
    "full": {
        "windows": [2**k for k in range(16, 23)],
        "window": 2**20,
        "merge_windows": [2**16, 2**18, 2**20, 2**22],
        "min_timed": 2**19,
        "rounds": 3,
        "task_sizes": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
        "sim_threads": [1, 2, 4, 8, 16],
        "latency_timed_s": 10.0,
    },
    "quick": {
        "windows": [2**12, 2**13, 2**14],
        "window": 2**14,
        "merge_windows": [2**12, 2**14],
        "min_timed": 2**15,
        "rounds": 3,
        "task_sizes": [1, 4, 16, 64, 256],
        "sim_threads": [1, 2, 4, 16],
        "latency_timed_s": 1.0,
    },
}
#: Fig. 13c's configurations: label -> how it is built (``core`` driven directly, or ``run``).
IMPLEMENTATIONS = {
    "single bplus_tree": ("core", "single", {"index": "bplus_tree"}),
    "single pim_tree": ("core", "single", {"index": "pim_tree"}),
    "shared(2) blocking": ("core", "shared", {"threads": 2, "merge": "blocking"}),
    "shared(2) nonblocking": ("core", "shared", {"threads": 2, "merge": "nonblocking"}),
    "split(2) pim_tree": ("run", "split", {"parts": 2}),
}
#: What the paper reports (Xeon E5-2665, 8 cores, 16 hardware threads; W up to 2^25).
PAPER = {
    "fig13c": "parallel PIM-Tree (16 threads) 7.5x single-thread B+-tree and 3.7x single-thread "
    "PIM-Tree on average over W = 2^15 … 2^25 (12x and 5.3x at 2^25); blocking merge slightly "
    "faster than nonblocking; not effective below W = 2^14",
    "fig8a": "round-robin partitioning speeds IBWJ up only 2.5x with 16 threads (NLWJ 8x)",
    "fig10": "throughput rises with the task size up to 4, a little more to 8, flat beyond "
    "(task sizes 1 … 10); latency grows with the task size (Fig. 10d)",
    "fig12": "concurrency control costs about 40% (two-way) and 26% (self-join) on one thread; "
    "8 threads 4.6x (two-way) and 4x (self-join) the one-thread join with CC, 16 threads "
    "(hyper-threading) 5.7x and 5x (Fig. 12a); parallel self-join 4x single-thread PIM-Tree "
    "for W >= 2^16 (Fig. 12c)",
    "fig14": "the cost of one merge grows linearly with the number of items in the tree",
    "latency": "the nonblocking merge exists so that joining goes on while T_S is rebuilt "
    "(§4.2): it should cut the latency tail that blocking merges cause",
}
#: Fig. 12's simulated batch sizes and their mode labels: the default batch, and batches 8 times
#: as large, over which the core's per-step and per-message costs spread (its serial part).
SIM_BATCHES = {BATCH: "simulated", 8 * BATCH: "simulated, batches of 8,192"}
#: The mode suffixes of simulated rows beside the default (pipelined, steps open to many
#: batches): the core's thread one of the workers (``pipelined=False``), and the core before
#: steps spanned batches (pipelined, ``step_tuples=0``: its threads meet at every batch).
WORKER = ", core's thread a worker"
ONE_STEP = ", one batch a step"
#: The mode suffix of pipelined rows whose batches cost the core's thread nothing to receive:
#: the profile's receive costs set to zero (:func:`receiving_free`), as the paper's threads
#: take their tuples from memory. The ``ray`` executor receives a batch on the thread that
#: then runs the step, and that is what the other simulated rows charge.
FREE = ", receiving free"
#: Fig. 12a's speed-ups over the one-thread join with CC (paper, two-way join), for the plot.
PAPER_SCALING = {1: 1.0, 8: 4.6, 16: 5.7}
PAPER_SCALING_SELF = {1: 1.0, 8: 4.0, 16: 5.0}


# --------------------------------------------------------------------------------------------
# The workload
# --------------------------------------------------------------------------------------------


def query(data, window: int, self_join: bool = False) -> sj.Query:
    """The band join of ``data`` at match rate 2 (``eps`` from
    :func:`~streamjoin.sources.band_for_match_rate`, as ``pim_tree_paper.py``)."""
    x = data.column("x").to_numpy()
    if self_join:
        eps = sj.sources.band_for_match_rate(x, window=window)
    else:
        s = data.column("stream").to_numpy()
        eps = sj.sources.band_for_match_rate(x[s == 0], x[s == 1], window=window)
    return sj.Query(sj.band("x", eps), window=sj.CountWindow(window), self_join=self_join)


#: Windows of tuples that fill a run untimed. A tuple store grows to twice its window, and its
#: tail then writes memory never touched before until it first compacts, one window of
#: appends later: a fill of one window per stream (2 W tuples, as before) left that first
#: touch to the timed phase, about one page fault per 1,000 tuples at W = 2^20, in the serial
#: part of every core's steps (``benchmarks/shared_index_speedup.py`` prints the faults).
FILL_WINDOWS = 5


@functools.cache
def workload(window: int, min_timed: int, self_join: bool = False):
    """``(data, query, batches, n_fill_batches)``: the input table (integer keys uniform on
    ``[0, 2^31)``), its query, its emitter batches (built once, shared by every
    configuration) and how many of them fill the windows."""
    n_fill = FILL_WINDOWS * window
    n = n_fill + max(window, min_timed)
    data = sj.sources.synthetic(n, seed=1, self_join=self_join)
    q = query(data, window, self_join)
    batches = [b for _, b in Emitter(q, BATCH).on_chunk(validate(data, q), 0)]
    filled = k = 0
    while filled < n_fill:
        filled += len(batches[k])
        k += 1
    return data, q, batches, k


def make_core(kind: str, q: sj.Query, options: dict):
    if kind == "single":
        core = JoinCore(q, options["index"])
    else:
        core = SharedIndexCore(
            q,
            "pim_tree",
            threads=options["threads"],
            merge=options.get("merge", "nonblocking"),
            task_size=options.get("task_size", TASK_SIZE),
        )
    core.warm()
    return core


def drive(kind: str, options: dict, window: int, min_timed: int, self_join=False) -> dict:
    """One core driven directly: fill untimed, then the timed phase (wall clock). Returns
    throughput, pairs and (shared cores) the merge and lock statistics of the timed phase."""
    _, q, batches, n_fill = workload(window, min_timed, self_join)
    core = make_core(kind, q, options)
    for b in batches[:n_fill]:
        core.on_batch("in", b)
    core.on_idle()  # the fill's pairs still held (a shared core's tasks in flight)
    before = core.stats() if kind == "shared" else {}
    pairs = tuples = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for b in batches[n_fill:]:
        for _, p in core.on_batch("in", b):
            pairs += len(p)
        tuples += len(b)
    for _, p in core.on_idle():  # the timed batches' pairs still held
        pairs += len(p)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    row = {
        "tuples": tuples,
        "seconds": elapsed,
        "tuples_per_s": tuples / elapsed,
        "pairs_per_tuple": pairs / tuples,
        "cpu_per_wall": cpu / elapsed,
        "how": "core driven directly",
    }
    if kind == "shared":
        after = core.stats()
        for k in ("merges", "merged", "merge_seconds", "lock_waits", "scanned", "tasks"):
            row[k] = after[k] - before[k]
        core.close()
    return row


def _run_seconds(q, data, topo, backend: str, batch: int, **kw) -> tuple[float, int, float]:
    """``(elapsed s, pairs, the join cores' busy s)`` of one run: the busiest core's, for a
    topology of several (``split(2)``: ``core0``, ``core1``)."""
    res = sj.run(q, data, topo, backend=backend, batch_size=batch, collect="count", **kw)
    cores = [n for n, role in topo.graph.nodes(data="role") if role == "join_core"]
    busy = max(res.metrics["actors"][n]["busy_s"] for n in cores)
    return res.metrics["elapsed_s"], res.count, busy


def receiving_free(profile):
    """``profile`` with every message's receive charged nothing (its sends as they were)."""
    m = profile.messages
    return profile.with_messages(
        dataclasses.replace(
            m,
            measured=tuple((b, send, 0.0) for b, send, _ in m.measured),
            recv_ns=0.0,
            recv_per_byte_ns=0.0,
            cyclic_recv_ns=0.0,
        )
    )


def via_run(
    topo,
    window: int,
    min_timed: int,
    backend: str = "local",
    self_join=False,
    batch=BATCH,
    machine=None,
) -> dict:
    """Steady-state throughput of ``topo`` through ``sj.run``: a run of the fill and a run of
    the whole input, throughput = timed tuples / the difference. On ``sim`` the input arrives
    far faster than any configuration takes it (virtual time), in chunks of at most 16
    batches so that the emitter and the core overlap; ``core_tuples_per_s`` is then the core
    alone (timed tuples / the difference of its busy time), what the paper measures without
    an emitter in front of the join. ``machine``: the simulated machine (default: the profile
    a ``sim`` run finds)."""
    data, q, _, _ = workload(window, min_timed, self_join)
    n_fill = FILL_WINDOWS * window
    kw: dict = {"pace": 1e12} if backend == "sim" else {}
    if machine is not None:
        kw["machine"] = machine
    t_fill, _, busy_fill = _run_seconds(q, data.slice(0, n_fill), topo, backend, batch, **kw)
    t_all, count, busy_all = _run_seconds(q, data, topo, backend, batch, **kw)
    tuples = len(data) - n_fill
    row = {
        "tuples": tuples,
        "seconds": t_all - t_fill,
        "tuples_per_s": tuples / (t_all - t_fill),
        "pairs_per_tuple": count / len(data),
        "batch": batch,
        "how": f"sj.run backend={backend!r}, fill run subtracted",
    }
    if backend == "sim":
        row["core_tuples_per_s"] = tuples / (busy_all - busy_fill)
    return row


def alternate(configs: dict, rounds: int, prov: report.Provenance, bar: tqdm) -> list[dict]:
    """Run every ``label -> thunk`` of ``configs`` in turn, ``rounds`` times (A B C … A B C …),
    and keep each label's median round (by throughput) with the spread and the loads."""
    got: dict[str, list[dict]] = {k: [] for k in configs}
    for _ in range(rounds):
        for label, thunk in configs.items():
            row = thunk()
            row["load"] = prov.note()
            got[label].append(row)
            bar.update(1)
    out = []
    for label, runs in got.items():
        tp = [r["tuples_per_s"] for r in runs]
        med = sorted(runs, key=lambda r: r["tuples_per_s"])[len(runs) // 2]
        out.append(
            {
                "config": label,
                **med,
                "tuples_per_s": statistics.median(tp),
                "min_tuples_per_s": min(tp),
                "max_tuples_per_s": max(tp),
                "rounds": len(runs),
                "load_min": min(r["load"] for r in runs),
                "load_max": max(r["load"] for r in runs),
            }
        )
    return out


# --------------------------------------------------------------------------------------------
# The parts
# --------------------------------------------------------------------------------------------


def part_fig13c(sc, prov, bar) -> list[dict]:
    rows = []
    for w in sc["windows"]:
        configs = {}
        for label, (how, kind, opts) in IMPLEMENTATIONS.items():
            if how == "core":
                configs[label] = functools.partial(drive, kind, opts, w, sc["min_timed"])
            else:
                topo = sj.topologies.split(opts["parts"], index="pim_tree")
                configs[label] = functools.partial(via_run, topo, w, sc["min_timed"])
        for r in alternate(configs, sc["rounds"], prov, bar):
            rows.append({"part": "fig13c", "window": w, **r})
        # round robin against the shared index on 2 simulated processors each (one run:
        # the simulator is deterministic), the comparison §2.2.3 argues
        for label, topo in (
            ("split(2) pim_tree", sj.topologies.split(2, index="pim_tree")),
            ("shared(2) nonblocking", sj.topologies.shared_index(2)),
        ):
            r = via_run(topo, w, sc["min_timed"], "sim")
            r["load"] = prov.note()
            bar.update(1)
            rows.append({"part": "fig13c_sim", "window": w, "config": label, **r})
        workload.cache_clear()  # one window's input in memory at a time
    return rows


def part_fig10(sc, prov, bar) -> list[dict]:
    w = sc["window"]
    configs = {
        f"shared({t}) task {ts}": functools.partial(
            drive, "shared", {"threads": t, "task_size": ts}, w, sc["min_timed"]
        )
        for ts in sc["task_sizes"]
        for t in (1, 2)
    }
    rows = []
    for r in alternate(configs, sc["rounds"], prov, bar):
        t, ts = r["config"].removeprefix("shared(").split(") task ")
        rows.append({"part": "fig10", "window": w, "threads": int(t), "task_size": int(ts), **r})
    return rows


def _sim_configs(sc, **options) -> dict:
    """Fig. 12's simulated configurations: ``single`` and ``shared_index(t, **options)``."""
    configs = {"single pim_tree": (0, sj.topologies.single("pim_tree"))}
    for t in sc["sim_threads"]:
        configs[f"shared({t})"] = (t, sj.topologies.shared_index(t, **options))
    return configs


def part_fig12(sc, prov, bar) -> list[dict]:
    w, rows = sc["window"], []
    for self_join in (False, True):
        join = "self-join" if self_join else "two-way"
        configs = {
            "single pim_tree": functools.partial(
                drive, "single", {"index": "pim_tree"}, w, sc["min_timed"], self_join
            ),
            **{
                f"shared({t})": functools.partial(
                    drive, "shared", {"threads": t}, w, sc["min_timed"], self_join
                )
                for t in (1, 2)
            },
        }
        for r in alternate(configs, sc["rounds"], prov, bar):
            threads = 0 if r["config"].startswith("single") else int(r["config"][7])
            rows.append(
                {"part": "fig12", "join": join, "mode": "measured", "threads": threads, **r}
            )
        # the simulator is deterministic: one run each, at two batch sizes (SIM_BATCHES)
        # the shared core pipelined (the simulator's default with two threads or more; the
        # one-thread base too, so that every row has the core's own thread beside its
        # workers), beside it with the core's thread one of the workers, and with one batch
        # a step (what steps open to many batches replaced), and pipelined with the batches
        # received free (FREE)
        pipelined = _sim_configs(sc, pipelined=True)
        free = receiving_free(as_profile(None))
        modes = (
            ("", pipelined, None),
            (WORKER, _sim_configs(sc, pipelined=False), None),
            (ONE_STEP, _sim_configs(sc, pipelined=True, step_tuples=0), None),
            (FREE, pipelined, free),
        )
        runs = [
            (batch, mode + suffix, configs, machine)
            for batch, mode in SIM_BATCHES.items()
            for suffix, configs, machine in modes
        ]
        for batch, mode, configs, machine in runs:
            for label, (threads, topo) in configs.items():
                r = via_run(topo, w, sc["min_timed"], "sim", self_join, batch, machine)
                r["load"] = prov.note()
                bar.update(1)
                rows.append(
                    {
                        "part": "fig12",
                        "join": join,
                        "mode": mode,
                        "threads": threads,
                        "config": label,
                        "window": w,
                        **r,
                    }
                )
    for r in rows:
        r.setdefault("window", w)
    return rows


def part_fig14(sc, prov, bar, done: list[dict]) -> list[dict]:
    """Merge statistics of the shared(2) cores: from ``fig13c``'s rows when that part ran,
    else measured here at ``merge_windows``."""
    shared = [r for r in done if r["part"] == "fig13c" and r["config"].startswith("shared(2)")]
    if shared:
        return [{**r, "part": "fig14", "from": "fig13c"} for r in shared]
    rows = []
    for w in sc["merge_windows"]:
        configs = {
            label: functools.partial(drive, "shared", opts, w, sc["min_timed"])
            for label, (_, kind, opts) in IMPLEMENTATIONS.items()
            if kind == "shared"
        }
        for r in alternate(configs, sc["rounds"], prov, bar):
            rows.append({"part": "fig14", "window": w, "from": "fig14", **r})
        workload.cache_clear()
    return rows


def part_latency(sc, prov, bar) -> tuple[list[dict], dict]:
    """Per-pair latency of shared(2) blocking vs nonblocking at a paced input."""
    w = sc["window"]
    # half the slower mode's throughput (one direct run each): both keep up, merges included
    probes = [
        drive("shared", {"threads": 2, "merge": m}, w, sc["min_timed"])["tuples_per_s"]
        for m in ("blocking", "nonblocking")
    ]
    workload.cache_clear()
    bar.update(2)
    pace = round(0.5 * min(probes), -3)
    n_fill = FILL_WINDOWS * w
    n = n_fill + int(pace * sc["latency_timed_s"])
    data = sj.sources.synthetic(n, seed=2)
    q = query(data, w)
    rows, cdfs = [], {}
    runs: dict[str, list[np.ndarray]] = {"blocking": [], "nonblocking": []}
    stats: dict[str, list[float]] = {"blocking": [], "nonblocking": []}
    for _ in range(sc["rounds"]):
        for merge in runs:
            res = sj.run(
                q,
                data,
                sj.topologies.shared_index(2, merge=merge),
                backend="local",
                pace=pace,
                batch_size=BATCH,
                max_delay=0.001,
            )
            r, s, lat = (res.pairs.column(c).to_numpy() for c in ("r", "s", "latency_ns"))
            lat = lat[np.maximum(r, s) >= n_fill] / 1e6
            runs[merge].append(lat)
            stats[merge].append(prov.note())
            bar.update(1)
    for merge, lats in runs.items():
        p = [(np.percentile(x, 50), np.percentile(x, 99), x.max()) for x in lats]
        med = sorted(range(len(p)), key=lambda i: p[i][1])[len(p) // 2]
        cdfs[merge] = np.sort(lats[med])
        rows.append(
            {
                "part": "latency",
                "config": f"shared(2) {merge}",
                "window": w,
                "pace": pace,
                "pairs": len(lats[med]),
                "p50_ms": statistics.median(x[0] for x in p),
                "p99_ms": statistics.median(x[1] for x in p),
                "max_ms": statistics.median(x[2] for x in p),
                "p99_ms_rounds": " ".join(f"{x[1]:.2f}" for x in p),
                "rounds": len(p),
                "load_min": min(stats[merge]),
                "load_max": max(stats[merge]),
                "how": "sj.run backend='local', paced, max_delay 1 ms",
            }
        )
    return rows, cdfs


def n_units(parts: list[str], sc: dict) -> int:
    """Progress units (one measured run each)."""
    r, n = sc["rounds"], 0
    if "fig13c" in parts:
        n += (r * len(IMPLEMENTATIONS) + 2) * len(sc["windows"])
    if "fig10" in parts:
        n += r * 2 * len(sc["task_sizes"])
    if "fig12" in parts:
        n += 2 * (3 * r + 4 * len(SIM_BATCHES) * (1 + len(sc["sim_threads"])))
    if "fig14" in parts and "fig13c" not in parts:
        n += r * 2 * len(sc["merge_windows"])
    if "latency" in parts:
        n += 2 * r + 2  # and the two runs that set the pace
    return n


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def _p2(v: float) -> str:
    return f"2^{int(np.log2(v))}"


def _k(v: float) -> str:
    return f"{v / 1e3:,.0f}K"


def write(rows, cdfs, prov, suffix: str, parts: list[str]) -> None:
    results = report.results_dir()
    base = os.path.join(results, "pim_tree_parallel" + suffix)
    for r in rows:
        r.update(prov.fields())
    report.save_rows(rows, base + ".csv")
    plot(rows, base + ".png")
    if cdfs:
        plot_latency(cdfs, rows, base.replace("pim_tree_parallel", "pim_tree_parallel_latency"))
    lines = [
        "# PIM-Tree §4–5: the parallel join (shared-index core) on this machine",
        "",
        "Band join at match rate 2 (integer keys uniform on [0, 2^31), eps chosen for 2 "
        "partners per probe), count window W per stream, batches of 1,024; "
        f"steady-state throughput in input tuples/s of wall time (the {FILL_WINDOWS} W tuples that fill the "
        "windows untimed). Cores (`single`, `shared(T)` = `shared_index(T)` with PIM-Tree, "
        "default options: m = 1/8, D_I = 1, one task per thread a batch, steps open to "
        "65,536 tuples) are driven directly, outside `sj.run` (the pairs of tasks still "
        "running at the end waited for inside the timed phase); `split(2)` runs through "
        "`sj.run(backend='local')`, where its two join cores take turns on one thread (the "
        "local executor steps every actor in this process): it is the work of round-robin "
        "partitioning on one core, not a 2-core run. Configurations in alternation, median "
        "of the rounds (min–max in the CSV). See the docstring of "
        "`experiments/pim_tree_parallel.py`.",
        "",
        prov.line(),
    ]
    if any(r["part"] in ("fig13c", "fig10", "fig12", "fig14") for r in rows):  # (plot's parts)
        lines += ["", f"![parallel join](pim_tree_parallel{suffix}.png)"]
    sel = [r for r in rows if r["part"] == "fig13c"]
    if sel:
        labels = list(IMPLEMENTATIONS)
        get = {(r["window"], r["config"]): r for r in sel}
        lines += [
            "",
            "## Fig. 13c: five implementations (and Fig. 8a's round-robin partitioning)",
            "",
            f"Paper: {PAPER['fig13c']}. Fig. 8a: {PAPER['fig8a']}.",
            "",
            "| W | "
            + " | ".join(
                c + (" (local, one thread)" if c.startswith("split") else "") for c in labels
            )
            + " | shared(2) nb / single pim | single pim / bplus "
            "| load |",
            "|---" + "|---:" * (len(labels) + 3) + "|",
        ]
        for w in dict.fromkeys(r["window"] for r in sel):
            cells = [_k(get[(w, c)]["tuples_per_s"]) for c in labels]
            nb, sp = get[(w, "shared(2) nonblocking")], get[(w, "single pim_tree")]
            bp = get[(w, "single bplus_tree")]
            loads = [get[(w, c)]["load_max"] for c in labels]
            lines.append(
                f"| {_p2(w)} | "
                + " | ".join(cells)
                + f" | {nb['tuples_per_s'] / sp['tuples_per_s']:.2f} "
                f"| {sp['tuples_per_s'] / bp['tuples_per_s']:.2f} | ≤ {max(loads):.1f} |"
            )
    sel = [r for r in rows if r["part"] == "fig13c_sim"]
    if sel:
        get = {(r["window"], r["config"]): r["tuples_per_s"] for r in sel}
        lines += [
            "",
            "Round robin against the shared index on the simulator (`sj.run(backend='sim')`, "
            f"{_profile_words()}; `split(2)`: two join cores on a processor each, every "
            "batch probed at both; `shared(2)`: one core charged as 2 processors; what the "
            "simulator leaves out: lock waits, the merging thread, contention between threads, "
            "longer scans past the edge tuple):",
            "",
            "| W | split(2) pim_tree, simulated | shared(2), simulated | shared / split |",
            "|---|---:|---:|---:|",
        ]
        for w in dict.fromkeys(r["window"] for r in sel):
            a, b = get[(w, "split(2) pim_tree")], get[(w, "shared(2) nonblocking")]
            lines.append(f"| {_p2(w)} | {_k(a)} | {_k(b)} | {b / a:.2f} |")
    sel = [r for r in rows if r["part"] == "fig10"]
    if sel:
        get = {(r["threads"], r["task_size"]): r["tuples_per_s"] for r in sel}
        sizes = sorted({r["task_size"] for r in sel})
        lines += [
            "",
            f"## Fig. 10c: task size (W = {_p2(sel[0]['window'])}, nonblocking merge)",
            "",
            f"Paper: {PAPER['fig10']}.",
            "",
            "| task size | shared(1) | shared(2) | shared(2) / shared(1) |",
            "|---:|---:|---:|---:|",
        ]
        for ts in sizes:
            a, b = get[(1, ts)], get[(2, ts)]
            lines.append(f"| {ts} | {_k(a)} | {_k(b)} | {b / a:.2f} |")
        best = {t: max(sizes, key=lambda s, t=t: get[(t, s)]) for t in (1, 2)}
        lines += [
            "",
            f"Best task size: {best[1]} (one thread), {best[2]} (two threads); task size 1 "
            f"runs at {get[(2, 1)] / get[(2, best[2])]:.2f} of the best with two threads.",
        ]
    sel = [r for r in rows if r["part"] == "fig12"]
    if sel:
        lines += [
            "",
            f"## Fig. 12a, 12c: scalability (W = {_p2(sel[0]['window'])})",
            "",
            f"Paper: {PAPER['fig12']}.",
            "",
            f"Simulated: `sj.run(backend='sim')` with {_profile_words()}, one "
            "simulated processor per thread. "
            "The paper's 16 threads ran on 8 cores with hyper-threading; the simulator models "
            "none: its 16 threads are 16 processors, each as fast as a thread alone on this "
            "host, so the 16-thread rows are an upper bound for 8 cores of two hardware threads "
            "each (a profile holds no measure of what a core's second hardware thread adds). "
            "The shared core's steps stay open to many "
            "batches (the default: its threads meet only when a step is full, at merges and "
            "at the end) and it is pipelined (the simulator's default with a processor per "
            "thread: a batch's tasks run on its pool's threads while the core's own thread "
            "stages the next batch and sends the pairs whose tasks have ended). Pipelined, "
            "`shared(T)` has T workers and the core's thread: T + 1 processors, one-thread "
            "base included (`shared(1)` pipelined: one worker and the core's thread). Rows "
            "marked *core's thread a worker* run it with `pipelined=False` (T processors, the "
            "core's thread taking tasks between batches, as on a host with fewer processors "
            "than threads + 3); rows marked *one batch a step* with `step_tuples=0`, "
            "pipelined: each batch a step whose threads meet when it ends (the core before "
            "steps spanned batches); rows marked *receiving free*, pipelined, with the "
            "profile's receive costs set to zero: the core's thread pays nothing to take a "
            "batch, as the paper's threads take theirs from memory (the `ray` executor "
            "receives a batch on the thread that then runs the step, as the other rows "
            "charge). "
            "The shared core's per-unit costs are its own "
            "(the profile's `shared:pim_tree` row, calibrated on `shared_index(1)`; `single` "
            "is charged from the `pim_tree` row of the same calibration). The simulator "
            "charges each task of a step its "
            "tuples, probes (with their share of the step's descent work), candidates, pairs "
            "and inserts from those costs, hands tasks in order to the "
            "thread that is free first (each pool thread free when its last task ends, whatever "
            "the batch), and puts the call's serial part on the core's thread (the per-call "
            "and per-expired-tuple charges, and the core's share of the messages: receiving "
            "each batch and sending its pairs, priced as the `ray` executor's); a batch's "
            "pairs leave once its tasks and all before have ended. It charges each merge's "
            "fixed cost on the core's thread (the profile's `merges` cost: the phases it "
            "switches), but does *not* charge lock waits (their "
            "count depends on the host's timing), the nonblocking merge's own thread (the "
            "calibration leaves its time out of the core's steps; at W = 2^20 it writes "
            "about 8 items a tuple, a bound far above these rates), memory-bandwidth or "
            "cache contention between "
            "threads, nor the longer scans past the edge tuple that concurrent tasks cause "
            "(the simulated core runs its tasks on one host thread, so each task sees the "
            "edge tuple as a one-thread run does). Its speed-ups are an upper bound of what "
            "the algorithm's task split allows, not a prediction for 16 real threads.",
            "",
            "Simulated runs take input far faster than any configuration (chunks of at most "
            "16 batches, so the emitter and the core overlap); *core alone* is the core's "
            "throughput over its own busy time, what the paper measures (its threads take "
            "tuples from memory, with no emitter or messages in front of the join).",
            "",
            "| join | mode | config | tuples/s | over shared(1) | over single "
            "| core alone | core alone over shared(1) |",
            "|---|---|---|---:|---:|---:|---:|---:|",
        ]
        for join in ("two-way", "self-join"):
            modes = [m + x for m in SIM_BATCHES.values() for x in ("", WORKER, ONE_STEP, FREE)]
            for mode in ("measured", *modes):
                grp = [r for r in sel if r["join"] == join and r["mode"] == mode]
                if not grp:
                    continue
                one_row = next(r for r in grp if r["threads"] == 1)
                one = one_row["tuples_per_s"]
                single = next(r["tuples_per_s"] for r in grp if r["threads"] == 0)
                for r in grp:
                    core = r.get("core_tuples_per_s")
                    alone = (
                        f"{_k(core)} | {core / one_row['core_tuples_per_s']:.2f}"
                        if core
                        else "– | –"
                    )
                    lines.append(
                        f"| {join} | {mode} | {r['config']} | {_k(r['tuples_per_s'])} "
                        f"| {r['tuples_per_s'] / one:.2f} | {r['tuples_per_s'] / single:.2f} "
                        f"| {alone} |"
                    )
        lines += ["", *_amdahl(sel)]
    sel = [r for r in rows if r["part"] == "fig14"]
    if sel:
        lines += [
            "",
            "## Fig. 14: merge cost (shared(2), both indexes summed, over the timed phase)",
            "",
            f"Paper: {PAPER['fig14']}. Merge time is the merging thread's CPU time "
            "(`merge_seconds`; for nonblocking merges that thread runs beside the join's). "
            "Process CPU / wall: CPU seconds of all the process's threads per second of the "
            "timed phase (2 threads busy throughout would give 2; under 1 the threads waited).",
            "",
            "| W | merge | tuples/s | merges | items merged per merge | ms per merge | ns per "
            "item merged | merge CPU / timed wall | lock waits | process CPU / wall |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in sel:
            m = max(r["merges"], 1)
            lines.append(
                f"| {_p2(r['window'])} | {r['config'].split()[-1]} | {_k(r['tuples_per_s'])} "
                f"| {r['merges']:.0f} | {r['merged'] / m:,.0f} "
                f"| {1e3 * r['merge_seconds'] / m:.2f} "
                f"| {1e9 * r['merge_seconds'] / max(r['merged'], 1):.1f} "
                f"| {r['merge_seconds'] / r['seconds']:.1%} | {r['lock_waits']:.0f} "
                f"| {r['cpu_per_wall']:.2f} |"
            )
    sel = [r for r in rows if r["part"] == "latency"]
    if sel:
        lines += [
            "",
            f"## Latency: blocking against nonblocking merge (shared(2), W = "
            f"{_p2(sel[0]['window'])})",
            "",
            f"Paper: {PAPER['latency']}.",
            "",
            f"Input paced at {sel[0]['pace']:,.0f} tuples/s (half the slower merge mode's "
            "throughput in one direct run just before), batches close at 1,024 tuples or 1 ms; latency per pair "
            "from the chunk's hand-over to the collector, pairs whose later tuple arrived "
            "after the fill; median over the rounds of each percentile.",
            "",
            f"![latency CDF](pim_tree_parallel_latency{suffix}.png)",
            "",
            "| merge | pairs | p50 ms | p99 ms | max ms | p99 per round | load |",
            "|---|---:|---:|---:|---:|---|---|",
        ]
        for r in sel:
            lines.append(
                f"| {r['config'].split()[-1]} | {r['pairs']:,} | {r['p50_ms']:.2f} "
                f"| {r['p99_ms']:.2f} | {r['max_ms']:.1f} | {r['p99_ms_rounds']} "
                f"| {r['load_min']:.1f}–{r['load_max']:.1f} |"
            )
    lines += _targets(rows)
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def _targets(rows: list[dict]) -> list[str]:
    """The parallel join's speed targets, checked against what this run measured (they are set for
    W = 2^20, the full run's ``fig12`` and ``latency`` window)."""
    out = []
    m = {
        r["threads"]: r
        for r in rows
        if r["part"] == "fig12" and r["join"] == "two-way" and r["mode"] == "measured"
    }
    if m:
        a, b = (
            m[2]["tuples_per_s"] / m[1]["tuples_per_s"],
            m[1]["tuples_per_s"] / m[0]["tuples_per_s"],
        )
        w = _p2(m[1]["window"])
        out += [
            f"- shared(2) / shared(1) = {a:.2f} at W = {w} (target: at least 0.85 of the "
            "two-thread ceiling, which `benchmarks/shared_index_speedup.py ceiling` measures "
            "beside the join, alternating; docs/performance.md has both).",
            f"- shared(1) / single(pim_tree) = {b:.2f} at W = {w} (target ≥ 0.9): "
            f"{'met' if b >= 0.9 else 'not met'}.",
        ]
    lat = {r["config"].split()[-1]: r for r in rows if r["part"] == "latency"}
    if lat:
        nb, bl = lat["nonblocking"]["p99_ms"], lat["blocking"]["p99_ms"]
        out.append(
            f"- p99 latency nonblocking {nb:.2f} ms against blocking {bl:.2f} ms at W = "
            f"{_p2(lat['blocking']['window'])} (target: below): "
            f"{'met' if nb < bl else 'not met'}."
        )
    if not out:
        return []
    return [
        "",
        "## The parallel join's speed targets (set for W = 2^20; the load is above)",
        "",
        *out,
    ]


def _profile_words() -> str:
    """Which machine profile the simulated rows ran on (a ``sim`` run given none: this
    host's calibrated one, else the shipped one), and when it was fitted."""
    prof = as_profile(None)
    cond = prof.info.get("conditions", {})
    load = "–".join(str(v) for v in cond.get("load_1min_start_end", []))
    return f"the profile {report.profile_of(prof)}{f', fitted at load {load}' if load else ''}"


def _amdahl(sel: list[dict]) -> list[str]:
    """What caps the simulated speed-up: per batch size (pipelined, steps open to many
    batches; and with the batches received free), the speed-ups at 8 and 16 threads beside
    the paper's and the serial fraction an Amdahl fit of the curve gives, then the profile's
    per-step and per-tuple charges of the core."""
    out = []
    for join, paper in (("two-way", PAPER_SCALING), ("self-join", PAPER_SCALING_SELF)):
        for mode in [m + x for m in SIM_BATCHES.values() for x in ("", FREE)]:
            sim = {
                r["threads"]: r["tuples_per_s"]
                for r in sel
                if r["join"] == join and r["mode"] == mode and r["threads"]
            }
            n = max(sim, default=1)
            if n == 1 or 1 not in sim:
                continue
            speedup = sim[n] / sim[1]
            serial = (n / speedup - 1) / (n - 1)
            vs = "; ".join(
                f"{sim[t] / sim[1]:.2f}x at {t} threads (paper {paper[t]}x: "
                f"{'met' if sim[t] / sim[1] >= paper[t] else 'not met'})"
                for t in (8, 16)
                if t in sim
            )
            out.append(
                f"- {mode.capitalize()}, {join}: {vs}; an Amdahl fit of {speedup:.2f}x at {n} "
                f"threads gives a serial fraction of {serial:.0%} of a one-thread step."
            )
    prof = as_profile(None)
    c = prof.indexes["shared:pim_tree"]
    m = prof.messages.step_ns(1024 * (8 * 2 + 41))  # a batch of 1,024 tuples, one attribute
    out.append(
        "- The charges that do not shrink with threads (the profile's "
        "`shared:pim_tree` costs charged once per call, not per task, and the core's share "
        f"of its messages): {c['calls'] / 1e3:.0f} µs per call (a batch) plus "
        f"{c['part_calls'] / 1e3:.0f} µs per window-part call (4 per two-way batch) and "
        f"{c['expired']:.0f} ns per expired tuple, and {c.get('merges', 0) / 1e3:.0f} µs "
        "per merge whose phases the core's thread switches (one per 131,072 inserts of a "
        "stream at W = 2^20); receiving a batch of 1,024 tuples "
        f"{m[2] / 1e3:.0f} µs, as the `ray` executor's messages cost. Against them, "
        f"per-task charges of {c['tuples']:.0f} ns per tuple, {c['probes']:.0f} ns per "
        f"probe, {c['inserted']:.0f} ns per insert and {c['candidates']:.0f} ns per "
        "candidate."
    )
    return out


def plot(rows, path: str) -> None:
    plt = viz._pyplot()
    parts = [p for p in ("fig13c", "fig10", "fig12", "fig14") if any(r["part"] == p for r in rows)]
    if not parts:
        return
    fig, axes = plt.subplots(1, len(parts), figsize=(5.2 * len(parts), 4.2), squeeze=False)
    for ax, part in zip(axes[0], parts, strict=True):
        sel = [r for r in rows if r["part"] == part]
        if part == "fig13c":
            colors = dict(zip(IMPLEMENTATIONS, plt.get_cmap("tab10").colors, strict=False))
            for label in IMPLEMENTATIONS:
                pts = sorted((r["window"], r["tuples_per_s"]) for r in sel if r["config"] == label)
                shown = label + (" (local, 1 thread)" if label.startswith("split") else "")
                ax.plot(*zip(*pts, strict=True), marker="o", color=colors[label], label=shown)
            sim = [r for r in rows if r["part"] == "fig13c_sim"]
            for label in dict.fromkeys(r["config"] for r in sim):
                pts = sorted((r["window"], r["tuples_per_s"]) for r in sim if r["config"] == label)
                ax.plot(
                    *zip(*pts, strict=True),
                    "--",
                    marker="s",
                    color=colors[label],
                    label=f"{label}, simulated",
                )
            ax.set_xscale("log", base=2)
            ax.set_xlabel("window W (tuples per stream)")
            ax.set_ylabel("throughput (input tuples/s)")
            ax.set_title("Fig. 13c: five implementations (dashed: simulated)")
        elif part == "fig10":
            for t in (1, 2):
                pts = sorted((r["task_size"], r["tuples_per_s"]) for r in sel if r["threads"] == t)
                ax.plot(*zip(*pts, strict=True), marker="o", label=f"shared({t})")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("task size (tuples)")
            ax.set_ylabel("throughput (input tuples/s)")
            ax.set_title(f"Fig. 10c: task size, W = {_p2(sel[0]['window'])} (measured)")
        elif part == "fig12":
            for join, style in (("two-way", "-"), ("self-join", "--")):
                curves = (
                    ("measured", "tuples_per_s", "o", "measured"),
                    ("simulated", "tuples_per_s", "s", "simulated"),
                    (SIM_BATCHES[8 * BATCH], "core_tuples_per_s", "^", "core alone, sim, 8,192"),
                    (
                        SIM_BATCHES[8 * BATCH] + ONE_STEP,
                        "core_tuples_per_s",
                        "v",
                        "core alone, sim, 8,192, one batch a step",
                    ),
                    (
                        SIM_BATCHES[8 * BATCH] + FREE,
                        "core_tuples_per_s",
                        "D",
                        "core alone, sim, 8,192, receiving free",
                    ),
                )
                for mode, key, marker, label in curves:
                    grp = [r for r in sel if r["join"] == join and r["mode"] == mode]
                    if not grp:
                        continue
                    one = next(r[key] for r in grp if r["threads"] == 1)
                    pts = sorted((r["threads"], r[key] / one) for r in grp if r["threads"])
                    ax.plot(*zip(*pts, strict=True), style, marker=marker, label=f"{join}, {label}")
            for data, label in (
                (PAPER_SCALING, "paper two-way"),
                (PAPER_SCALING_SELF, "paper self-join"),
            ):
                ax.plot(
                    list(data),
                    list(data.values()),
                    "x:",
                    color="grey" if "two" in label else "k",
                    label=label,
                )
            ax.set_xscale("log", base=2)
            ax.set_xlabel("threads")
            ax.set_ylabel("throughput / shared(1)'s")
            ax.set_title(f"Fig. 12a/12c: scalability, W = {_p2(sel[0]['window'])}")
        else:
            for merge in ("blocking", "nonblocking"):
                pts = sorted(
                    (r["window"], 1e3 * r["merge_seconds"] / max(r["merges"], 1))
                    for r in sel
                    if r["config"].endswith(" " + merge)
                )
                ax.plot(*zip(*pts, strict=True), marker="o", label=f"shared(2) {merge}")
            first = min((r for r in sel), key=lambda r: r["window"])
            ws = sorted({r["window"] for r in sel})
            y0 = 1e3 * first["merge_seconds"] / max(first["merges"], 1)
            ax.plot(
                ws,
                [y0 * w / ws[0] for w in ws],
                "k:",
                label="linear in W (the paper's Fig. 14 shape)",
            )
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("window W (tuples per stream)")
            ax.set_ylabel("CPU ms per merge")
            ax.set_title("Fig. 14: cost of one merge (measured)")
        ax.grid(True, alpha=0.3)
        if part == "fig13c":  # room above the lines for the legend
            ax.set_ylim(0, 1.5 * ax.get_ylim()[1])
            ax.legend(fontsize=6, ncol=2, loc="upper center")
            continue
        if part != "fig14":
            ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    fig.tight_layout()
    viz.save_figure(fig, path)


def plot_latency(cdfs: dict, rows, path: str) -> None:
    plt = viz._pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for merge, lat in cdfs.items():
        ax.plot(lat, np.arange(1, len(lat) + 1) / len(lat), label=f"shared(2), {merge} merge")
    ax.set_xscale("log")
    ax.set_xlabel("latency per output pair (ms, log)")
    ax.set_ylabel("fraction of pairs")
    r = next(r for r in rows if r["part"] == "latency")
    ax.set_title(f"Latency CDF, W = {_p2(r['window'])}, paced at {r['pace'] / 1e3:,.0f}K tuples/s")
    ax.axhline(0.99, color="grey", lw=0.8, ls="--")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    viz.save_figure(fig, path + ".png")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small windows, for a smoke run")
    ap.add_argument("--only", default=",".join(PARTS), help=f"parts, from {', '.join(PARTS)}")
    ap.add_argument("--rounds", type=int, help="rounds of the alternation (median)")
    args = ap.parse_args()
    parts = args.only.split(",")
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        ap.error(f"unknown parts {unknown}; choose from {list(PARTS)}")
    sc = dict(SCALES["quick" if args.quick else "full"])
    if args.rounds:
        sc["rounds"] = args.rounds
    prov = report.Provenance()
    rows: list[dict] = []
    cdfs: dict = {}
    with tqdm(total=n_units(parts, sc), unit="run", file=sys.stderr) as bar:
        for part in PARTS:
            if part not in parts:
                continue
            bar.set_description(part)
            if part == "fig13c":
                rows += part_fig13c(sc, prov, bar)
            elif part == "fig10":
                rows += part_fig10(sc, prov, bar)
            elif part == "fig12":
                rows += part_fig12(sc, prov, bar)
            elif part == "fig14":
                rows += part_fig14(sc, prov, bar, rows)
            else:
                lat_rows, cdfs = part_latency(sc, prov, bar)
                rows += lat_rows
    # a run of some parts writes its own files, beside the whole run's
    suffix = "" if set(parts) == set(PARTS) else "_" + "_".join(parts)
    write(rows, cdfs, prov, suffix + ("_quick" if args.quick else ""), parts)


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"{time.time() - t0:.0f} s")
