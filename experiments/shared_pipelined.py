"""The shared-index core on Ray, pipelined against one step a batch, side by side.

``shared_index(T, pipelined=True)`` runs a batch's tasks on ``T`` pool threads while the core's
own thread sends the last batch's pairs and takes the next batch; ``pipelined=False`` runs each
batch as one step on the core's thread and ``T - 1`` pool threads. By default a core
pipelines only on a host with more processors than ``T + 1``; this experiment runs both on
any host, alternating (A B A B …) in one Ray session, so that the default can be checked
against what the machine gives.

Band join at match rate 2 (keys uniform on [0, 1.5 W), band ±1), count window W per stream,
batches of 1,024. Per round and mode: an unpaced run (input tuples/s end to end, latency per
pair), then a paced one (``--pace`` tuples/s, batches closing after 1 ms: latency). Each mode is
first checked against the oracle. Beside them, both modes simulated once (unpaced) on this
host's profile with its processors shared (as ``streamjoin calibrate --check`` does): the
simulator's ratio of the two against Ray's. Writes
``experiments/results/shared_pipelined.{csv,md}``.

Run: ``python experiments/shared_pipelined.py`` (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import time

import report

import streamjoin as sj
from streamjoin.runtime.sim.calibrate import measure_cpu_share
from streamjoin.runtime.sim.host_profile import profile_for_this_host

RESULTS = report.results_dir()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log2-window", type=int, default=16)
    ap.add_argument("--windows", type=int, default=6, help="input tuples, in windows")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pace", type=float, default=100_000, help="paced input rate, tuples/s")
    args = ap.parse_args()

    import ray

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    prov = report.Provenance()
    w = 1 << args.log2_window
    data = sj.sources.synthetic(args.windows * w, low=0, high=1.5 * w, seed=1)
    query = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(w))
    small = data.slice(0, 20_000)
    paced = data.slice(0, min(len(data), int(3 * args.pace)))  # three seconds of input

    def topology(pipelined: bool):
        return sj.topologies.shared_index(args.threads, pipelined=pipelined)

    exact = {}
    for pipelined in (True, False):
        res = sj.run(query, small, topology(pipelined), backend="ray", batch_size=1024)
        exact[pipelined] = bool(res.same_pairs(sj.oracle.join(query, small)))
    rows = []
    for k in range(args.rounds):
        for pipelined in (True, False):
            load = prov.note()
            fast = sj.run(
                query, data, topology(pipelined), backend="ray", batch_size=1024, collect="count"
            )
            slow = sj.run(
                query,
                paced,
                topology(pipelined),
                backend="ray",
                batch_size=1024,
                max_delay=0.001,
                pace=args.pace,
                collect="count",
            )
            row = {
                "round": k,
                "pipelined": pipelined,
                "exact": exact[pipelined],
                "input_tuples_per_s": round(fast.metrics["input_tuples_per_s"]),
                "p50_ms": fast.metrics["latency_ms"]["p50"],
                "p99_ms": fast.metrics["latency_ms"]["p99"],
                "paced_p50_ms": slow.metrics["latency_ms"]["p50"],
                "paced_p99_ms": slow.metrics["latency_ms"]["p99"],
                "pairs": fast.count,
                "load": load,
            }
            rows.append(row)
            print(row, flush=True)
    cpus = os.cpu_count() or 1
    machine = profile_for_this_host().with_cpus(
        cpus, measure_cpu_share(cpus, seconds=0.3, rounds=1)[0]
    )
    sim = {}
    for pipelined in (True, False):
        res = sj.run(
            query,
            data,
            topology(pipelined),
            backend="sim",
            machine=machine,
            batch_size=1024,
            pace=1e12,
            collect="count",
        )
        sim[pipelined] = res.metrics["input_tuples_per_s"]
    write(rows, sim, args, prov)


def write(rows: list[dict], sim: dict, args, prov: report.Provenance) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    base = os.path.join(RESULTS, "shared_pipelined")
    with open(base + ".csv", "w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(rows[0]))
        out.writeheader()
        out.writerows(rows)
    t = args.threads
    lines = [
        f"# shared_index({t}) on Ray: pipelined against one step a batch",
        "",
        f"{args.windows} windows of input, count window 2^{args.log2_window} per stream, band "
        "join at match rate 2, batches of 1,024; unpaced, then paced at "
        f"{args.pace:,.0f} tuples/s (batches closing after 1 ms). Modes alternate within each "
        "round, one Ray session. See the docstring of `experiments/shared_pipelined.py`.",
        "",
        prov.line(),
        "",
        "| round | pipelined | exact | tuples/s | p50 ms | p99 ms | paced p50 ms "
        "| paced p99 ms | load |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['round']} | {'yes' if r['pipelined'] else 'no'} "
            f"| {'yes' if r['exact'] else 'NO'} | {r['input_tuples_per_s']:,} "
            f"| {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['paced_p50_ms']:.2f} "
            f"| {r['paced_p99_ms']:.2f} | {r['load']:.1f} |"
        )
    ratios = [
        a["input_tuples_per_s"] / b["input_tuples_per_s"]
        for a, b in zip(rows[::2], rows[1::2], strict=True)
    ]
    lines += [
        "",
        f"Pipelined over one step a batch, round by round: "
        f"{', '.join(f'{x:.2f}' for x in ratios)} (median {statistics.median(ratios):.2f}). "
        f"This host has {os.cpu_count()} processors; a core pipelines by default where there "
        f"are threads + 3 = {t + 3} (the workers, the core's thread, the emitter and the "
        "collector).",
        "",
        f"Simulated on this host's profile, its {os.cpu_count()} processors shared: "
        f"pipelined {sim[True]:,.0f} tuples/s, one step a batch {sim[False]:,.0f}: "
        f"{sim[True] / sim[False]:.2f} (Ray: {statistics.median(ratios):.2f}).",
    ]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"{time.time() - t0:.0f} s")
