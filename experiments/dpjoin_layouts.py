"""DP-Join's layout findings (Buono et al. §IV) reproduced on the ``sim`` backend.

Sixteen join cores arranged as m×n grids (square 4×4, rectangular 2×8 / 8×2 / 3×5 / 5×3,
linear 1×16 / 16×1, chain forwarding as in DP-Join §III-C), tuple at a time (batch 1), on the
handshake workload (uniform values, nested-loop windows; ``band(x, 50) & band(y, 50)``, wider
than the paper's 10 so that the scaled-down windows still yield thousands of pairs: a
nested-loop probe costs the same either way)
with time windows, the input arriving as one Poisson process at λx + λy in virtual time (its
interleaving gives each stream its rate; constant rates would make R and S arrive in lockstep
and queue behind each other at the core they share):

1. symmetric streams, 1000 t/s each (Fig. 6b): mean latency per layout in the steady state
   (pairs whose later tuple arrived after one window length), beside DP-Join's Expr. 7,
   ``L = λ T_w T⋈ (m + n) / (4 m n)`` (results leave as they are found, on average half way
   through a partition scan) and its end-of-probe variant ``2 L`` (our join cores send a
   probe's pairs when the probe is done, so a pair waits for the whole scan);
2. asymmetric rates λx = 1000, λy = 3000 t/s (Fig. 7a), beside Expr. 5–6, where the paper
   finds a rectangular layout best (3×5 at 0.26 ms against 4×4 at 0.30 ms);
3. the steady-state output rate beside Expr. 3, ``B_max = 2 λx λy T_w p`` (Fig. 4);
4. the handshake join on 16 cores (Teubner & Mueller, ``topologies.handshake(16)``, segments of
   ``λ T_w / 16`` tuples) against the 4×4 grid on the same symmetric input (Fig. 6): DP-Join
   measures 67 s against about 1 ms. Model: a tuple stays ``T_w / N`` at each of the N cores,
   so a tuple and one ``Δ`` older coming the other way meet half way,
   ``τ = ((N-1)/N · T_w − Δ) / 2`` after the later one arrived; with ``Δ`` uniform on
   ``[0, T_w]`` the mean is ``T_w (N-1)² / (4 N²)`` (0.22 T_w at N = 16: 66 s for the
   paper's 300 s window). The run is two windows long and only pairs whose later tuple
   arrived at least half a window before the end count, so that the end-of-input drain,
   which pushes every segment through the chain, does not cut the slow meetings short.

The simulator runs the real joins, so windows are scaled: ``T_w`` is 6 s instead of 300 s
and every scanned tuple is charged ``--scale`` (50) times the calibrated nested-loop cost, so
a probe costs what a probe of the paper's 300 s window would (T⋈ × 50 × 6,000 tuples =
T⋈ × 300,000 tuples). Two machines, both built in that way from this host's profile
(``streamjoin calibrate``'s, else the shipped one; the results name it), both with shared-memory messaging (assumed: 0.5 µs to send, 1 µs in flight, 0.5 µs to
receive, the order of a lock-free queue hand-off between cores, cf. FastFlow; not measured):

- ``python``: per-call and per-tuple overheads of this Python implementation as calibrated
  (tens of µs per step);
- ``native``: those overheads 50× smaller (a what-if of compiled workers, closer to DP-Join's
  C++ ones), so that scanning the window dominates as in the paper.

Writes ``experiments/results/dpjoin_layouts.{csv,md,png}`` (``dpjoin_layouts_quick.*`` with
``--quick``) with the profiles, the commit, the machine and its load.

Scenarios 1–3 run on both machines, the handshake comparison on ``native`` (its latency is the
time tuples spend in the chain, which per-step overheads barely change). The mirror layouts
8×2 and 16×1 are left out of the symmetric scenario (by symmetry they equal 2×8 and 1×16:
0.194 against 0.196 ms and 0.378 against 0.376 ms in an earlier run) to keep the run short.

Run: ``python experiments/dpjoin_layouts.py`` (about 15 minutes on 2 cores; ``--quick`` for a
smoke run of a few minutes).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import os
import time

import numpy as np
import report

import streamjoin as sj
from streamjoin.runtime import sim

#: Assumed shared-memory message costs (ns): see the module docstring.
SHARED_MEMORY = sim.MessageCosts(send_ns=500.0, hop_ns=1_000.0, recv_ns=500.0)
#: Features that are per-call or per-tuple overheads, not kernel work (scaled in "native").
OVERHEADS = {"calls", "part_calls", "tuples", "probes", "tuples_in", "msgs_out", "tuples_out"}

SYMMETRIC = [(4, 4), (2, 8), (1, 16)]
ASYMMETRIC = [(4, 4), (3, 5), (5, 3), (2, 8), (8, 2), (1, 16)]


def machines(scan_scale: float, native_factor: float = 50.0, base=None) -> dict:
    """The two machine profiles of the module docstring, built on ``base`` (by default
    :func:`report.host_profile`)."""
    # DP-Join's model charges the work alone: no after-idle charge (that term measures how
    # this host's processes warm up again after sleeping)
    base = base or report.host_profile()
    base = base.with_messages(SHARED_MEMORY).with_after_idle(sim.IdleCosts())

    def edit(table: dict, overhead: float) -> dict:
        return {
            k: {
                f: c / overhead if f in OVERHEADS else c * scan_scale if f == "scan" else c
                for f, c in coefs.items()
            }
            for k, coefs in table.items()
        }

    return {
        name: dataclasses.replace(
            base,
            name=f"{base.name}, scan x{scan_scale:g}{suffix}",
            roles=edit(base.roles, factor),
            indexes=edit(base.indexes, factor),
        )
        for name, factor, suffix in (
            ("python", 1.0, ""),
            ("native", native_factor, f", overheads /{native_factor:g}"),
        )
    }


def match_probability(eps: int) -> float:
    """p of the handshake workload: P(|Δx| <= eps) for x uniform on the integers 1..10000,
    times P(|Δy| <= eps) for y uniform on [1, 10000]."""
    n = 10_000
    px = (n + 2 * sum(n - d for d in range(1, eps + 1))) / n**2
    width = 9_999.0
    py = 2 * eps / width - (eps / width) ** 2
    return px * py


def simulate(
    profile,
    layout: str,
    rate_r: float,
    rate_s: float,
    window_s: float,
    run_s: float,
    eps: int,
    seed: int = 1,
    tail_s: float = 0.0,
    window_r_s: float | None = None,
) -> dict:
    """One layout (``"MxN"`` or ``"handshake(N)"``): mean steady-state latency and output rate.

    ``window_s`` is S's window and R's too unless ``window_r_s`` is given (DP-Join Fig. 7b).
    Steady state: pairs whose later tuple arrived after the longer window and at least
    ``tail_s`` before the end (by its expected arrival time; rows arrive at
    ``rate_r + rate_s`` on average).
    """
    tuples = int((rate_r + rate_s) * run_s)
    data = sj.sources.handshake_workload(tuples, rate=rate_r, rate_s=rate_s, seed=seed)
    window_r_s = window_s if window_r_s is None else window_r_s
    query = sj.Query(
        sj.band("x", eps) & sj.band("y", eps),
        window=sj.TimeWindow(int(window_r_s * 1000), int(window_s * 1000)),
    )
    arrival = sim.Arrival.poisson(rate_r + rate_s, seed=seed)
    t0 = time.perf_counter()
    res = sj.run(
        query,
        data,
        topology(layout, rate_r, window_s),
        batch_size=1,
        chunk_rows=1,
        backend="sim",
        machine=profile,
        arrival=arrival,
        progress=False,
    )
    wall = time.perf_counter() - t0
    first = int((rate_r + rate_s) * max(window_s, window_r_s))
    last = tuples - int((rate_r + rate_s) * tail_s)
    r, s_, lat = (res.pairs.column(c).to_numpy() for c in ("r", "s", "latency_ns"))
    later = np.maximum(r, s_)
    steady = (later >= first) & (later < last)
    span = (last - first) / (rate_r + rate_s)
    cores = [
        a for a in res.metrics["actors"].values() if a["role"] in ("join_core", "handshake_core")
    ]
    lat = lat[steady] / 1e6 if steady.any() else np.full(1, np.nan)
    return {
        "pairs_steady": int(steady.sum()),
        "latency_mean_ms": float(lat.mean()),
        "latency_p50_ms": float(np.median(lat)),
        "latency_p95_ms": float(np.percentile(lat, 95)),
        "output_rate": float(steady.sum() / span),
        "max_core_busy": max(a["busy_share"] for a in cores),
        "drain_ms": res.metrics["sim"]["drain_s"] * 1e3,
        "wall_s": wall,
    }


def topology(layout: str, rate: float, window_s: float) -> sj.Topology:
    """A chain-forwarding ``"MxN"`` grid of nested-loop cores, or ``"handshake(N)"`` with
    segments of ``rate · window_s / N`` tuples (the window spread over the chain)."""
    if layout.startswith("handshake"):
        n = int(layout[len("handshake(") : -1])
        return sj.topologies.handshake(n, "nested_loop", segment=math.ceil(rate * window_s / n))
    m, n = map(int, layout.split("x"))
    return sj.topologies.grid(m, n, "nested_loop")


def handshake_ms(n: int, window_s: float) -> float:
    """Mean handshake-join latency when tuples meet half way: ``T_w (N-1)² / (4 N²)`` (see
    the module docstring)."""
    return window_s * 1e3 * (n - 1) ** 2 / (4 * n**2)


def expr5_6_ms(
    profile,
    m: int,
    n: int,
    rate_r: float,
    rate_s: float,
    window_s: float,
    window_r_s: float | None = None,
) -> float:
    """DP-Join Expr. 5–6, ``p_x W_y T⋈ / (2n) + p_y W_x T⋈ / (2m)`` with ``p_x`` the share of
    X arrivals and ``W_x = λ_x T_x`` (``window_r_s``, default ``window_s``); for equal rates
    and windows it is Expr. 7, ``λ T_w T⋈ (m + n) / (4 m n)``."""
    t_join = profile.indexes["nested_loop"]["scan"]
    px, py = rate_r / (rate_r + rate_s), rate_s / (rate_r + rate_s)
    window_r_s = window_s if window_r_s is None else window_r_s
    wr, ws = rate_r * window_r_s, rate_s * window_s
    return (px * ws / (2 * n) + py * wr / (2 * m)) * t_join / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=6.0, help="T_w in seconds (default 6)")
    ap.add_argument(
        "--scale",
        type=float,
        default=50.0,
        help="scan cost per tuple x this: the window it stands for (default 50)",
    )
    ap.add_argument("--band", type=int, default=50, help="band width eps (paper: 10)")
    ap.add_argument("--quick", action="store_true", help="small windows, three layouts")
    args = ap.parse_args()
    window, scale = (1.0, 300.0) if args.quick else (args.window, args.scale)
    sym = [(4, 4), (2, 8), (1, 16)]
    asym = [(4, 4), (3, 5), (2, 8)] if args.quick else ASYMMETRIC
    p = match_probability(args.band)
    host = report.host_profile()
    profiles = machines(scale, base=host)
    grids = lambda layouts: [f"{m}x{n}" for m, n in layouts]  # noqa: E731
    # (machine, scenario, rate_r, rate_s, layouts, run length and tail in windows)
    plan = [
        ("native", "symmetric", 1000.0, 1000.0, grids(sym), 1.5, 0.0),
        ("native", "handshake", 1000.0, 1000.0, ["handshake(16)"], 2.0, 0.5),
        ("native", "asymmetric", 1000.0, 3000.0, grids(asym), 1.5, 0.0),
        ("python", "symmetric", 1000.0, 1000.0, grids(sym), 1.5, 0.0),
        ("python", "asymmetric", 1000.0, 3000.0, grids(asym), 1.5, 0.0),
    ]
    rows = []
    prov = report.Provenance()
    for mname, scenario, lx, ly, layouts, runs, tail in plan:
        prof = profiles[mname]
        for layout in layouts:
            out = simulate(
                prof, layout, lx, ly, window, runs * window, args.band, tail_s=tail * window
            )
            if layout.startswith("handshake"):
                model, end_of_probe, name = (handshake_ms(16, window),) * 2 + ("handshake",)
            else:
                m, n = map(int, layout.split("x"))
                model = expr5_6_ms(prof, m, n, lx, ly, window)
                end_of_probe, name = 2 * model, "Expr. 5-7"
            row = {
                "machine": mname,
                "scenario": scenario,
                "layout": layout,
                "rate_r": lx,
                "rate_s": ly,
                "window_s": window,
                "scan_scale": scale,
                "band": args.band,
                "model": name,
                "model_latency_ms": model,
                "model_end_of_probe_ms": end_of_probe,
                "expr3_bmax": 2 * lx * ly * window * p,
                **out,
                "profile": report.profile_of(host),
            }
            rows.append(row)
            print(
                f"{mname:<7}{scenario:<11}{layout:>14} mean {out['latency_mean_ms']:9.3f} ms"
                f"  {name} {model:9.3f} (end of probe {end_of_probe:9.3f}) ms  output "
                f"{out['output_rate']:7.1f}/s (Expr.3 {row['expr3_bmax']:7.1f})  busiest "
                f"core {out['max_core_busy']:.0%}  [{out['wall_s']:.0f} s]",
                flush=True,
            )
            prov.note()
    write(rows, profiles, prov, "_quick" if args.quick else "")


def write(rows: list[dict], profiles: dict, prov: report.Provenance, suffix: str = "") -> None:
    results = report.results_dir()
    os.makedirs(results, exist_ok=True)
    base = os.path.join(results, "dpjoin_layouts" + suffix)
    with open(base + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    plot(rows, base + ".png")
    window = rows[0]["window_s"]
    lines = [
        "# DP-Join layouts on the simulator",
        "",
        "Simulated (virtual time: the figures do not depend on this host's load). "
        f"Window {window:g} s, batch 1, Poisson arrivals, band {rows[0]['band']}; total "
        f"simulator wall time {sum(r['wall_s'] for r in rows):.0f} s. Both machines are built "
        f"on the profile {rows[0].get('profile', 'shipped (not recorded)')}.",
        prov.line(),
        "",
    ]
    for mname, prof in profiles.items():
        lines += [
            f"## machine `{mname}`: {prof.name}",
            "",
            "| scenario | layout | mean latency ms | p50 ms | p95 ms | Expr. 5–7 ms "
            "| ×2 (end of probe) ms | output/s | Expr. 3 B_max/s | busiest core |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            if r["machine"] == mname and r["scenario"] != "handshake":
                lines.append(
                    f"| {r['scenario']} ({r['rate_r']:g}/{r['rate_s']:g} t/s) | {r['layout']} "
                    f"| {r['latency_mean_ms']:.3f} | {r['latency_p50_ms']:.3f} "
                    f"| {r['latency_p95_ms']:.3f} | {r['model_latency_ms']:.3f} "
                    f"| {r['model_end_of_probe_ms']:.3f} | {r['output_rate']:.1f} "
                    f"| {r['expr3_bmax']:.1f} | {r['max_core_busy']:.0%} |"
                )
        lines.append("")
    lines += handshake_table(rows)
    lines += ["## Findings", ""] + findings(rows) + [""]
    lines += [
        "Messages: shared-memory costs assumed (see the script's docstring). Scan cost "
        f"per tuple x{rows[0]['scan_scale']:g} (each simulated window tuple stands for "
        "that many). `native` divides per-call and per-tuple overheads by 50; other "
        "kernel costs (candidates, pairs, inserts, expiry) are as calibrated.",
        "",
    ]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {base}.csv, .png, .md")


def handshake_table(rows: list[dict]) -> list[str]:
    """The handshake join beside the 4x4 grid on the same machine and input."""
    out = []
    for hs in (r for r in rows if r["scenario"] == "handshake"):
        grid = next(
            r
            for r in rows
            if r["machine"] == hs["machine"]
            and r["scenario"] == "symmetric"
            and r["layout"] == "4x4"
        )
        out += [
            f"## Handshake join against the 4x4 grid (machine `{hs['machine']}`, "
            f"{hs['rate_r']:g}/{hs['rate_s']:g} t/s, same input)",
            "",
            "| layout | mean latency ms | p50 ms | p95 ms | model ms | model "
            "| output/s | Expr. 3 B_max/s | busiest core |",
            "|---|---:|---:|---:|---:|---|---:|---:|---:|",
        ]
        for r in (hs, grid):
            model = "T_w (N-1)² / (4N²)" if r is hs else "Expr. 7 ×2 (end of probe)"
            out.append(
                f"| {r['layout']} | {r['latency_mean_ms']:,.3f} | {r['latency_p50_ms']:,.3f} "
                f"| {r['latency_p95_ms']:,.3f} | {r['model_end_of_probe_ms']:,.3f} "
                f"| {model} | {r['output_rate']:.1f} | {r['expr3_bmax']:.1f} "
                f"| {r['max_core_busy']:.0%} |"
            )
        ratio = hs["latency_mean_ms"] / grid["latency_mean_ms"]
        stretch = 300.0 / hs["window_s"]
        out += [
            "",
            f"Handshake / grid mean latency: {ratio:,.0f} (10^{math.log10(ratio):.1f}). "
            f"The grid's latency already stands for the paper's 300 s window (scan cost "
            f"×{hs['scan_scale']:g}); the handshake's grows with the window itself, so at "
            f"300 s it would be {stretch:g}× larger, {hs['latency_mean_ms'] * stretch / 1e3:,.0f} "
            f"s, a ratio of {ratio * stretch:,.0f} (10^{math.log10(ratio * stretch):.1f}). "
            "DP-Join Fig. 6a: 67 s against 0.95 ms (10^4.8).",
            "",
        ]
    return out


def findings(rows: list[dict]) -> list[str]:
    """One line per machine and grid scenario: the best layout, square against linear or
    rectangular; and the handshake join against the grid."""
    out = []
    for mname, scenario in dict.fromkeys((r["machine"], r["scenario"]) for r in rows):
        if scenario == "handshake":
            continue
        sel = {r["layout"]: r for r in rows if r["machine"] == mname and r["scenario"] == scenario}
        best = min(sel.values(), key=lambda r: r["latency_mean_ms"])
        model = min(sel.values(), key=lambda r: r["model_latency_ms"])
        line = (
            f"- `{mname}`, {scenario}: lowest simulated mean latency {best['layout']} "
            f"({best['latency_mean_ms']:.3f} ms); Expr. 5–7 ranks {model['layout']} first"
        )
        if scenario == "symmetric" and "4x4" in sel and "1x16" in sel:
            ratio = sel["4x4"]["latency_mean_ms"] / sel["1x16"]["latency_mean_ms"]
            line += f"; 4x4 / 1x16 latency = {ratio:.2f} (DP-Join Fig. 6a: 0.95 / 2.42 = 0.39)"
        if scenario == "asymmetric" and "4x4" in sel and "3x5" in sel:
            ratio = sel["3x5"]["latency_mean_ms"] / sel["4x4"]["latency_mean_ms"]
            line += f"; 3x5 / 4x4 latency = {ratio:.2f} (DP-Join Fig. 7a: 0.26 / 0.30 = 0.87)"
        worst = max(abs(r["output_rate"] / r["expr3_bmax"] - 1) for r in sel.values())
        out.append(line + f"; output rate within {worst:.1%} of Expr. 3.")
    for hs in (r for r in rows if r["scenario"] == "handshake"):
        grid = next(
            r
            for r in rows
            if r["machine"] == hs["machine"]
            and r["scenario"] == "symmetric"
            and r["layout"] == "4x4"
        )
        out.append(
            f"- `{hs['machine']}`, handshake(16) against 4x4: mean latency "
            f"{hs['latency_mean_ms'] / 1e3:.2f} s against {grid['latency_mean_ms']:.3f} "
            f"ms, {hs['latency_mean_ms'] / grid['latency_mean_ms']:,.0f}× (model "
            f"{hs['model_latency_ms'] / 1e3:.2f} s, simulated / model "
            f"{hs['latency_mean_ms'] / hs['model_latency_ms']:.2f}); output rate "
            f"{hs['output_rate'] / hs['expr3_bmax'] - 1:+.1%} from Expr. 3."
        )
    return out


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    machines_ = list(dict.fromkeys(r["machine"] for r in rows))
    fig, axes = plt.subplots(len(machines_), 3, figsize=(14, 4.2 * len(machines_)), squeeze=False)
    for i, mname in enumerate(machines_):
        for j, scenario in enumerate(("symmetric", "asymmetric")):
            ax = axes[i][j]
            sel = [r for r in rows if r["machine"] == mname and r["scenario"] == scenario]
            if not sel:
                ax.set_axis_off()
                continue
            x = np.arange(len(sel))
            ax.bar(x - 0.2, [r["latency_mean_ms"] for r in sel], 0.4, label="simulated mean")
            ax.bar(
                x + 0.2,
                [r["model_end_of_probe_ms"] for r in sel],
                0.4,
                label="Expr. 5–7 × 2 (end of probe)",
            )
            ax.set_xticks(x, [r["layout"] for r in sel])
            ax.set_title(f"{mname}, {scenario} ({sel[0]['rate_r']:g}/{sel[0]['rate_s']:g} t/s)")
            ax.set_ylabel("mean latency (ms)")
            ax.legend(fontsize=8)
        ax = axes[i][2]
        hs = [r for r in rows if r["machine"] == mname and r["scenario"] == "handshake"]
        if hs:
            grid = next(
                r
                for r in rows
                if r["machine"] == mname and r["scenario"] == "symmetric" and r["layout"] == "4x4"
            )
            sel = [grid, hs[0]]
            x = np.arange(2)
            ax.bar(x - 0.2, [r["latency_mean_ms"] for r in sel], 0.4, label="simulated mean")
            ax.bar(
                x + 0.2,
                [r["model_end_of_probe_ms"] for r in sel],
                0.4,
                label="model (Expr. 7 × 2; T_w (N-1)²/4N²)",
            )
            ax.set_yscale("log")
            ax.set_xticks(x, ["grid 4x4", hs[0]["layout"]])
            ax.set_title(f"{mname}: handshake join vs grid, 16 cores")
            ax.set_ylabel("mean latency (ms, log)")
            ax.legend(fontsize=8, loc="upper left")
        else:
            sel = [r for r in rows if r["scenario"] != "handshake"]
            x = np.arange(len(sel))
            ax.bar(
                x,
                [100 * (r["output_rate"] / r["expr3_bmax"] - 1) for r in sel],
                color=["C0" if r["machine"] == "native" else "C1" for r in sel],
            )
            ax.axhspan(-2, 2, color="green", alpha=0.12, label="within 2%")
            for k, name in enumerate(("native", "python")):  # legend entries for the colours
                ax.bar([0], [0], color=f"C{k}", label=f"{name[0]}: {name}")
            ax.set_xticks(
                x,
                [f"{r['machine'][0]} {r['scenario'][:4]} {r['layout']}" for r in sel],
                rotation=70,
                fontsize=7,
            )
            ax.set_title("output rate against Expr. 3 (all runs)")
            ax.set_ylabel("difference (%)")
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
