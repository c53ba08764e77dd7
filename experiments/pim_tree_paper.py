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
  (Fig. 11a; the index alone, filled and churned at batch 512).

Indexes: ``bplus_tree``; ``chained`` with L = 2, archived as B+-trees (B-chain) or CSS-trees
(IB-chain); ``im_tree`` and ``pim_tree`` with m = 1/8 and D_I = 1 unless varied; every index but
the B+-tree gets ``window=W``. Writes ``experiments/results/pim_tree_paper.{csv,md,png}``; the
markdown puts the paper's reported figures beside ours.

Run: ``python experiments/pim_tree_paper.py`` (about 20 minutes on 2 cores; ``--quick`` for a
smoke run, ``--only window,chain`` for some experiments).
"""

from __future__ import annotations

import argparse
import csv
import functools
import os
import subprocess
import sys
import time

import numpy as np

import streamjoin as sj
from streamjoin import indexes, viz
from streamjoin.runtime.result import machine_info

RESULTS = os.path.join(os.path.dirname(__file__), "results")
BATCH = 1024
INDEXES = {
    "bplus_tree": ("bplus_tree", {}),
    "b_chain": ("chained", {"chain_length": 2, "archive": "bplus"}),
    "ib_chain": ("chained", {"chain_length": 2, "archive": "css"}),
    "im_tree": ("im_tree", {"merge_ratio": 1 / 8}),
    "pim_tree": ("pim_tree", {"merge_ratio": 1 / 8, "insertion_depth": 1}),
}
#: Sizes per experiment: full run and --quick.
SCALES = {
    "full": {"windows": [2**k for k in range(10, 23, 2)], "sweep_window": 2**18,
             "depth_windows": [2**16, 2**18, 2**20],
             "match_rates": [2.0**k for k in range(-4, 11, 2)]},
    "quick": {"windows": [2**10, 2**12, 2**14], "sweep_window": 2**12,
              "depth_windows": [2**12, 2**14], "match_rates": [0.25, 2.0, 64.0]},
}  # fmt: skip
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
def _data(n: int):
    return sj.sources.synthetic(n, seed=1)


def join(config: str, window: int, match_rate: float = 2.0, **overrides) -> dict:
    """Join throughput of index ``config`` (with option ``overrides``) at window ``window``."""
    name, options = INDEXES[config]
    options = {**options, **({} if name == "bplus_tree" else {"window": window}), **overrides}
    fill = 2 * window
    n = fill + max(2 * window, 2**19)
    data = _data(n)
    x, s = data.column("x").to_numpy(), data.column("stream").to_numpy()
    eps = sj.sources.band_for_match_rate(x[s == 0], x[s == 1], window=window,
                                         match_rate=match_rate)  # fmt: skip
    q = sj.Query(sj.band("x", eps), window=sj.CountWindow(window))
    topo = sj.topologies.single(name, **options)
    sj.run(q, data.slice(0, 20_000), topo, batch_size=BATCH, collect="count")  # compile
    t_fill, _ = _timed(q, data.slice(0, fill), topo)
    t_all, count = _timed(q, data, topo)
    return {"index": config, "window": window, "tuples": n,
            "input_tuples_per_s": round((n - fill) / (t_all - t_fill)),
            "pairs_per_input": round(count / n, 3)}  # fmt: skip


def _timed(query, data, topo) -> tuple[float, int]:
    """Elapsed seconds and output pairs of one run."""
    res = sj.run(query, data, topo, batch_size=BATCH, collect="count")
    return res.metrics["elapsed_s"], res.count


def memory(config: str, window: int, **overrides) -> dict:
    """Bytes per item of index ``config`` holding ``window`` items, after a window of churn."""
    name, options = INDEXES[config]
    options = {**options, **({} if name == "bplus_tree" else {"window": window}), **overrides}
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
        "window": [("W", v, functools.partial(join, c, v)) for c in INDEXES
                   for v in scale["windows"]],
        "chain": [("chain_length", L, functools.partial(join, c, w, chain_length=L))
                  for c in ("b_chain", "ib_chain") for L in (2, 3, 4, 6, 8, 12, 16)],
        "merge": [("merge_ratio", m, functools.partial(join, c, w, merge_ratio=m))
                  for c in ("im_tree", "pim_tree") for m in 2.0 ** np.arange(-6, 1)],
        "depth": [("insertion_depth", d, functools.partial(join, "pim_tree", v, insertion_depth=d))
                  for v in scale["depth_windows"] for d in (1, 2, 3, 4)],
        "match": [("match_rate", r, functools.partial(join, c, w, r))
                  for c in ("bplus_tree", "im_tree", "pim_tree") for r in scale["match_rates"]],
        "memory": [("merge_ratio", m, functools.partial(memory, c, v, **({} if m is None else
                                                                       {"merge_ratio": m})))
                   for v in scale["windows"][-3:]
                   for c, m in (("bplus_tree", None), ("pim_tree", 1.0), ("pim_tree", 1 / 8))],
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small windows, for a smoke run")
    ap.add_argument("--only", default="window,chain,merge,depth,match,memory")
    args = ap.parse_args()
    todo = experiments(SCALES["quick" if args.quick else "full"])
    load = os.getloadavg()[0]
    rows = []
    for exp in args.only.split(","):
        for param, value, run in todo[exp]:
            t0 = time.perf_counter()
            row = {"experiment": exp, "param": param, "value": value, **run()}
            row["run_s"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            print(row, flush=True)
    write(rows, args, (load, os.getloadavg()[0]))


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
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()  # fmt: skip
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
        f"`python {' '.join(sys.argv)}`.",
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
            ratios = [r["bytes_per_item"] / base_mem[r["window"]] for r in sel
                      if r["index"] == "pim_tree"]  # fmt: skip
            lines += ["", f"Ours: PIM-Tree / B+-tree bytes between {min(ratios):.2f} and "
                      f"{max(ratios):.2f} (our B+-tree also keeps a 16-byte insertion log per "
                      "item for expiry; our PIM-Tree has no merge buffer)."]  # fmt: skip
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
    fig, axes = plt.subplots(-(-len(exps) // cols), cols, figsize=(5 * cols, 3.8 * -(-len(exps)
                             // cols)), squeeze=False)  # fmt: skip
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
