"""Calibration: measure this host into a :class:`~streamjoin.runtime.sim.profile.MachineProfile`.

:func:`calibrate` (``streamjoin calibrate``) measures the processors' share one and several
busy processes get (:func:`measure_cpu_share`), runs the join kernels (and the emitter on
every route at a run's chunk sizes, :func:`route_rows`) through the simulator with a
recording cost model that times every step, fits the coefficients by non-negative least
squares on relative error (:func:`fit_costs`), times the same kind of steps after an
idle gap for the after-idle costs (:func:`measure_after_idle`), measures what the fitted
costs miss on windows past the caches (:mod:`~streamjoin.runtime.sim.window_growth`), times
the ``ray`` executor's messages (framed batches over TCP between actors,
:mod:`streamjoin.runtime.sim.ray_messages`) for the message costs, and writes a profile JSON.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from streamjoin import indexes as registry
from streamjoin import sources, topologies
from streamjoin._version import __version__
from streamjoin.indexes.pim.shared import SHAREABLE
from streamjoin.query import CountWindow, Query, band, equal, greater, less
from streamjoin.roofline import cpu_times, steal_share
from streamjoin.runtime.result import machine_info
from streamjoin.runtime.run import run
from streamjoin.runtime.sim.arrival import Arrival
from streamjoin.runtime.sim.costs import CostModel
from streamjoin.runtime.sim.engine import Sim
from streamjoin.runtime.sim.host_profile import busy_reasons, store, with_source
from streamjoin.runtime.sim.profile import (
    FEATURES,
    FITTED_HELD,
    IdleCosts,
    MachineProfile,
    MessageCosts,
    default_profile,
)
from streamjoin.runtime.sim.variability import Variability
from streamjoin.runtime.sim.window_growth import (
    QUICK_WINDOWS,
    SECONDS,
    WINDOWS,
    measurable,
    measure_window_growth,
)


class _Recorder(CostModel):
    """Charges each step its measured host time and keeps ``(features, ns, workload)`` per
    cost group and index: the features are a call and the step's counter differences."""

    def __init__(self, profile: MachineProfile, skip: int = 3) -> None:
        super().__init__(profile)
        self.rows: dict[tuple, list] = {}
        self.skip = skip  # first steps of each actor run colder (caches, allocator)
        self.run = 0  # workload number, so each workload weighs the same in the fit

    def bind(self, logic):
        with warnings.catch_warnings():  # a cost key the base profile lacks is what we fit
            warnings.simplefilter("ignore")
            self.coefficients(logic)  # the logic counts what its cost group charges
        rows = self.rows.setdefault((logic.cost_group, logic.cost_key), [])
        seen = [0]
        # a shared-index core's thread waits for its merging threads when a merge phase must
        # end (the simulator's host settles merges at the next batch): their work, not the
        # step's, and charged to no step (their own processors)
        waited = [getattr(logic, "merge_wait_ns", 0)]

        def charge(kind, msg, before, after, wall_ns, threads=None):
            seen[0] += 1
            now = getattr(logic, "merge_wait_ns", 0)
            wall_ns -= now - waited[0]
            waited[0] = now
            if seen[0] > self.skip and kind != "eof":
                features = (1, *(a - b for a, b in zip(after, before, strict=True)))
                rows.append((features, wall_ns, self.run))
            return wall_ns

        return charge


#: Untimed runs of each topology's first workload before an index's workloads are timed
#: (:func:`_warm`).
WARM_RUNS = 2


def _warm(workloads: list) -> None:
    """Run the first workload of each topology in ``workloads`` :data:`WARM_RUNS` times,
    untimed. A process's first runs of a topology load its kernels as their steps first call
    them (an expiry's once the window has filled, a merge's at the first merge), and a
    shared-index core's also start its threads: its first two runs take several times a warm
    run's time, spread over steps the recorder keeps
    (``experiments/results/calibrate_check.md``)."""
    seen: set[str] = set()
    for query, data, topo, b, chunk in workloads:
        if topo.name in seen:
            continue
        seen.add(topo.name)
        for _ in range(WARM_RUNS):
            _recorded_run(_Recorder(default_profile()), query, data, topo, b, chunk)


def _recorded_run(recorder: CostModel, query, data, topo, batch: int, chunk: int) -> None:
    """Run ``topo`` on the simulator with ``recorder`` timing its steps (the arrival rate
    only orders them: each step costs its measured host time)."""
    run(
        query,
        data,
        topo,
        Sim(machine=recorder, arrival=Arrival.constant(1e6)),
        batch_size=batch,
        chunk_rows=chunk,
        collect="count",
        progress=False,
    )


def nnls(a: np.ndarray, b: np.ndarray, tol: float = 1e-12) -> np.ndarray:
    """Non-negative least squares ``min ||a x - b||, x >= 0`` (Lawson & Hanson's active set)."""
    n = a.shape[1]
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    a = a / norms  # scale columns so one tolerance fits features of any magnitude
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    for _ in range(3 * n):
        w = a.T @ (b - a @ x)
        if passive.all() or w[~passive].max() <= tol * max(1.0, np.abs(b).max()):
            break
        passive[np.argmax(np.where(passive, -np.inf, w))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if np.all(z[passive] > 0):
                x = z
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > tol
    return x / norms


def fit_costs(rows: list, names: tuple) -> tuple[dict, dict]:
    """Coefficients (ns per feature) minimising relative error over measured steps.

    ``rows`` are ``(features, measured ns, workload)``. Relative error, because a latency is a
    sum of small steps and a plain fit would be dominated by the largest ones; each workload
    weighs the same, or the many small steps of batch size 1 would drown the few large ones
    that reveal per-tuple costs. Steps off by more than 3× after a first fit (GC pauses,
    preemption on a shared host) are dropped and the fit repeated once.
    """
    x = np.array([f for f, _, _ in rows], dtype=np.float64)
    y = np.array([t for _, t, _ in rows], dtype=np.float64)
    run = np.array([r for _, _, r in rows])
    per_run = np.bincount(run)[run]
    keep = np.ones(len(y), dtype=bool)
    for _ in range(2):
        w = 1.0 / (np.maximum(y[keep], 1_000.0) * np.sqrt(per_run[keep]))
        coef = nnls(x[keep] * w[:, None], y[keep] * w)
        ratio = (x @ coef) / np.maximum(y, 1.0)
        keep = (ratio > 1 / 3) & (ratio < 3)
        if keep.sum() < len(names):
            break
    err = np.abs(x @ coef - y) / np.maximum(y, 1.0)
    quality = {
        "steps": len(y),
        "median_rel_error": float(np.median(err)),
        "p90_rel_error": float(np.percentile(err, 90)),
    }
    return {n: float(c) for n, c in zip(names, coef, strict=True)}, quality


def _workload(index: str, n: int, window: int, match: float, seed: int):
    """``(query, data)``: a band join at ``match`` rate over a count ``window`` (an equi-join
    for an index without range probes; SPO-Join's two-inequality join for ``po_join``), or
    None if ``index`` supports neither."""
    if index == "po_join":
        data = sources.inequality_workload(n, window, match, seed=seed)
        return Query(less("a") & greater("b"), window=CountWindow(window)), data
    cls = registry.get(index)
    band_ok = cls.unsupported(Query(band("x", 1), window=CountWindow(1)).predicate) is None
    if band_ok:
        data = sources.synthetic(n, low=0, high=1_000_000, seed=seed)
        x = data.column("x").to_numpy()
        eps = sources.band_for_match_rate(x, window=window, match_rate=match)
        query = Query(band("x", eps), window=CountWindow(window))
    else:
        data = sources.synthetic(n, low=0, high=max(1, int(window / match)), seed=seed)
        query = Query(equal("x"), window=CountWindow(window))
    return None if cls.unsupported(query.predicate) is not None else (query, data)


#: Steps of a calibration workload, at most (the batches of one actor's input): bounds the
#: small batches' runs, whose windows would otherwise fill a batch of 1 or 32 tuples at a time.
#: Every workload weighs the same in the fit (:func:`fit_costs`), whatever its steps: fits
#: from workloads of 800 steps met a 1,200-step recording's steps as closely as a second
#: 1,200-step recording's fit did, in two thirds of the time
#: (``experiments/results/calibrate_check.md``).
STEPS = 800
#: Those of a quick calibration.
QUICK_STEPS = 300


def _calibration_runs(index: str, quick: bool, seed: int):
    """``(query, data, topology, batch_size, chunk_rows)`` workloads spanning window sizes,
    batch sizes and match rates, so every feature varies independently enough to be fitted:
    on ``single(index)``, on PanJoin's workers and both handshake chains' cores (cost keys of
    their own: ``<index>:panjoin``, ``<index>:handshake``, ``<index>:handshake_ll``), and for
    an index threads can share on ``shared_index(1, index)``, whose costs are its own
    (``shared:<index>``)."""
    windows = (256, 4096) if quick else (256, 4096, FITTED_HELD // 2)
    if index == "nested_loop":  # its probes scan the window: 4096 separates the per-row cost,
        windows = windows[:2]  # and 16384 took a sixth of a calibration
    # batches past the default batch size (1024): a fit extrapolated to it predicts the
    # executor's throughput and latency worse (experiments/results/machine_profile.md)
    batches = (1, 32, 512) if quick else (1, 32, 512, 2048)
    for w in windows:
        for b in batches:
            for k, match in enumerate((0.5, 16.0)):
                steps = QUICK_STEPS if quick else STEPS  # per actor: bounds the run time
                n = int(min(3 * w + 4 * b, steps * b))
                workload = _workload(index, n, w, match, seed)
                if workload is None:
                    continue
                query, data = workload
                # varied chunk sizes, so the emitter's per-chunk and per-tuple costs separate
                chunk = max((1, 64, 1024)[(k + b + w) % 3], -(-n // steps))
                yield query, data, topologies.single(index), b, chunk
                if b > 1 and k == 0:
                    # a split core probes every tuple and stores half: on single() alone the
                    # tuples, probes and inserts move together and a fit cannot tell them apart
                    # (one match rate: the separation needs no second, and it bounds the time)
                    yield query, data, topologies.split(2, index), b, chunk
                if index in SHAREABLE:  # the shared core's own costs (cost key shared:<index>)
                    yield query, data, topologies.shared_index(1, index), b, chunk
                if b > 1 and index == "po_join":  # its stages, under the same coefficients
                    yield query, data, topologies.spo(2, merge_every=max(64, w // 4)), b, chunk
                elif b > 1:  # workers: the same kernels behind per-subwindow calls, own costs
                    yield query, data, topologies.panjoin(2, 4, index), b, chunk
                if b > 1 and k == 1 and index != "po_join":
                    # chains' cores: the kernels behind forwarding and acknowledging, own
                    # costs each variant (at the higher match rate, whose pairs vary most)
                    yield query, data, topologies.handshake(2, index), b, chunk
                    # the low-latency chain's at one batch a chunk, as a run hands them over:
                    # fitted at chunks of 64, its cores' row charged the check's steps less
                    # than they took (experiments/results/calibrate_check.md)
                    yield query, data, topologies.handshake(2, index, low_latency=True), b, b


#: Idle gap (s) before each step when :func:`measure_after_idle` times steps after idle time:
#: a paced stream's gap between chunks of ten milliseconds of input (the check's). The costs
#: still grow there: after 10 ms against after 5 ms, a join core's step cost 1.1–1.3 times as
#: much more and the emitter's twice as much, and a longer gap is charged as this one.
IDLE_GAP_S = 0.010
#: Shorter gaps at which :func:`measure_after_idle` measures how much of the after-idle cost
#: they already cost (``IdleCosts.ramp``): steps that waited a moment for a shared processor,
#: or a fast paced stream's gaps.
RAMP_GAPS_S = (0.0002, 0.001)


#: :class:`_GapRecorder` holds a gap for this many steps in a row and keeps the later half:
#: a step right after another actor's step that followed a gap starts colder than one in a
#: run of steps without any (drawn step by step, the gapless steps read 1.3–1.6× their hot
#: time here, and the after-idle costs came out at about half).
GAP_BLOCK = 8


class _GapRecorder(CostModel):
    """Charges each step its host time; once ``warm_rows`` input rows are in, sleeps before
    every step for a gap of ``gaps`` drawn at random for a block of :data:`GAP_BLOCK` steps
    (of whichever actors: this process asleep, others free to run; drawn, not in turn, so
    that no actor's steps keep meeting the same gap) and keeps the host time of each step in
    a block's later half per cost group and the block's gap: every step before it in the
    block followed the same gap, so a step without one runs hot, as the fitted kernels' steps
    do, and a step after one as a paced stream's do.

    With ``emitter`` the blocks are the emitter's steps alone, its rest comes right before
    its logic is called and only its steps are kept: a paced stream's driver calls the
    emitter as its pacing sleep ends, whereas a core on Ray first receives its message (a
    cost of its own), as a step here follows the simulator's own work after the sleep. (After
    10 ms, the emitter's logic took 1.3–2.1 times as much more with the rest right before
    it, here.)"""

    def __init__(
        self, profile: MachineProfile, warm_rows: int, gaps: tuple, seed: int, emitter=False
    ) -> None:
        super().__init__(profile)
        self.warm_rows, self.gaps, self.emitter = warm_rows, gaps, emitter
        self.rows_in = 0
        self.rng = random.Random(seed)
        self.gap: float | None = None  # the gap of the block under way (None: warming)
        self.at = 0  # steps of the block so far
        self.rest = 0.0  # (``emitter``) the rest before the emitter's coming step
        self.times: dict[str, dict[float, list]] = {}

    def bind(self, logic):
        group = logic.cost_group
        times = self.times.setdefault(group, {g: [] for g in self.gaps})
        if self.emitter and group != "emitter":
            return lambda kind, msg, before, after, wall_ns, threads=None: wall_ns
        timed = [0]
        if self.emitter:  # its rest right before its logic, which it times itself
            on_chunk = logic.on_chunk

            def rested(*args):
                if self.rest:
                    time.sleep(self.rest)
                t0 = time.perf_counter_ns()
                out = on_chunk(*args)
                timed[0] = time.perf_counter_ns() - t0
                return out

            logic.on_chunk = rested

        def charge(kind, msg, before, after, wall_ns, threads=None):
            if kind == "chunk":
                self.rows_in += len(msg)
            if self.rows_in > self.warm_rows and kind != "eof":
                if self.emitter and kind == "chunk":  # (its logic alone, the rest left out)
                    wall_ns = timed[0]
                if self.gap is not None and self.at >= GAP_BLOCK // 2:
                    times[self.gap].append(wall_ns)
                self.at += 1
                if self.gap is None or self.at == GAP_BLOCK:
                    self.gap, self.at = self.rng.choice(self.gaps), 0
                if self.emitter:
                    self.rest = self.gap
                elif self.gap:
                    time.sleep(self.gap)  # before the coming step
            return wall_ns

        return charge


def measure_after_idle(
    index: str = "bplus_tree",
    *,
    gap_s: float = IDLE_GAP_S,
    ramp_gaps_s: tuple[float, ...] = RAMP_GAPS_S,
    window: int = 16384,
    batches: tuple[int, ...] = (64, 512, 4096),
    steps: int = 30,
    rounds: int = 2,
    seed: int = 0,
    emitter_chunks: tuple[int, ...] = (2048,),
) -> tuple[IdleCosts, dict]:
    """Time steps after idle time against the same steps back to back: :class:`IdleCosts`.

    A band join at match rate 2 over a count ``window`` runs on ``single(index)`` for each
    batch size in ``batches`` and on ``panjoin(2, 4, index)`` for the middle one; once the
    windows are full, chunks of one batch each are stepped through every actor, in blocks of
    steps after a gap drawn from no gap, ``gap_s`` and the shorter gaps of ``ramp_gaps_s``
    (:class:`_GapRecorder`: about ``steps`` steps of each actor kept after each gap; one run
    fills the windows for every gap). The emitter's steps come from runs of their own, on
    ``single(index)`` and ``grid(2, 2, index)`` at chunks of each of ``emitter_chunks``
    tuples, whose blocks are its steps alone, each rest right before its logic as a paced
    source's. Per cost group and workload the medians give a step's host time hot and
    after each gap; a group's after-idle cost is the median of its
    differences over its workloads at ``gap_s`` (clipped at 0), and the ramp's share at a
    shorter gap is the median over groups and workloads of the difference there against the
    one at ``gap_s`` (clipped to [0, 1]). The runs alternate ``rounds`` times (the host is
    shared: medians over rounds). Host (wall) time, so it carries what other processes do to
    the caches while this one sleeps: the load of the moment (returned with the raw figures,
    ns per group and workload).
    """
    gaps = (0.0, *sorted(g for g in ramp_gaps_s if 0 < g < gap_s), gap_s)
    base = default_profile().with_messages(MessageCosts())
    layouts = [(f"single:{b}", topologies.single(index), b, False) for b in batches]
    mid = batches[len(batches) // 2]
    layouts.append((f"panjoin:{mid}", topologies.panjoin(2, 4, index), mid, False))
    # the emitter's own runs, its rest right before its logic: at a paced stream's chunks,
    # on one core's route and on a grid's, which copies every tuple into its part for R or S
    for c in emitter_chunks:
        layouts.append((f"single:{c}", topologies.single(index), c, True))
        layouts.append((f"grid:{c}", topologies.grid(2, 2, index), c, True))
    points: dict[tuple, list] = {}  # (group, workload) -> per round, the medians by gap
    load0 = os.getloadavg()[0]
    for _ in range(rounds):
        for name, topo, b, rested in layouts:
            warm = 2 * window + 2 * b
            # about ``steps`` kept after each gap: each block keeps its later half
            chunks = (2 * steps + 4) * len(gaps)
            workload = _workload(index, warm + chunks * b, window, 2.0, seed)
            if workload is None:
                raise ValueError(f"index {index!r} supports neither a band nor an equi-join")
            query, data = workload
            # every gap in turn within one run: the windows are filled once, not per gap
            rec = _GapRecorder(base, warm, gaps, seed, emitter=rested)
            _recorded_run(rec, query, data, topo, b, b)
            # the emitter's steps from its own runs, the others' from the rest
            found = {g: t for g, t in rec.times.items() if (g == "emitter") == rested}
            medians = [
                {g: float(np.median(t[gap] or [np.nan])) for g, t in found.items()} for gap in gaps
            ]
            for g in medians[0]:
                points.setdefault((g, name), []).append([m[g] for m in medians])
    raw = {
        f"{g}:{name}": {
            "hot_ns": float(np.nanmedian([r[0] for r in v])),
            "after_idle_ns": float(np.nanmedian([r[-1] for r in v])),
            "after_gap_ns": {
                f"{gap * 1e3:g} ms": float(np.nanmedian([r[k] for r in v]))
                for k, gap in enumerate(gaps[1:], 1)
            },
        }
        for (g, name), v in sorted(points.items())
    }
    extra: dict[str, list] = {}
    shares: dict[float, list] = {}
    for (g, _), v in points.items():
        full = float(np.nanmedian([r[-1] - r[0] for r in v]))
        if full != full:  # no step after one of the gaps (a group with very few steps)
            continue
        extra.setdefault(g, []).append(full)
        for k, gap in enumerate(gaps[1:-1], 1):
            if full > 0:
                part = float(np.nanmedian([r[k] - r[0] for r in v]))
                shares.setdefault(gap, []).append(min(1.0, max(0.0, part / full)))
    ramp = [(gap * 1e9, float(np.nanmedian(shares[gap]))) for gap in gaps[1:-1] if gap in shares]
    ramp.append((gap_s * 1e9, 1.0))
    for k in range(1, len(ramp)):  # a longer gap never costs less
        ramp[k] = (ramp[k][0], max(ramp[k][1], ramp[k - 1][1]))
    costs = IdleCosts(
        **{
            f"{g}_ns": max(0.0, float(np.median(extra[g]))) if g in extra else 0.0 for g in FEATURES
        },
        ramp=tuple(ramp),
    )
    return costs, {
        "gap_s": gap_s,
        "ramp_gaps_s": list(gaps[1:-1]),
        "index": index,
        "window": window,
        "steps": raw,
        "load_1min_start_end": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }


#: A busy process for :func:`measure_cpu_share`: spins for the given seconds, then prints
#: its process CPU time over its wall time.
_SPIN = """import sys, time
t = float(sys.argv[1])
w0, c0 = time.perf_counter(), time.process_time()
while time.perf_counter() - w0 < t:
    pass
print((time.process_time() - c0) / (time.perf_counter() - w0))
"""


def measure_cpu_share(
    cpus: int | None = None, *, seconds: float = 0.5, rounds: int = 3
) -> tuple[tuple[float, ...], dict]:
    """The share of a processor each of k busy processes gets on this host, k = 1 … ``cpus``.

    Starts k processes that spin for ``seconds`` and reports each one's CPU time over its
    wall time (median over the k), for each k, ``rounds`` times interleaved (median over
    rounds). On an idle host every share is about 1; where other work runs, the shares fall
    as k grows (with Linux's per-session group scheduling another session's busy job holds
    about its half of the processors whatever the number of threads on either side). For
    :attr:`MachineProfile.cpu_share`; a child of this process runs where its actors would
    (the ``ray`` executor's actors descend from the driver as well). Returns the shares and
    the raw figures (per k, every round's share, and the load average).
    """
    cpus = cpus or os.cpu_count() or 1
    load0 = os.getloadavg()[0]
    seen: dict[int, list] = {k: [] for k in range(1, cpus + 1)}
    for _ in range(rounds):
        for k in seen:
            procs = [
                subprocess.Popen(
                    [sys.executable, "-c", _SPIN, str(seconds)], stdout=subprocess.PIPE, text=True
                )
                for _ in range(k)
            ]
            seen[k].append(float(np.median([float(p.communicate()[0]) for p in procs])))
    share = tuple(min(1.0, round(float(np.median(v)), 3)) for v in seen.values())
    return share, {
        "by_busy": {str(k): [round(x, 3) for x in v] for k, v in seen.items()},
        "seconds": seconds,
        "load_1min_start_end": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }


#: The speed probe's workload: ``(index, tuples, window, match rate, batch)``: a band join on
#: ``single("bplus_tree")``, some milliseconds of join steps.
PROBE = ("bplus_tree", 20_000, 4096, 2.0, 512)


def speed_probe(repeats: int = 5) -> float:
    """How fast this host runs join steps now: the ns that :data:`PROBE`'s join steps take
    in this process (each step timed as a calibration times it, the median of ``repeats``).

    A calibration probes before and after each index's workloads and fits every workload's
    steps as if timed at the median speed over the indexes; the check probes around its
    rounds of Ray runs and runs the simulator with the profile's compute scaled to the
    host's speed then
    (:func:`~streamjoin.runtime.sim.fidelity.check`): a shared host's speed can drift by
    more within an hour than most effects a profile describes.
    """
    index, n, window, match, batch = PROBE
    query, data = _workload(index, n, window, match, seed=1)
    times = []
    for _ in range(repeats):
        recorder = _Recorder(default_profile().with_messages(MessageCosts()))
        _recorded_run(recorder, query, data, topologies.single(index), batch, batch)
        times.append(sum(ns for _, ns, _ in recorder.rows[("join", index)]))
    return float(np.median(times))


def _at_probed_speed(rows: list, probes: dict[int, float], reference: float) -> list:
    """``rows`` (features, ns, workload) with each workload's ns scaled from the speed its
    probe saw to ``reference`` (:func:`speed_probe`)."""
    return [(f, ns * reference / probes[run], run) for f, ns, run in rows]


def index_rows(index: str, quick: bool, seed: int, repeats: int) -> tuple[dict, float, int, float]:
    """Time one index's calibration workloads in this process: ``(rows, speed, count,
    seconds)``, the recorder's rows per cost group (``(features, ns, workload)``, the
    workloads numbered from 1), the mean of :func:`speed_probe` before and after them, how
    many there were and the seconds it all took."""
    return _timed_rows(list(_calibration_runs(index, quick, seed)), repeats)


#: Chunk sizes of the emitter's own workloads (:func:`route_rows`), each one batch: a run's
#: default batch (1,024) and a paced stream's chunks of a few thousand tuples.
ROUTE_CHUNKS = (256, 1024, 4096)


def _route_runs(quick: bool, seed: int):
    """Workloads for the emitter's steps on every route a topology gives it (one core, a
    split's, a grid's and the chains' splits of R from S, SPO-Join's broadcast) at chunks of
    :data:`ROUTE_CHUNKS`, one batch each, and a chunk cut into four batches: the index
    workloads' chunks mostly hold 64 tuples or fewer (the low-latency chain's one batch), and
    the emitter's per-tuple costs (stamping, a route's copies) are what a run's chunks of a
    thousand or more tuples cost."""
    window, steps = (512, 8) if quick else (4096, 40)
    shapes = [(1024, 1024)] if quick else [(c, c) for c in ROUTE_CHUNKS] + [(4096, 1024)]
    layouts = [
        ("bplus_tree", topologies.single("bplus_tree")),
        ("bplus_tree", topologies.split(2, "bplus_tree")),
        ("bplus_tree", topologies.grid(2, 2, "bplus_tree")),
        ("bplus_tree", topologies.handshake(2, "bplus_tree")),
        ("bplus_tree", topologies.handshake(2, "bplus_tree", low_latency=True)),
        ("po_join", topologies.spo(2, merge_every=window // 4)),
    ]
    for index, topo in layouts:
        for chunk, batch in shapes:
            workload = _workload(index, 2 * window + steps * chunk, window, 2.0, seed)
            if workload is not None:
                yield (*workload, topo, batch, chunk)


def route_rows(quick: bool, seed: int, repeats: int) -> tuple[dict, float, int, float]:
    """:func:`index_rows` for the emitter's own workloads (:func:`_route_runs`): its rows
    only (the join cores' steps there are the index fit's business)."""
    rows, speed, count, seconds = _timed_rows(list(_route_runs(quick, seed)), repeats)
    return {k: v for k, v in rows.items() if k[0] == "emitter"}, speed, count, seconds


def _timed_rows(workloads: list, repeats: int) -> tuple[dict, float, int, float]:
    """Time ``workloads`` in this process (:func:`index_rows`'s answer), after warming
    each topology's first one untimed."""
    t0 = time.perf_counter()
    recorder = _Recorder(default_profile().with_messages(MessageCosts()))  # host time only
    before = speed_probe(repeats)
    _warm(workloads)
    for query, data, topo, b, chunk in workloads:
        recorder.run += 1
        _recorded_run(recorder, query, data, topo, b, chunk)
    after = speed_probe(repeats)
    return recorder.rows, (before + after) / 2, len(workloads), time.perf_counter() - t0


def _time_indexes(names: list[str], quick: bool, seed: int, repeats: int, jobs: int):
    """Yield ``(index, index_rows(index, ...))`` for each of ``names``, in order: in this
    process with one job, else in ``jobs`` worker processes
    (:mod:`~streamjoin.runtime.sim.calibrate_worker`), one a thread of a pool, each given an
    index as it finishes one."""
    if jobs <= 1:
        speed_probe(1)  # loads the probe's kernels
        for index in names:
            yield index, index_rows(index, quick, seed, repeats)
        return
    mine = threading.local()  # each pool thread's worker process and its error output
    workers: list[subprocess.Popen] = []

    def in_worker(index: str) -> tuple[dict, float, int, float]:
        if not hasattr(mine, "worker"):
            err = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed with ``files``)
            mine.err = files.enter_context(err)
            mine.worker = subprocess.Popen(
                [sys.executable, "-m", "streamjoin.runtime.sim.calibrate_worker"]
                + [str(int(quick)), str(seed), str(repeats)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=mine.err,
                text=True,
            )
            workers.append(mine.worker)
        worker, err = mine.worker, mine.err
        try:
            worker.stdin.write(index + "\n")
            worker.stdin.flush()
            line = worker.stdout.readline()
        except BrokenPipeError:  # it ended before it read the name
            line = ""
        if not line:
            err.seek(0)
            raise RuntimeError(
                f"the calibration's worker process ended (exit code {worker.wait()}) without "
                f"its timings:\n{err.read()[-2000:]}"
            )
        return _rows_from_json(line)

    files = contextlib.ExitStack()  # the workers' error outputs
    pool = ThreadPoolExecutor(jobs)
    try:
        futures = [pool.submit(in_worker, index) for index in names]
        for index, future in zip(names, futures, strict=True):
            try:
                result = future.result()
            except Exception as e:
                raise RuntimeError(f"timing the kernels of index {index!r} failed") from e
            yield index, result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for worker in workers:  # each ends with its input
            with contextlib.suppress(BrokenPipeError), worker:
                pass
        files.close()


def rows_to_json(rows: dict, speed: float, count: int, seconds: float) -> str:
    """One line of JSON for :func:`index_rows`' result (a worker process's answer)."""
    groups = [[group, key, found] for (group, key), found in rows.items()]
    return json.dumps({"rows": groups, "speed": speed, "count": count, "seconds": seconds})


def _rows_from_json(line: str) -> tuple[dict, float, int, float]:
    d = json.loads(line)
    rows = {(g, k): [(tuple(f), ns, run) for f, ns, run in found] for g, k, found in d["rows"]}
    return rows, float(d["speed"]), int(d["count"]), float(d["seconds"])


class BusyHostError(RuntimeError):
    """A calibration saw a busy host and did not store its profile (``force=True`` stores
    it anyway); ``profile`` holds what it fitted, ``reasons`` what made the host busy."""

    def __init__(self, reasons: list[str], profile: MachineProfile) -> None:
        super().__init__(
            "the machine was busy while calibrating ("
            + "; ".join(reasons)
            + "): the profile would measure the other jobs as much as the kernels, so it was "
            "not stored; calibrate again on a quiet machine, or force it"
        )
        self.reasons = reasons
        self.profile = profile


def calibrate(
    path: str | os.PathLike | None = None,
    *,
    indexes: list[str] | None = None,
    ray: bool = True,
    quick: bool = False,
    seed: int = 0,
    name: str | None = None,
    idle_gap_s: float | None = IDLE_GAP_S,
    cache: bool = True,
    force: bool = False,
    window_growth: bool = True,
    progress: Callable[[str, float], None] | None = None,
    jobs: int | None = None,
) -> MachineProfile:
    """Measure this machine and return its :class:`MachineProfile`, stored as this host's
    (:mod:`~streamjoin.runtime.sim.host_profile`) and optionally written to ``path``.

    Parameters
    ----------
    path : path-like, optional
        Write the profile JSON here too.
    indexes : list of str, optional
        Window indexes to measure (default: every registered index).
    ray : bool
        Time the ``ray`` executor's messages for the message costs, and the spread of its
        hosts' steps and messages for the profile's ``variability``
        (:mod:`~streamjoin.runtime.sim.variability`) (starts a Ray instance with this host's
        CPUs if none is running); with False the message costs of :func:`default_profile`
        are kept, and the profile has no spread.
    quick : bool
        Fewer and smaller workloads (a few seconds per index; coarser fit).
    seed : int
    name : str, optional
        Profile name (default: the host name).
    idle_gap_s : float, optional
        Idle gap (s) at which :func:`measure_after_idle` times steps after idle time, on
        ``bplus_tree`` (or the first index measured, if that is not among them); with None
        the after-idle costs of :func:`default_profile` are kept.
    cache : bool
        Store the profile as this host's, where ``Sim()`` finds it (default True; only when
        every registered index was measured, so a partial profile never shadows the shipped
        one).
    force : bool
        Store (and write) the profile even if the host was busy.
    window_growth : bool
        Measure what each index's fitted costs miss on windows past the caches
        (:func:`~streamjoin.runtime.sim.window_growth.measure_window_growth`: 2^16 to 2^20
        tuples a stream, a few seconds an index; 2^15 when ``quick``); False keeps the
        profile without (its cores then charged as at the fitted windows, whatever their
        size).
    progress : callable, optional
        Called as ``progress(phase, seconds)`` when each phase ends (the processor share,
        each index's kernels, the emitter's routes, the fit, the after-idle costs, the window
        costs, the messages), with the seconds it took; the same figures go to
        ``info["conditions"]["phases"]``.
    jobs : int, optional
        How many indexes' kernels are timed at once, each in a process of its own (default:
        one per processor, at most one per index; 1 times them in this process). A join
        core's steps run on one processor and their data fits the caches, so one a
        processor they run as fast as alone (docs/simulator.md); the window costs, the
        after-idle costs and the messages are measured one at a time, on a host otherwise
        idle.

    Raises
    ------
    BusyHostError
        The host was busy (:func:`~streamjoin.runtime.sim.host_profile.busy_reasons`: load
        average at the start or before the Ray phase, stolen time, a busy process's share of
        a processor) and ``force`` is False:
        nothing was stored or written. The profile's ``info["conditions"]`` records them.

    The share of a processor that one and several busy processes get
    (:func:`measure_cpu_share`) is measured first, next to the kernel timings, whose
    conditions it describes. Before and after each index's workloads :func:`speed_probe`
    times a fixed join, and each workload's steps are fitted as if timed at the median over
    the indexes of the two probes' mean (kept as ``info["speed_probe_ns"]``, each index's in
    ``info["fit"]["speed"]``): a host that drifts during the fit does not bend the rows fitted
    while it was slow.

    Returns
    -------
    MachineProfile
        Its ``info`` holds the machine, the date and each group's fit quality (median and p90
        relative error of the fitted step times against the measured ones).
    """
    names = list(indexes) if indexes is not None else registry.names()
    for n in names:
        registry.get(n)
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"jobs={jobs!r}: the processes that time kernels at once, at least 1")
    t0, load0, stolen0 = time.perf_counter(), os.getloadavg()[0], cpu_times()
    phases: dict[str, float] = {}
    mark = [t0]

    def done(phase: str, seconds: float | None = None) -> None:
        """A phase ended: its seconds (by default, since the previous phase ended)."""
        now = time.perf_counter()
        if seconds is None:
            seconds, mark[0] = now - mark[0], now
            phases[phase] = round(seconds, 1)
        if progress is not None:
            progress(phase, seconds)

    base = default_profile()
    # the share of a processor the timed steps get, and what several busy processes get
    cpu_share, share_raw = (
        measure_cpu_share(seconds=0.2, rounds=1) if quick else measure_cpu_share()
    )
    done("processor share")
    # each index's workloads timed in a process of their own, ``jobs`` at once (the
    # speed probe before and after them): a join core's step runs on one processor
    rows: dict[tuple, list] = {}
    probes: dict[int, float] = {}  # each workload's speed
    by_index: dict[str, float] = {}
    repeats = 3 if quick else 5
    jobs = min(jobs or os.cpu_count() or 1, len(names))
    own: dict[str, float] = {}  # each index's own seconds

    def take(found: dict, speed: float, count: int) -> None:
        """One process's rows, their workloads numbered on from those taken before."""
        offset = len(probes)
        for key, timed in found.items():
            rows.setdefault(key, []).extend((f, ns, run + offset) for f, ns, run in timed)
        probes.update(dict.fromkeys(range(offset + 1, offset + count + 1), speed))

    for index, (found, speed, count, seconds) in _time_indexes(names, quick, seed, repeats, jobs):
        take(found, speed, count)
        by_index[index] = speed
        own[index] = round(seconds, 1)
        done(f"{index} kernels ({count} runs)", seconds)
    done(f"kernels ({jobs} {'index' if jobs == 1 else 'indexes'} at once)")
    # the emitter's steps at a run's chunk sizes, on every route (one process: few seconds)
    found, speed, count, _ = route_rows(quick, seed, repeats)
    take(found, speed, count)
    done(f"the emitter's routes ({count} runs)")
    reference = float(np.median(list(by_index.values())))
    quality = {
        "cpu_share": share_raw,
        "speed": {"by_index": {k: round(v) for k, v in by_index.items()}},
        "kernels": {"jobs": jobs, "seconds": own},
    }
    roles, index_costs = {}, {}
    for (group, index), found in sorted(rows.items(), key=str):
        if not found:
            continue
        coefs, q = fit_costs(_at_probed_speed(found, probes, reference), FEATURES[group])
        if group == "join":
            index_costs[index] = coefs
            quality[f"index:{index}"] = q
        else:
            roles[group] = coefs
            quality[group] = q
    for group in ("emitter", "manager", "collector"):
        roles.setdefault(group, base.roles[group])
    done("the fit")
    after_idle = base.after_idle
    if idle_gap_s is not None:
        index = "bplus_tree" if "bplus_tree" in names else names[0]
        if quick:
            after_idle, quality["after_idle"] = measure_after_idle(
                index,
                gap_s=idle_gap_s,
                seed=seed,
                window=4096,
                rounds=1,
                steps=20,
                emitter_chunks=(512,),
            )
        else:
            after_idle, quality["after_idle"] = measure_after_idle(
                index, gap_s=idle_gap_s, seed=seed
            )
        done("after-idle costs")
    windows = {}
    if window_growth:  # what the costs just fitted miss on windows past the caches
        grown = QUICK_WINDOWS if quick else WINDOWS
        t_grow = time.perf_counter()
        for index in names:
            if measurable(index) and index in index_costs:
                windows[index] = measure_window_growth(
                    index, index_costs[index], grown, seed, seconds=1.0 if quick else SECONDS
                )
        quality["window_growth"] = {
            "windows": list(grown),
            "seconds": round(time.perf_counter() - t_grow, 1),
        }
        done("window costs")
    # the load at the end is read before Ray's phase: its own processes (the relay, the sink,
    # the raylet, the object store) raise the 1-minute load on two processors past the limit
    # by themselves (a fit refused at 2.05 with nothing else running)
    load1 = os.getloadavg()[0]
    messages, variability = base.messages, Variability()
    if ray:
        from streamjoin.runtime.sim.ray_messages import measure_messages  # imports Ray

        messages, quality["messages"] = measure_messages()
        spread = quality["messages"]["spread"]
        variability = Variability(step=spread["step"], message=spread["message"])
        done("Ray's messages")
    profile = MachineProfile(
        name=name or os.uname().nodename,
        roles=roles,
        indexes=index_costs,
        messages=messages,
        after_idle=after_idle,
        windows=windows,
        cpu_share=cpu_share,
        variability=variability,
        info={
            "machine": machine_info(),
            "date": datetime.date.today().isoformat(),
            "streamjoin": __version__,
            "quick": quick,
            "fit": quality,
            # the host's speed the steps were fitted at (speed_probe)
            "speed_probe_ns": round(reference),
        },
    )
    steal = steal_share(stolen0, cpu_times())
    reasons = busy_reasons(max(load0, load1), steal, cpu_share[0], os.cpu_count() or 1)
    profile.info["conditions"] = {
        "seconds": round(time.perf_counter() - t0, 1),
        "load_1min_start_end": [round(load0, 2), round(load1, 2)],
        "steal": None if steal != steal else round(steal, 4),
        "cpu_share": list(cpu_share),
        "busy": reasons,
        "forced": bool(reasons) and force,
        "phases": phases,
    }
    if reasons and not force:
        raise BusyHostError(reasons, profile)
    if path is not None:
        profile.save(path)
    if cache and indexes is None:
        profile = with_source(profile, f"this host's cache {store(profile)}")
    return profile
