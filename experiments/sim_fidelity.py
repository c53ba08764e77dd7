"""Simulator fidelity on this machine: ``sim`` against measured ``ray`` (and ``local``) runs.

The target: for ``single``, ``split(2)`` and ``grid(1, 2)`` the simulated throughput and
p50 latency be within 25% of what the ``ray`` backend measures on the same input. Each layout
runs the same band join (match rate 2, count window ``--window`` per stream, index
``--index``) on every backend, in two modes:

- *unpaced* (maximum throughput): ``--tuples`` input tuples handed over as fast as the join
  takes them, chunks and batches of ``--batch`` tuples; on ``sim`` the whole input arrives at
  virtual time 0 (a constant arrival rate of 1e12 tuples/s). Throughput is the comparison;
  latency here is queueing (Ray bounds it with backpressure, the simulator has none) and is
  reported only for completeness;
- *paced* (latency): the input arrives at ``--pace-share`` of the throughput Ray measured
  unpaced for that layout, in chunks of ``--chunk-ms`` of input, each chunk one batch
  (``max_delay=0``); ``sim`` gets the same constant rate in virtual time. The p50 latency is
  the comparison.

Three simulated machines, each with its actors sharing this host's processors as Ray's driver
and actors do here: ``MachineProfile.with_cpus(os.cpu_count(), share)``, with ``share`` the
share of a processor one and two busy processes got (``sim.measure_cpu_share``, 0.3 s
before each ``ray`` run; the median over the runs compared): the host is shared, and other
jobs come and go.

- ``sim, shipped``: the shipped profile (``sim.default_profile()``);
- ``sim, calibrated``: the profile ``streamjoin calibrate`` wrote (``--machine``, by default
  ``experiments/results/sim_fidelity.machine.json``; skipped if there is none);
- ``sim, calibrated now``: the host as it is during this layout's runs. Right before each
  layout's ``ray`` runs, ``sim.calibrate(indexes=[--index], ray=False)`` measures the
  index's and the roles' kernels and the after-idle costs; the ``ray``
  executor's message costs are measured once at the start as ``streamjoin calibrate`` does
  (``sim.ray_messages.measure_messages``: driver → relay host → sink host, the executor's
  own hosts and edges, real batches), and with them the spread of steps and messages
  (``sim.Variability``). This separates stale coefficients from what the model leaves out.

Ray and local runs are repeated ``--repeat`` times and the median is kept (the machine is
shared: see the load average recorded with every row); a simulated run is deterministic and
runs once.

Writes ``experiments/results/sim_fidelity.{csv,md,png}`` with the machine, load and commit.

Run: ``python experiments/sim_fidelity.py`` (about 6 minutes on 2 cores with ``--repeat 5``;
``--quick`` for a smoke run).

Why one file of ~600 lines: the runs are short (:func:`measure`); most of the file is the
report, whose explanation (:func:`explanation`) reads the rows of every machine together.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import time

import numpy as np
import report

import streamjoin as sj
from streamjoin import viz
from streamjoin.runtime import sim
from streamjoin.runtime.result import machine_info

RESULTS = report.results_dir()
LAYOUTS = {
    "single": lambda index: sj.topologies.single(index),
    "split(2)": lambda index: sj.topologies.split(2, index),
    "grid(1, 2)": lambda index: sj.topologies.grid(1, 2, index),
}
#: Arrival rate standing for "all input at once" on the simulator (tuples/s of virtual time).
FLOOD = 1e12
#: The simulated machines (see the module docstring).
SIMULATED = ("sim, shipped", "sim, calibrated", "sim, calibrated now")
#: Where ``streamjoin calibrate -o`` put the profile compared by default.
CALIBRATED = os.path.join(os.path.dirname(__file__), "results", "sim_fidelity.machine.json")


def band_workload(n: int, window: int, seed: int = 1):
    """``(query, data)``: band join |r.x - s.x| <= eps at match rate 2 over a count window."""
    data = sj.sources.synthetic(n, low=0, high=10 * n, seed=seed)
    x, s = data.column("x").to_numpy(), data.column("stream").to_numpy()
    eps = sj.sources.band_for_match_rate(x[s == 0], x[s == 1], window=window, match_rate=2)
    return sj.Query(sj.band("x", eps), window=sj.CountWindow(window)), data


def measure(
    query, data, topo, backend: str, *, batch: int, chunk: int, pace: float | None, machine=None
) -> dict:
    """One run: throughput, latency percentiles and wall time."""
    kw = {"batch_size": batch, "chunk_rows": chunk, "collect": "count", "progress": False}
    if backend == "sim":
        kw |= {"machine": machine, "arrival": sim.Arrival.constant(pace or FLOOD)}
    elif pace is not None:
        kw["pace"] = pace
    if pace is not None:
        kw["max_delay"] = 0.0  # every chunk is one batch
    t0 = time.perf_counter()
    res = sj.run(query, data, topo, backend=backend, **kw)
    m = res.metrics
    return {
        "tuples_per_s": m["input_tuples_per_s"],
        "p50_ms": m["latency_ms"]["p50"],
        "p99_ms": m["latency_ms"]["p99"],
        "pairs": res.count,
        "wall_s": time.perf_counter() - t0,
        "load_1min": os.getloadavg()[0],
    }


def fmt_share(share) -> str:
    """A processor share per number of busy processes, as ``0.98/0.51``."""
    return "/".join(f"{v:.2f}" for v in share)


def median_run(runs: list[dict]) -> dict:
    """The median of each figure over repeated runs (the load: the highest seen), with the
    range of throughput and p50 over them."""
    out = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    out["load_1min"] = max(r["load_1min"] for r in runs)
    out["runs"] = len(runs)
    for k in ("tuples_per_s", "p50_ms"):
        out[f"{k}_min"] = min(r[k] for r in runs)
        out[f"{k}_max"] = max(r[k] for r in runs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuples", type=int, default=200_000, help="input tuples, unpaced")
    ap.add_argument("--window", type=int, default=2**14, help="count window per stream")
    ap.add_argument("--index", default="bplus_tree")
    ap.add_argument("--batch", type=int, default=1024, help="batch and chunk size, unpaced")
    ap.add_argument(
        "--pace-share",
        type=float,
        default=0.25,
        help="paced rate as a share of Ray's unpaced throughput (default 0.25)",
    )
    ap.add_argument("--chunk-ms", type=float, default=10.0, help="paced chunk, ms of input")
    ap.add_argument("--paced-seconds", type=float, default=4.0, help="paced input length")
    ap.add_argument("--repeat", type=int, default=2, help="runs of ray and local (median)")
    ap.add_argument(
        "--machine",
        default=CALIBRATED,
        help="profile from `streamjoin calibrate` (default: %(default)s)",
    )
    ap.add_argument("--quick", action="store_true", help="small input, one repeat")
    args = ap.parse_args()
    if args.quick:
        args.tuples, args.window, args.repeat, args.paced_seconds = 40_000, 2**12, 1, 2.0

    import ray

    from streamjoin.runtime.sim import measure_cpu_share
    from streamjoin.runtime.sim.ray_messages import measure_messages

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    cpus = os.cpu_count()
    messages_now, raw = measure_messages()
    spread_now = sim.Variability(raw["spread"]["step"], raw["spread"]["message"])
    fixed = {SIMULATED[0]: sim.default_profile()}
    if os.path.exists(args.machine):
        fixed[SIMULATED[1]] = sim.MachineProfile.load(args.machine)
    machines = {}  # per layout
    query, data = band_workload(args.tuples, args.window)
    sj.run(
        query,
        data.slice(0, 4 * args.batch),
        LAYOUTS["single"](args.index),
        batch_size=256,
        collect="count",
        progress=False,
    )
    rows = []

    def record(layout, mode, backend, pace, out, chunk):
        row = {
            "layout": layout,
            "mode": mode,
            "backend": backend,
            "pace": pace or "",
            "chunk_rows": chunk,
            **out,
        }
        rows.append(row)
        print(
            f"{layout:<11}{mode:<8}{backend:<19}{out['tuples_per_s']:>12,.0f} t/s  "
            f"p50 {out['p50_ms']:8.2f} ms  p99 {out['p99_ms']:8.2f} ms  "
            f"[{out['wall_s']:.1f} s, load {out['load_1min']:.1f}]",
            flush=True,
        )

    def series(backend, topo, data_, chunk, pace):
        """``--repeat`` runs; before each ``ray`` run, the processors' share (the median of
        each is the host as it was during the runs)."""
        runs, shares = [], []
        for _ in range(args.repeat):
            if backend == "ray":
                shares.append(measure_cpu_share(cpus, seconds=0.3, rounds=1)[0])
            runs.append(measure(query, data_, topo, backend, batch=chunk, chunk=chunk, pace=pace))
        out = median_run(runs)
        if shares:
            out["cpu_share"] = tuple(float(np.median([x[k] for x in shares])) for k in range(cpus))
        return out

    for layout, make in LAYOUTS.items():
        topo = make(args.index)
        b = args.batch
        now = (
            sim.calibrate(indexes=[args.index], ray=False, quick=args.quick, name="now")
            .with_messages(messages_now)
            .with_variability(spread_now)
        )
        machines[layout] = {**fixed, SIMULATED[2]: now}
        for mode in ("unpaced", "paced"):
            if mode == "unpaced":
                pace, chunk, data_ = None, b, data
            else:
                ray_rate = next(
                    r["tuples_per_s"]
                    for r in rows
                    if r["layout"] == layout and r["mode"] == "unpaced" and r["backend"] == "ray"
                )
                pace = float(round(args.pace_share * ray_rate, -2))
                chunk = max(1, int(pace * args.chunk_ms / 1000))
                data_ = data.slice(0, int(pace * args.paced_seconds))
            ray_out = series("ray", topo, data_, chunk, pace)
            share = ray_out["cpu_share"]
            record(layout, mode, "ray", pace, ray_out | {"cpu_share": fmt_share(share)}, chunk)
            record(layout, mode, "local", pace, series("local", topo, data_, chunk, pace), chunk)
            for name, prof in machines[layout].items():
                out = measure(
                    query,
                    data_,
                    topo,
                    "sim",
                    batch=chunk,
                    chunk=chunk,
                    pace=pace,
                    machine=prof.with_cpus(cpus, share),
                )
                record(layout, mode, name, pace, out, chunk)
    write(rows, args, machines, raw)


def ratios(rows: list[dict], names: list[str]) -> list[dict]:
    """Per layout and simulated machine: sim / ray for unpaced throughput and paced p50."""
    out = []
    get = {(r["layout"], r["mode"], r["backend"]): r for r in rows}
    for layout in LAYOUTS:
        ray_u, ray_p = get[(layout, "unpaced", "ray")], get[(layout, "paced", "ray")]
        for name in names:
            sim_u, sim_p = get[(layout, "unpaced", name)], get[(layout, "paced", name)]
            out.append(
                {
                    "layout": layout,
                    "machine": name,
                    "throughput_ratio": sim_u["tuples_per_s"] / ray_u["tuples_per_s"],
                    "p50_ratio": sim_p["p50_ms"] / ray_p["p50_ms"],
                    "paced_throughput_ratio": sim_p["tuples_per_s"] / ray_p["tuples_per_s"],
                }
            )
    return out


def write(rows: list[dict], args, machines: dict, raw: dict) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    base = os.path.join(RESULTS, "sim_fidelity" + ("_quick" if args.quick else ""))
    with open(base + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    names = [n for n in SIMULATED if n in next(iter(machines.values()))]
    listed = {}  # (layouts, name) -> profile: a fixed machine once, a "now" one per layout
    for layout, profs in machines.items():
        for name, prof in profs.items():
            key = ("all", name) if name != SIMULATED[2] else (layout, name)
            listed.setdefault(key, prof)
    rat = ratios(rows, names)
    plot(rows, rat, base + ".png", names)
    m = machine_info()
    loads = [r["load_1min"] for r in rows]
    lines = [
        "# Simulator fidelity: `sim` against `ray` on this machine",
        "",
        f"{args.tuples:,} tuples, count window {args.window:,} per stream, band join at match "
        f"rate 2, index `{args.index}`. Unpaced: chunks and batches of {args.batch}; paced: "
        f"{args.pace_share:g} of Ray's unpaced throughput, chunks of {args.chunk_ms:g} ms of "
        f"input as one batch each, {args.paced_seconds:g} s of input. Ray and local: median "
        f"of {args.repeat} runs.",
        f"Machine: {m['cpus']} CPUs, {m['processor']}, {m['platform']}, Python {m['python']}; "
        f"commit `{report.commit()}` (working tree may differ); 1-minute load average during the "
        f"runs {min(loads):.1f}–{max(loads):.1f}; `{report.command_line()}`.",
        "",
        "Simulated machines (message costs in µs, per-byte in ns/B; every one with its actors "
        f"sharing this host's {m['cpus']} processors):",
        "",
        "| layouts | machine | profile | send | send/B | kernel | kernel/B | hop | hop/B "
        "| receive | receive/B | send (the kernel's delivery in it), receive of 1,024 tuples "
        "(50 KB) as charged |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    kb50 = raw["by_batch_size"]["1024"]["bytes"]  # a batch of 1,024 tuples, as timed
    for (layouts, name), prof in listed.items():
        c = prof.messages
        send50, recv50 = c.send_recv(kb50)
        lines.append(
            f"| {layouts} | {name} | `{prof.name}` {prof.info.get('date', '')} "
            f"| {c.send_ns / 1e3:.0f} | {c.send_per_byte_ns:.2f} "
            f"| {c.kernel_ns / 1e3:.0f} | {c.kernel_per_byte_ns:.2f} "
            f"| {c.hop_ns / 1e3:.0f} | {c.hop_per_byte_ns:.2f} "
            f"| {c.recv_ns / 1e3:.0f} | {c.recv_per_byte_ns:.2f} "
            f"| {send50 / 1e3:.0f}, {recv50 / 1e3:.0f} |"
        )
    lines += [
        "",
        f"Their compute: `{args.index}` coefficients in ns (per call, tuple inserted, tuple "
        "expired, scan unit), the after-idle costs in µs per step (emitter, join core, "
        "collector), and the load average when they were measured. Every machine shares the "
        "processors as measured during the `ray` runs it is compared with (the share of a "
        "processor one and two busy processes got; see *All runs*):",
        "",
        "| layouts | machine | call | inserted | expired | scan | after idle µs | load |",
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for (layouts, name), prof in listed.items():
        k, a = prof.indexes.get(args.index, {}), prof.after_idle
        fit = prof.info.get("fit", {})
        load = (fit.get("after_idle") or fit.get("messages") or {}).get("load_1min_start_end")
        lines.append(
            f"| {layouts} | {name} | {k.get('calls', 0):.0f} | {k.get('inserted', 0):.0f} "
            f"| {k.get('expired', 0):.0f} | {k.get('scan', 0):.1f} "
            f"| {a.emitter_ns / 1e3:.0f}, {a.join_ns / 1e3:.0f}, {a.collector_ns / 1e3:.0f} "
            f"| {load[0] if load else '–'} |"
        )
    lines += [
        "",
        f"The executor's messages measured now (`sim.ray_messages.measure_messages`, load "
        f"{raw['load_1min']:.1f}), µs per message by batch size, through the executor's "
        "hosts (a relay host and a sink host): pipelined, the relay's period and each host's "
        "process CPU per message (the sink's is the receive, the relay's less the sink's the "
        "send); idle, each host's CPU per message with the messages 2 and 8 ms apart, and the "
        "one-way time from the relay's step to the sink's:",
        "",
        "| batch (tuples) | bytes | relay period | relay CPU | sink CPU | relay asleep 2 / 8 ms "
        "| sink asleep 2 / 8 ms | idle one-way |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, r in raw["by_batch_size"].items():
        us = {k: v / 1e3 for k, v in r.items()}
        lines.append(
            f"| {n} | {r['bytes']:,.0f} | {us['relay_period_ns']:.0f} | {us['relay_cpu_ns']:.0f} "
            f"| {us['sink_cpu_ns']:.0f} | {us['asleep_relay_cpu_ns_2ms']:.0f} / "
            f"{us['asleep_relay_cpu_ns_8ms']:.0f} | {us['asleep_sink_cpu_ns_2ms']:.0f} / "
            f"{us['asleep_sink_cpu_ns_8ms']:.0f} | {us['one_way_ns']:.0f} |"
        )
    lines += [
        "",
        "## sim / ray (target: within 25%, i.e. 0.80–1.25)",
        "",
        "| layout | simulated machine | unpaced throughput | paced p50 latency "
        "| paced throughput |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rat:
        lines.append(
            f"| {r['layout']} | {r['machine']} | {r['throughput_ratio']:.2f} "
            f"| {r['p50_ratio']:.2f} | {r['paced_throughput_ratio']:.2f} |"
        )
    lines += ["", *explanation(rat, rows, listed, raw)]
    lines += [
        "",
        "## All runs",
        "",
        "| layout | mode | backend | input rate t/s | tuples/s | p50 ms | p99 ms | load "
        "| processor share |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['layout']} | {r['mode']} | {r['backend']} "
            f"| {r['pace'] and format(r['pace'], ',.0f') or 'unpaced'} "
            f"| {r['tuples_per_s']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} "
            f"| {r['load_1min']:.1f} | {r.get('cpu_share', '')} |"
        )
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {base}.csv, .md, .png")


def explanation(rat: list[dict], rows: list[dict], listed: dict, raw: dict) -> list[str]:
    """What the model charges and what it leaves out, with this run's figures."""
    ok = [r for r in rat if all(0.8 <= r[k] <= 1.25 for k in ("throughput_ratio", "p50_ratio"))]
    now = [r for r in rat if r["machine"] == SIMULATED[2]]
    ok_now = [r for r in now if r in ok]
    by = raw["by_batch_size"]
    cpu = [r["relay_cpu_ns"] / max(1.0, r["relay_period_ns"]) for r in by.values()]
    nows = {lay: p for (lay, name), p in listed.items() if name == SIMULATED[2]}
    ray = {(r["layout"], r["mode"]): r for r in rows if r["backend"] == "ray"}

    def us(key) -> str:
        return ", ".join(f"{key(r) / 1e3:.0f}" for r in by.values())

    per_frame = raw["kernel"]["ns_per_frame"].values()
    us_kernel = ", ".join("–" if v is None else f"{v / 1e3:.0f}" for v in per_frame)

    def spread(mode: str, k: str, fmt: str) -> str:
        return ", ".join(
            f"{format(ray[(lay, mode)][k + '_min'], fmt)}–"
            f"{format(ray[(lay, mode)][k + '_max'], fmt)}"
            for lay in LAYOUTS
        )

    em = sim.default_profile().roles["emitter"]
    sizes = [int(ray[(lay, "paced")]["chunk_rows"]) for lay in LAYOUTS]
    chunks = ", ".join(f"{n:,}" for n in sizes)
    emitter = ", ".join(
        f"{(em['calls'] + em['msgs_out'] + (em['tuples_in'] + em['tuples_out']) * n) / 1e3:.0f}"
        for n in sizes
    )
    copied = em.get("copied", 0.0)
    local = {(r["layout"], r["mode"]): r for r in rows if r["backend"] == "local"}
    local_gap = ", ".join(
        f"{ray[(lay, 'paced')]['p50_ms'] - local[(lay, 'paced')]['p50_ms']:.1f}" for lay in LAYOUTS
    )
    idle = "; ".join(
        f"{lay} {p.after_idle.emitter_ns / 1e3:.0f}, {p.after_idle.join_ns / 1e3:.0f}, "
        f"{p.after_idle.collector_ns / 1e3:.0f}"
        for lay, p in nows.items()
    )
    ramps = "; ".join(
        f"{lay} " + " / ".join(f"{f:.2f}" for _, f in p.after_idle.ramp[:-1])
        for lay, p in nows.items()
    )
    gap = f"{sim.IDLE_GAP_S * 1e3:g}"
    ramp = ", ".join(f"{g * 1e3:g}" for g in sim.RAMP_GAPS_S)
    # measured once, with the messages: the same for every layout
    measured = next((p.variability for p in nows.values() if p.variability), None)
    spreads = measured.summary().strip().removeprefix("spread: ") if measured else ""
    shares = "; ".join(
        f"{lay} {ray[(lay, 'unpaced')]['cpu_share']} unpaced, "
        f"{ray[(lay, 'paced')]['cpu_share']} paced"
        for lay in LAYOUTS
    )
    return [
        "## How the model is calibrated, and what it leaves out",
        "",
        f"- {len(ok)} of {len(rat)} (layout, machine) pairs have both ratios within 25%; "
        f"{len(ok_now)} of {len(now)} for `{SIMULATED[2]}`, whose every coefficient was "
        "measured on the host as it was during the layout's runs.",
        "- **Transport.** The `ray` executor uses Ray only to place, start and stop its actors; "
        "batches travel over one TCP connection per graph edge as framed raw columns "
        "(`runtime/ray/channels.py`). In each actor of an acyclic graph one thread reads the "
        "frames that are ready and runs the logic on them, so a message's receive, the step "
        "and its sends follow one another in one thread, as the simulator charges them.",
        "- **Message costs** are timed where a join core stands, through the executor's own "
        "hosts: the driver writes real batches to a relay host, which writes each on to a sink "
        "host. Pipelined, the sink's process CPU per message is the receive, which the "
        "simulator charges before the step that reads the message (the collector stamps a "
        "pair's latency after it), and the relay's less the sink's the send. Here the "
        "pipelined receive is "
        + us(lambda r: r["sink_cpu_ns"])
        + " µs and the send "
        + us(lambda r: max(0.0, r["relay_cpu_ns"] - r["sink_cpu_ns"]))
        + " µs by batch size. A profile keeps these points (`MessageCosts.measured`) and the "
        "simulator interpolates between them; the lines in the table above (a cost per "
        "message and per byte, fitted to all sizes) are the summary, and undercharge the "
        "middle sizes where the points are not kept. The kernel's delivery of a frame (on "
        "loopback the TCP receive runs as softirq work inside the writer's system call, which "
        "no process's CPU time counts) is measured apart, from the machine's softirq time "
        "over each size's runs and their frames (`kernel` in the table above), and charged "
        "to the sender with the send: " + us_kernel + " µs a frame by batch size here.",
        "- **Hop latency** is the idle one-way time (the relay's step to the sink's, every "
        "host asleep between messages) less the send, the kernel's delivery, the receive and "
        "the wake-up costs, taken as the "
        "median over the batch sizes (clipped at 0, nothing per byte). Here the idle one-way "
        "time is "
        + us(lambda r: r["one_way_ns"])
        + " µs, and the sink host's CPU per message asleep 8 ms before each "
        + us(lambda r: r["asleep_sink_cpu_ns_8ms"])
        + " µs (Ray's threads in its process included).",
        "- **Steps after idle time** are charged: a step whose core had no message waiting "
        "costs more than the back-to-back steps the kernels are fitted on, a constant per "
        f"actor kind at a {gap}-ms gap and a measured share of it after a shorter one "
        "(`MachineProfile.after_idle`). `sim.measure_after_idle` times the same steps "
        f"back to back and with the process asleep {ramp} and {gap} ms before each (the window "
        "full, batches of 64 to 4,096): the difference hardly grows with the step, as a cache "
        "refill would not once the working set is back, and grows with the gap. Measured "
        f"before each layout (µs at {gap} ms, emitter, join core, collector): {idle}; the "
        f"share after {ramp.replace(', ', ' / ')} ms: {ramps}. Paced, every step follows idle "
        "time; "
        "unpaced, the busiest actor never does, but on processors shared by more actors "
        "a step that waited for one starts colder (other processes ran on it), and is "
        "charged by the length of its wait in the same way.",
        "- **Spread.** A step's compute and a message's way vary from one to the next "
        "(`MachineProfile.variability`): measured with the messages, the relay's join work "
        "per step over its mean and the one-way times over their median, both as quantile "
        "tables, from which the simulator draws a factor per step and per message (seeded "
        f"per core). Measured now ({spreads or 'none'}). The shipped profile has none: its "
        "paced p99 is about its p50.",
        "- **Processors.** The simulated actors share the host's 2 processors, first come, "
        "first served: a step holds one until it ends. Processor sharing (every runnable "
        "step progressing at 2/n of a processor, as Linux's scheduler shares them over time) "
        "was measured instead on 2026-11-26: paced p50 unchanged (within 0.01 of these "
        "ratios), unpaced throughput 0.10–0.17 higher for split(2) and grid(1, 2), further "
        "from Ray, as no step then starts colder after waiting for a processor. Other jobs "
        "share the processors too: Linux divides the processors between sessions first, so one busy job "
        "elsewhere holds about one of the two however many processes the run has. "
        "`sim.measure_cpu_share` spins one and then two processes and takes the share "
        "of a processor each got; the compute of a step that starts while two steps hold "
        "processors is stretched by the ratio of the two (the kernels were timed by one "
        "process). Measured before each `ray` run, the median over a layout's runs (one/two "
        f"busy): {shares}. Ray's own "
        "daemons and idle actors took about 0.1 of a processor on 2026-11-26 (`/proc` CPU "
        "times over 5 s, load 3.4), inside what the share measures. The stretch is fixed "
        "when a step starts (a step that starts alone is not stretched when another starts "
        "during it), and each share is a 0.3-s sample before a run: other jobs come and go "
        "within one.",
        "- **Load.** Over the repeats Ray's unpaced throughput ranged "
        + spread("unpaced", "tuples_per_s", ",.0f")
        + " tuples/s and its paced p50 "
        + spread("paced", "p50_ms", ".2f")
        + " ms (single, split(2), grid(1, 2)); the figures compared are medians, the "
        "coefficients single measurements a minute before.",
        "- **Contention in the transport.** The relay's process CPU time is "
        + ", ".join(f"{c:.0%}" for c in cpu)
        + " of the pipeline's period: the rest is waiting for a processor that other "
        "processes hold, or for its input. Message costs are the hosts' CPU costs, measured "
        "once at the start, with the load of that moment (see the load column).",
        "- **The emitter** is charged per call, tuple stamped, message sent and tuple "
        "copied (`Emitter.copied`: the tuples copied merging chunks into a batch or cutting "
        f"one; {copied:.0f} ns each in the shipped profile), so a chunk sent as one batch, as "
        "the paced chunks here are, pays no copies: the shipped model charges "
        f"{emitter} µs for chunks of {chunks} tuples (one message each, after-idle cost "
        "aside).",
        "- **Chains pass batches on first.** A DP-Join grid core passes each batch on along "
        "its row or column before joining it (§III-C; `passes_on`, sent by every executor "
        "before `on_batch`). Before a change of 2026-11-26 the `ray` executor sent it after the step with "
        "the pairs, so the second core of a grid(1, 2) row took its R batch a step later "
        "(about 1.1 ms: the core's take time after ingest was 0.7–1.0 ms at core0_0 and "
        "2.4–2.8 ms at core0_1, median), while the simulator charged the forward first: "
        "grid(1, 2)'s paced p50 ratio was 0.68–0.73 then.",
        "- **Coalescing.** When several batches of one sender for one port wait in an actor's "
        "inbox, the executor hands them to the logic as one (`coalesce.mergeable`; at most "
        "`INBOX` = 2, as a host reads no further once that many wait). The simulator does "
        "the same when a core takes its next message: one step over the merged batch, each "
        "frame's receive charged.",
        "- **Backpressure.** The executor's senders block once a receiver's inbox and socket "
        "buffers are full; the simulator's mailboxes are unbounded. With the paced input "
        "below capacity no mailbox fills; unpaced, the simulator's emitter runs ahead of "
        "the cores instead of waiting, which changes the queues, not which actor bounds the "
        "throughput.",
        "- **`local`** runs every actor in one thread and delivers a chunk's messages before "
        "reading the next: no messages to pay for, but no parallelism, and no queues, so its "
        "unpaced p50 is one chunk's pass (1–2 ms) where Ray's queues fill to their bounds and "
        "the simulator's hold the whole input. Paced, its p50 is the same steps after idle "
        f"time without the messages: Ray's p50 less {local_gap} ms here.",
        "- **Unpaced latency** is not compared: with the whole input arriving at once the "
        "simulator's queues hold all of it, while the executor's senders wait for their "
        "destinations.",
    ]


def plot(rows: list[dict], rat: list[dict], path: str, names: list[str]) -> None:
    plt = viz._pyplot()
    layouts = list(LAYOUTS)
    backends = ["ray", *names, "local"]
    get = {(r["layout"], r["mode"], r["backend"]): r for r in rows}
    x = np.arange(len(layouts))
    width = 0.8 / len(backends)
    fig, axes = plt.subplots(1, 3, figsize=(15, 5))
    for k, backend in enumerate(backends):
        off = (k - (len(backends) - 1) / 2) * width
        axes[0].bar(
            x + off,
            [get[(lay, "unpaced", backend)]["tuples_per_s"] / 1e3 for lay in layouts],
            width,
            label=backend,
        )
        axes[1].bar(
            x + off,
            [get[(lay, "paced", backend)]["p50_ms"] for lay in layouts],
            width,
            label=backend,
        )
    for j, name in enumerate(names):  # colours as in the other panels
        sel = [r for r in rat if r["machine"] == name]
        w = 0.8 / (2 * len(names))
        off = (2 * j - len(names)) * w + w / 2
        axes[2].bar(
            x + off,
            [r["throughput_ratio"] for r in sel],
            w,
            color=f"C{j + 1}",
            label=f"{name}: unpaced throughput",
        )
        axes[2].bar(
            x + off + w,
            [r["p50_ratio"] for r in sel],
            w,
            color=f"C{j + 1}",
            hatch="//",
            alpha=0.6,
            label=f"{name}: paced p50",
        )
    axes[2].axhspan(0.8, 1.25, color="green", alpha=0.12, label="within 25%")
    axes[2].axhline(1.0, color="black", lw=0.8)
    axes[2].set_yscale("log")
    ticks = [
        t
        for t in (0.125, 0.25, 0.5, 0.8, 1.25, 2, 4, 8)
        if min(min(r["throughput_ratio"], r["p50_ratio"]) for r in rat) / 1.5
        <= t
        <= 1.5 * max(max(r["throughput_ratio"], r["p50_ratio"]) for r in rat)
    ]
    axes[2].set_yticks(ticks, [f"{t:g}" for t in ticks])
    axes[2].minorticks_off()
    titles = ("unpaced throughput (K tuples/s)", "paced p50 latency (ms)", "sim / ray")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xticks(x, layouts)
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3)
    axes[2].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
    fig.tight_layout()
    viz.save_figure(fig, path)


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"{time.time() - t0:.0f} s")
