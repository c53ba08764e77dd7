"""PanJoin as a system (Pan & Jacobsen §V-C, Fig. 15) on the simulator, modelled beyond what the
simulator can hold, and scaled down on ``local`` and ``ray``.

The paper runs the whole PanJoin on a cluster of 2×20-core Xeon Gold 6148 nodes linked by 100
Gb/s InfiniBand: 16 worker nodes per stream, one subwindow each, count windows of 8M – 1G
tuples per stream, batches ``N_Bat`` of 32K and more, and reports 28.9M tuples/s (BI-Sort, W =
128M, S = 1), about 10M tuples/s at W = 1G, more than 1000x the low-latency handshake join and
SplitJoin with nested loops at W = 8M (about 5000x at 128M), and, inside Apache Storm, about 90%
of an engine whose workers do nothing.

Workload: two streams of uniform 32-bit integer keys, a band join ``|r.x - s.x| <= eps`` with
``eps`` for ``S`` matches per probe in a full subwindow (as in §V-A; the paper's Fig. 15a is
an equi-join at S = 1, which costs the subwindow stores the same search), count windows of W
per stream, ``panjoin(workers, subwindows, store)`` with each PanJoin subwindow one store of
``N_Sub = W / subwindows`` items and ``P = N_Sub / 128`` partitions (the paper's N_P = 128).
Throughput is the steady state's: two runs whose inputs share their first 3 W tuples, 3 W and 4
W long (longer for the nested-loop layouts with small windows, :func:`run_lengths`), all input
there at once; throughput = the tuples between the two lengths / the difference of their
simulated end times (the fill-up of the windows and the drain at the end cancel).

Sections, each with the paper's figure:

- ``batch`` (Fig. 15a): throughput against ``N_Bat``, S = 1;
- ``window`` (Fig. 15a's and 15d's W, 15d's workers): throughput against W and the number of
  workers, S = 1 and 64, ``N_Bat`` = 32K;
- ``selectivity`` (Fig. 15b, and 15c's share of the result traffic): throughput against S;
- ``baselines`` (Fig. 15e, 15f): PanJoin against ``split(n)`` (SplitJoin / ScaleJoin) and
  ``handshake(n, low_latency=True)`` with ``nested_loop`` cores, same W, same number of workers;
  the nested-loop layouts with the window scaled (each simulated window tuple charged as ``k``,
  see ``experiments/dpjoin_system.py``);
- ``storm`` (Fig. 15g, 15h): PanJoin against the same layout whose workers cost nothing (they
  receive their commands and drop them), the simulated analogue of the paper's "empty" Storm
  topology;
- ``measured``: the same comparison scaled down to what this 2-core machine runs (2 workers, W
  = 2^14) on ``local`` and ``ray``, beside ``sim`` with this machine's profile.

Machines: ``cluster``, the paper's network (100 Gb/s: 0.08 ns per byte to send and to receive,
1 µs per message each way and 2 µs in flight; assumed, the paper gives the bandwidth only) with
this machine's calibrated kernels, one thread per node (the paper probes with 8), no after-idle
cost; ``calibrated``, this host's profile as is (``streamjoin calibrate``'s, else the shipped
one; Ray TCP messages), a processor per actor. Each section names the profile.

**How far the simulator goes, and the model beyond.** The simulator runs the real joins: a
window of 2^27 tuples per stream needs the ~10 GB and the hours one takes on this machine
(shared by other jobs). The largest simulated window here is ``--max-window`` (2^22 per stream:
29M input tuples in the two runs). Beyond it the figures are *modelled*: :func:`model` writes out
the charges the simulator would make per batch (each actor's calls, tuples, probes, scan units
``log2(N_Sub + 1)`` per probe, pairs, inserts and messages, from the same profile) and takes the
busiest actor as the bound; the tables put it beside every simulated point it can be checked
against, and every modelled figure is labelled so.

Writes ``experiments/results/panjoin_system_<section>.csv`` per section and renders
``panjoin_system.{md,png}`` from every section's CSV present (``_quick`` with ``--quick``).

Run: ``python experiments/panjoin_system.py`` (about 1.5 hours on 2 shared cores; the
``measured`` section starts Ray: run it under the machine's Ray lock); ``--only batch,window``
for some sections, ``--render`` to redraw from the CSVs, ``--quick`` for a smoke run.

Why one file of ~1,050 lines: it is one paper section's reproduction, read end to end by
whoever checks a figure — the paper's figures and machine (top), the workload, the runs, the
model beyond the simulated windows (:func:`model`, checked against every simulated row) and
the report (from ``# -- the report``, about 40%) that puts each row beside the paper's value.
The report only reads the CSV rows the runs write; it stays here so that one file says how a
figure was made and how it was judged.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import numpy as np
import report

import streamjoin as sj
from streamjoin.actors.panjoin import WorkerCommand
from streamjoin.batch import Batch, PairBatch
from streamjoin.runtime import sim
from streamjoin.runtime.sim.host_profile import profile_for_this_host
from streamjoin.runtime.sim.profile import message_nbytes

SECTIONS = ("batch", "window", "selectivity", "baselines", "storm", "measured")
STORES = ("bisort", "rap_table", "wib_tree")
KEY_RANGE = 2.0**32
#: The paper's partition size N_P = N_Sub / P (§V-A4, Fig. 13: N_Sub 8M, P 64K).
PARTITION_SIZE = 128
#: Modelled windows (tuples per stream), up to the paper's 1G.
MODEL_WINDOWS = [2**k for k in range(16, 31, 2)] + [2**27]
#: What the paper reports, per section.
PAPER = {
    "batch": "Fig. 15a, W = 128M, 16 nodes per stream, equi-join S = 1: BI-Sort up to 28.9M "
    "tuples/s; RaP-Table ≈ 1.5x WiB+-Tree for N_Bat > 64K; larger batches are faster",
    "window": "Fig. 15d, W = 1G: BI-Sort ≈ 10M tuples/s; RaP-Table and WiB+-Tree 1-10x slower "
    "at S = 1, 10-100x at S = 64; more nodes do not always help (network-bound)",
    "selectivity": "Fig. 15b, N_Bat = 32K: RaP-Table and WiB+-Tree fall as S grows and overlap "
    "(data transfer > 60% of the time); Fig. 15c: receiving results > 90% of the time for "
    "S > 1K",
    "baselines": "Fig. 15e, W = 8M, 16 nodes: BI-Sort > 1000x the low-latency handshake join "
    "and SplitJoin (nested loops), RaP-Table and WiB+-Tree > 100x at small S; Fig. 15f, W = "
    "128M: BI-Sort ≈ 5000x",
    "storm": "Fig. 15g-h, N_Sub = 1M, inside Apache Storm: PanJoin ≈ 90% of the throughput of "
    "the same topology with empty subwindows",
    "measured": "(our own check, scaled down)",
}
PAPER_FIGURES = {"bisort_128M": 28.9e6, "bisort_1G": 10e6, "ratio_8M": 1000, "ratio_128M": 5000}
#: Message costs of the ``cluster`` machine (assumed, see the module docstring).
INFINIBAND = {
    "send_ns": 1_000.0,
    "send_per_byte_ns": 0.08,
    "hop_ns": 2_000.0,
    "recv_ns": 1_000.0,
    "recv_per_byte_ns": 0.08,
}
#: Scales: full and --quick.
SCALES = {
    "full": {
        "window": 2**18,
        "batches": [2**12, 2**14, 2**15, 2**16, 2**18],
        "windows": [2**16, 2**18, 2**20],
        "big_windows": [2**22],
        "workers": [16, 32, 64],
        "sel_window": 2**16,
        "selectivities": [1, 4, 16, 64],
        "base_windows": [2**18, 2**20, 2**23, 2**27],
        "nl_window": 2**13,
        "storm_window": 2**18,
        "measured_window": 2**14,
    },
    "quick": {
        "window": 2**14,
        "batches": [2**12, 2**14],
        "windows": [2**14],
        "big_windows": [],
        "workers": [16],
        "sel_window": 2**12,
        "selectivities": [1, 16],
        "base_windows": [2**14, 2**23],
        # 2^12: at 2^10 (4 stored batches of 512 per stream for 16 workers) most workers of
        # the low-latency handshake join hold nothing and it runs at 0.13 of nested_model
        "nl_window": 2**12,
        "storm_window": 2**14,
        "measured_window": 2**11,
    },
}
NESTED = ("split", "handshake_ll")


def cluster_machine() -> sim.MachineProfile:
    """This host's kernels (:func:`report.host_profile`) on the paper's network (module
    docstring)."""
    base = report.host_profile()
    return sim.MachineProfile.from_dict(
        {
            **base.to_dict(),
            "name": "the paper's cluster network (100 Gb/s) with this machine's kernels",
            "messages": INFINIBAND,
            "after_idle": {},
        }
    )


def machines() -> dict:
    return {"cluster": cluster_machine(), "calibrated": report.host_profile()}


def empty_workers(profile: sim.MachineProfile, store: str) -> sim.MachineProfile:
    """``profile`` whose ``store`` workers cost nothing but their messages."""
    d = profile.to_dict()
    d["indexes"] = {**d["indexes"], **dict.fromkeys(report.cost_keys(profile, store), {})}
    return sim.MachineProfile.from_dict(d)


def eps_for(selectivity: float, n_sub: int) -> float:
    """Band half-width for ``selectivity`` matches per probe in a full subwindow of uniform
    32-bit keys: ``(2 eps + 1) n_sub / 2^32 = S``."""
    return max(0.0, (selectivity * KEY_RANGE / n_sub - 1) / 2)


def store_options(store: str, n_sub: int) -> dict:
    """One store per PanJoin subwindow, ``P = N_Sub / 128`` partitions (leaves)."""
    p = max(1, n_sub // PARTITION_SIZE)
    if store == "bisort":
        return {"subwindow_size": n_sub, "partitions": p}
    if store == "rap_table":
        return {"subwindow_size": n_sub, "partitions": p, "domain": (0.0, KEY_RANGE)}
    return {"subwindow_size": n_sub, "leaf_width": max(2, round(n_sub / (p * math.log(2))))}


def layout(kind: str, store: str, workers: int, subwindows: int, window: int) -> sj.Topology:
    if kind == "panjoin":
        n_sub = -(-window // subwindows)
        return sj.topologies.panjoin(
            workers, subwindows, store, index_options=store_options(store, n_sub)
        )
    if kind == "split":
        return sj.topologies.split(workers, "nested_loop")
    return sj.topologies.handshake(workers, "nested_loop", low_latency=True)


def data_for(n: int, window: int, selectivity: float, subwindows: int, seed: int = 1):
    """``(query, data)``: ``n`` tuples of two uniform 32-bit key streams, S per subwindow."""
    rng = np.random.default_rng(seed)
    stream = (rng.random(n) < 0.5).astype(np.int8)
    data = {
        "stream": stream,
        "ts": np.arange(n, dtype=np.int64),
        "x": rng.integers(0, 2**32, n).astype(np.float64),
    }
    eps = eps_for(selectivity, -(-window // subwindows))
    return sj.Query(sj.band("x", eps), window=sj.CountWindow(window)), data


def run_lengths(kind: str, window: int, workers: int, batch: int) -> tuple[int, int]:
    """Input lengths of the two runs whose end times give the steady state: 3 W and 4 W.

    ``split`` and ``handshake(low_latency=True)`` store each whole batch at one worker, in
    turn, so their steady state repeats every ``workers · batch`` input tuples; with a window
    (per stream) below about ``workers · batch / 2`` (a batch holds both streams), a worker
    holds one batch at a time and is idle in between, and
    runs of 3 W and 4 W may end together (each worker's work is bounded by the window, not by
    the run). For them the runs go past the fill-up (2 W, both streams) by at least two
    periods and differ by whole periods, at least W tuples.
    """
    if kind == "panjoin":
        return 3 * window, 4 * window
    period = workers * batch
    span = -(-max(window, 2 * period) // period) * period
    first = max(3 * window, 2 * window + 2 * period)
    return first, first + span


def steady_throughput(
    profile, topo_args: tuple, window: int, selectivity: float, batch: int, sim_window=None
) -> dict:
    """Steady-state input tuples/s of one layout: two flooded runs of :func:`run_lengths`
    (module docstring). ``sim_window``: the window the kernels hold when it differs from
    ``window`` (the nested-loop layouts, scan charged ``window / sim_window`` times)."""
    kind, store, workers, subwindows = topo_args
    w = sim_window or window
    n1, n2 = run_lengths(kind, w, workers, batch)
    query, data = data_for(n2, w, selectivity, subwindows)
    topo = layout(kind, store, workers, subwindows, w)
    ends, wall, busy = [], 0.0, {}
    for n in (n1, n2):
        t0 = time.perf_counter()
        res = sj.run(
            query,
            {k: v[:n] for k, v in data.items()},
            topo,
            backend="sim",
            machine=profile,
            arrival=sim.Arrival.constant(1e12),
            batch_size=batch,
            chunk_rows=batch,
            collect="count",
            progress=False,
        )
        wall += time.perf_counter() - t0
        ends.append(res.metrics["elapsed_s"])
        busy = {
            a["role"]: max(busy.get(a["role"], 0.0), a["busy_share"])
            for a in res.metrics["actors"].values()
        }
        pairs = res.count
    if ends[1] <= ends[0]:
        raise ValueError(
            f"{kind} W={w}: the {n2}-tuple run ended no later than the {n1}-tuple one "
            f"({ends[1]} s, {ends[0]} s): the window is too small for a steady state"
        )
    return {
        "tuples_per_s": (n2 - n1) / (ends[1] - ends[0]),
        "pairs_per_input": pairs / n2,
        "busiest": max(busy, key=busy.get),
        "busy": ", ".join(f"{r} {b:.0%}" for r, b in busy.items()),
        "wall_s": wall,
    }


# -- the model beyond the simulated windows ------------------------------------------------


def zero_batch(n: int) -> Batch:
    """A batch of ``n`` tuples of one attribute, to size messages."""
    z = np.zeros(n, dtype=np.int64)
    return Batch(z, z.astype(np.int8), z, z, z, z, np.zeros((1, n)))


def zero_pairs(n: float) -> PairBatch:
    """``n`` result pairs, to size their message."""
    z = np.zeros(int(n), dtype=np.int64)
    return PairBatch(z, z, z)


def placement(workers: int, subwindows: int) -> tuple[int, int]:
    """``(held, receivers)`` in the steady state: the most live subwindows one worker holds
    (a worker probes a tuple once per subwindow of the other stream it holds, so with half the
    tuples from each stream it probes ``held / 2`` times per input tuple) and the most workers
    a batch's commands go to. The manager places each stream's chain round robin, R from
    worker 0 and S from worker 1 (:class:`~streamjoin.actors.panjoin.PanJoinManager`), with
    ``subwindows + 1`` live per stream (the newest filling while the oldest drains); the worst
    phase of the rotation counts."""
    held_most = receivers = 0
    for newest in range(workers):
        held = np.zeros(workers, dtype=int)
        for y in (0, 1):
            for j in range(subwindows + 1):
                held[(newest + y - j) % workers] += 1
        held_most = max(held_most, int(held.max()))
        receivers = max(receivers, int(np.count_nonzero(held)))
    return held_most, receivers


def model(profile, store: str, window: int, workers: int, subwindows: int, batch: int, s: float):
    """Modelled steady input tuples/s: the charges per batch of ``batch`` tuples (half R, half
    S) at each actor, from ``profile``, and the busiest actor as the bound.

    Emitter: a call, ``batch`` tuples in, one message sent. Manager: its receive, a call,
    ``batch`` tuples planned, a command to each worker holding a subwindow (the whole batch
    with its insert positions). Busiest worker: its command's receive, a call, a part call per
    subwindow probed, ``batch / 2`` probes per subwindow it holds of each stream, each charged
    ``log2(N_Sub + 1)`` scan units and ``S`` pairs, its share of the inserts, and the pairs'
    messages. Collector: every pair, the manager's in-batch pairs (the batch joined with
    itself: ``batch² / 4 · S / N_Sub``) among them.
    """
    n_sub = -(-window // subwindows)
    msgs = profile.messages
    tuples = zero_batch(batch)
    cmd = WorkerCommand(tuples, insert=[(0, np.zeros(batch // workers + 1, dtype=np.int64))])
    batch_bytes, cmd_bytes = message_nbytes(tuples), message_nbytes(cmd)
    held, receivers = placement(workers, subwindows)
    e, m, c = profile.roles["emitter"], profile.roles["manager"], profile.roles["collector"]
    j = profile.indexes[store]
    send = lambda nbytes: msgs.send_recv(nbytes)[0]  # noqa: E731
    recv = lambda nbytes: msgs.send_recv(nbytes)[1]  # noqa: E731
    emitter = e["calls"] + e["tuples_in"] * batch + e["msgs_out"] + send(batch_bytes)
    in_batch = batch * batch / 4 * s / n_sub  # R-S pairs inside one batch
    manager = (
        recv(batch_bytes)
        + m["calls"]
        + m["tuples"] * batch
        + m["pairs"] * in_batch
        + (m["msgs_out"] + send(cmd_bytes)) * receivers
        + send(message_nbytes(zero_pairs(in_batch)))
    )
    probes = held * batch / 2
    pairs = probes * s
    pair_bytes = message_nbytes(zero_pairs(int(pairs)))
    worker = (
        recv(cmd_bytes)
        + j["calls"]
        + j["part_calls"] * (held + 1)
        + j["tuples"] * batch
        + j["probes"] * probes
        + j["scan"] * probes * math.log2(n_sub + 1)
        + j["candidates"] * pairs
        + j["pairs"] * pairs
        + j["inserted"] * batch / workers
        + send(pair_bytes)
    )
    total_pairs = batch * subwindows * s + in_batch
    collector = c["calls"] * receivers + c["pairs"] * total_pairs + receivers * recv(pair_bytes)
    costs = {"emitter": emitter, "manager": manager, "worker": worker, "collector": collector}
    bound = max(costs, key=costs.get)
    return batch / costs[bound] * 1e9, bound


def nested_model(profile, kind: str, window: int, workers: int, batch: int) -> float:
    """Modelled tuples/s of ``split`` / ``handshake(low_latency=True)`` with nested loops:
    every worker scans its ``W / workers`` share of the opposite window for every tuple (the
    scan dominates from small windows on).

    Both layouts store each whole batch at one worker, in turn, so the shares are even only
    when every worker holds several batches of each stream. ``split`` broadcasts every batch
    to all workers, which queue it, so it keeps to the model even when they do not (simulated
    0.99 of it at W = 2^10, 16 workers, batches of 512). The low-latency handshake join passes
    each batch along the chain, so it goes at the pace of the workers that hold the most:
    simulated 0.13, 0.40–0.45 and 0.57–0.62 of the model at W = 2^10, 2^12 and 2^13 there,
    and it levels off at 0.71 from 2^14 to 2^15 (``cluster``): a cost the model leaves out
    (not investigated; the crossing log each batch also probes at its home is a candidate).
    """
    j = profile.indexes["nested_loop"]
    per_tuple = j["scan"] * window / workers + (j["calls"] + j["part_calls"]) / batch
    return 1e9 / per_tuple


# -- sections ------------------------------------------------------------------------------


def run_section(section: str, args, prov: report.Provenance) -> list[dict]:
    sc = SCALES["quick" if args.quick else "full"]
    profs = machines()
    rows: list[dict] = []
    host = report.profile_of(report.host_profile())  # what both machines are built on

    def point(machine, prof, store, window, workers, subwindows, batch, s, **extra) -> dict:
        kind = extra.pop("kind", "panjoin")
        sim_window = extra.pop("sim_window", None)
        row = {
            "machine": machine,
            "layout": kind,
            "store": store,
            "window": window,
            "workers": workers,
            "subwindows": subwindows,
            "batch": batch,
            "selectivity": s,
            "source": "simulated",
            "profile": host,
            **extra,
        }
        out = steady_throughput(
            prof, (kind, store, workers, subwindows), window, s, batch, sim_window
        )
        row.update(out)
        if kind == "panjoin":
            row["model_tuples_per_s"], row["model_bound"] = model(
                prof, store, window, workers, subwindows, batch, s
            )
        else:
            # ``prof`` already charges the scan ``window / sim_window`` times over
            row["model_tuples_per_s"] = nested_model(
                prof, kind, sim_window or window, workers, batch
            )
            row["model_bound"] = "worker"
        rows.append(row)
        prov.note()
        print(
            f"{section}: {machine} {kind} {store} W=2^{int(math.log2(window))} "
            f"workers={workers} batch={batch} S={s}: {out['tuples_per_s']:,.0f} t/s "
            f"(model {row['model_tuples_per_s']:,.0f}; {out['busy']}) [{out['wall_s']:.0f} s]",
            flush=True,
        )
        return row

    def modelled(machine, prof, store, window, workers, subwindows, batch, s, kind="panjoin"):
        if kind == "panjoin":
            tput, bound = model(prof, store, window, workers, subwindows, batch, s)
        else:
            tput, bound = nested_model(prof, kind, window, workers, batch), "worker"
        rows.append(
            {
                "machine": machine,
                "layout": kind,
                "store": store,
                "window": window,
                "workers": workers,
                "subwindows": subwindows,
                "batch": batch,
                "selectivity": s,
                "source": "modelled",
                "profile": host,
                "tuples_per_s": tput,
                "model_tuples_per_s": tput,
                "model_bound": bound,
            }
        )

    w = sc["window"]
    if section == "batch":
        for store in STORES:
            for b in sc["batches"]:
                point("cluster", profs["cluster"], store, w, 16, 15, b, 1)
            point("calibrated", profs["calibrated"], store, w, 16, 15, 2**15, 1)
            for b in [2**k for k in range(10, 24, 2)]:
                for machine, prof in profs.items():
                    modelled(machine, prof, store, 2**27, 16, 15, b, 1)
    elif section == "window":
        for s in (1, 64):
            for store in STORES:
                for window in sc["windows"] + (sc["big_windows"] if store == "bisort" else []):
                    if s == 64 and window > 2**16:
                        continue  # 1,024 pairs per input tuple: 0.5G pairs at 2^16 already
                    point("cluster", profs["cluster"], store, window, 16, 15, 2**15, s)
                for workers in sc["workers"]:
                    if s == 1 and workers != 16:  # 16 workers: the window sweep's points
                        point("cluster", profs["cluster"], store, w, workers, workers - 1, 2**15, s)
                    for window in MODEL_WINDOWS:
                        for machine, prof in profs.items():
                            modelled(machine, prof, store, window, workers, workers - 1, 2**15, s)
    elif section == "selectivity":
        ws = sc["sel_window"]
        for store in STORES:
            for s in sc["selectivities"]:
                row = point("cluster", profs["cluster"], store, ws, 16, 15, 2**15, s)
                row["result_share"] = result_share(profs["cluster"], row)
    elif section == "baselines":
        nl = sc["nl_window"]
        for window in sc["base_windows"]:
            for store in STORES:
                simulate = window <= w
                for machine, prof in profs.items():
                    if simulate:
                        point(machine, prof, store, window, 16, 15, 2**15, 1)
                    else:
                        modelled(machine, prof, store, window, 16, 15, 2**15, 1)
            for kind in NESTED:
                for machine, prof in profs.items():
                    k = window / nl
                    point(  # the PanJoin rows' match rate: 15 subwindows at S = 1
                        machine,
                        report.scaled_scan(prof, k),
                        "nested_loop",
                        window,
                        16,
                        1,
                        512,
                        15,
                        kind=kind,
                        sim_window=nl,
                        scale=k,
                    )
    elif section == "storm":
        ws = sc["storm_window"]
        for store in STORES:
            for machine, prof in profs.items():
                full = point(machine, prof, store, ws, 16, 15, 2**15, 1, variant="PanJoin")
                empty = point(
                    machine,
                    empty_workers(prof, store),
                    store,
                    ws,
                    16,
                    15,
                    2**15,
                    1,
                    variant="empty workers",
                )
                full["ratio_to_empty"] = full["tuples_per_s"] / empty["tuples_per_s"]
    elif section == "measured":
        rows = measured(args, sc, prov)
    return rows


def result_share(profile, row: dict) -> float:
    """Fig. 15c: the share of the busiest worker's modelled time that goes to its results
    (the pairs' charge and their messages)."""
    n_sub = -(-row["window"] // row["subwindows"])
    j = profile.indexes[row["store"]]
    probes = placement(row["workers"], row["subwindows"])[0] * row["batch"] / 2
    pairs = probes * row["selectivity"]
    result = j["pairs"] * pairs + profile.messages.send_recv(message_nbytes(zero_pairs(pairs)))[0]
    search = j["scan"] * probes * math.log2(n_sub + 1) + j["probes"] * probes
    return result / (result + search)


def measured(args, sc: dict, prov: report.Provenance) -> list[dict]:
    """PanJoin against the nested-loop layouts where this machine runs them: 2 workers,
    W = ``measured_window``, full speed, on ``ray`` and ``local`` (``--repeat`` runs,
    alternating, median), beside ``sim`` with this host's profile (``streamjoin
    calibrate``'s, else the shipped one, with a warning; each row says which) on this host's
    processors."""
    import ray

    w = sc["measured_window"]
    n = 4 * w
    cpus = os.cpu_count()
    plans = [("panjoin", store, 2, 4, 8192) for store in STORES] + [
        (kind, "nested_loop", 2, 1, 1024) for kind in NESTED
    ]
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    rows = []
    try:
        for kind, store, workers, subwindows, batch in plans:
            query, data = data_for(n, w, 1, subwindows)
            topo = layout(kind, store, workers, subwindows, w)
            runs: dict = {"ray": [], "local": []}
            shares = []
            for _ in range(args.repeat):
                for backend in ("ray", "local"):
                    if backend == "ray":
                        shares.append(sim.measure_cpu_share(cpus, seconds=0.3, rounds=1)[0])
                    load = prov.note()
                    res = sj.run(
                        query,
                        data,
                        topo,
                        backend=backend,
                        batch_size=batch,
                        collect="count",
                        progress=False,
                    )
                    runs[backend].append((res.metrics["input_tuples_per_s"], load))
            share = tuple(float(np.median([s[i] for s in shares])) for i in range(cpus))
            res = sj.run(
                query,
                data,
                topo,
                backend="sim",
                machine=profile_for_this_host().with_cpus(cpus, share),
                arrival=sim.Arrival.constant(1e12),
                batch_size=batch,
                chunk_rows=batch,
                collect="count",
                progress=False,
            )
            runs["sim, this host (2 processors)"] = [
                (res.metrics["input_tuples_per_s"], prov.loads[-1])
            ]
            profile_used = report.profile_note(res.metrics)
            for backend, got in runs.items():
                tput = [t for t, _ in got]
                rows.append(
                    {
                        "layout": kind,
                        "store": store,
                        "window": w,
                        "workers": workers,
                        "batch": batch,
                        "backend": backend,
                        "tuples_per_s": statistics.median(tput),
                        "min": min(tput),
                        "max": max(tput),
                        "runs": len(tput),
                        "load": statistics.median(ld for _, ld in got),
                        "sim_profile": profile_used,
                    }
                )
                print(f"measured {kind} {store} {backend}: {rows[-1]['tuples_per_s']:,.0f} t/s")
    finally:
        ray.shutdown()
    return rows


def csv_path(section: str, quick: bool) -> str:
    return os.path.join(
        report.results_dir(), f"panjoin_system_{section}{'_quick' if quick else ''}.csv"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    ap.add_argument("--quick", action="store_true", help="small windows, few points")
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


def _m(v: float) -> str:
    return f"{v / 1e6:.3g}M" if v >= 1e5 else f"{v:,.0f}"


def _p2(v: float) -> str:
    return f"2^{int(round(math.log2(v)))}"


def render(quick: bool, prov: report.Provenance) -> None:
    data = {
        s: report.load_rows(csv_path(s, quick))
        for s in SECTIONS
        if os.path.exists(csv_path(s, quick))
    }
    if not data:
        return
    suffix = "_quick" if quick else ""
    base = os.path.join(report.results_dir(), "panjoin_system" + suffix)
    plot(data, base + ".png")
    headline(data, base + "_headline.png")
    lines = [
        "# PanJoin as a system (§V-C, Fig. 15): simulated, modelled beyond, measured scaled down",
        "",
        "Every row says whether it is *simulated* (virtual time, exact joins, independent of "
        "this host's load), *modelled* (the profile's charges written out per batch, "
        "`model()` in `experiments/panjoin_system.py`; checked against every simulated point "
        "in the `model` column) or *measured* (`local`, `ray`). Input tuples/s, both streams; "
        "M = million. Machines: `cluster` = this machine's kernels on the paper's 100 Gb/s "
        "network, one thread per worker node; `calibrated` = this host's profile (Ray TCP "
        "messages). Each section names the profile both are built on.",
        "",
        "Each section's CSV records the commit, machine and load it ran with; this page was "
        "rendered by: " + prov.line(),
        "",
        f"![PanJoin system figures](panjoin_system{suffix}.png)",
        "",
    ]
    for section, rows in data.items():
        lines += WRITERS[section](rows)
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {base}.md, .png")


def _head(title: str, section: str, rows: list[dict]) -> list[str]:
    r = rows[0]
    return [
        f"## {title}",
        "",
        f"Paper: {PAPER[section]}.",
        "",
        f"Ran at commit `{r.get('commit', '?')}`, load average {r.get('load_start', 0):.1f} "
        f"(max {r.get('load_max', 0):.1f})"
        + (f"; built on the profile {r['profile']}." if "profile" in r else "."),
        "",
    ]


def _table(rows: list[dict], extra: tuple = ()) -> list[str]:
    cols = ["machine", "source", "layout", "store", "W", "workers", "N_Bat", "S", "tuples/s"]
    cols += ["model", "sim / model", "bound (model)", "busiest (simulated)", *extra]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        sim_ = r["source"] == "simulated"
        cells = [
            r["machine"],
            r["source"],
            r["layout"],
            r["store"],
            _p2(r["window"]),
            f"{r['workers']:.0f}",
            _p2(r["batch"]),
            f"{r['selectivity']:g}",
            _m(r["tuples_per_s"]),
            _m(r["model_tuples_per_s"]),
            f"{r['tuples_per_s'] / r['model_tuples_per_s']:.2f}" if sim_ else "",
            str(r["model_bound"]),
            str(r.get("busy", "")) if sim_ else "",
        ]
        cells += [
            f"{r[e]:.2f}" if isinstance(r.get(e), float) else str(r.get(e, "")) for e in extra
        ]
        out.append("| " + " | ".join(cells) + " |")
    return out


def write_batch(rows: list[dict]) -> list[str]:
    out = _head("Fig. 15a: throughput against the batch size, S = 1", "batch", rows)
    sim_rows = [r for r in rows if r["source"] == "simulated"]
    out += _table(sim_rows) + [""]
    mod = [r for r in rows if r["source"] == "modelled"]
    if mod:
        out += [
            f"Modelled at W = {_p2(mod[0]['window'])} (the paper's 128M), 32 workers, 16 "
            "subwindows per stream (N_Sub = 8M), tuples/s:",
            "",
            "| machine | store | "
            + " | ".join(_p2(b) for b in sorted({r["batch"] for r in mod}))
            + " |",
            "|---|---|" + "---:|" * len({r["batch"] for r in mod}),
        ]
        for (machine, store), sel in report.groups(mod, "machine", "store").items():
            sel.sort(key=lambda r: r["batch"])
            out.append(
                f"| {machine} | {store} | " + " | ".join(_m(r["tuples_per_s"]) for r in sel) + " |"
            )
        best = max(
            (r for r in mod if r["machine"] == "cluster" and r["store"] == "bisort"),
            key=lambda r: r["tuples_per_s"],
        )
        out += [
            "",
            f"- Modelled BI-Sort at W = 128M on `cluster`: up to {_m(best['tuples_per_s'])} "
            f"tuples/s (N_Bat {_p2(best['batch'])}, bound by the {best['model_bound']}); paper "
            "28.9M.",
            "",
        ]
    return out


def write_window(rows: list[dict]) -> list[str]:
    out = _head("Fig. 15d: throughput against the window and the workers", "window", rows)
    out += _table([r for r in rows if r["source"] == "simulated"]) + [""]
    mod = [r for r in rows if r["source"] == "modelled" and r["machine"] == "cluster"]
    for s in sorted({r["selectivity"] for r in mod}):
        sel = [r for r in mod if r["selectivity"] == s]
        windows = sorted({r["window"] for r in sel})
        out += [
            f"Modelled, `cluster`, S = {s:g}, N_Bat = 32K, tuples/s:",
            "",
            "| store | workers | " + " | ".join(_p2(w) for w in windows) + " |",
            "|---|---:|" + "---:|" * len(windows),
        ]
        for (store, workers), g in report.groups(sel, "store", "workers").items():
            get = {r["window"]: r["tuples_per_s"] for r in g}
            out.append(
                f"| {store} | {workers:.0f} | "
                + " | ".join(_m(get[w]) if w in get else "" for w in windows)
                + " |"
            )
        out.append("")
    gig = [r for r in mod if r["window"] == 2**30 and r["selectivity"] == 1]
    if gig:
        best = max(gig, key=lambda r: r["tuples_per_s"])
        out += [
            f"- Modelled at W = 1G (2^30), S = 1: best {best['store']} with {best['workers']:.0f}"
            f" workers, {_m(best['tuples_per_s'])} tuples/s (paper: BI-Sort ≈ 10M).",
            "",
        ]
    return out


def write_selectivity(rows: list[dict]) -> list[str]:
    out = _head("Fig. 15b-c: throughput against the selectivity", "selectivity", rows)
    out += _table(rows, extra=("result_share",)) + [""]
    out += [
        "`result_share`: the share of the busiest worker's modelled time spent on its results "
        "(copying the pairs out and sending them), the analogue of Fig. 15c.",
        "",
    ]
    return out


def write_baselines(rows: list[dict]) -> list[str]:
    out = _head(
        "Fig. 15e-f: PanJoin against SplitJoin and the low-latency handshake join",
        "baselines",
        rows,
    )
    out += _table(rows, extra=("scale",)) + [""]
    out += [
        "The nested-loop layouts run with a window of "
        f"{_p2(min(r['window'] / r.get('scale', 1) for r in rows if r['layout'] in NESTED))} "
        "tuples in the kernels, each scanned tuple charged `scale` times (the window of the "
        "row); batches of 512 (their per-batch cost is negligible beside the scan).",
        "",
        "| machine | W | best PanJoin store | PanJoin tuples/s | source | best nested loop "
        "| nested tuples/s | ratio | paper |",
        "|---|---|---|---:|---|---|---:|---:|---|",
    ]
    for (machine, window), sel in report.groups(rows, "machine", "window").items():
        pan = [r for r in sel if r["layout"] == "panjoin"]
        nest = [r for r in sel if r["layout"] in NESTED]
        if not pan or not nest:
            continue
        p = max(pan, key=lambda r: r["tuples_per_s"])
        q = max(nest, key=lambda r: r["tuples_per_s"])
        paper = {2**23: "> 1000x", 2**27: "≈ 5000x"}.get(int(window), "")
        out.append(
            f"| {machine} | {_p2(window)} | {p['store']} | {_m(p['tuples_per_s'])} "
            f"| {p['source']} | {q['layout']} | {_m(q['tuples_per_s'])} "
            f"| {p['tuples_per_s'] / q['tuples_per_s']:,.0f}x | {paper} |"
        )
    return out + [""]


def write_storm(rows: list[dict]) -> list[str]:
    out = _head("Fig. 15g-h: against an engine whose workers do nothing", "storm", rows)
    out += _table(rows, extra=("variant", "ratio_to_empty")) + [""]
    return out


def write_measured(rows: list[dict]) -> list[str]:
    out = _head("Scaled down on this machine: measured beside simulated", "measured", rows)
    w = rows[0]["window"]
    out += [
        f"Two workers, W = {_p2(w)} per stream, 4 W tuples handed over at full speed, S = 1 per "
        "subwindow; PanJoin with 4 subwindows per stream, batches of 8,192; the nested-loop "
        "layouts with batches of 1,024. `ray` and `local` measured (median, alternating); the "
        "`sim` row with this host's profile on its 2 processors.",
        "",
        f"Simulated with the profile {rows[0].get('sim_profile', 'shipped (not recorded)')}.",
        "",
        "| layout | store | backend | tuples/s | min | max | runs | load |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['layout']} | {r['store']} | {r['backend']} | {r['tuples_per_s']:,.0f} "
            f"| {r['min']:,.0f} | {r['max']:,.0f} | {r['runs']:.0f} | {r['load']:.1f} |"
        )
    out.append("")
    for backend in dict.fromkeys(r["backend"] for r in rows):
        sel = [r for r in rows if r["backend"] == backend]
        pan = max((r for r in sel if r["layout"] == "panjoin"), key=lambda r: r["tuples_per_s"])
        nest = max((r for r in sel if r["layout"] in NESTED), key=lambda r: r["tuples_per_s"])
        out.append(
            f"- {backend}: best PanJoin ({pan['store']}) / best nested loop ({nest['layout']}) "
            f"= {pan['tuples_per_s'] / nest['tuples_per_s']:,.0f}x at W = {_p2(w)}."
        )
    get = {(r["layout"], r["store"], r["backend"]): r["tuples_per_s"] for r in rows}
    for layout, store in dict.fromkeys((r["layout"], r["store"]) for r in rows):
        ray_ = get.get((layout, store, "ray"))
        sim2 = get.get((layout, store, "sim, this host (2 processors)"))
        if ray_ and sim2:
            out.append(f"- {layout} ({store}): sim (2 processors) / ray = {sim2 / ray_:.2f}.")
    return out + [""]


WRITERS = {
    "batch": write_batch,
    "window": write_window,
    "selectivity": write_selectivity,
    "baselines": write_baselines,
    "storm": write_storm,
    "measured": write_measured,
}


COLORS = {
    "bisort": "C0",
    "rap_table": "C1",
    "wib_tree": "C2",
    "split": "C3",
    "handshake_ll": "C4",
}


def plot(data: dict, path: str) -> None:
    """Every section's panel (``panjoin_system.png``)."""
    panels = [panel_batch, panel_window, panel_workers, panel_selectivity, panel_ratio]
    panels.append(panel_measured)
    report.figure(data, path, panels, (2, 3), (17, 10), 11)


def headline(data: dict, path: str) -> None:
    """Throughput against the window and the ratio to the nested loops, for the README."""
    report.figure(data, path, [panel_window, panel_ratio], (1, 2), (13, 5.2), 12)


def _lines(ax, rows: list[dict], x: str, name) -> None:
    """One line per (source, name(row)): simulated solid with dots, modelled dotted."""
    for (source, label), sel in report.groups(
        [{**r, "_name": name(r)} for r in rows], "source", "_name"
    ).items():
        sel.sort(key=lambda r: r[x])
        ax.plot(
            [r[x] for r in sel],
            [r["tuples_per_s"] for r in sel],
            "-o" if source == "simulated" else ":",
            color=COLORS[label],
            label=f"{label} ({source})",
        )


def panel_batch(ax, data: dict) -> None:
    """Fig. 15a: throughput against the batch size."""
    rows = [r for r in data.get("batch", []) if r["machine"] == "cluster"]
    _lines(ax, rows, "batch", lambda r: r["store"])
    ax.axhline(PAPER_FIGURES["bisort_128M"], color="k", ls="--", lw=1, label="paper: 28.9M")
    ax.set_xscale("log", base=2)
    ax.set(
        yscale="log",
        xlabel="batch size N_Bat (tuples)",
        ylabel="input tuples/s",
        title="Fig. 15a: S = 1, 16 workers, `cluster`\nsimulated at W 2^18, modelled at 2^27",
    )


def panel_window(ax, data: dict) -> None:
    """Fig. 15a/d: throughput against the window."""
    rows = [
        r
        for r in data.get("window", [])
        if r["machine"] == "cluster" and r["selectivity"] == 1 and r["workers"] == 16
    ]
    _lines(ax, rows, "window", lambda r: r["store"])
    ax.plot([2**27], [PAPER_FIGURES["bisort_128M"]], "k*", ms=14, label="paper: BI-Sort, 128M")
    ax.plot([2**30], [PAPER_FIGURES["bisort_1G"]], "kP", ms=12, label="paper: BI-Sort, 1G")
    ax.set_xscale("log", base=2)
    ax.set(
        yscale="log",
        xlabel="window W (tuples per stream)",
        ylabel="input tuples/s",
        title="Fig. 15a/d: S = 1, N_Bat 32K, 16 workers, `cluster`\n(dotted: modelled)",
    )


def panel_workers(ax, data: dict) -> None:
    """Fig. 15d: throughput against the workers at W = 1G (modelled)."""
    rows = [
        r
        for r in data.get("window", [])
        if r["machine"] == "cluster" and r["window"] == 2**30 and r["source"] == "modelled"
    ]
    workers = sorted({r["workers"] for r in rows})
    x = np.arange(len(workers))
    for i, store in enumerate(STORES):
        for s, hatch in ((1, ""), (64, "//")):
            get = {
                r["workers"]: r["tuples_per_s"]
                for r in rows
                if r["store"] == store and r["selectivity"] == s
            }
            ax.bar(
                x + (i - 1) * 0.28 + (-0.07 if s == 1 else 0.07),
                [get.get(w, 0) for w in workers],
                0.14,
                color=COLORS[store],
                hatch=hatch,
                label=f"{store}, S = {s}",
            )
    ax.axhline(PAPER_FIGURES["bisort_1G"], color="k", ls="--", lw=1, label="paper: BI-Sort 10M")
    ax.set_xticks(x, [f"{w:.0f}" for w in workers])
    ax.set(
        yscale="log",
        xlabel="workers",
        ylabel="input tuples/s",
        title="Fig. 15d: W = 1G, N_Bat 32K\n(modelled, `cluster`)",
    )


def panel_selectivity(ax, data: dict) -> None:
    """Fig. 15b: throughput against the selectivity."""
    rows = data.get("selectivity", [])
    _lines(ax, rows, "selectivity", lambda r: r["store"])
    ax.set_xscale("log", base=2)
    w = rows[0]["window"] if rows else 0
    ax.set(
        yscale="log",
        xlabel="selectivity S (matches per probe per subwindow)",
        ylabel="input tuples/s",
        title=f"Fig. 15b: N_Bat 32K, 16 workers, W {_p2(w) if w else ''}\n(simulated, `cluster`)",
    )


def panel_ratio(ax, data: dict) -> None:
    """Fig. 15e-f: the best PanJoin store over the best nested-loop layout, against W."""
    rows = [r for r in data.get("baselines", []) if r["machine"] == "cluster"]
    by_w = report.groups(rows, "window")
    xs, ys, kinds = [], [], []
    for (w,), sel in sorted(by_w.items()):
        pan = [r for r in sel if r["layout"] == "panjoin"]
        nest = [r for r in sel if r["layout"] in NESTED]
        if pan and nest:
            p = max(pan, key=lambda r: r["tuples_per_s"])
            xs.append(w)
            ys.append(p["tuples_per_s"] / max(r["tuples_per_s"] for r in nest))
            kinds.append(p["source"])
    ax.plot(xs, ys, "-", color="C0")
    for x, y, k in zip(xs, ys, kinds, strict=True):
        ax.plot(
            x,
            y,
            "o" if k == "simulated" else "s",
            color="C0",
            mfc="C0" if k == "simulated" else "white",
            ms=9,
        )
    ax.plot([], [], "o", color="C0", label="PanJoin simulated")
    ax.plot([], [], "s", color="C0", mfc="white", label="PanJoin modelled")
    ax.plot([2**23], [1000], "k*", ms=14, label="paper: > 1000x at 8M")
    ax.plot([2**27], [5000], "kP", ms=12, label="paper: ≈ 5000x at 128M")
    ax.set_xscale("log", base=2)
    ax.set(
        yscale="log",
        xlabel="window W (tuples per stream)",
        ylabel="best PanJoin / best nested loop",
        title="Fig. 15e-f: 16 workers, S = 1, `cluster`\n(nested loops simulated, window scaled)",
    )


def panel_measured(ax, data: dict) -> None:
    """Scaled down on this machine: measured beside simulated."""
    rows = data.get("measured", [])
    if not rows:
        ax.set(title="This machine: measured (pending)")
        return
    names = list(dict.fromkeys((r["layout"], r["store"]) for r in rows))
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    get = {(r["layout"], r["store"], r["backend"]): r["tuples_per_s"] for r in rows}
    width = 0.8 / len(backends)
    for i, b in enumerate(backends):
        ax.bar(
            np.arange(len(names)) + (i - (len(backends) - 1) / 2) * width,
            [get.get((lay, st, b), 0) for lay, st in names],
            width,
            label=b + (" (measured)" if b in ("ray", "local") else " (simulated)"),
        )
    ax.set_xticks(
        np.arange(len(names)), [st if lay == "panjoin" else lay for lay, st in names], fontsize=9
    )
    ax.set(
        yscale="log",
        ylabel="input tuples/s",
        title=f"This machine: 2 workers, W = {_p2(rows[0]['window'])}, full speed",
    )


if __name__ == "__main__":
    main()
