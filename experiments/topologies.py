"""Every topology on the local and Ray executors, side by side, on one input.

Band join |r.x - s.x| <= eps (match rate 2), count window per stream, uniform integers. For
each topology and backend: input tuples/s end to end and latency per output pair, at full
speed (batch 16K) and at a paced input rate with small batches (1 ms delay). Each
configuration is first checked against the oracle on a small input. Writes
``experiments/results/topologies.{csv,md,png}`` with the machine and commit.

Run: ``python experiments/topologies.py`` (about 10 minutes on 2 cores; ``--quick`` for a
smoke run).
"""

from __future__ import annotations

import argparse
import csv
import os
import time

import numpy as np
import report

import streamjoin as sj
from streamjoin import viz

RESULTS = report.results_dir()


def band_query(data, window: int, match_rate: float = 2.0) -> sj.Query:
    x, s = data.column("x").to_numpy(), data.column("stream").to_numpy()
    eps = sj.sources.band_for_match_rate(x[s == 0], x[s == 1], window=window, match_rate=match_rate)
    return sj.Query(sj.band("x", eps), window=sj.CountWindow(window))


def check_exact(spec: str, index: str, backend: str) -> bool:
    data = sj.sources.synthetic(3000, low=0, high=30_000, seed=7)
    q = band_query(data, 256)
    res = sj.run(q, data, sj.topologies.parse(spec, index), backend=backend, batch_size=64)
    return bool(res.same_pairs(sj.oracle.join(q, data)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuples", type=int, default=1_000_000)
    ap.add_argument("--window", type=int, default=2**16)
    ap.add_argument("--index", default="bplus_tree")
    ap.add_argument("--pace", type=float, default=50_000, help="paced input rate, tuples/s")
    ap.add_argument(
        "--layouts",
        default="single,split:2,grid:1x2,grid:2x1,grid:2x2,handshake:2,handshake:2:ll,panjoin:2x4",
    )
    ap.add_argument("--quick", action="store_true", help="small input, for a smoke run")
    args = ap.parse_args()
    if args.quick:
        args.tuples, args.window = 50_000, 2**12

    import ray

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    prov = report.Provenance()
    data = sj.sources.synthetic(args.tuples, low=0, high=10 * args.tuples, seed=1)
    q = band_query(data, args.window)
    paced = data.slice(0, min(len(data), int(args.pace * 4)))  # four seconds of input
    rows = []
    for spec in args.layouts.split(","):
        for backend in ("local", "ray"):
            exact = check_exact(spec, args.index, backend)
            topo = sj.topologies.parse(spec, args.index)
            fast = sj.run(q, data, topo, backend=backend, batch_size=16_384, collect="count")
            slow = sj.run(
                q,
                paced,
                topo,
                backend=backend,
                batch_size=256,
                max_delay=0.001,
                pace=args.pace,
                collect="count",
            )
            row = {
                "layout": spec,
                "backend": backend,
                "exact": exact,
                "input_tuples_per_s": round(fast.metrics["input_tuples_per_s"]),
                "latency_p50_ms": fast.metrics["latency_ms"]["p50"],
                "latency_p99_ms": fast.metrics["latency_ms"]["p99"],
                "paced_tuples_per_s": round(slow.metrics["input_tuples_per_s"]),
                "paced_p50_ms": slow.metrics["latency_ms"]["p50"],
                "paced_p99_ms": slow.metrics["latency_ms"]["p99"],
                "pairs": fast.count,
            }
            rows.append(row)
            print(row, flush=True)
            prov.note()
    write(rows, args, prov)


def write(rows: list[dict], args, prov: report.Provenance) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    base = os.path.join(RESULTS, "topologies" + ("_quick" if args.quick else ""))
    with open(base + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    local = {r["layout"]: r["input_tuples_per_s"] for r in rows if r["backend"] == "local"}
    lines = [
        "# Topologies on local and Ray",
        "",
        f"{args.tuples:,} tuples, count window {args.window:,} per stream, band join at match "
        f"rate 2, index `{args.index}`; full speed at batch 16,384; paced at {args.pace:,.0f} "
        "tuples/s with batch 256 closing after 1 ms.",
        prov.line(),
        "",
        "| layout | backend | exact | tuples/s | ray/local | p50 ms | p99 ms | paced tuples/s "
        "| paced p50 ms | paced p99 ms |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = r["input_tuples_per_s"] / local[r["layout"]]
        lines.append(
            f"| {r['layout']} | {r['backend']} | {'yes' if r['exact'] else 'NO'} "
            f"| {r['input_tuples_per_s']:,} | {ratio:.2f} | {r['latency_p50_ms']:.1f} "
            f"| {r['latency_p99_ms']:.1f} | {r['paced_tuples_per_s']:,} "
            f"| {r['paced_p50_ms']:.2f} | {r['paced_p99_ms']:.2f} |"
        )
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    plot(rows, base + ".png")
    print("\n".join(lines))


def plot(rows: list[dict], path: str) -> None:
    plt = viz._pyplot()
    layouts = list(dict.fromkeys(r["layout"] for r in rows))
    x = np.arange(len(layouts))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for k, backend in enumerate(("local", "ray")):
        sel = {r["layout"]: r for r in rows if r["backend"] == backend}
        off = (k - 0.5) * 0.38
        axes[0].bar(
            x + off, [sel[lay]["input_tuples_per_s"] / 1e3 for lay in layouts], 0.38, label=backend
        )
        axes[1].bar(x + off, [sel[lay]["latency_p50_ms"] for lay in layouts], 0.38, label=backend)
        axes[2].bar(x + off, [sel[lay]["paced_p50_ms"] for lay in layouts], 0.38, label=backend)
    titles = (
        "throughput, full speed (K tuples/s)",
        "p50 latency, full speed (ms)",
        "p50 latency, paced (ms, log scale)",
    )
    # the original handshake join's paced latency is ~100x the others': a linear axis hides them
    axes[2].set_yscale("log")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xticks(x, layouts, rotation=30)
        ax.set_title(title)
        ax.legend()
        ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    viz.save_figure(fig, path)


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"{time.time() - t0:.0f} s")
