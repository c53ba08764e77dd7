"""Simulator fidelity on this machine: ``sim`` against measured ``ray`` (and ``local``) runs.

Issue 6 asks that for ``single``, ``split(2)`` and ``grid(1, 2)`` the simulated throughput and
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

Three simulated machines, all with the shipped compute costs:

- ``sim``: the shipped profile (``cost_model.default_profile()``);
- ``sim, ping now``: Ray's message costs measured again now, at this run's load, the way
  ``streamjoin calibrate`` does (``ray_calibrate.measure_messages``: one actor, calls from the
  driver), which separates stale coefficients from what the model leaves out;
- ``sim, relay now``: as ``ping now``, but the receive cost taken from a pipeline through a
  relay actor (driver → relay → sink, 4 calls in flight, :func:`measure_relay`), the position
  of a join core, which receives batches and sends pairs: ``recv_ns`` = the relay's time per
  message less one send, ``recv_per_byte_ns`` = its growth with the payload less the
  sender's;
- ``sim, relay now, N CPUs``: as ``relay now``, with the actors sharing this host's N
  processors (``MachineProfile.with_cpus``), as Ray's driver and actors do here; the other
  machines give every actor a processor of its own. Ray and local runs are repeated ``--repeat`` times and the median is kept
(the machine is shared: see the load average recorded with every row); a simulated run is
deterministic and runs once.

Writes ``experiments/results/sim_fidelity.{csv,md,png}`` with the machine, load and commit.

Run: ``python experiments/sim_fidelity.py`` (about 5 minutes on 2 cores; ``--quick`` for a
smoke run).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import statistics
import sys
import time

import numpy as np

import streamjoin as sj
from streamjoin import viz
from streamjoin.runtime import cost_model, sim
from streamjoin.runtime.result import machine_info

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dpjoin_layouts import RESULTS, commit_id  # noqa: E402

LAYOUTS = {
    "single": lambda index: sj.topologies.single(index),
    "split(2)": lambda index: sj.topologies.split(2, index),
    "grid(1, 2)": lambda index: sj.topologies.grid(1, 2, index),
}
#: Arrival rate standing for "all input at once" on the simulator (tuples/s of virtual time).
FLOOD = 1e12
#: The simulated machines (see the module docstring).
SIMULATED = ("sim", "sim, ping now", "sim, relay now", f"sim, relay now, {os.cpu_count()} CPUs")
#: Payloads (bytes) of the relay measurement.
RELAY_SIZES = (8, 64 * 1024)


def band_workload(n: int, window: int, seed: int = 1):
    """``(query, data)``: band join |r.x - s.x| <= eps at match rate 2 over a count window."""
    data = sj.sources.synthetic(n, low=0, high=10 * n, seed=seed)
    x, s = data.column("x").to_numpy(), data.column("stream").to_numpy()
    eps = sj.sources.band_for_match_rate(x[s == 0], x[s == 1], window=window, match_rate=2)
    return sj.Query(sj.band("x", eps), window=sj.CountWindow(window)), data


def measure(query, data, topo, backend: str, *, batch: int, chunk: int, pace: float | None,
            machine=None) -> dict:  # fmt: skip
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
    return {"tuples_per_s": m["input_tuples_per_s"], "p50_ms": m["latency_ms"]["p50"],
            "p99_ms": m["latency_ms"]["p99"], "pairs": res.count,
            "wall_s": time.perf_counter() - t0, "load_1min": os.getloadavg()[0]}  # fmt: skip


def measure_relay(sizes=RELAY_SIZES, calls: int = 200, in_flight: int = 4) -> dict[int, float]:
    """ns per message through driver → relay actor → sink, pipelined ``in_flight`` deep (as
    ``ray_executor`` bounds each sender), for each payload size in bytes."""
    import ray

    @ray.remote
    class Sink:
        def take(self, payload) -> None:
            return None

    @ray.remote
    class Relay:
        def __init__(self, sink) -> None:
            self.sink, self.pending = sink, []

        def take(self, payload) -> None:
            self.pending.append(self.sink.take.remote(payload))
            if len(self.pending) > in_flight:
                done, self.pending = ray.wait(self.pending,
                                              num_returns=len(self.pending) - in_flight)  # fmt: skip
                ray.get(done)

        def settle(self) -> None:
            ray.get(self.pending)
            self.pending = []

    relay = Relay.remote(Sink.remote())
    out = {}
    for size in (8, *sizes):  # the first round warms the workers
        payload = np.zeros(max(1, size // 8))
        pending = []
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            pending.append(relay.take.remote(payload))
            if len(pending) > in_flight:
                done, pending = ray.wait(pending, num_returns=len(pending) - in_flight)
                ray.get(done)
        ray.get(pending)
        ray.get(relay.settle.remote())
        out[size] = (time.perf_counter_ns() - t0) / calls
    ray.kill(relay)
    return out


def relay_messages(
    ping: cost_model.MessageCosts, relay: dict[int, float]
) -> cost_model.MessageCosts:
    """``ping`` with the receive costs a relay pipeline implies (see the module docstring): a
    relay's step per message is one receive and one send."""
    small, large = RELAY_SIZES
    slope = (relay[large] - relay[small]) / (large - small)
    return dataclasses.replace(
        ping, recv_ns=max(0.0, relay[small] - ping.send_ns - ping.send_per_byte_ns * small),
        recv_per_byte_ns=max(0.0, slope - ping.send_per_byte_ns),
    )  # fmt: skip


def median_run(runs: list[dict]) -> dict:
    """The median of each figure over repeated runs (the load: the highest seen)."""
    out = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    out["load_1min"] = max(r["load_1min"] for r in runs)
    out["runs"] = len(runs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuples", type=int, default=200_000, help="input tuples, unpaced")
    ap.add_argument("--window", type=int, default=2**14, help="count window per stream")
    ap.add_argument("--index", default="bplus_tree")
    ap.add_argument("--batch", type=int, default=1024, help="batch and chunk size, unpaced")
    ap.add_argument("--pace-share", type=float, default=0.25,
                    help="paced rate as a share of Ray's unpaced throughput (default 0.25)")  # fmt: skip
    ap.add_argument("--chunk-ms", type=float, default=10.0, help="paced chunk, ms of input")
    ap.add_argument("--paced-seconds", type=float, default=4.0, help="paced input length")
    ap.add_argument("--repeat", type=int, default=2, help="runs of ray and local (median)")
    ap.add_argument("--quick", action="store_true", help="small input, one repeat")
    args = ap.parse_args()
    if args.quick:
        args.tuples, args.window, args.repeat, args.paced_seconds = 40_000, 2**12, 1, 2.0

    import ray

    from streamjoin.runtime.ray_calibrate import measure_messages

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    shipped = cost_model.default_profile()
    ping, raw = measure_messages()
    raw["relay_ns"] = measure_relay()
    relay = shipped.with_messages(relay_messages(ping, raw["relay_ns"]))
    machines = dict(zip(SIMULATED, (shipped, shipped.with_messages(ping), relay,
                                    relay.with_cpus(os.cpu_count())), strict=True))  # fmt: skip
    query, data = band_workload(args.tuples, args.window)
    sj.run(query, data.slice(0, 4 * args.batch), LAYOUTS["single"](args.index), batch_size=256,
           collect="count", progress=False)  # fmt: skip
    rows = []

    def record(layout, mode, backend, pace, out, chunk):
        row = {"layout": layout, "mode": mode, "backend": backend,
               "pace": pace or "", "chunk_rows": chunk, **out}  # fmt: skip
        rows.append(row)
        print(f"{layout:<11}{mode:<8}{backend:<19}{out['tuples_per_s']:>12,.0f} t/s  "
              f"p50 {out['p50_ms']:8.2f} ms  p99 {out['p99_ms']:8.2f} ms  "
              f"[{out['wall_s']:.1f} s, load {out['load_1min']:.1f}]", flush=True)  # fmt: skip

    for layout, make in LAYOUTS.items():
        topo = make(args.index)
        b = args.batch
        for backend in ("ray", "local"):
            runs = [measure(query, data, topo, backend, batch=b, chunk=b, pace=None)
                    for _ in range(args.repeat)]  # fmt: skip
            record(layout, "unpaced", backend, None, median_run(runs), b)
        for name, prof in machines.items():
            out = measure(query, data, topo, "sim", batch=b, chunk=b, pace=None, machine=prof)
            record(layout, "unpaced", name, None, out, b)
        ray_rate = next(r["tuples_per_s"] for r in rows
                        if r["layout"] == layout and r["mode"] == "unpaced" and r["backend"] == "ray")  # fmt: skip
        pace = float(round(args.pace_share * ray_rate, -2))
        chunk = max(1, int(pace * args.chunk_ms / 1000))
        paced = data.slice(0, int(pace * args.paced_seconds))
        for backend in ("ray", "local"):
            runs = [measure(query, paced, topo, backend, batch=chunk, chunk=chunk, pace=pace)
                    for _ in range(args.repeat)]  # fmt: skip
            record(layout, "paced", backend, pace, median_run(runs), chunk)
        for name, prof in machines.items():
            out = measure(query, paced, topo, "sim", batch=chunk, chunk=chunk, pace=pace,
                          machine=prof)  # fmt: skip
            record(layout, "paced", name, pace, out, chunk)
    free = shipped.with_messages(cost_model.MessageCosts())  # the compute costs alone
    raw["compute_only_single"] = measure(query, data, LAYOUTS["single"](args.index), "sim",
                                         batch=args.batch, chunk=args.batch, pace=None,
                                         machine=free)["tuples_per_s"]  # fmt: skip
    write(rows, args, machines, raw)


def ratios(rows: list[dict]) -> list[dict]:
    """Per layout and simulated machine: sim / ray for unpaced throughput and paced p50."""
    out = []
    get = {(r["layout"], r["mode"], r["backend"]): r for r in rows}
    for layout in LAYOUTS:
        ray_u, ray_p = get[(layout, "unpaced", "ray")], get[(layout, "paced", "ray")]
        for name in SIMULATED:
            sim_u, sim_p = get[(layout, "unpaced", name)], get[(layout, "paced", name)]
            out.append({"layout": layout, "machine": name,
                        "throughput_ratio": sim_u["tuples_per_s"] / ray_u["tuples_per_s"],
                        "p50_ratio": sim_p["p50_ms"] / ray_p["p50_ms"],
                        "paced_throughput_ratio": sim_p["tuples_per_s"] / ray_p["tuples_per_s"]})  # fmt: skip
    return out


def write(rows: list[dict], args, machines: dict, raw: dict) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    base = os.path.join(RESULTS, "sim_fidelity")
    with open(base + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    rat = ratios(rows)
    plot(rows, rat, base + ".png")
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
        f"commit `{commit_id()}` (working tree may differ); 1-minute load average during the "
        f"runs {min(loads):.1f}–{max(loads):.1f}; `python {' '.join(sys.argv)}`.",
        "",
        "Simulated machines (compute costs of the shipped profile "
        f"`{machines['sim'].name}` in all; message costs in µs, per-byte in ns/B):",
        "",
        "| machine | send | send/B | hop | receive | receive/B | processors |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for name in SIMULATED:
        c = machines[name].messages
        lines.append(f"| {name} | {c.send_ns / 1e3:.0f} | {c.send_per_byte_ns:.2f} "
                     f"| {c.hop_ns / 1e3:.0f} | {c.recv_ns / 1e3:.0f} "
                     f"| {c.recv_per_byte_ns:.2f} "
                     f"| {machines[name].cpus or 'one per actor'} |")  # fmt: skip
    relay = raw["relay_ns"]
    lines += [
        "",
        f"Measured now: tiny round trip {raw['rtt_ns'][8] / 1e3:.0f} µs; pipelined calls "
        f"driver → actor {raw['pipelined_ns_per_call'] / 1e3:.0f} µs each; through a relay "
        + ", ".join(f"{relay[k] / 1e3:.0f} µs at {k:,} B" for k in RELAY_SIZES)
        + " per message.",
        "",
        "## sim / ray (target: within 25%, i.e. 0.80–1.25)",
        "",
        "| layout | simulated machine | unpaced throughput | paced p50 latency "
        "| paced throughput |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rat:
        lines.append(f"| {r['layout']} | {r['machine']} | {r['throughput_ratio']:.2f} "
                     f"| {r['p50_ratio']:.2f} | {r['paced_throughput_ratio']:.2f} |")  # fmt: skip
    lines += ["", *explanation(rows, rat, machines, raw)]
    lines += [
        "",
        "## All runs",
        "",
        "| layout | mode | backend | input rate t/s | tuples/s | p50 ms | p99 ms | load |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['layout']} | {r['mode']} | {r['backend']} "
                     f"| {r['pace'] and format(r['pace'], ',.0f') or 'unpaced'} "
                     f"| {r['tuples_per_s']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} "
                     f"| {r['load_1min']:.1f} |")  # fmt: skip
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {base}.csv, .md, .png")


def explanation(rows: list[dict], rat: list[dict], machines: dict, raw: dict) -> list[str]:
    """Where the differences come from, with this run's figures."""
    get = {(r["layout"], r["mode"], r["backend"]): r for r in rows}
    by = {(r["layout"], r["machine"]): r for r in rat}
    shipped, relay, shared = SIMULATED[0], SIMULATED[2], SIMULATED[3]
    recv = machines[relay].messages.recv_ns / machines[shipped].messages.recv_ns

    def span(key: str, name: str) -> str:
        return "–".join(f"{by[(lay, name)][key]:.2f}" for lay in LAYOUTS)

    def within(name: str) -> str:
        ok = [lay for lay in LAYOUTS if 0.8 <= by[(lay, name)]["throughput_ratio"] <= 1.25]
        return ", ".join(ok) if ok else "none"

    gap = [get[(lay, "paced", "ray")]["p50_ms"] - get[(lay, "paced", shared)]["p50_ms"]
           for lay in LAYOUTS]  # fmt: skip
    return [
        "## What the differences come from",
        "",
        f"- **Ray's cost per message.** The shipped profile times calls from the driver to one "
        f"idle actor (`streamjoin calibrate`); a join core receives batches and sends pairs, "
        f"and through such a relay a message costs the receiver {recv:.1f}× the shipped "
        f"`recv_ns`. With the relay-measured costs, unpaced throughput sim / ray moves from "
        f"{span('throughput_ratio', shipped)} to {span('throughput_ratio', relay)} "
        "(single, split(2), grid(1, 2)). `ray_calibrate.measure_messages` should time a relay.",
        f"- **Processors.** The simulator gives every actor a processor; here Ray runs the "
        f"driver (emitter), the join actors, the collector and its own daemons on "
        f"{os.cpu_count()} CPUs. Sharing {os.cpu_count()} processors "
        f"(`MachineProfile.with_cpus`) brings unpaced throughput to "
        f"{span('throughput_ratio', shared)} ({within(shared)} within 25%). `local` runs "
        "everything in one process without messages, hence its higher throughput. Ray and "
        "the relay are measured minutes apart on a machine other jobs share: their ratio "
        "moves with the load (compare the load column below between runs).",
        f"- **Paced latency** stays {span('p50_ratio', shared)} of Ray's ("
        + ", ".join(f"{g:.1f}" for g in gap)
        + " ms short): the hop latency comes from a ping (half a round trip less the send) "
        "and the shared processors are modelled first come first served, without the time "
        "the OS and Ray's scheduler take to wake an actor process on a busy host, which "
        "every hop pays. The ping and relay figures themselves move by tens of percent "
        "from one run to the next.",
        "- **Unpaced latency** is not comparable: the simulator has no backpressure, so with "
        "the whole input arriving at once its queues hold all of it, while Ray's senders "
        "wait with 4 calls in flight.",
        "- **Compute costs** were calibrated on this machine under a load average of about 5 "
        f"(`machine_default.py`). Here `local` runs the emitter, the join core and the "
        f"collector of `single` one after another in one process at "
        f"{get[('single', 'unpaced', 'local')]['tuples_per_s']:,.0f} tuples/s, while the "
        f"profile's compute costs alone (messages free) let the join core by itself reach "
        f"{raw['compute_only_single']:,.0f}: "
        + (
            "at this run's load the kernels are faster than the profile says, and the "
            "(larger) message costs hide it."
            if get[("single", "unpaced", "local")]["tuples_per_s"] > raw["compute_only_single"]
            else "the profile's compute costs are not too high for this run's load."
        ),
    ]


def plot(rows: list[dict], rat: list[dict], path: str) -> None:
    plt = viz._pyplot()
    layouts = list(LAYOUTS)
    backends = ["ray", *SIMULATED, "local"]
    get = {(r["layout"], r["mode"], r["backend"]): r for r in rows}
    x = np.arange(len(layouts))
    width = 0.8 / len(backends)
    fig, axes = plt.subplots(1, 3, figsize=(15, 5))
    for k, backend in enumerate(backends):
        off = (k - (len(backends) - 1) / 2) * width
        axes[0].bar(x + off, [get[(lay, "unpaced", backend)]["tuples_per_s"] / 1e3
                              for lay in layouts], width, label=backend)  # fmt: skip
        axes[1].bar(x + off, [get[(lay, "paced", backend)]["p50_ms"] for lay in layouts],
                    width, label=backend)  # fmt: skip
    for j, name in enumerate(SIMULATED):  # colours as in the other panels
        sel = [r for r in rat if r["machine"] == name]
        w = 0.8 / (2 * len(SIMULATED))
        off = (2 * j - len(SIMULATED)) * w + w / 2
        axes[2].bar(x + off, [r["throughput_ratio"] for r in sel], w, color=f"C{j + 1}",
                    label=f"{name}: unpaced throughput")  # fmt: skip
        axes[2].bar(x + off + w, [r["p50_ratio"] for r in sel], w, color=f"C{j + 1}",
                    hatch="//", alpha=0.6, label=f"{name}: paced p50")  # fmt: skip
    axes[2].axhspan(0.8, 1.25, color="green", alpha=0.12, label="within 25%")
    axes[2].axhline(1.0, color="black", lw=0.8)
    axes[2].set_yscale("log")
    ticks = [t for t in (0.125, 0.25, 0.5, 0.8, 1.25, 2, 4, 8)
             if min(min(r["throughput_ratio"], r["p50_ratio"]) for r in rat) / 1.5 <= t
             <= 1.5 * max(max(r["throughput_ratio"], r["p50_ratio"]) for r in rat)]  # fmt: skip
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
