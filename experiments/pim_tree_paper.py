"""PIM-Tree §5 at this machine's scale: single-threaded IBWJ with the tree-family indexes.

Band join ``|r.x - s.x| <= eps`` of two uniform integer streams, ``eps`` for the match rate
(2 unless varied, :func:`~streamjoin.sources.band_for_match_rate`), count window W per stream,
batches of 1024, one join core, ``collect="count"``. Throughput is the steady state's, as in the
paper: the first 2 W tuples fill the windows, so a run of them is timed as well as a run of
``N = 2 W + max(2 W, 2**19)`` tuples, and throughput = (N - 2 W) / the difference. Experiments,
with the paper's figure:

- ``window``: W = 2**10 … 2**22, every index (Fig. 10a; Fig. 8b for the chains);
- ``chain``: chain length 2 … 16, B-chain and IB-chain (Fig. 8b);
- ``merge``: merge ratio 2**-6 … 1, IM-Tree and PIM-Tree (Fig. 9c, 9d);
- ``depth``: insertion depth 1 … 4, PIM-Tree, three window sizes (Fig. 8c);
- ``match``: match rate 2**-4 … 2**10, B+-tree, IM-Tree and PIM-Tree (Fig. 10b);
- ``memory``: index bytes per item at W items, B+-tree and PIM-Tree with m = 1 and 1/8
  (Fig. 11a; the index alone, filled and churned at batch 512);
- ``breakdown``: ns per input tuple of insert, delete, search, scan and merge for B+-tree,
  IM-Tree and PIM-Tree at W = 2**17 and 2**20, beside the whole join's (Fig. 9b; the index
  replayed alone, see :func:`breakdown`);
- ``distributions``: join throughput and index cost under Gaussian and Gamma values (Fig. 12b,
  W = 2**20);
- ``shifting``: a shifting Gaussian at W = 2**20: index throughput per phase and over time, and
  PIM-Tree's inserts per subindex per merge period (Fig. 13a, 13b; see :func:`shifting`).

Indexes: ``bplus_tree``; ``chained`` with L = 2, archived as B+-trees (B-chain) or CSS-trees
(IB-chain); ``im_tree`` and ``pim_tree`` with m = 1/8 and D_I = 1 unless varied, and
``pim_compact``, PIM-Tree with T_S in 8-byte items (``layout="compact"``; in ``window``,
``memory`` and ``breakdown``); every index but the B+-tree gets ``window=W``. Writes ``experiments/results/pim_tree_paper.{csv,md,png}``, and
``pim_tree_breakdown.*``, ``pim_tree_distributions.*`` and ``pim_tree_shifting.*`` for the last
three sections; the
markdown puts the paper's reported figures beside ours.

Run: ``python experiments/pim_tree_paper.py`` (12 minutes on 2 quiet cores; ``--quick`` for a
smoke run, ``--only window,chain`` or ``--only breakdown,distributions,shifting`` for some).

Why one file of ~1,070 lines: one paper section (§5, single thread), whose figures share the
join workload, the lockstep alternation and the replayed step timings; the report and
figures are about half. It stays one file so that one file says how each figure was made
and judged.
"""

from __future__ import annotations

import argparse
import csv
import functools
import os
import time

import numpy as np
import report

import streamjoin as sj
from streamjoin import indexes, viz
from streamjoin.actors.collector import Collector
from streamjoin.actors.emitter import Emitter
from streamjoin.actors.join_core import JoinCore
from streamjoin.runtime.result import machine_info
from streamjoin.validation import Columns, validate

RESULTS = report.results_dir()
BATCH = 1024
INDEXES = {
    "bplus_tree": ("bplus_tree", {}),
    "b_chain": ("chained", {"chain_length": 2, "archive": "bplus"}),
    "ib_chain": ("chained", {"chain_length": 2, "archive": "css"}),
    "im_tree": ("im_tree", {"merge_ratio": 1 / 8}),
    "pim_tree": ("pim_tree", {"merge_ratio": 1 / 8, "insertion_depth": 1}),
    # T_S in 8-byte items, beside the default 16-byte ones
    "pim_compact": ("pim_tree", {"merge_ratio": 1 / 8, "insertion_depth": 1, "layout": "compact"}),
}
#: Sizes per experiment: full run and --quick.
SCALES = {
    "full": {
        "windows": [2**k for k in range(10, 23, 2)],
        "sweep_window": 2**18,
        "depth_windows": [2**16, 2**18, 2**20],
        "match_rates": [2.0**k for k in range(-4, 11, 2)],
        "breakdown_windows": [2**17, 2**20],
        "dist_window": 2**20,
        "shift_window": 2**20,
    },
    "quick": {
        "windows": [2**10, 2**12, 2**14],
        "sweep_window": 2**12,
        "depth_windows": [2**12, 2**14],
        "match_rates": [0.25, 2.0, 64.0],
        "breakdown_windows": [2**12],
        "dist_window": 2**12,
        "shift_window": 2**12,
    },
}
#: What the paper reports (single-threaded, Intel Xeon E5-2665, W up to 2**25).
PAPER = {
    "window": "IM-Tree +50%, PIM-Tree +63% over B+-tree on average (Fig. 10a); PIM-Tree "
    "≈ 1.6x B+-tree (abstract, §1)",
    "chain": "IB-chain ≈ 1.5x B-chain on average; L = 2 best, throughput falls as L grows "
    "(Fig. 8b)",
    "merge": "too small or too large m is slow; best m = 2**-3 at W = 2**16, 2**-4 at "
    "W = 2**23 (Fig. 9c, 9d)",
    "depth": "single-threaded: little dependence on D_I; the highest feasible D_I is slower "
    "(Fig. 8c)",
    "match": "flat for match rates 2**-4 … 2**4, falling beyond; IM-/PIM-Tree above B+-tree at "
    "high match rates (Fig. 10b)",
    "memory": "PIM-Tree ≈ 2x the B+-tree (m = 1, with the nonblocking-merge buffer; Fig. 11a)",
}


@functools.cache
def _data(n: int, distribution: str = "uniform", params: tuple = ()):
    """``n`` arrivals of two streams, values from ``distribution`` with the ``(name, value)``
    pairs ``params`` (:func:`~streamjoin.sources.values`)."""
    return sj.sources.synthetic(n, distribution, seed=1, **dict(params))


def _options(config: str, window: int, **overrides) -> tuple[str, dict]:
    """Registry name and options of index ``config``: every index but the B+-tree gets
    ``window``."""
    name, options = INDEXES[config]
    return name, {**options, **({} if name == "bplus_tree" else {"window": window}), **overrides}


def join(config: str, window: int, match_rate: float = 2.0, **overrides) -> dict:
    """Join throughput of index ``config`` (with option ``overrides``) at window ``window``."""
    name, options = _options(config, window, **overrides)
    fill = 2 * window
    n = fill + max(2 * window, 2**19)
    data = _data(n)
    x, s = data.column("x").to_numpy(), data.column("stream").to_numpy()
    eps = sj.sources.band_for_match_rate(x[s == 0], x[s == 1], window=window, match_rate=match_rate)
    q = sj.Query(sj.band("x", eps), window=sj.CountWindow(window))
    topo = sj.topologies.single(name, **options)
    sj.run(q, data.slice(0, 20_000), topo, batch_size=BATCH, collect="count")  # compile
    t_fill, _ = _timed(q, data.slice(0, fill), topo)
    t_all, count = _timed(q, data, topo)
    return {
        "index": config,
        "window": window,
        "tuples": n,
        "input_tuples_per_s": round((n - fill) / (t_all - t_fill)),
        "pairs_per_input": round(count / n, 3),
    }


def _timed(query, data, topo) -> tuple[float, int]:
    """Elapsed seconds and output pairs of one run."""
    res = sj.run(query, data, topo, batch_size=BATCH, collect="count")
    return res.metrics["elapsed_s"], res.count


def memory(config: str, window: int, **overrides) -> dict:
    """Bytes per item of index ``config`` holding ``window`` items, after a window of churn."""
    name, options = _options(config, window, **overrides)
    index = indexes.get(name)(1, **options)
    rng = np.random.default_rng(3)
    half = BATCH // 2
    for b in range(2 * window // half):
        refs = np.arange(b * half, (b + 1) * half)
        index.insert(rng.integers(0, 2**31 - 1, (1, half)).astype(np.float64), refs)
        index.expire(refs[-1] + 1 - window)
    return {"index": config, "window": window, "bytes_per_item": round(index.nbytes / window, 2)}


def experiments(scale: dict) -> dict:
    """Experiment name -> list of (param, value, run) to do, each run giving a row."""
    w = scale["sweep_window"]
    return {
        "window": [
            ("W", v, functools.partial(join, c, v)) for c in INDEXES for v in scale["windows"]
        ],
        "chain": [
            ("chain_length", L, functools.partial(join, c, w, chain_length=L))
            for c in ("b_chain", "ib_chain")
            for L in (2, 3, 4, 6, 8, 12, 16)
        ],
        "merge": [
            ("merge_ratio", m, functools.partial(join, c, w, merge_ratio=m))
            for c in ("im_tree", "pim_tree")
            for m in 2.0 ** np.arange(-6, 1)
        ],
        "depth": [
            ("insertion_depth", d, functools.partial(join, "pim_tree", v, insertion_depth=d))
            for v in scale["depth_windows"]
            for d in (1, 2, 3, 4)
        ],
        "match": [
            ("match_rate", r, functools.partial(join, c, w, r))
            for c in ("bplus_tree", "im_tree", "pim_tree")
            for r in scale["match_rates"]
        ],
        "memory": [
            (
                "merge_ratio",
                m,
                functools.partial(memory, c, v, **({} if m is None else {"merge_ratio": m})),
            )
            for v in scale["windows"][-3:]
            for c, m in (
                ("bplus_tree", None),
                ("pim_tree", 1.0),
                ("pim_tree", 1 / 8),
                ("pim_compact", 1 / 8),
            )
        ],
    }


# --------------------------------------------------------------------------------------------
# Sections with their own result files: the per-step breakdown (Fig. 9b), skewed value
# distributions (Fig. 12b) and a shifting one (Fig. 13a, 13b)
# --------------------------------------------------------------------------------------------

#: The steps of one input tuple's index work (Fig. 9b), in plotting order.
STEPS = ("insert", "delete", "search", "scan", "merge")
#: Fig. 12b's distributions: name -> (distribution, params) for :func:`~streamjoin.sources.values`.
DISTRIBUTIONS = {
    "uniform": ("uniform", ()),
    "gaussian": ("gaussian", ()),
    "gamma(3,3)": ("gamma", (("k", 3.0), ("theta", 3.0))),
    "gamma(1,5)": ("gamma", (("k", 1.0), ("theta", 5.0))),
}
#: Shifting-Gaussian runs (Fig. 13): label, index config, option overrides, speed r. The
#: paper's Fig. 13 runs are multi-threaded, where it merges at m = 1 (§5.2).
SHIFT_RUNS = [
    ("bplus_tree", "bplus_tree", {}, 1.0),
    ("im_tree", "im_tree", {}, 1.0),
    ("pim_tree", "pim_tree", {}, 1.0),
    ("pim_tree D_I=2", "pim_tree", {"insertion_depth": 2}, 1.0),
    ("pim_tree D_I=2 m=1", "pim_tree", {"insertion_depth": 2, "merge_ratio": 1.0}, 0.5),
    ("pim_tree D_I=2 m=1", "pim_tree", {"insertion_depth": 2, "merge_ratio": 1.0}, 1.0),
]
#: Relative phase lengths of the shifting Gaussian, in windows: the paper's middle phase of
#: 10 W (so the same shift per window, r / 10), shorter stationary phases (4 W in the paper).
SHIFT_PHASES = (2, 10, 2)
#: A subindex is idle in a merge period if it takes under this fraction of an even share.
IDLE = 0.1


class Replay:
    """Index ``config`` driven through one stream's share of a join, one timed batch at a time.

    Batch ``b`` probes ``probes[b]`` with the band ``[-eps, eps]``, inserts ``keys[b]`` (refs
    in arrival order) and expires what left a window of ``window`` items: the join core's
    order (docs/design.md §2). With ``split_search``, odd batches probe the zero-width band
    ``[eps, eps]`` instead: each component's descent to the start of the range runs as
    before (the paper's *search*) but nothing is scanned, so, with the batches interleaved,
    the band's *scan* is the difference of the two means. Merges run inside ``insert``; their
    time (the index's ``merge_seconds``) is taken out of it. ``on_merge(b, index)`` is called
    after each batch whose insert merged. Times are CPU time (``time.thread_time``): other
    processes' time slices do not count.

    ``keys``, ``probes``: float64 ``(n_batches, batch)``. After the steps, ``out`` holds
    arrays over batches: ``probe``, ``insert``, ``delete``, ``merge`` seconds, ``matches``
    found, ``narrow`` (the zero-width batches).
    """

    def __init__(
        self, config, window, keys, probes, eps, split_search=False, on_merge=None, **overrides
    ):
        name, options = _options(config, window, **overrides)
        self.index = indexes.get(name)(1, **options)
        self.config, self.overrides, self.eps = config, overrides, eps
        self.window, self.keys, self.probes, self.on_merge = window, keys, probes, on_merge
        nb = len(keys)
        self.out = {k: np.zeros(nb) for k in ("probe", "insert", "delete", "merge", "matches")}
        self.out["narrow"] = (np.arange(nb) % 2 == 1) & split_search
        self.n_steps = nb
        self.bands = (np.array([-eps]), np.array([eps])), (np.array([eps]), np.array([eps]))

    def warm(self) -> None:
        """Compile (or load) the kernels on a small throwaway copy."""
        copy = Replay(
            self.config, 2048, self.keys[:8], self.probes[:8], self.eps, True, **self.overrides
        )
        for b in range(8):
            copy.step(b)

    def step(self, b: int) -> None:
        index, out, clock = self.index, self.out, time.thread_time
        size = self.keys.shape[1]
        refs = np.arange(b * size, (b + 1) * size)
        lo, hi = self.bands[int(out["narrow"][b])]
        merged = (getattr(index, "merges", 0), getattr(index, "merge_seconds", 0.0))
        t0 = clock()
        _, found = index.probe(self.probes[b : b + 1], lo, hi)
        t1 = clock()
        index.insert(self.keys[b : b + 1], refs)
        t2 = clock()
        index.expire(refs[-1] + 1 - self.window)
        t3 = clock()
        merge = getattr(index, "merge_seconds", 0.0) - merged[1]
        out["probe"][b], out["insert"][b], out["delete"][b] = t1 - t0, t2 - t1 - merge, t3 - t2
        out["merge"][b], out["matches"][b] = merge, len(found)
        if self.on_merge is not None and getattr(index, "merges", 0) > merged[0]:
            self.on_merge(b, index)


class JoinReplay:
    """A single-core join of ``data`` on index ``config`` — the emitter, the join core and the
    collector of ``sj.topologies.single`` wired as the local executor wires them — fed one
    batch at a time, each batch's CPU time (``time.thread_time``) in ``seconds``.

    Query and workload as :func:`join`: ``|r.x - s.x| <= eps`` for match rate 2, count window
    ``window``, batches of 1024, pairs counted.
    """

    def __init__(self, config: str, window: int, data, **overrides) -> None:
        name, options = _options(config, window, **overrides)
        x, s = data.column("x").to_numpy(), data.column("stream").to_numpy()
        eps = sj.sources.band_for_match_rate(x[s == 0], x[s == 1], window=window)
        query = sj.Query(sj.band("x", eps), window=sj.CountWindow(window))
        self.cols = validate(data, query)
        self.emitter = Emitter(query, BATCH, clock=time.monotonic_ns)
        self.core = JoinCore(query, name, options)
        self.collector = Collector("count", time.monotonic_ns)
        self.n_steps = -(-len(self.cols) // BATCH)
        self.seconds = np.zeros(self.n_steps)

    def warm(self) -> None:
        self.core.warm()

    def step(self, b: int) -> None:
        c, start = self.cols, b * BATCH
        chunk = Columns(
            c.stream[start : start + BATCH],
            c.ts[start : start + BATCH],
            c.attrs[:, start : start + BATCH],
        )
        t0 = time.thread_time()
        for _, batch in self.emitter.on_chunk(chunk):
            for _, pairs in self.core.on_batch("in", batch):
                self.collector.on_batch("in", pairs)
        self.seconds[b] = time.thread_time() - t0


def lockstep(runs: list) -> None:
    """Warm ``runs`` (:class:`Replay` or :class:`JoinReplay`), then step them batch by batch
    in turn: load from other processes drifts over a run, interleaved the runs meet it alike
    (docs/design.md §5: compare side by side in one run). Each also finds the caches as the others
    left them, as an index does in a join core, which holds two indexes and their tuples."""
    for r in runs:
        r.warm()
    for b in range(max(r.n_steps for r in runs)):
        for r in runs:
            if b < r.n_steps:
                r.step(b)


def lockstep_joins(configs: list[str], window: int, datasets: list) -> list[float]:
    """Steady-state CPU ns per input tuple of a :class:`JoinReplay` per (config, data) pair,
    all in :func:`lockstep`; as :func:`join`, the first 2 W tuples (filling the windows) are
    not counted."""
    runs = [JoinReplay(c, window, d) for c, d in zip(configs, datasets, strict=True)]
    lockstep(runs)
    fill = 2 * window // BATCH
    return [float(r.seconds[fill:].sum() / (len(r.cols) - fill * BATCH) * 1e9) for r in runs]


def _two_streams(window: int, dist: str):
    """Keys and probe keys, ``(n_batches, 512)``, of two streams of values from ``dist`` (one
    of :data:`DISTRIBUTIONS`), ``eps`` for match rate 2, and the batches that fill the window
    and those timed after (``max(2 W, 2**19)`` tuples)."""
    half = BATCH // 2
    fill, steady = window // half, max(2 * window, 2**19) // half
    distribution, params = DISTRIBUTIONS[dist]
    keys, probes = (
        sj.sources.values((fill + steady) * half, distribution, seed=seed, **dict(params))
        .astype(np.float64)
        .reshape(-1, half)
        for seed in (2, 3)
    )
    eps = sj.sources.band_for_match_rate(keys.ravel(), probes.ravel(), window=window)
    return keys, probes, eps, fill


def _step_ns(replay: Replay, fill: int) -> dict:
    """ns per input tuple of each step, and matches per probe, over the batches after
    ``fill``."""
    t = {k: v[fill:] for k, v in replay.out.items()}
    narrow, half = t["narrow"], replay.keys.shape[1]
    per_tuple = 1e9 / (len(narrow) * half)
    ns = {
        "insert": t["insert"].sum() * per_tuple,
        "delete": t["delete"].sum() * per_tuple,
        "search": t["probe"][narrow].mean() / half * 1e9,
        "scan": (t["probe"][~narrow].mean() - t["probe"][narrow].mean()) / half * 1e9,
        "merge": t["merge"].sum() * per_tuple,
    }
    ns["index"] = sum(ns.values())
    matches = t["matches"][~narrow].sum() / ((~narrow).sum() * half)
    return {
        **{f"{k}_ns": round(float(v), 1) for k, v in ns.items()},
        "merges": int((t["merge"] > 0).sum()),
        "matches_per_probe": round(float(matches), 2),
    }


def breakdown(window: int) -> list[dict]:
    """ns per input tuple of each step of IBWJ (Fig. 9b) on B+-tree, IM-Tree and PIM-Tree, in
    :func:`lockstep`, beside the whole join's ns per tuple; the rest is the join core's own
    work.

    Two streams of uniform integers as in the other experiments; per batch of the join (1024
    tuples) each index gets about 512 probes, 512 inserts and 512 expiries, so each
    :class:`Replay` runs batches of 512 and every step's time is per input tuple of the join.
    The window fills first (W items), then ``max(2 W, 2**19)`` tuples are timed.
    """
    keys, probes, eps, fill = _two_streams(window, "uniform")
    configs = ("bplus_tree", "im_tree", "pim_tree", "pim_compact")
    replays = [Replay(c, window, keys, probes, eps, split_search=True) for c in configs]
    lockstep(replays)
    data = _data(2 * window + max(2 * window, 2**19))
    joins = lockstep_joins(list(configs), window, [data] * len(configs))
    rows = []
    for config, replay, join_ns in zip(configs, replays, joins, strict=True):
        row = {"index": config, "window": window, **_step_ns(replay, fill)}
        row["join_ns"] = round(join_ns, 1)
        row["rest_ns"] = round(row["join_ns"] - row["index_ns"], 1)
        rows.append(row)
        print(row, flush=True)
    return rows


def index_costs(config: str, window: int) -> dict[str, float]:
    """Index steps' ns per input tuple of ``config`` under each of :data:`DISTRIBUTIONS`
    (Fig. 12b), the distributions' replays in :func:`lockstep`."""
    streams = {d: _two_streams(window, d) for d in DISTRIBUTIONS}
    replays = {
        d: Replay(config, window, k, p, eps, split_search=True)
        for d, (k, p, eps, _) in streams.items()
    }
    lockstep(list(replays.values()))
    return {d: _step_ns(r, streams[d][3])["index_ns"] for d, r in replays.items()}


def shifting(window: int) -> tuple[list[dict], list[dict]]:
    """The runs of :data:`SHIFT_RUNS` (Fig. 13): one self-join stream of shifting-Gaussian
    values through each index, in :func:`lockstep`.

    Phases of :data:`SHIFT_PHASES` windows: ``N(0.5, 0.125)``, the mean moving to ``r + 0.5``,
    ``N(r + 0.5, 0.125)``; ``eps`` for match rate 2 in the first phase (its first two
    windows: :data:`SHIFT_PHASES` must start with at least 2). Each batch of 1024 probes the
    index (a self-join probes its own stream), then is inserted and expires the oldest tuples
    (:class:`Replay`). Index work only: the join core's own work does not depend on the
    values. For PIM-Tree, the inserts per subindex of every merge period
    (``last_partition_inserts``) give the load shares of Fig. 13a.

    Returns ``(phase_rows, series_rows)``: throughput (and subindex skew) per run and phase,
    and over time (throughput per half window; skew per merge period).
    """
    n = sum(SHIFT_PHASES) * window
    keys, eps = {}, {}
    for r in dict.fromkeys(run[3] for run in SHIFT_RUNS):
        values = sj.sources.values(n, "shifting_gaussian", seed=1, r=r, phases=SHIFT_PHASES)
        keys[r] = values.reshape(-1, BATCH)
        # two disjoint samples: a sample probed against itself would count self-matches
        eps[r] = sj.sources.band_for_match_rate(
            values[:window], values[window : 2 * window], window=window
        )
    runs = []
    for label, config, overrides, r in SHIFT_RUNS:
        periods = []
        record = functools.partial(_record_period, periods, label, r, window)
        replay = Replay(
            config,
            window,
            keys[r],
            keys[r],
            eps[r],
            on_merge=record if config == "pim_tree" else None,
            **overrides,
        )
        runs.append((label, config, r, replay, periods))
    lockstep([run[3] for run in runs])
    phases, series = [], []
    bounds = np.cumsum((0, *SHIFT_PHASES)) * window
    bounds[0] = window  # phase 1 is timed after the window filled
    chunk = window // 2 // BATCH
    for label, config, r, replay, periods in runs:
        t = replay.out
        seconds = t["probe"] + t["insert"] + t["delete"] + t["merge"]
        series += [
            {
                "kind": "throughput",
                "run": label,
                "r": r,
                "position_w": (c + chunk) * BATCH / window,
                "cpu_tuples_per_s": round(chunk * BATCH / seconds[c : c + chunk].sum()),
            }
            for c in range(0, len(seconds), chunk)
        ]
        for k in range(3):
            lo, hi = bounds[k] // BATCH, bounds[k + 1] // BATCH
            sel = [p for p in periods if bounds[k] < p["position_w"] * window <= bounds[k + 1]]
            fields = ("partitions", "max_share", "max_over_even", "idle_share")
            skew = {f: float(np.mean([p[f] for p in sel])) if sel else "" for f in fields}
            phases.append(
                {
                    "kind": "shifting",
                    "run": label,
                    "index": config,
                    "r": r,
                    "window": window,
                    "phase": k + 1,
                    "cpu_tuples_per_s": round((hi - lo) * BATCH / seconds[lo:hi].sum()),
                    "matches_per_probe": round(t["matches"][lo:hi].mean() / BATCH, 2),
                    **skew,
                }
            )
            print(phases[-1], flush=True)
        series += periods
    return phases, series


def _record_period(periods: list, label: str, r: float, window: int, b: int, index) -> None:
    """Append the subindex load of the merge period that batch ``b``'s insert closed."""
    counts = index.last_partition_inserts
    shares = counts / counts.sum()
    top = shares.max()
    periods.append(
        {
            "kind": "period",
            "run": label,
            "r": r,
            "position_w": (b + 1) * BATCH / window,
            "partitions": len(counts),
            "max_share": top,
            "max_over_even": top * len(counts),
            "idle_share": float(np.mean(shares < IDLE / len(shares))),
            "shares": " ".join(f"{v:.4f}" for v in shares) if len(counts) <= 16 else "",
        }
    )


def run_breakdown(scale: dict) -> None:
    """Section ``breakdown``: Fig. 9b, written to ``pim_tree_breakdown.{csv,md,png}``."""
    load = os.getloadavg()[0]
    rows = [row for window in scale["breakdown_windows"] for row in breakdown(window)]
    write_breakdown(rows, (load, os.getloadavg()[0]))


def run_distributions(scale: dict) -> None:
    """Section ``distributions``: Fig. 12b, written to ``pim_tree_distributions.{csv,md,png}``.

    Per index: the index steps under each distribution (:func:`index_costs`), then the whole
    join under each (:func:`lockstep_joins`), the distributions in :func:`lockstep`."""
    load = os.getloadavg()[0]
    window = scale["dist_window"]
    n = 2 * window + max(2 * window, 2**19)
    datasets = [_data(n, *DISTRIBUTIONS[d]) for d in DISTRIBUTIONS]
    rows = []
    for config in ("bplus_tree", "im_tree", "pim_tree"):
        costs = index_costs(config, window)
        joins = lockstep_joins([config] * len(datasets), window, datasets)
        for dist, join_ns in zip(DISTRIBUTIONS, joins, strict=True):
            rows.append(
                {
                    "kind": "stationary",
                    "run": config,
                    "distribution": dist,
                    "window": window,
                    "join_ns": round(join_ns, 1),
                    "index_ns": costs[dist],
                }
            )
            print(rows[-1], flush=True)
    write_distributions(rows, (load, os.getloadavg()[0]))


def run_shifting(scale: dict) -> None:
    """Section ``shifting``: Fig. 13a and 13b, written to ``pim_tree_shifting.{csv,md,png}``
    (time series in ``pim_tree_shifting_series.csv``)."""
    load = os.getloadavg()[0]
    rows, series = shifting(scale["shift_window"])
    write_shifting(rows, series, (load, os.getloadavg()[0]))


def _preamble(title: str, what: str, load: tuple[float, float]) -> list[str]:
    m = machine_info()
    return [
        f"# {title}",
        "",
        what,
        "",
        f"Machine: {m['cpus']} CPUs, {m['processor']}, {m['platform']}, Python {m['python']}; "
        f"load average {load[0]:.1f} at the start, {load[1]:.1f} at the end (other processes "
        f"share the 2 cores: figures are noisy, compare within a table); commit "
        f"{report.commit()}; {time.strftime('%Y-%m-%d')}; `{report.command_line()}`.",
    ]


def _write_csv(path: str, rows: list[dict]) -> None:
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def write_breakdown(rows: list[dict], load: tuple[float, float]) -> None:
    base = os.path.join(RESULTS, "pim_tree_breakdown")
    os.makedirs(RESULTS, exist_ok=True)
    _write_csv(base + ".csv", rows)
    lines = _preamble(
        "PIM-Tree §5, Fig. 9b: the cost of each step of IBWJ per input tuple",
        "Band join of two uniform integer streams, match rate 2, count window W per stream, batch "
        f"{BATCH}; m = 1/8, D_I = 1. Each index is replayed through one stream's share of the "
        "join (per batch: probe 512 keys, insert 512, expire 512; steady state after W items; "
        "the three indexes' batches in turn, `lockstep`), timing each call in CPU time "
        "(`time.thread_time`: other processes' time slices do not count; a timer call costs "
        "1-3 µs, 2-6 ns per tuple): "
        "*insert* excludes merges, which the index times itself (`merge_seconds`); *delete* is "
        "`expire` (item by item in the B+-tree, a bound for IM-/PIM-Tree, whose deletes happen "
        "in the merge); *search* is the probe of a zero-width band (every component descends to "
        "the range start, nothing is scanned) on every other batch, *scan* the full band's "
        "probe time minus it. *join* is the whole join's steady-state CPU ns per input tuple "
        "(emitter, join core and collector fed batch by batch, `JoinReplay`, the three indexes' "
        "joins in `lockstep` too), *rest* = join − index steps: the work around the index "
        "(stamping and batching, candidate filtering, the in-batch join, the tuple store, "
        "counting) and what two indexes and two stores cost in cache misses over one. Each "
        "cell: ns per input tuple (share of the index steps).",
        load,
    )
    for window in dict.fromkeys(r["window"] for r in rows):
        sel = [r for r in rows if r["window"] == window]
        lines += [
            "",
            f"## W = {_pow2(window)}",
            "",
            "| index | " + " | ".join(STEPS) + " | index total | join | rest | merges | "
            "matches/probe |",
            "|---" + "|---:" * (len(STEPS) + 5) + "|",
        ]
        for r in sel:
            cells = [f"{r[f'{k}_ns']:.0f} ({r[f'{k}_ns'] / r['index_ns']:.0%})" for k in STEPS]
            cells += [
                f"{r['index_ns']:.0f}",
                f"{r['join_ns']:.0f}",
                f"{r['rest_ns']:.0f}",
                str(r["merges"]),
                f"{r['matches_per_probe']:.2f}",
            ]
            lines.append(f"| {r['index']} | " + " | ".join(cells) + " |")
    ns = {(r["index"], r["window"]): r for r in rows}
    windows = list(dict.fromkeys(r["window"] for r in rows))

    def ours(fn) -> str:
        return " | ".join(fn(lambda c, w=w: ns[(c, w)]) for w in windows)

    lines += [
        "",
        "## Paper vs ours",
        "",
        "| figure | paper (W = 2^17; 2^23) | "
        + " | ".join(f"ours W = {_pow2(w)}" for w in windows)
        + " |",
        "|---|---|" + "---:|" * len(windows),
    ]
    comparisons = [
        (
            "insert, B+-tree / PIM-Tree",
            "1.5x; 2.6x",
            lambda g: f"{g('bplus_tree')['insert_ns'] / g('pim_tree')['insert_ns']:.2f}x",
        ),
        (
            "insert, IM-Tree / PIM-Tree",
            "≈ 1; ≈ 1",
            lambda g: f"{g('im_tree')['insert_ns'] / g('pim_tree')['insert_ns']:.2f}x",
        ),
        (
            "search, PIM-Tree / B+-tree",
            "≈ 1.75x (B+ 75% faster); ≈ 1",
            lambda g: f"{g('pim_tree')['search_ns'] / g('bplus_tree')['search_ns']:.2f}x",
        ),
        (
            "search, IM-Tree / B+-tree",
            "≈ 1.75x; slightly > 1",
            lambda g: f"{g('im_tree')['search_ns'] / g('bplus_tree')['search_ns']:.2f}x",
        ),
        (
            "merge share of the index steps, IM / PIM",
            "7%; 11% (both)",
            lambda g: (
                f"{g('im_tree')['merge_ns'] / g('im_tree')['index_ns']:.0%} / "
                f"{g('pim_tree')['merge_ns'] / g('pim_tree')['index_ns']:.0%}"
            ),
        ),
        (
            "index steps, B+-tree / PIM-Tree",
            "≈ 1.6x (whole join, Fig. 10a)",
            lambda g: f"{g('bplus_tree')['index_ns'] / g('pim_tree')['index_ns']:.2f}x",
        ),
        (
            "whole join, B+-tree / PIM-Tree (ns per tuple)",
            "≈ 1.6x (Fig. 10a)",
            lambda g: f"{g('bplus_tree')['join_ns'] / g('pim_tree')['join_ns']:.2f}x",
        ),
        (
            "PIM-Tree 16-byte / 8-byte T_S items: index steps; whole join",
            "— (the paper's items are 8 bytes)",
            lambda g: (
                f"{g('pim_tree')['index_ns'] / g('pim_compact')['index_ns']:.2f}x; "
                f"{g('pim_tree')['join_ns'] / g('pim_compact')['join_ns']:.2f}x"
            ),
        ),
        (
            "index steps share of the join, B+ / IM / PIM",
            "— (the paper's join is the index)",
            lambda g: " / ".join(
                f"{g(c)['index_ns'] / g(c)['join_ns']:.0%}"
                for c in ("bplus_tree", "im_tree", "pim_tree")
            ),
        ),
    ]
    for what, paper, fn in comparisons:
        lines.append(f"| {what} | {paper} | {ours(fn)} |")
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    plot_breakdown(rows, base + ".png")
    print("\n".join(lines))


def plot_breakdown(rows: list[dict], path: str) -> None:
    plt = viz._pyplot()
    windows = list(dict.fromkeys(r["window"] for r in rows))
    fig, axes = plt.subplots(1, len(windows), figsize=(6 * len(windows), 3.5), squeeze=False)
    colors = dict(zip(STEPS, plt.get_cmap("tab10").colors, strict=False))
    for ax, window in zip(axes.flat, windows, strict=True):
        sel = [r for r in rows if r["window"] == window][::-1]
        left = np.zeros(len(sel))
        for k in (*STEPS, "rest"):
            width = [max(0.0, r[f"{k}_ns"]) for r in sel]
            style = {"color": "lightgrey", "hatch": "//"} if k == "rest" else {"color": colors[k]}
            ax.barh([r["index"] for r in sel], width, left=left, label=k, **style)
            left += width
        ax.set_xlabel("ns per input tuple")
        ax.set_title(f"W = {_pow2(window)}: index steps, then the rest of the join core")
        ax.grid(True, axis="x", alpha=0.3)
    fig.legend(*axes.flat[0].get_legend_handles_labels(), loc="lower center", ncol=6, fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    viz.save_figure(fig, path)


def write_distributions(stat: list[dict], load: tuple[float, float]) -> None:
    base = os.path.join(RESULTS, "pim_tree_distributions")
    os.makedirs(RESULTS, exist_ok=True)
    _write_csv(base + ".csv", stat)
    configs = list(dict.fromkeys(r["run"] for r in stat))
    lines = _preamble(
        f"PIM-Tree §5, Fig. 12b: skewed value distributions, W = {_pow2(stat[0]['window'])}",
        "Single join core, m = 1/8, D_I = 1, two-way band join, `eps` for match rate 2 under "
        "each distribution (values of `streamjoin.sources.values`: gaussian N(0.5, 0.125), "
        "gamma(k, θ)). *join*: steady-state throughput of the whole join (emitter, join core, "
        "collector: `JoinReplay`), input tuples per CPU second; *index*: the index steps "
        "alone, ns per input tuple (the breakdown's `Replay` under the same values). For each "
        "index the four distributions run in `lockstep`, batch by batch in turn. In "
        "parentheses, the throughput relative to the same index under the uniform distribution "
        "(< 1: slower).",
        load,
    )
    lines += [
        "",
        "Paper: uniform always fastest, but only 2% (Gaussian) to 4% (Gamma) above "
        "the others (parallel PIM-Tree, 16 threads, W = 2^20).",
        "",
        "| distribution | "
        + " | ".join(f"{c} join" for c in configs)
        + " | "
        + " | ".join(f"{c} index" for c in configs)
        + " | pim_tree / bplus_tree join; "
        "index |",
        "|---" + "|---:" * (2 * len(configs) + 1) + "|",
    ]
    tput = {(r["run"], r["distribution"]): 1e9 / r["join_ns"] for r in stat}
    ins = {(r["run"], r["distribution"]): r["index_ns"] for r in stat}
    for dist in dict.fromkeys(r["distribution"] for r in stat):
        cells = [
            f"{tput[(c, dist)] / 1e3:,.0f}K ({tput[(c, dist)] / tput[(c, 'uniform')]:.2f})"
            for c in configs
        ]
        cells += [
            f"{ins[(c, dist)]:.0f} ns ({ins[(c, 'uniform')] / ins[(c, dist)]:.2f})" for c in configs
        ]
        cells.append(
            f"{tput[('pim_tree', dist)] / tput[('bplus_tree', dist)]:.2f}x; "
            f"{ins[('bplus_tree', dist)] / ins[('pim_tree', dist)]:.2f}x"
        )
        lines.append(f"| {dist} | " + " | ".join(cells) + " |")
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    plot_distributions(stat, base + ".png")
    print("\n".join(lines))


def write_shifting(shift: list[dict], series: list[dict], load: tuple[float, float]) -> None:
    base = os.path.join(RESULTS, "pim_tree_shifting")
    os.makedirs(RESULTS, exist_ok=True)
    _write_csv(base + ".csv", shift)
    _write_csv(base + "_series.csv", series)
    window = shift[0]["window"]
    lines = _preamble(
        f"PIM-Tree §5, Fig. 13a and 13b: a shifting Gaussian, W = {_pow2(window)}",
        f"Single join core, m = 1/8, D_I = 1 unless stated. One stream (self-join pattern), "
        f"phases of {SHIFT_PHASES} windows: N(0.5, 0.125), the mean moving linearly by r, "
        "N(r + 0.5, 0.125) (the paper: 4, 10, 4 windows of 2^20; the middle phase, hence the "
        "shift per window, is the paper's). Index work alone (probe, insert, expire per batch "
        "of 1024; `Replay`, all runs in `lockstep`), in tuples per CPU second, phase 1 timed "
        "after the window filled. Subindex load per merge period from PIM-Tree's "
        "`last_partition_inserts`: *busiest* = the largest share of a period's inserts taken "
        "by one subindex (in parentheses, over an even share: 1x is even), *idle* = the "
        "fraction "
        f"of subindexes taking under {IDLE:g} of an even share; means over the periods of "
        "each phase.",
        load,
    )
    lines += [
        "",
        "Paper (D_I = 4: 1024 subindexes): inserts even at r = 0; at r = 1, 77% of the "
        "inserts go to one subindex and 70% of the subindexes get almost none (Fig. 13a); "
        "parallel self-join throughput falls to 35% (r = 0.4, 0.6) and 16% (r = 0.8, 1) "
        "in phase 2 from lock congestion, and recovers in phase 3 (Fig. 13b). Ours is "
        "single-threaded: no lock congestion can occur.",
        "",
        "| index | r | subindexes | tuples/s phase 1 | phase 2 | phase 3 | 2 / 1 | 3 / 1 | "
        "busiest 1 / 2 / 3 | idle 1 / 2 / 3 | matches/probe 1 / 2 / 3 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, r in dict.fromkeys((x["run"], x["r"]) for x in shift):
        p = {x["phase"]: x for x in shift if x["run"] == label and x["r"] == r}
        t = [p[k]["cpu_tuples_per_s"] for k in (1, 2, 3)]
        skew = p[1]["partitions"] != ""
        cells = [
            label,
            f"{r:g}",
            f"{p[2]['partitions']:.0f}" if skew else "—",
            *(f"{v / 1e3:,.0f}K" for v in t),
            f"{t[1] / t[0]:.2f}",
            f"{t[2] / t[0]:.2f}",
            " / ".join(f"{p[k]['max_share']:.1%} ({p[k]['max_over_even']:.1f}x)" for k in (1, 2, 3))
            if skew
            else "—",
            " / ".join(f"{p[k]['idle_share']:.1%}" for k in (1, 2, 3)) if skew else "—",
            " / ".join(f"{p[k]['matches_per_probe']:.1f}" for k in (1, 2, 3)),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    plot_shifting(series, window, base + ".png")
    print("\n".join(lines))


def plot_distributions(stat: list[dict], path: str) -> None:
    plt = viz._pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    dists = list(dict.fromkeys(r["distribution"] for r in stat))
    configs = list(dict.fromkeys(r["run"] for r in stat))
    speed = {(r["run"], r["distribution"]): (1e9 / r["join_ns"], 1e9 / r["index_ns"]) for r in stat}
    colors = plt.get_cmap("tab10").colors
    for i, c in enumerate(configs):
        for j, what in enumerate(("whole join", "index steps alone")):
            ys = [speed[(c, d)][j] / speed[(c, "uniform")][j] for d in dists]
            ax.bar(
                np.arange(len(dists)) + (2 * i + j - 2.5) * 0.13,
                ys,
                width=0.13,
                color=colors[i],
                hatch="//" if j else None,
                label=f"{c}, {what}",
            )
    ax.axhline(1, color="grey", lw=0.8)
    ax.set_ylim(0.8, 1.1)  # the differences are a few percent
    ax.set_xticks(range(len(dists)), dists)
    ax.set_ylabel("throughput / the same under uniform")
    ax.set_title(f"Fig. 12b: value distributions, W = {_pow2(stat[0]['window'])} (CPU time)")
    ax.legend(fontsize=6, ncol=3, loc="upper center")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    viz.save_figure(fig, path)


def plot_shifting(series: list[dict], window: int, path: str) -> None:
    plt = viz._pyplot()
    fig, axes = plt.subplots(3, 1, figsize=(9, 10.5))
    periods = [s for s in series if s["kind"] == "period"]
    ax = axes[0]
    for label, r in dict.fromkeys((s["run"], s["r"]) for s in periods):
        sel = [s for s in periods if s["run"] == label and s["r"] == r]
        ax.plot(
            [s["position_w"] for s in sel],
            [s["max_over_even"] for s in sel],
            label=f"{label}, r={r:g} ({sel[-1]['partitions']} subindexes)",
        )
    ax.set_yscale("log", base=2)
    ax.set_title("Fig. 13a: PIM-Tree, the busiest subindex's inserts per merge period")
    ax.set_ylabel("share / even share")
    ax.legend(fontsize=7, ncol=2)
    ax = axes[1]
    label, r = next((s["run"], s["r"]) for s in periods if s["shares"])
    sel = [s for s in periods if s["run"] == label and s["r"] == r and s["shares"]]
    shares = [np.array(s["shares"].split(), dtype=float) for s in sel]
    width = max(map(len, shares))
    stack = np.array([np.pad(v, (0, width - len(v))) for v in shares]).T
    ax.stackplot([s["position_w"] for s in sel], stack, step="pre")
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of the period's inserts")
    ax.set_title(
        f"Fig. 13a: {label}, r={r:g}: inserts per subindex and merge period (bottom: lowest keys)"
    )
    ax = axes[2]
    tp = [s for s in series if s["kind"] == "throughput"]
    for label, r in dict.fromkeys((s["run"], s["r"]) for s in tp):
        sel = [s for s in tp if s["run"] == label and s["r"] == r]
        ax.plot(
            [s["position_w"] for s in sel],
            [s["cpu_tuples_per_s"] for s in sel],
            label=f"{label}, r={r:g}",
        )
    ax.set_ylabel("tuples per CPU second (index work)")
    ax.set_ylim(bottom=0)
    ax.set_title("Fig. 13b (one thread): throughput over the stream, per half window")
    ax.legend(fontsize=7, ncol=2)
    for ax in axes:
        ax.set_xlabel(f"tuples seen, in windows of {_pow2(window)}")
        ax.set_xlim(left=0)
        ax.grid(True, alpha=0.3)
        for e in np.cumsum(SHIFT_PHASES)[:-1]:
            ax.axvline(e, color="grey", lw=0.8, ls="--")
    fig.tight_layout()
    viz.save_figure(fig, path)


#: Sections that write their own result files (``--only`` selects them like experiments).
SECTIONS = {
    "breakdown": run_breakdown,
    "distributions": run_distributions,
    "shifting": run_shifting,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small windows, for a smoke run")
    ap.add_argument(
        "--only", default="window,chain,merge,depth,match,memory,breakdown,distributions,shifting"
    )
    args = ap.parse_args()
    scale = SCALES["quick" if args.quick else "full"]
    todo = experiments(scale)
    only = args.only.split(",")
    unknown = [e for e in only if e not in todo and e not in SECTIONS]
    if unknown:
        ap.error(f"unknown experiments {unknown}; choose from {[*todo, *SECTIONS]}")
    load = os.getloadavg()[0]
    rows = []
    for exp in (e for e in only if e in todo):
        for param, value, run in todo[exp]:
            t0 = time.perf_counter()
            row = {"experiment": exp, "param": param, "value": value, **run()}
            row["run_s"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            print(row, flush=True)
    if rows:
        write(rows, args, (load, os.getloadavg()[0]))
    for exp in (e for e in only if e in SECTIONS):
        SECTIONS[exp](scale)


def _ratio(rows: list[dict], num: str, den: str, key: str) -> float:
    """Geometric mean of ``num``'s throughput over ``den``'s, at equal ``key`` (window or the
    swept value)."""
    a = {r[key]: r["input_tuples_per_s"] for r in rows if r["index"] == num}
    b = {r[key]: r["input_tuples_per_s"] for r in rows if r["index"] == den}
    return float(np.exp(np.mean([np.log(a[v] / b[v]) for v in sorted(set(a) & set(b))])))


def _label(row: dict) -> str:
    """The series a row belongs to: its index, its window (``depth``), its index and merge ratio
    (``memory``)."""
    if row["experiment"] == "depth":
        return f"W=2^{int(np.log2(row['window']))}"
    if row["experiment"] == "memory" and row["value"] is not None:
        return f"{row['index']} m={row['value']:g}"
    return row["index"]


def _pow2(v: float) -> str:
    """Powers of two as ``2^k`` (windows, merge ratios, match rates), others as they are."""
    k = np.log2(v)
    return f"2^{k:.0f}" if v > 0 and k == round(k) and abs(k) >= 2 else f"{v:g}"


def _tput(row: dict) -> str:
    return f"{row['input_tuples_per_s'] / 1e3:,.0f}K"


def _table(rows: list[dict], key: str, columns: list[str], fmt) -> list[str]:
    """Markdown table: one line per value of ``key``, one column per index / window label."""
    name = rows[0]["param"] if key == "value" else key
    lines = [f"| {name} | " + " | ".join(columns) + " |", "|---" + "|---:" * len(columns) + "|"]
    for v in dict.fromkeys(r[key] for r in rows):
        cells = [fmt(r) for c in columns for r in rows if r[key] == v and _label(r) == c]
        shown = v if name in ("chain_length", "insertion_depth") else _pow2(v)
        lines.append(f"| {shown} | " + " | ".join(cells) + " |")
    return lines


def write(rows: list[dict], args, load: tuple[float, float]) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    base = os.path.join(RESULTS, "pim_tree_paper")
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(base + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    commit = report.commit()
    m = machine_info()
    lines = [
        "# PIM-Tree §5 at this machine's scale",
        "",
        "Single join core, band join of two uniform integer streams, count window W per stream, "
        f"batch {BATCH}; steady-state throughput in input tuples/s (after the 2 W tuples that "
        "fill the windows). See the docstring of `experiments/pim_tree_paper.py`.",
        f"Machine: {m['cpus']} CPUs, {m['processor']}, {m['platform']}, Python {m['python']}; "
        f"load average {load[0]:.1f} at the start, {load[1]:.1f} at the end (other processes "
        f"share the 2 cores: figures are noisy); commit {commit} plus the working tree; "
        f"`{report.command_line()}`.",
    ]
    for exp in dict.fromkeys(r["experiment"] for r in rows):
        sel = [r for r in rows if r["experiment"] == exp]
        lines += ["", f"## {exp}", "", f"Paper: {PAPER[exp]}.", ""]
        labels = list(dict.fromkeys(map(_label, sel)))
        if exp == "window":
            lines += _table(sel, "window", labels, _tput)
            ours = ", ".join(
                f"{c} {_ratio(sel, c, 'bplus_tree', 'window'):.2f}x" for c in labels[1:]
            )
            lines += ["", f"Ours, geometric mean over W of the ratio to bplus_tree: {ours}."]
        elif exp == "memory":
            lines += _table(sel, "window", labels, lambda r: f"{r['bytes_per_item']:.1f} B/item")
            base_mem = {r["window"]: r["bytes_per_item"] for r in sel if r["index"] == "bplus_tree"}
            ratios = [
                r["bytes_per_item"] / base_mem[r["window"]] for r in sel if r["index"] == "pim_tree"
            ]
            lines += [
                "",
                f"Ours: PIM-Tree / B+-tree bytes between {min(ratios):.2f} and "
                f"{max(ratios):.2f} (our B+-tree also keeps a 16-byte insertion log per "
                "item for expiry; our PIM-Tree has no merge buffer).",
            ]
        else:
            lines += _table(sel, "value", labels, _tput)
            pair = {"chain": ("ib_chain", "b_chain"), "match": ("pim_tree", "bplus_tree")}
            if exp in pair:
                num, den = pair[exp]
                ratio = _ratio(sel, num, den, "value")
                lines += ["", f"Ours: {num} / {den} {ratio:.2f}x (geometric mean over the sweep)."]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    plot(rows, base + ".png")
    print("\n".join(lines))


def plot(rows: list[dict], path: str) -> None:
    plt = viz._pyplot()
    exps = list(dict.fromkeys(r["experiment"] for r in rows))
    cols = min(3, len(exps))
    fig, axes = plt.subplots(
        -(-len(exps) // cols), cols, figsize=(5 * cols, 3.8 * -(-len(exps) // cols)), squeeze=False
    )
    for ax in axes.flat[len(exps) :]:
        ax.set_visible(False)
    for ax, exp in zip(axes.flat, exps, strict=False):
        sel = [r for r in rows if r["experiment"] == exp]
        metric = "bytes_per_item" if exp == "memory" else "input_tuples_per_s"
        x = "window" if exp in ("window", "memory") else "value"
        for g in dict.fromkeys(map(_label, sel)):
            pts = sorted((r[x], r[metric]) for r in sel if _label(r) == g)
            ax.plot(*zip(*pts, strict=True), marker="o", label=g)
        if exp not in ("chain", "depth"):
            ax.set_xscale("log", base=2)
        ax.set_xlabel("window W" if x == "window" else sel[0]["param"])
        ax.set_ylabel("bytes per item" if exp == "memory" else "input tuples/s")
        ax.set_ylim(bottom=0)
        ax.set_title(exp)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    viz.save_figure(fig, path)


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"{time.time() - t0:.0f} s")
