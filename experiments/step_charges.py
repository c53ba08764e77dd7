"""Where a profile's charge for a layout's steps parts from the host, in one process.

``streamjoin calibrate --check`` compares each actor's steps on Ray (their CPU time) with what
the simulator charges for them. A gap there may be the profile's model of the step, or Ray's
processes: each actor's caches its own, a batch arriving from a socket. The simulator runs the
real logic and times each step on the host as it charges it (``metrics["actors"][a]``:
``compute_wall_ns`` and ``step_cpu_s``), in one process where the actors' steps follow one
another. So this runs the check's unpaced workload for each layout on the simulator (a run to
warm its kernels up, then ``--repeat`` runs), charges its steps at the host's speed then
(scaled by the speed probe's drift around the run, as the check scales its profile), and sets
each actor's host time beside its charge and beside the check's Ray / sim ratio (from a check's
rows: ``streamjoin calibrate --check --report F.md`` writes ``F.json``). A ratio off 1 here is
the model of the step; what the check's ratio adds to it is the processes'.

A shared-index core of more than one thread is left out: it is charged by its tasks on several
processors, and its host time is the wall time of its threads' step. One of one thread is in,
its step's host time with its waits for its merging thread, which its charge leaves out. The
host's speed drifts from run to run: each layout runs ``--repeat`` times after a warm-up, and
the table gives each actor's median ratio and every run's.

Writes ``experiments/results/step_charges.md`` (``_quick`` with ``--quick``).

Run: ``python experiments/step_charges.py [--machine PROFILE.json] [--check-rows ROWS.json]
[--layout NAME ...] [--tuples N]`` (about a minute on 2 cores; ``--quick``: two layouts of
100,000 tuples). The profile defaults to this host's (``streamjoin calibrate``), the rows to
the newest check's in ``experiments/results/check_rows``.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import warnings

import report

from streamjoin import run
from streamjoin.runtime.sim import Arrival, Sim, as_profile, profile_for_this_host
from streamjoin.runtime.sim.calibrate import speed_probe
from streamjoin.runtime.sim.fidelity import (
    CHECK_LAYOUTS,
    CHECK_TUPLES,
    FLOOD,
    load_rows,
    workload,
)

ROWS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "check_rows")
QUICK_LAYOUTS = ["single", "panjoin(2, 4)"]


def measure(
    profile, name: str, tuples: int, repeat: int, window: int = 2**13, batch: int = 1024
) -> dict:
    """One layout: per actor, its steps' host and charged seconds and their ratio, the
    medians over ``repeat`` runs (after one that warms the kernels up), and the drifts."""
    make, inequality = CHECK_LAYOUTS[name]
    topo = make()
    query, data = workload(tuples, window, inequality)
    reference = profile.info.get("speed_probe_ns")
    per_actor: dict[str, list] = {}
    drifts = []
    for k in range(repeat + 1):
        before = speed_probe()
        actors = run(
            query,
            data,
            topo,
            Sim(machine=profile, arrival=Arrival.constant(FLOOD)),
            batch_size=batch,
            chunk_rows=batch,
            collect="count",
            progress=False,
        ).metrics["actors"]
        if k == 0:  # the warm-up
            continue
        # the host's speed around the run; the charges scale by it as a scaled profile's
        drift = statistics.median([before, speed_probe()]) / reference if reference else 1.0
        drifts.append(drift)
        for a, v in actors.items():
            if getattr(topo.config(a), "threads", 1) > 1:  # charged by its tasks
                continue
            host, charged = v["compute_wall_ns"] / 1e9, v["step_cpu_s"] * drift
            per_actor.setdefault(a, []).append((host, charged, host / charged))
    return {
        "layout": name,
        "drifts": drifts,
        "actors": {
            a: {
                "host_s": statistics.median(h for h, _, _ in runs),
                "charged_s": statistics.median(c for _, c, _ in runs),
                "ratio": statistics.median(r for _, _, r in runs),
                "ratios": [r for _, _, r in runs],
            }
            for a, runs in per_actor.items()
        },
    }


def ray_ratios(path: str | None) -> dict:
    """``{(layout, actor): Ray step CPU / sim step}`` from a check's rows file."""
    if path is None:
        return {}
    rows, _ = load_rows(path)
    return {
        (r.layout, a.actor): a.ray_step_cpu_s / a.sim_step_s
        for r in rows
        for a in r.actors
        if a.ray_step_cpu_s and a.sim_step_s
    }


def newest_rows() -> str | None:
    """The newest check's rows in ``experiments/results/check_rows`` (not its profiles)."""
    found = sorted(p for p in glob.glob(os.path.join(ROWS, "*.json")) if "profile-" not in p)
    return found[-1] if found else None


def table(results: list[dict], ray: dict) -> list[str]:
    lines = [
        "| layout | drift | actor | host s | charged s | host / charged (runs) "
        "| Ray / sim (check) |",
        "|---|---|---|---:|---:|---|---:|",
    ]
    for r in results:
        drift = "–".join(f"{d:.2f}" for d in (min(r["drifts"]), max(r["drifts"])))
        for actor, a in r["actors"].items():
            runs = ", ".join(f"{x:.2f}" for x in a["ratios"])
            check = ray.get((r["layout"], actor))
            lines.append(
                f"| {r['layout']} | {drift} | {actor} | {a['host_s']:.3f} | "
                f"{a['charged_s']:.3f} | **{a['ratio']:.2f}** ({runs}) | "
                f"{'' if check is None else f'{check:.2f}'} |"
            )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_LAYOUTS}, 100,000 tuples")
    ap.add_argument("--machine", default=None, help="profile JSON (default: this host's)")
    ap.add_argument("--layout", action="append", choices=list(CHECK_LAYOUTS))
    ap.add_argument("--repeat", type=int, default=3, help="timed runs a layout (default 3)")
    ap.add_argument(
        "--tuples", type=int, default=None, help=f"a layout (default {CHECK_TUPLES // 2:,})"
    )
    ap.add_argument("--check-rows", default=None, help="a check's rows JSON (default: the newest)")
    args = ap.parse_args()
    profile = as_profile(args.machine) if args.machine else profile_for_this_host(warn=False)
    names = args.layout or (QUICK_LAYOUTS if args.quick else list(CHECK_LAYOUTS))
    tuples = args.tuples or (100_000 if args.quick else CHECK_TUPLES // 2)
    rows_file = args.check_rows or newest_rows()
    prov = report.Provenance()
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a profile without window costs warns, by design
        for name in names:
            results.append(measure(profile, name, tuples, 1 if args.quick else args.repeat))
            prov.note()
            print(f"{name}: done", flush=True)
    date = profile.info.get("date", "unknown")
    rows_name = os.path.basename(rows_file) if rows_file else "none"
    lines = [
        "# A layout's steps: the profile's charge against the host, in one process",
        "",
        f"The check's unpaced workload ({tuples:,} tuples, a band join at match rate 2 or "
        "SPO-Join's two inequalities, count windows of 8,192, batches of 1,024) on the "
        f"simulator; profile {profile.name!r} (fitted {date}), its charges scaled by *drift* "
        "(the speed probe before and after each run against the fit's; the range over the "
        "runs). *host s*: the host time of the actor's steps, in this process; *charged s*: "
        "what the profile charges for the same steps (medians over the runs); the ratio is "
        "the median of the runs' ratios, each run's in brackets. *Ray / sim (check)*: the "
        "actor's Ray step CPU time over its simulated steps in the check of "
        f"`{rows_name}`. See the docstring of `experiments/step_charges.py`.",
        "",
        prov.line(),
        "",
        *table(results, ray_ratios(rows_file)),
    ]
    results_dir = report.results_dir()
    os.makedirs(results_dir, exist_ok=True)
    path = os.path.join(results_dir, "step_charges" + ("_quick" if args.quick else "") + ".md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[4:]))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
