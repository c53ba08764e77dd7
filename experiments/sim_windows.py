"""The simulator on windows past the caches: simulated against measured, with and without
the profile's window costs.

A machine profile's join costs are fitted on windows of at most 16,384 tuples a stream,
which fit this machine's caches; ``streamjoin calibrate`` also measures what those costs
miss at 2^16, 2^18 and 2^20 tuples a stream (``MachineProfile.windows``,
:mod:`streamjoin.runtime.sim.window_growth`), and the simulator charges it by the items a
core holds. This script shows what that buys, for each index and count window W a stream
(a band join at match rate 2 over uniform keys, batches of 1,024, 4 W tuples: the windows
fill over the first half):

- one core, ``single`` and ``shared_index(1)`` (PIM-Tree §4's core on one thread, charged
  its index's window costs in a plain core): the input tuples/s of ``local`` (the join in
  this process; the median of three runs, two before the simulated ones and one after)
  against the simulator's with the whole input arriving at once, with the profile as it is
  and with its window costs removed;
- every layout (those two, split(2), grid(2, 2), handshake(2) and panjoin(2, 4), whose
  workers are charged window costs over tree indexes only): each join core's or worker's
  charged step time on the simulator against
  the host time the same steps took in that run (the simulator runs the real logic and times
  it: ``metrics["actors"][core]["compute_wall_ns"]``), with and without window costs. On
  this host the cores' steps run one after another in one process, so a core with others'
  data in the caches between its steps takes longer than a core with a processor of its own
  would: the ratio reads low for layouts of many cores.

The profile is this host's (``streamjoin calibrate``), else the shipped one, or ``--machine
FILE``; where it has no window costs for an index, they are measured first, against its
coefficients, as ``calibrate`` measures them. A shared host's speed drifts within the hour:
before each index and window a fixed join is timed against the same at the fit
(``speed_probe``; the row's ``drift``, above 1 when the host is slower than at the fit). It
is reported, not applied: the probe is short and fits the caches, so it is noisy and does
not see a slowdown on the memory side (``experiments/results/calibrate_check.md`` has the
runs that showed both). The windows of 2^14, inside the fitted ones, are the control.

Writes ``experiments/results/sim_windows.{csv,md,png}`` (``_quick`` with ``--quick``).

Run: ``python experiments/sim_windows.py`` (about 6 minutes on 2 cores; ``--quick`` for a
smoke run of seconds).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import warnings

import numpy as np
import report

import streamjoin as sj
from streamjoin.runtime.sim import (
    Arrival,
    MachineProfile,
    Sim,
    as_profile,
    measure_window_growth,
    profile_for_this_host,
)
from streamjoin.runtime.sim.calibrate import speed_probe
from streamjoin.runtime.sim.window_growth import WINDOWS

SCALES = {
    "full": {
        "indexes": ["bplus_tree", "pim_tree", "bisort"],
        "windows": [2**14, 2**16, 2**18, 2**20],
        "layouts": [
            "single",
            "shared_index(1)",
            "split(2)",
            "grid(2, 2)",
            "handshake(2)",
            "panjoin(2, 4)",
        ],
    },
    "quick": {"indexes": ["bplus_tree"], "windows": [2**12, 2**16], "layouts": ["single"]},
}
#: Arrival of the simulated runs: the whole input at once (unpaced).
FLOOD = Arrival.constant(1e12)
BATCH = 1024
#: Layouts of one core, measured on ``local`` too.
ONE_CORE = ("single", "shared_index(1)")
#: Indexes a shared-index core takes (of those measured here).
SHARED = ("bplus_tree", "pim_tree")


def topology(layout: str, index: str):
    """The topology ``layout`` (``"split(2)"``, …) over ``index``."""
    name, _, args = layout.partition("(")
    numbers = [int(a) for a in args.rstrip(")").split(",") if a.strip()]
    return getattr(sj.topologies, name)(*numbers, index)


def workload(window: int, seed: int = 1):
    """``(query, data)``: a band join at match rate 2 over a count window of ``window``,
    4 ``window`` tuples of uniform keys."""
    data = sj.sources.synthetic(4 * window, low=0, high=1_000_000, seed=seed)
    x = data.column("x").to_numpy()
    eps = sj.sources.band_for_match_rate(x, window=window, match_rate=2)
    return sj.Query(sj.band("x", eps), window=sj.CountWindow(window)), data


def simulate(query, data, topo, profile: MachineProfile) -> dict:
    """``{"ns_per_tuple", "charged_over_host": [per join core]}`` of one simulated run."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a profile without window costs warns, by design
        res = sj.run(
            query,
            data,
            topo,
            backend=Sim(machine=profile, arrival=FLOOD),
            batch_size=BATCH,
            collect="count",
            progress=False,
        )
    cores = [
        a
        for a in res.metrics["actors"].values()
        if a["role"] not in ("emitter", "collector", "manager")
    ]
    return {
        "ns_per_tuple": 1e9 / res.metrics["input_tuples_per_s"],
        "charged_over_host": [a["step_cpu_s"] / (a["compute_wall_ns"] / 1e9) for a in cores],
    }


def local_ns(query, data, topo) -> float:
    res = sj.run(query, data, topo, backend="local", batch_size=BATCH, collect="count")
    return 1e9 / res.metrics["input_tuples_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one index, two windows, single")
    ap.add_argument("--machine", default=None, help="profile JSON (default: this host's)")
    args = ap.parse_args()
    sc = SCALES["quick" if args.quick else "full"]
    profile = as_profile(args.machine) if args.machine else profile_for_this_host(warn=False)
    missing = [i for i in sc["indexes"] if i not in profile.windows]
    if missing:  # measured now, against the profile's coefficients, as calibrate does
        print(f"profile {profile.name!r} has no window costs for {missing}: measuring them")
        grown = (2**15,) if args.quick else WINDOWS
        measured = {i: measure_window_growth(i, profile.indexes[i], grown) for i in missing}
        profile = dataclasses.replace(profile, windows={**profile.windows, **measured})
    without = dataclasses.replace(profile, windows={})
    reference = profile.info.get("speed_probe_ns")
    prov = report.Provenance()
    rows = []
    for index in sc["indexes"]:
        for window in sc["windows"]:
            query, data = workload(window)
            drift = speed_probe() / reference if reference else float("nan")
            for layout in sc["layouts"]:
                if layout.startswith("shared_index") and index not in SHARED:
                    continue
                topo = topology(layout, index)
                row = {"index": index, "window": window, "layout": layout, "drift": drift}
                if layout in ONE_CORE:
                    measured = [local_ns(query, data, topo) for _ in range(2)]
                runs = {
                    k: simulate(query, data, topo, p)
                    for k, p in (("with", profile), ("without", without))
                }
                if layout in ONE_CORE:
                    measured.append(local_ns(query, data, topo))
                    row["local_ns_per_tuple"] = statistics.median(measured)
                for k, run in runs.items():
                    row[f"sim_ns_per_tuple_{k}"] = run["ns_per_tuple"]
                    row[f"charged_over_host_{k}_min"] = min(run["charged_over_host"])
                    row[f"charged_over_host_{k}_max"] = max(run["charged_over_host"])
                row["load"] = prov.note()
                rows.append(row)
                print(
                    f"{index} W=2^{int(np.log2(window))} {layout}: charged / host "
                    f"{row['charged_over_host_without_min']:.2f}–{row['charged_over_host_without_max']:.2f}"
                    f" without window costs, {row['charged_over_host_with_min']:.2f}–"
                    f"{row['charged_over_host_with_max']:.2f} with",
                    flush=True,
                )
    for row in rows:
        row.update(prov.fields())
    write(rows, prov, profile, "_quick" if args.quick else "")


def write(rows: list[dict], prov: report.Provenance, profile, suffix: str) -> None:
    results = report.results_dir()
    os.makedirs(results, exist_ok=True)
    base = os.path.join(results, "sim_windows" + suffix)
    report.save_rows(rows, base + ".csv")
    plot(rows, base + ".png")
    date = profile.info.get("date", "unknown")
    lines = [
        "# The simulator on windows past the caches",
        "",
        "Band join at match rate 2, batches of 1,024, 4 W tuples (see the docstring of "
        "`experiments/sim_windows.py`). Profile "
        f"{profile.name!r} ({profile.source.split(' /')[0]}, fitted {date}); *without*: the "
        "same profile with its window costs removed (what every profile charged before). "
        "*drift*: a fixed join's steps timed before the row against the same at the fit "
        "(reported, not applied: the docstring).",
        "",
        prov.line(),
        "",
        f"![sim / local](sim_windows{suffix}.png)",
        "",
        "## One core: simulated against measured throughput",
        "",
        "| index | layout | W | drift | local ns / tuple | sim without | sim with "
        "| sim / local without | sim / local with |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r["layout"] not in ONE_CORE:
            continue
        local, a, b = (
            r["local_ns_per_tuple"],
            r["sim_ns_per_tuple_without"],
            r["sim_ns_per_tuple_with"],
        )
        # throughput ratio: sim tuples/s over local tuples/s
        lines.append(
            f"| {r['index']} | {r['layout']} | 2^{int(np.log2(r['window']))} | {r['drift']:.2f} | "
            f"{local:,.0f} | "
            f"{a:,.0f} | "
            f"{b:,.0f} | {local / a:.2f} | {local / b:.2f} |"
        )
    lines += [
        "",
        "## Every layout: a join core's charged step time against its steps' host time",
        "",
        "Min–max over a layout's join cores.",
        "",
        "| index | W | layout | without | with |",
        "|---|---|---|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['index']} | 2^{int(np.log2(r['window']))} | {r['layout']} | "
            f"{r['charged_over_host_without_min']:.2f}–{r['charged_over_host_without_max']:.2f} | "
            f"{r['charged_over_host_with_min']:.2f}–{r['charged_over_host_with_max']:.2f} |"
        )
    largest = max(r["window"] for r in rows)
    single = [r for r in rows if r["layout"] in ONE_CORE and r["window"] == largest]
    cores = [r for r in rows if r["window"] == largest]

    def span(rs, key) -> str:
        return f"{min(key(r) for r in rs):.2f}–{max(key(r) for r in rs):.2f}"

    lines += [
        "",
        "## Findings",
        "",
        f"- One core (single, shared_index(1)) at W = 2^{int(np.log2(largest))}: sim / local "
        f"{span(single, lambda r: r['local_ns_per_tuple'] / r['sim_ns_per_tuple_without'])} "
        "without window costs, "
        f"{span(single, lambda r: r['local_ns_per_tuple'] / r['sim_ns_per_tuple_with'])} with.",
        "- Every layout's join cores there, charged / host: "
        f"{min(r['charged_over_host_without_min'] for r in cores):.2f}–"
        f"{max(r['charged_over_host_without_max'] for r in cores):.2f} without, "
        f"{min(r['charged_over_host_with_min'] for r in cores):.2f}–"
        f"{max(r['charged_over_host_with_max'] for r in cores):.2f} with.",
        "- A layout of several cores runs them one after another in this process, each finding "
        "the others' data in the caches: its cores' host times are higher than cores with a "
        "processor each would take, and its ratios read low.",
        "",
    ]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {base}.md")


def plot(rows: list[dict], path: str) -> None:
    single = [r for r in rows if r["layout"] in ONE_CORE]
    lines = list(dict.fromkeys((r["index"], r["layout"]) for r in single))

    def panel(ax, _):
        for k, (index, layout) in enumerate(lines):
            mine = [r for r in single if (r["index"], r["layout"]) == (index, layout)]
            w = [r["window"] for r in mine]
            for key, style in (("without", "--"), ("with", "-")):
                ratio = [r["local_ns_per_tuple"] / r[f"sim_ns_per_tuple_{key}"] for r in mine]
                name = index if layout == "single" else f"{layout}, {index}"
                label = f"{name}, {key} window costs"
                ax.plot(w, ratio, style, marker="o", color=f"C{k}", label=label)
        ax.axhspan(0.8, 1.25, color="0.9", zorder=0)
        ax.axhline(1.0, color="0.5", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("count window W, tuples a stream")
        ax.set_ylabel("sim / local, input tuples/s (one core)")
        ax.set_title("The simulator on windows past the caches")

    report.figure(None, path, [panel], (1, 1), (7.5, 4.5), 11)


if __name__ == "__main__":
    main()
