"""DP-Join's system figures (Buono, De Matteis & Mencagli §IV-B, §IV-C2) on the simulator, with
measured Ray points where this machine runs the layout.

The paper's workload (§IV-A): the handshake-join benchmark, R = (x int, y float) and S alike,
all uniform in [1, 10000], ``band(x, eps) & band(y, eps)`` with hit rate p = 3.6e-6, time
windows, nested-loop workers fed tuple at a time, on two Xeon E5-2650 (16 cores, 32 SMT
threads). Sections, each with the paper's figure:

- ``fig4``: 2,100 t/s per stream, T_w = 300 s: the output rate of linear (1×N), square,
  rectangular layouts and the handshake join against N; the minimum N that reaches Expr. 3's
  ``B_max = 2 λ² T_w p`` (9,526 pairs/s; the paper: linear 7, rectangular 8 (2×4), square 9;
  measured within 2% of Expr. 3);
- ``fig5a``: 6,000 t/s, T_w = 300 s (``B_max`` out of reach): the offered bandwidth of
  linear layouts against N, and the scalability ``B(N) / B(1)``. The handshake join is
  compared by the rate it sustains (``fig4``, ``fig5b``) instead: overloaded, its simulated
  chain piles the work onto its middle cores (the simulator's mailboxes are unbounded and the
  end cores pass tuples on at once), which measures that pile-up rather than the chain;
- ``table1``: the same streams, N = 6, 9, 16 in linear, rectangular and square layouts
  (Table I: 8,529 – 21,740 pairs/s; Expr. 4, ``B = m n p / T⋈``, says the layout does not
  matter);
- ``fig5b``: the maximum input rate per stream a linear layout sustains, N = 1 … 32, T_w = 300
  and 900 s, and the handshake join: :func:`streamjoin.runtime.sim.max_sustainable_rate`
  (sustained = the backlog drains within 5% of the input's span) at the window the rate
  implies (a fixed point, see :func:`sustainable_rate`);
- ``fig7b``: asymmetric windows, 1,000 t/s per stream, T_x = 150 s and T_y = 300 s: the mean
  latency of layouts of 12, 15 and 16 workers beside Expr. 5–6 (the paper: a rectangular
  layout is best);
- ``measured``: layouts this 2-core machine can run (1×1, 1×2, 2×1, 1×4, 2×2) on ``ray`` and
  ``local`` at full speed, beside ``sim`` with this machine's profile sharing its 2 processors
  (and with a processor per actor): measured against simulated.

**Scaling.** The simulator runs the real join, so a 300 s window of 630,000 tuples per stream
would cost the hours it costs here. Each simulated window is ``k`` times shorter (``T_w / k``,
rates as in the paper) and every scanned tuple is charged ``k`` times (it stands for ``k`` of
the paper's window), with ``eps`` chosen so that the hit rate is ``k p``: a probe then costs
what the paper's does and Expr. 3's ``B_max`` is the paper's (``2 λ² (T_w / k) (k p)``). Pairs
are still exactly those of the scaled join (the simulator checks nothing less than every
backend). ``k`` = 300 (T_w / k = 1 s) for throughput, 50 for the latency of ``fig7b``.

**Machines.**

- ``paper``: DP-Join's machine as a profile. T⋈ = 2.31 ns per predicate evaluation: Table I's
  9-worker square layout through Expr. 4 (``9 p / 14,047``), the one degree that uses neither
  SMT nor a shared core; messages as FastFlow passes pointers between cores (§III-D2): 50 ns to
  push, 200 ns to reach the other core, 50 ns to pop (assumed: the order of a lock-free
  single-producer queue and a cache-line transfer; the paper gives no figure); 100 ns per
  step, 10 ns per tuple handled or stored. 32 processors (SMT threads) of which 16 are cores:
  with k > 16 threads busy each runs at ``(14.4 + 0.1 k) / k`` of a core (two threads on a core
  yield 1.1 of it; assumed). No after-idle cost (busy-waiting workers, as FastFlow's).
- ``calibrated``: this host's profile (``streamjoin calibrate``'s, else the shipped one: the
  numba kernels and the Ray executor's TCP messages as measured here; each row names it), a
  processor per actor, scan charged ``k`` times as above. Throughput sections run it with
  batches of up to 256 tuples closing after 1 ms (tuple at a time, this transport's 0.2–0.3
  ms per message would bound every layout); ``fig7b`` tuple at a time, as the paper.

Writes ``experiments/results/dpjoin_system_<section>.csv`` per section and renders
``dpjoin_system.{md,png}`` from every section's CSV present (``_quick`` names with
``--quick``).

Run: ``python experiments/dpjoin_system.py`` (about an hour on 2 shared cores, most of it
``fig5b``; the ``measured`` section starts Ray: run it under the machine's Ray lock);
``--only fig4,table1`` for some sections, ``--render`` to redraw from the CSVs, ``--quick``
for a smoke run of a few minutes.

Why one file of ~1,000 lines: it is one paper section's reproduction, read end to end by whoever
checks a figure — the paper's figures and machine (top), the workload and runs per section,
and the report (from ``# -- the report``, about half) that puts each of our rows beside the
paper's value. The report only reads the CSV rows the runs write; it stays here so that one
file says how a figure was made and how it was judged.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import numpy as np
import report
from dpjoin_layouts import expr5_6_ms, match_probability, simulate

import streamjoin as sj
from streamjoin.runtime import sim
from streamjoin.runtime.sim.host_profile import profile_for_this_host

SECTIONS = ("fig4", "fig5a", "table1", "fig5b", "fig7b", "measured")
#: The paper's hit rate (§IV-A) and T⋈ (ns; Table I, 3×3, through Expr. 4).
P_PAPER = 3.6e-6
T_JOIN_NS = 9 * P_PAPER / 14_047 * 1e9
#: What the paper reports, per section.
PAPER = {
    "fig4": "B_max = 9,526 pairs/s (Expr. 3), reached from N = 7 (linear), 8 (rectangular "
    "2×4), 9 (square 3×3); measured within 2% of Expr. 3",
    "fig5a": "near-optimal scalability of the linear layout up to 16 workers (15–16 share "
    "cores with the emitter and collector through SMT); DP-Join 24% above the handshake join "
    "with one worker (a faster sequential kernel), the same scalability",
    "table1": "N = 6: rectangular 9,301, linear 8,529; N = 9: square 14,047, linear 13,599; "
    "N = 16: square 21,740, rectangular 21,700, linear 21,659 pairs/s",
    "fig5b": "DP-Join sustains higher rates than the handshake join; a slowdown beyond 16 "
    "workers (SMT), roughly back to the 16-worker rate at 32; figures only in the plot",
    "fig7b": "1,000 t/s per stream, T_x = 150 s, T_y = 300 s: the rectangular layout gives "
    "the lowest latency (figures only in the plot)",
    "measured": "(our own check: the simulator against this machine)",
}
#: Table I's figures: (workers, layout kind) -> pairs/s.
TABLE1 = {
    (6, "rectangular"): 9_301,
    (6, "linear"): 8_529,
    (9, "square"): 14_047,
    (9, "linear"): 13_599,
    (16, "square"): 21_740,
    (16, "rectangular"): 21_700,
    (16, "linear"): 21_659,
}
#: Fig. 4's minimum parallelism degree per layout kind.
FIG4_MIN_N = {"linear": 7, "rectangular": 8, "square": 9}
#: Fig. 4 and Table I's layouts per kind.
FIG4_LAYOUTS = {
    "linear": [f"1x{n}" for n in range(1, 11)],
    "square": ["2x2", "3x3", "4x4"],
    "rectangular": ["2x3", "2x4", "2x5", "3x4"],
    "handshake": [f"handshake({n})" for n in (2, 4, 6, 7, 8, 9, 10)],
}
TABLE1_LAYOUTS = {6: ["2x3", "1x6"], 9: ["3x3", "1x9"], 16: ["4x4", "2x8", "1x16"]}
FIG5A = [1, 2, 4, 6, 8, 9, 12, 16]
FIG5B = {300: [1, 2, 4, 8, 12, 16, 20, 24, 32], 900: [1, 4, 8, 16, 32]}
FIG5B_HANDSHAKE = [1, 4, 8, 16]
FIG7B = ["4x4", "2x8", "8x2", "1x16", "16x1", "3x5", "5x3", "3x4", "4x3", "2x6", "6x2"]
MEASURED = ["1x1", "1x2", "2x1", "1x4", "2x2"]
#: Scan charge per simulated window tuple (see the module docstring).
SCALE = 300
LATENCY_SCALE = 50
#: Input length in windows for throughput runs, and the sustained criterion (as capacity.py).
WINDOWS = 3
SLACK = 0.05
#: Message costs of the ``paper`` machine (ns; assumed, see the module docstring).
FASTFLOW = {"send_ns": 50.0, "hop_ns": 200.0, "recv_ns": 50.0}
#: Batching of the ``calibrated`` machine in throughput sections: (batch_size, max_delay s).
CALIBRATED_BATCH = (256, 0.001)
#: Batching of the ``paper`` machine in the rate search (see :func:`batching`).
SEARCH_BATCH = (16, 0.0005)
#: Roles whose busy share is reported.
ROLES = ("join_core", "handshake_core")


def smt_shares(cores: int = 16, threads: int = 32, gain: float = 1.1) -> tuple:
    """Share of a core each of k busy threads gets, k = 1 … ``threads``: whole cores up to
    ``cores`` threads, then ``k - cores`` cores run two threads that together yield ``gain``
    of a core."""
    out = []
    for k in range(1, threads + 1):
        paired = max(0, k - cores)
        out.append(min(1.0, ((cores - paired) + paired * gain) / k))
    return tuple(out)


def paper_machine(k: float) -> sim.MachineProfile:
    """DP-Join's Xeon E5-2650 pair as a profile, scan charged ``k`` times (module docstring)."""
    step = {"calls": 100.0}
    return sim.MachineProfile.from_dict(
        {
            "name": f"DP-Join's 2x Xeon E5-2650 (16 cores, 32 SMT threads), scan x{k:g}",
            "roles": {
                "emitter": {**step, "tuples_in": 10.0},
                "collector": {**step, "pairs": 10.0},
                "manager": {**step, "tuples": 10.0},
            },
            "indexes": {
                "nested_loop": {
                    **step,
                    "tuples": 10.0,
                    "scan": T_JOIN_NS * k,
                    "pairs": 10.0,
                    "inserted": 10.0,
                    "expired": 10.0,
                }
            },
            "messages": FASTFLOW,
            "cpus": 32,
            "cpu_share": list(smt_shares()),
            "info": {
                "t_join_ns": T_JOIN_NS,
                "source": "Table I (3x3, 14,047 pairs/s) through Expr. 4; messages assumed",
            },
        }
    )


def calibrated_machine(k: float) -> sim.MachineProfile:
    """This host's profile (:func:`report.host_profile`), a processor per actor, scan charged
    ``k`` times."""
    base = report.host_profile()
    return report.scaled_scan(base, k, f"{base.name} (this machine, calibrated), scan x{k:g}")


MACHINES = ("paper", "calibrated")


def machines(k: float) -> dict:
    return {"paper": paper_machine(k), "calibrated": calibrated_machine(k)}


def batching(machine: str, search: bool = False) -> tuple[int, float | None]:
    """``(batch_size, max_delay)`` of ``machine``'s runs: tuple at a time on ``paper`` (the
    paper's workers), except in the rate search, whose dozens of runs per point take batches
    of up to 16 tuples closing after 0.5 ms (0.8% of a worker's time at most: 100 ns per
    step against a scan of at least 12 µs per tuple)."""
    if machine == "paper":
        return SEARCH_BATCH if search else (1, None)
    return CALIBRATED_BATCH


def eps_for(k: float) -> int:
    """Band width whose hit rate on the handshake workload is closest to ``k p``."""
    target = k * P_PAPER
    lo = int(math.sqrt(target) * 10_000 / 2)  # p ≈ (2 eps / 10^4)² for eps << 10^4
    return min(range(max(1, lo - 20), lo + 20), key=lambda e: abs(match_probability(e) - target))


def topology(layout: str, rate: float, window_s: float) -> sj.Topology:
    """``"MxN"`` (a chain-forwarding grid) or ``"handshake(N)"`` (segments of the window's
    share), nested-loop cores."""
    if layout.startswith("handshake"):
        n = int(layout[len("handshake(") : -1])
        return sj.topologies.handshake(n, "nested_loop", segment=math.ceil(rate * window_s / n))
    m, n = map(int, layout.split("x"))
    return sj.topologies.grid(m, n, "nested_loop")


def workers(layout: str) -> int:
    if layout.startswith("handshake"):
        return int(layout[len("handshake(") : -1])
    m, n = map(int, layout.split("x"))
    return m * n


def kind(layout: str) -> str:
    if layout.startswith("handshake"):
        return "handshake"
    m, n = map(int, layout.split("x"))
    return "linear" if 1 in (m, n) else "square" if m == n else "rectangular"


def workload(rate: float, window_s: float, k: float, windows: float = WINDOWS, seed: int = 1):
    """``(query, data)``: the handshake workload at ``rate`` per stream (``ts`` in µs), the
    window ``window_s / k`` and ``eps`` for the hit rate ``k p``."""
    w = window_s / k
    n = int(2 * rate * w * windows)
    data = sj.sources.handshake_workload(n, rate=rate, seed=seed, ts_per_second=1_000_000)
    eps = eps_for(k)
    query = sj.Query(sj.band("x", eps) & sj.band("y", eps), window=sj.TimeWindow(int(w * 1e6)))
    return query, data


def offered(
    profile, machine: str, layout: str, rate: float, window_s: float, k: float, seed: int = 1
) -> dict:
    """One layout at ``rate`` t/s per stream: the steady output rate (DP-Join's achieved
    bandwidth) and whether the input was sustained.

    Rows arrive at their own ``ts`` (``Arrival.replay``), so a pair's emission time is its
    later tuple's ``ts`` plus its latency. The output rate counts the pairs emitted from 1.5
    windows into the input to its end (the windows are full from one window on): the offered
    input's pairs per second when the layout keeps up (Expr. 3), its capacity when it does
    not (a backlog keeps every core busy), and, for the handshake join, the pairs its chain
    finds per second however late. ``sustained``: the backlog drained within 5% of the
    input's span after the last arrival (as :func:`~streamjoin.runtime.sim.
    max_sustainable_rate` decides; the handshake join always drains its segments at the end).
    """
    query, data = workload(rate, window_s, k, seed=seed)
    batch, delay = batching(machine)
    w = window_s / k
    t0 = time.perf_counter()
    res = sj.run(
        query,
        data,
        topology(layout, rate, w),
        backend="sim",
        machine=profile,
        arrival=sim.Arrival.replay(ts_unit_ns=1_000),
        batch_size=batch,
        max_delay=delay,
        chunk_rows=1,
        progress=False,
    )
    ts = data.column("ts").to_numpy()
    ts_ns = (ts - ts[0]) * 1_000
    r, s, lat = (res.pairs.column(c).to_numpy() for c in ("r", "s", "latency_ns"))
    emitted = ts_ns[np.maximum(r, s)] + lat
    start, end = 1.5 * w * 1e9, float(ts_ns[-1])
    counted = np.count_nonzero((emitted >= start) & (emitted < end))
    p = match_probability(eps_for(k)) / k
    cores = [a for a in res.metrics["actors"].values() if a["role"] in ROLES]
    drain = res.metrics["sim"]["drain_s"]
    return {
        "machine": machine,
        "layout": layout,
        "kind": kind(layout),
        "workers": workers(layout),
        "rate": rate,
        "window_s": window_s,
        "scale": k,
        "batch": batch,
        "output_rate": counted / (end - start) * 1e9,
        "expr3_bmax": 2 * rate * rate * window_s * p,
        "sustained": drain <= SLACK * res.metrics["sim"]["last_arrival_s"],
        "drain_s": drain,
        "busiest": max(a["busy_share"] for a in cores),
        "pairs": res.count,
        "wall_s": time.perf_counter() - t0,
    }


def sustainable_rate(profile, machine: str, layout: str, window_s: float, k: float) -> dict:
    """The highest rate per stream ``layout`` sustains with a window of ``window_s`` seconds
    (DP-Join Fig. 5b), by :func:`~streamjoin.runtime.sim.max_sustainable_rate`.

    That search replays one input at scaled rates, so the window it sees holds a fixed number
    of tuples, while a time window holds more tuples the faster they come. Work per second
    grows as ``λ · W`` (every arrival scans the opposite window), so with ``W`` sized for a
    guess ``λ_g`` the search finds ``λ_1 ≈ λ*² / λ_g``: the fixed point is ``λ* = sqrt(λ_g
    λ_1)``. Start from Expr. 4's guess (``2 λ² T_w = N / T⋈``, the profile's SMT share
    applied) and search again from ``λ*`` until the search lands within 10% of its guess
    (so that the scaling law bridges at most that much).
    """
    n = workers(layout)
    t_join = profile.indexes["nested_loop"]["scan"] * 1e-9 / k
    model = math.sqrt(n / (2 * t_join * window_s))
    # SMT: n workers and the emitter share the cores (the profile's shares)
    share = profile.cpu_share[min(n, len(profile.cpu_share) - 1)] if profile.cpu_share else 1
    guess = model * math.sqrt(share)
    batch, delay = batching(machine, search=True)
    w = window_s / k
    runs = 0
    for _ in range(3):
        query, data = workload(guess, window_s, k)
        found = sim.max_sustainable_rate(
            query,
            data,
            topology(layout, guess, w),
            arrival=sim.Arrival.constant(rate_r=guess, rate_s=guess),
            machine=profile,
            batch_size=batch,
            max_delay=delay,
            chunk_rows=1,
            slack=SLACK,
            rel_tol=0.04,
            max_runs=10,
        )
        runs += len(found.runs)
        searched = found.rate / 2
        rate = math.sqrt(guess * searched)
        if abs(searched / guess - 1) < 0.1:
            break
        guess = rate if searched else guess / 2
    return {
        "machine": machine,
        "layout": layout,
        "kind": kind(layout),
        "workers": n,
        "window_s": window_s,
        "scale": k,
        "batch": batch,
        "rate": rate,
        "searched_rate": searched,
        "window_rate": guess,
        "model_rate": model,
        "sim_runs": runs,
    }


def latency(profile, machine: str, layout: str, k: float) -> dict:
    """Fig. 7b: mean steady-state latency of ``layout`` at 1,000 t/s per stream, T_x = 150 s,
    T_y = 300 s (scaled by ``k``), tuple at a time, Poisson arrivals, beside Expr. 5–6."""
    wx, wy = 150 / k, 300 / k
    t0 = time.perf_counter()
    out = simulate(profile, layout, 1000.0, 1000.0, wy, 1.5 * wy, eps_for(k), window_r_s=wx)
    m, n = map(int, layout.split("x"))
    model = expr5_6_ms(profile, m, n, 1000.0, 1000.0, wy, window_r_s=wx)
    return {
        "machine": machine,
        "layout": layout,
        "workers": m * n,
        "scale": k,
        "latency_mean_ms": out["latency_mean_ms"],
        "latency_p95_ms": out["latency_p95_ms"],
        "expr5_6_ms": model,
        "expr5_6_end_of_probe_ms": 2 * model,
        "output_rate": out["output_rate"],
        "busiest": out["max_core_busy"],
        "wall_s": time.perf_counter() - t0,
    }


def measured(args, prov: report.Provenance) -> list[dict]:
    """Layouts this machine runs for real: full-speed throughput on ``ray`` and ``local``
    (``--repeat`` runs each, alternating, median) beside ``sim`` with this host's profile
    (``streamjoin calibrate``'s, else the shipped one, with a warning; each row says which) on
    this host's processors (``with_cpus(2, share)``, the share measured before each Ray run)
    and with a processor per actor. A real window: 2,100 t/s per stream, T_w = 10 s (21,000
    tuples), the paper's hit rate (eps 9), three windows of input, batches of 1,024."""
    import ray

    rate, window_s = 2100.0, 10.0 if not args.quick else 2.0
    query, data = workload(rate, window_s, 1.0)
    cpus = os.cpu_count()
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    rows = []
    try:
        for layout in MEASURED[:3] if args.quick else MEASURED:
            topo = topology(layout, rate, window_s)
            runs = {"ray": [], "local": []}
            shares = []
            for _ in range(args.repeat):
                for backend in ("ray", "local"):
                    if backend == "ray":
                        shares.append(sim.measure_cpu_share(cpus, seconds=0.3, rounds=1)[0])
                    load = prov.note()
                    res = sj.run(
                        query, data, topo, backend=backend, batch_size=1024, progress=False
                    )
                    runs[backend].append((res.metrics["input_tuples_per_s"], load))
            share = tuple(float(np.median([s[i] for s in shares])) for i in range(cpus))
            base = profile_for_this_host()
            for backend, profile in (
                ("sim, this host (2 processors)", base.with_cpus(cpus, share)),
                ("sim, a processor per actor", base),
            ):
                res = sj.run(
                    query,
                    data,
                    topo,
                    backend="sim",
                    machine=profile,
                    arrival=sim.Arrival.constant(1e12),
                    batch_size=1024,
                    chunk_rows=1024,
                    progress=False,
                )
                runs[backend] = [(res.metrics["input_tuples_per_s"], prov.loads[-1])]
                profile_used = report.profile_note(res.metrics)
            for backend, got in runs.items():
                tput = [t for t, _ in got]
                rows.append(
                    {
                        "layout": layout,
                        "workers": workers(layout),
                        "backend": backend,
                        "tuples_per_s": statistics.median(tput),
                        "min": min(tput),
                        "max": max(tput),
                        "runs": len(tput),
                        "load": statistics.median(ld for _, ld in got),
                        "cpu_share": "/".join(f"{v:.2f}" for v in share),
                        "sim_profile": profile_used,
                    }
                )
                print(f"measured {layout:>5} {backend:<30} {rows[-1]['tuples_per_s']:>12,.0f} t/s")
    finally:
        ray.shutdown()
    return rows


def run_section(section: str, args, prov: report.Provenance) -> list[dict]:
    """The rows of one section (module docstring)."""
    quick = args.quick
    k = SCALE * (3 if quick else 1)
    profs = machines(k)
    rows: list[dict] = []
    host = report.profile_of(report.host_profile())

    def note(row: dict) -> None:
        row["profile"] = host  # what the `calibrated` machine is built on
        rows.append(row)
        prov.note()
        # the section so far, so that an interrupted run (fig5b takes an hour) keeps its points
        report.save_rows([{**r, **prov.fields()} for r in rows], csv_path(section, quick))
        cells = "  ".join(
            f"{c}={row[c]:,.3g}" if isinstance(row[c], float) else f"{c}={row[c]}"
            for c in ("machine", "layout", "rate", "output_rate", "sustained", "latency_mean_ms")
            if c in row
        )
        print(f"{section}: {cells}", flush=True)

    if section == "fig4":
        for machine, prof in profs.items():
            for layouts in FIG4_LAYOUTS.values():
                for layout in layouts[::3] if quick else layouts:
                    note(offered(prof, machine, layout, 2100.0, 300.0, k))
    elif section in ("fig5a", "table1"):
        plan = (
            [f"1x{n}" for n in FIG5A]
            if section == "fig5a"
            else [lay for lays in TABLE1_LAYOUTS.values() for lay in lays]
        )
        for machine, prof in profs.items():
            for layout in plan[::4] if quick else plan:
                note(offered(prof, machine, layout, 6000.0, 300.0, k))
    elif section == "fig5b":
        for machine in profs:
            for window_s, ns in FIG5B.items():
                if machine == "calibrated" and window_s != 300:
                    continue
                kw = window_s / (300 / k)  # the same simulated window length
                prof_w = machines(kw)[machine]
                plan = [f"1x{n}" for n in ns]
                if window_s == 300:
                    plan += [f"handshake({n})" for n in FIG5B_HANDSHAKE]
                for layout in plan[::4] if quick else plan:
                    note(sustainable_rate(prof_w, machine, layout, window_s, kw))
    elif section == "fig7b":
        kl = LATENCY_SCALE * (3 if quick else 1)
        for machine, prof in machines(kl).items():
            for layout in FIG7B[::4] if quick else FIG7B:
                note(latency(prof, machine, layout, kl))
    elif section == "measured":
        rows = measured(args, prov)
    return rows


def csv_path(section: str, quick: bool) -> str:
    return os.path.join(
        report.results_dir(), f"dpjoin_system_{section}{'_quick' if quick else ''}.csv"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    ap.add_argument("--quick", action="store_true", help="coarser scaling, fewer layouts")
    ap.add_argument("--repeat", type=int, default=3, help="measured runs per backend (median)")
    ap.add_argument("--render", action="store_true", help="only redraw md and png from CSVs")
    args = ap.parse_args()
    if args.quick:
        args.repeat = 1
    prov = report.Provenance()
    if not args.render:
        for section in args.only.split(","):
            if section not in SECTIONS:
                ap.error(f"unknown section {section!r}; choose from {', '.join(SECTIONS)}")
            rows = run_section(section, args, prov)
            for row in rows:
                row.update(prov.fields())
            report.save_rows(rows, csv_path(section, args.quick))
    render(args.quick, prov)


# -- the report ------------------------------------------------------------------------------


def render(quick: bool, prov: report.Provenance) -> None:
    """``dpjoin_system.{md,png}`` from every section's CSV present."""
    data = {
        s: report.load_rows(csv_path(s, quick))
        for s in SECTIONS
        if os.path.exists(csv_path(s, quick))
    }
    if not data:
        return
    base = os.path.join(report.results_dir(), "dpjoin_system" + ("_quick" if quick else ""))
    plot(data, base + ".png")
    headline(data, base + "_headline.png")
    k = SCALE * (3 if quick else 1)
    lines = [
        "# DP-Join's system figures on the simulator (and measured where this machine can)",
        "",
        "Simulated unless a row says `ray` or `local` (virtual time: simulated figures do not "
        "depend on this host's load). Handshake-join workload, nested-loop workers, windows "
        f"scaled by k = {k:g} ({LATENCY_SCALE * (3 if quick else 1):g} for Fig. 7b) with every "
        "scanned tuple charged k times and the hit rate k p: see the docstring of "
        "`experiments/dpjoin_system.py`. Machines: `paper` = DP-Join's 16-core Xeon as a "
        f"profile (T⋈ = {T_JOIN_NS:.2f} ns from Table I, FastFlow-like messages of 50 + 200 + "
        "50 ns, 16 cores / 32 SMT threads); `calibrated` = this host's profile "
        "(numba kernels, Ray TCP messages; each section names it) with a processor per actor, batches of up to 256 "
        "tuples closing after 1 ms in the throughput figures.",
        "",
        "Each section's CSV records the commit, machine and load it ran with; this page was "
        "rendered by: " + prov.line(),
        "",
        "![DP-Join system figures](dpjoin_system" + ("_quick" if quick else "") + ".png)",
        "",
    ]
    for section, rows in data.items():
        lines += SECTION_WRITERS[section](rows)
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {base}.md, .png")


def _header(title: str, section: str, rows: list[dict]) -> list[str]:
    r = rows[0]
    return [
        f"## {title}",
        "",
        f"Paper: {PAPER[section]}.",
        "",
        f"Ran at commit `{r.get('commit', '?')}`, load average {r.get('load_start', 0):.1f} "
        f"(max {r.get('load_max', 0):.1f})"
        + (f"; `calibrated` built on the profile {r['profile']}." if "profile" in r else "."),
        "",
    ]


def write_fig4(rows: list[dict]) -> list[str]:
    out = _header("Fig. 4: output rate against parallelism, 2,100 t/s, T_w = 300 s", "fig4", rows)
    out += [
        "| machine | layout | kind | N | output pairs/s | Expr. 3 B_max | output / B_max "
        "| sustained | busiest core |",
        "|---|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for r in sorted(rows, key=lambda r: (r["machine"], r["kind"], r["workers"])):
        out.append(
            f"| {r['machine']} | {r['layout']} | {r['kind']} | {r['workers']:.0f} "
            f"| {r['output_rate']:,.0f} | {r['expr3_bmax']:,.0f} "
            f"| {r['output_rate'] / r['expr3_bmax']:.3f} | {'yes' if r['sustained'] else 'no'} "
            f"| {r['busiest']:.0%} |"
        )
    out += ["", *fig4_summary(rows), ""]
    return out


def min_parallelism(rows: list[dict]) -> dict:
    """(machine, kind) -> smallest N whose output rate is within 1% of the highest any layout
    reached on that machine: the input's own ``B_max`` (Expr. 3 estimates it within about 1%,
    too loose a reference for a layout 2% short)."""
    top = {m: max(r["output_rate"] for r in rows if r["machine"] == m) for m in MACHINES}
    best: dict = {}
    for r in rows:
        if r["output_rate"] >= 0.99 * top.get(r["machine"], math.inf):
            key = (r["machine"], r["kind"])
            best[key] = min(best.get(key, 1e9), r["workers"])
    return best


def fig4_summary(rows: list[dict]) -> list[str]:
    best = min_parallelism(rows)
    out = []
    for machine in dict.fromkeys(r["machine"] for r in rows):
        cells = []
        for k in FIG4_LAYOUTS:
            n = best.get((machine, k))
            cell = f"{k} {n:.0f}" if n else f"{k} not reached"
            if k in FIG4_MIN_N:
                cell += f" (paper {FIG4_MIN_N[k]})"
            cells.append(cell)
        reached = [
            r
            for r in rows
            if r["machine"] == machine and r["sustained"] and r["kind"] != "handshake"
        ]
        err = max((abs(r["output_rate"] / r["expr3_bmax"] - 1) for r in reached), default=0)
        out.append(
            f"- `{machine}`: minimum N reaching B_max (within 1% of the highest output): "
            f"{', '.join(cells)}; where a grid sustained the input, its output rate is within "
            f"{err:.1%} of Expr. 3 (paper: 2%)."
        )
    return out


def write_fig5a(rows: list[dict]) -> list[str]:
    out = _header("Fig. 5a: scalability, 6,000 t/s, T_w = 300 s", "fig5a", rows)
    out += [
        "| machine | layout | N | offered bandwidth pairs/s | scalability B(N) / B(1) "
        "| Expr. 4 pairs/s | busiest core |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for machine in dict.fromkeys(r["machine"] for r in rows):
        sel = sorted((r for r in rows if r["machine"] == machine), key=lambda r: r["workers"])
        one = next((r["output_rate"] for r in sel if r["workers"] == 1), None)
        for r in sel:
            scal = f"{r['output_rate'] / one:.2f}" if one else "—"
            model = (
                f"{r['workers'] * P_PAPER / (T_JOIN_NS * 1e-9):,.0f}" if machine == "paper" else "—"
            )
            out.append(
                f"| {machine} | {r['layout']} | {r['workers']:.0f} | {r['output_rate']:,.0f} "
                f"| {scal} | {model} | {r['busiest']:.0%} |"
            )
    out.append("")
    for machine in dict.fromkeys(r["machine"] for r in rows):
        get = {r["layout"]: r["output_rate"] for r in rows if r["machine"] == machine}
        if "1x1" in get and "1x16" in get:
            out.append(
                f"- `{machine}`: linear scalability at 16 workers "
                f"{get['1x16'] / get['1x1']:.1f} (ideal 16; the paper's Table I through Expr. 4: "
                f"{21_659 / (P_PAPER / (T_JOIN_NS * 1e-9)):.1f})."
            )
    out += [
        "- The handshake join is compared by sustained rate (Fig. 4, 5b): see the module "
        "docstring. With one worker it is the same kernel as DP-Join here (the paper's 24% "
        "is a difference between two C++ implementations).",
        "",
    ]
    return out


def write_table1(rows: list[dict]) -> list[str]:
    out = _header("Table I: offered bandwidth per layout, 6,000 t/s, T_w = 300 s", "table1", rows)
    out += [
        "| N | layout | kind | paper pairs/s | `paper` machine | ours / paper | `calibrated` "
        "machine | Expr. 4 (paper's T⋈) |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    get = {(r["machine"], r["layout"]): r for r in rows}
    for n, layouts in TABLE1_LAYOUTS.items():
        for layout in layouts:
            k = kind(layout)
            paper = TABLE1.get((n, k))
            ours = get.get(("paper", layout))
            cal = get.get(("calibrated", layout))
            out.append(
                f"| {n} | {layout} | {k} | {paper:,} "
                f"| {ours['output_rate']:,.0f} | {ours['output_rate'] / paper:.2f} "
                f"| {cal['output_rate']:,.0f} | {n * P_PAPER / (T_JOIN_NS * 1e-9):,.0f} |"
                if ours and cal
                else f"| {n} | {layout} | {k} | {paper:,} | — | — | — | — |"
            )
    out += [
        "",
        "The `paper` machine takes T⋈ from the 3×3 row, so that row agrees by construction; "
        "the others test Expr. 4's claim that the layout does not matter and how 16 workers "
        "sharing 16 cores with the emitter and collector fare.",
        "",
    ]
    return out


def write_fig5b(rows: list[dict]) -> list[str]:
    out = _header("Fig. 5b: maximum sustainable input rate per stream", "fig5b", rows)
    out += [
        "| machine | T_w s | layout | N | sustained t/s per stream | Expr. 4 model t/s "
        "| simulated / model | simulator runs |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(rows, key=lambda r: (r["machine"], r["window_s"], r["kind"], r["workers"])):
        out.append(
            f"| {r['machine']} | {r['window_s']:.0f} | {r['layout']} | {r['workers']:.0f} "
            f"| {r['rate']:,.0f} | {r['model_rate']:,.0f} | {r['rate'] / r['model_rate']:.2f} "
            f"| {r['sim_runs']:.0f} |"
        )
    out += [
        "",
        "Model: every arrival scans the opposite window, so N workers sustain "
        "`2 λ² T_w T⋈ = N`, i.e. `λ = sqrt(N / (2 T⋈ T_w))` (one core per worker).",
        "",
    ]
    return out


def write_fig7b(rows: list[dict]) -> list[str]:
    out = _header(
        "Fig. 7b: latency with asymmetric windows, 1,000 t/s, T_x = 150 s, T_y = 300 s",
        "fig7b",
        rows,
    )
    out += [
        "| machine | layout | N | mean latency ms | p95 ms | Expr. 5–6 ms | ×2 (end of "
        "probe) ms | busiest core |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(rows, key=lambda r: (r["machine"], -r["workers"], r["latency_mean_ms"])):
        out.append(
            f"| {r['machine']} | {r['layout']} | {r['workers']:.0f} "
            f"| {r['latency_mean_ms']:.3f} | {r['latency_p95_ms']:.3f} | {r['expr5_6_ms']:.3f} "
            f"| {r['expr5_6_end_of_probe_ms']:.3f} | {r['busiest']:.0%} |"
        )
    out.append("")
    for machine in dict.fromkeys(r["machine"] for r in rows):
        sel = [r for r in rows if r["machine"] == machine]
        best = min(sel, key=lambda r: r["latency_mean_ms"])
        for n in sorted({r["workers"] for r in sel}, reverse=True):
            at = [r for r in sel if r["workers"] == n]
            b = min(at, key=lambda r: r["latency_mean_ms"])
            out.append(
                f"- `{machine}`, N = {n:.0f}: lowest latency {b['layout']} "
                f"({b['latency_mean_ms']:.3f} ms, {kind(b['layout'])})."
            )
        out.append(
            f"- `{machine}`: lowest overall {best['layout']} ({best['latency_mean_ms']:.3f} ms)."
        )
    return out + [""]


def write_measured(rows: list[dict]) -> list[str]:
    out = _header("Measured on this machine beside the simulator", "measured", rows)
    out += [
        "Full speed (the input handed over as fast as the join takes it), 2,100 t/s of event "
        "time per stream, T_w = 10 s, the paper's hit rate (eps 9), three windows, batches of "
        "1,024. `ray` and `local` measured (median of the runs, alternating); the `sim` rows "
        "use this host's profile on its 2 processors (shares measured before the Ray "
        "runs) and with a processor per actor (what the layout would do with a core each).",
        "",
        f"Simulated with the profile {rows[0].get('sim_profile', 'shipped (not recorded)')}.",
        "",
        "| layout | N | backend | input tuples/s | min | max | runs | load |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['layout']} | {r['workers']:.0f} | {r['backend']} | {r['tuples_per_s']:,.0f} "
            f"| {r['min']:,.0f} | {r['max']:,.0f} | {r['runs']:.0f} | {r['load']:.1f} |"
        )
    out.append("")
    get = {(r["layout"], r["backend"]): r["tuples_per_s"] for r in rows}
    for layout in dict.fromkeys(r["layout"] for r in rows):
        ray_, sim2 = get.get((layout, "ray")), get.get((layout, "sim, this host (2 processors)"))
        if ray_ and sim2:
            out.append(f"- {layout}: sim (2 processors) / ray = {sim2 / ray_:.2f}.")
    return out + [""]


SECTION_WRITERS = {
    "fig4": write_fig4,
    "fig5a": write_fig5a,
    "table1": write_table1,
    "fig5b": write_fig5b,
    "fig7b": write_fig7b,
    "measured": write_measured,
}


COLORS = {"linear": "C0", "square": "C1", "rectangular": "C2", "handshake": "C3"}
STYLES = {"paper": "-", "calibrated": "--"}


def plot(data: dict, path: str) -> None:
    """Every section's panel (``dpjoin_system.png``)."""
    panels = [panel_fig4, panel_fig5a, panel_fig5b, panel_table1, panel_fig7b, panel_measured]
    report.figure(data, path, panels, (2, 3), (17, 10), 11, {panel_fig4: "lower right"})


def headline(data: dict, path: str) -> None:
    """Fig. 4 and Fig. 5b (Fig. 5a until ``fig5b`` has run), large enough to read where the
    README shows them."""
    second = panel_fig5b if data.get("fig5b") else panel_fig5a
    report.figure(
        data, path, [panel_fig4, second], (1, 2), (13, 5.6), 12, {panel_fig4: "lower right"}
    )


def panel_fig4(ax, data: dict) -> None:
    """Fig. 4: output rate against workers."""
    for r0 in data.get("fig4", [])[:1]:
        ax.axhline(r0["expr3_bmax"], color="k", lw=1, label="Expr. 3 B_max (ours)")
        ax.axhline(9526, color="k", lw=1, ls=":", label="paper's B_max 9,526")
    for (machine, k), sel in report.groups(data.get("fig4", []), "machine", "kind").items():
        sel.sort(key=lambda r: r["workers"])
        ax.plot(
            [r["workers"] for r in sel],
            [r["output_rate"] for r in sel],
            STYLES[machine],
            marker="o",
            color=COLORS[k],
            label=k if machine == "paper" else None,
        )
    for k, n in FIG4_MIN_N.items():
        ax.axvline(n, color=COLORS[k], lw=0.8, ls=":", alpha=0.7)
    ax.set(
        xlabel="workers N",
        ylabel="output rate (pairs/s)",
        title="Fig. 4: 2,100 t/s per stream, T_w 300 s (simulated)\nsolid `paper` machine, "
        "dashed `calibrated`;\nvertical dotted: the paper's minimum N",
    )


def panel_fig5a(ax, data: dict) -> None:
    """Fig. 5a: scalability, with the measured Ray points."""
    for (machine, k), sel in report.groups(data.get("fig5a", []), "machine", "kind").items():
        sel.sort(key=lambda r: r["workers"])
        one = next((r["output_rate"] for r in sel if r["workers"] == 1), None)
        if one:
            ax.plot(
                [r["workers"] for r in sel],
                [r["output_rate"] / one for r in sel],
                STYLES[machine],
                marker="o",
                color=COLORS[k],
                label=f"{k} ({machine})",
            )
    meas = data.get("measured", [])
    for backend, marker in (("ray", "s"), ("sim, this host (2 processors)", "x")):
        sel = [r for r in meas if r["backend"] == backend and r["layout"].startswith("1x")]
        one = next((r["tuples_per_s"] for r in sel if r["layout"] == "1x1"), None)
        if one:
            ax.plot(
                [r["workers"] for r in sel],
                [r["tuples_per_s"] / one for r in sel],
                marker=marker,
                ls="none",
                ms=9,
                color="k",
                label=f"linear, {backend} (measured)" if backend == "ray" else backend,
            )
    one = P_PAPER / (T_JOIN_NS * 1e-9)  # the paper's 1x1 by Expr. 4
    ax.plot(
        list(TABLE1_LAYOUTS),
        [TABLE1[(n, "linear")] / one for n in TABLE1_LAYOUTS],
        "k*",
        ms=13,
        label="paper: Table I linear / Expr. 4's B(1)",
    )
    ax.plot([1, 16], [1, 16], color="grey", lw=1, label="ideal")
    ax.set(
        xlabel="workers N",
        ylabel="scalability B(N) / B(1)",
        title="Fig. 5a: 6,000 t/s, T_w 300 s (simulated"
        + (";\nsquares: measured on Ray, 2 cores)" if meas else ")"),
    )


def panel_fig5b(ax, data: dict) -> None:
    """Fig. 5b: the sustained rate against workers."""
    for (machine, window, k), sel in report.groups(
        data.get("fig5b", []), "machine", "window_s", "kind"
    ).items():
        sel.sort(key=lambda r: r["workers"])
        ax.plot(
            [r["workers"] for r in sel],
            [r["rate"] for r in sel],
            STYLES[machine],
            marker="o",
            color=COLORS[k] if window == 300 else "C4",
            label=f"{k}, T_w {window:.0f} s" + (" (calibrated)" if machine != "paper" else ""),
        )
        if machine == "paper" and k == "linear":
            ax.plot(
                [r["workers"] for r in sel],
                [r["model_rate"] for r in sel],
                ":",
                color="grey",
                label=f"model sqrt(N / 2 T⋈ T_w), {window:.0f} s",
            )
    ax.axvline(16, color="grey", lw=0.8, ls="--")
    ax.set(
        xlabel="workers N",
        ylabel="max sustainable rate (tuples/s per stream)",
        title="Fig. 5b: highest sustained rate (simulated)\nsolid `paper` machine, dashed "
        "`calibrated`;\nvertical: 16 cores, SMT beyond",
    )


def panel_table1(ax, data: dict) -> None:
    """Table I: offered bandwidth per layout, beside the paper."""
    t1 = data.get("table1", [])
    get = {(r["machine"], r["layout"]): r["output_rate"] for r in t1}
    labels = [(n, lay) for n, lays in TABLE1_LAYOUTS.items() for lay in lays]
    x = np.arange(len(labels))
    ax.bar(x - 0.27, [TABLE1[(n, kind(lay))] for n, lay in labels], 0.27, label="paper (measured)")
    ax.bar(x, [get.get(("paper", lay), 0) for _, lay in labels], 0.27, label="`paper` machine")
    ax.bar(
        x + 0.27,
        [get.get(("calibrated", lay), 0) for _, lay in labels],
        0.27,
        label="`calibrated` machine",
    )
    ax.set_xticks(x, [f"{lay}\n(N={n})" for n, lay in labels], fontsize=9)
    ax.set(
        ylabel="offered bandwidth (pairs/s)",
        title="Table I: 6,000 t/s, T_w 300 s (simulated vs paper)",
    )


def panel_fig7b(ax, data: dict) -> None:
    """Fig. 7b: latency per layout, beside Expr. 5–6."""
    f7 = data.get("fig7b", [])
    sel = [r for r in f7 if r["machine"] == "paper"]
    if sel:
        sel.sort(key=lambda r: (-r["workers"], r["layout"]))
        x = np.arange(len(sel))
        ax.bar(x - 0.2, [r["latency_mean_ms"] for r in sel], 0.4, label="simulated mean")
        ax.bar(x + 0.2, [r["expr5_6_end_of_probe_ms"] for r in sel], 0.4, label="Expr. 5–6 × 2")
        ax.set_xticks(x, [f"{r['layout']}\n{r['workers']:.0f}" for r in sel], fontsize=8)
    ax.set(
        ylabel="mean latency (ms)",
        title="Fig. 7b: T_x 150 s, T_y 300 s, 1,000 t/s\n(`paper` machine, simulated)",
    )


def panel_measured(ax, data: dict) -> None:
    """Measured against simulated on this machine."""
    meas = data.get("measured", [])
    if meas:
        layouts = list(dict.fromkeys(r["layout"] for r in meas))
        backends = list(dict.fromkeys(r["backend"] for r in meas))
        get = {(r["layout"], r["backend"]): r for r in meas}
        width = 0.8 / len(backends)
        for i, b in enumerate(backends):
            vals = [get[(lay, b)]["tuples_per_s"] if (lay, b) in get else 0 for lay in layouts]
            lo = [
                v - get[(lay, b)]["min"] if (lay, b) in get else 0
                for lay, v in zip(layouts, vals, strict=True)
            ]
            hi = [
                get[(lay, b)]["max"] - v if (lay, b) in get else 0
                for lay, v in zip(layouts, vals, strict=True)
            ]
            ax.bar(
                np.arange(len(layouts)) + (i - (len(backends) - 1) / 2) * width,
                vals,
                width,
                yerr=[lo, hi],
                label=b + (" (measured)" if b in ("ray", "local") else " (simulated)"),
            )
        ax.set_xticks(np.arange(len(layouts)), layouts)
    ax.set(
        ylabel="input tuples/s",
        title="This machine: measured (median, min–max)\nvs simulated; 2,100 t/s, T_w 10 s, "
        "full speed",
    )


if __name__ == "__main__":
    main()
