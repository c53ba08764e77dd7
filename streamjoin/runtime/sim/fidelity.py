"""``streamjoin calibrate --check``: the simulator against real Ray runs on this host.

For each layout of :data:`CHECK_LAYOUTS`, the same join runs on the ``ray`` backend and on
``sim`` with the profile under test, alternating, in two modes:

- *unpaced*: the input handed over as fast as the join takes it (on ``sim``, all of it at
  virtual time 0); throughput is compared;
- *paced*: the input at ``pace_share`` of Ray's unpaced throughput, a batch per
  ``chunk_ms`` of input; p50, p99 and mean latency are compared.

The mean is there because a p50 can sit on an edge: where a layout's cores do unequal work
for one batch (split(2)'s core that stores the batch and the one that only probes it, a grid's
rows), its pairs' latencies fall in two or more clusters, and a few pairs more on one side
move the p50 from one cluster to the other (Ray's runs move by as much from one run to the
next). The mean moves with the clusters, not across them.

The simulated machine is the profile with this host's processors shared by all actors, as
Ray's driver and actors share them here (``profile.with_cpus(os.cpu_count(), share)``, with
``share`` the processor share busy processes got right before the layout's first Ray run),
its compute scaled to the host's speed meanwhile: a fixed join timed before the first round
of Ray runs and after each against the same at the fit, the median of them
(:func:`~streamjoin.runtime.sim.calibrate.speed_probe`; the row's ``drift``), as a shared
host's speed drifts within the hour, and a probe of some 70 ms can meet a slow spell of a
second. Ray's runs go in rounds over the layouts, each round running every layout once, so
that a slow spell falls on one run of every layout rather than on every run of one: the
layouts are compared over the same minutes. Each row says how loaded the host was. A
layout's ``sim / ray`` ratio is the simulator's error for it on this host at this moment;
the fidelity target is 0.80–1.25. How far Ray's own figures move over the minutes a check
spans (:func:`ray_against_itself`) bounds how closely a check can agree.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import math
import os
import platform
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamjoin import sources, topologies
from streamjoin.checks import positive_int, positive_number
from streamjoin.query import CountWindow, Query, band, greater, less
from streamjoin.roofline import TICK_KINDS, processor_ticks
from streamjoin.runtime.run import run
from streamjoin.runtime.sim.arrival import Arrival
from streamjoin.runtime.sim.calibrate import measure_cpu_share, speed_probe
from streamjoin.runtime.sim.host_profile import cpu_model
from streamjoin.runtime.sim.profile import MachineProfile
from streamjoin.topologies.base import Topology

#: The layouts the check runs, by name: their topology and whether they take the two-inequality
#: query of SPO-Join (the others take a band join).
CHECK_LAYOUTS: dict[str, tuple[Callable[[], Topology], bool]] = {
    "single": (lambda: topologies.single("bplus_tree"), False),
    "split(2)": (lambda: topologies.split(2, "bplus_tree"), False),
    "grid(1, 2)": (lambda: topologies.grid(1, 2, "bplus_tree"), False),
    "grid(2, 2)": (lambda: topologies.grid(2, 2, "bplus_tree"), False),
    "handshake(2)": (lambda: topologies.handshake(2, "bplus_tree"), False),
    "handshake(2, low latency)": (
        lambda: topologies.handshake(2, "bplus_tree", low_latency=True),
        False,
    ),
    "panjoin(2, 4)": (lambda: topologies.panjoin(2, 4, "bplus_tree"), False),
    "spo(2)": (lambda: topologies.spo(2), True),
    "shared_index(1)": (lambda: topologies.shared_index(1), False),
    "shared_index(2)": (lambda: topologies.shared_index(2), False),
}
#: Arrival rate standing for "all input at once" on the simulator (tuples/s of virtual time).
FLOOD = 1e12
#: Tuples of the unpaced runs: a second or so on Ray on a 2-core VM. Shorter runs carry their
#: start-up (Ray's actors waking, the windows filling) on both sides, and not alike
#: (``experiments/results/calibrate_check.md`` compares the two lengths).
CHECK_TUPLES = 1_200_000
#: Ray runs of each layout in each mode (the median kept).
CHECK_REPEAT = 3


@dataclass(frozen=True)
class ActorFigures:
    """Where an unpaced run's time went at one actor: its busy seconds on Ray (wall time in
    its steps, descheduled time included) and its process's CPU seconds there when the
    backend reports them (None: the driver's, or not reported), and its busy seconds on the
    simulator (its steps' charges, messages' receive included). The steps alone, messaging
    left out: the CPU seconds of the thread that ran them on Ray, and their compute charges
    on the simulator (``step_cpu_s``; None where a run did not report it)."""

    actor: str
    ray_busy_s: float
    ray_cpu_s: float | None
    sim_busy_s: float
    ray_step_cpu_s: float | None = None
    sim_step_s: float | None = None


@dataclass(frozen=True)
class PacedFigures:
    """Where a paced batch's latency went at one actor: when its steps began and when they
    ended, ms after the newest tuple each handled arrived, how long a step took, and on Ray
    the CPU its thread took in a step (medians over its steps) and how long it waited for a
    processor from its previous step's end to this one's (the mean: most wait for none;
    :meth:`ActorStats.lag <streamjoin.runtime.trace.ActorStats.lag>`), in Ray's run of
    median p50 and on the simulator (nan where a run reported none)."""

    actor: str
    ray_start_ms: float
    ray_end_ms: float
    sim_start_ms: float
    sim_end_ms: float
    ray_cpu_ms: float = float("nan")
    ray_wait_ms: float = float("nan")
    ray_step_ms: float = float("nan")
    sim_step_ms: float = float("nan")


@dataclass(frozen=True)
class CheckRow:
    """One layout's figures: Ray's (median of ``repeat`` runs) and the simulator's, and per
    actor where the unpaced runs' time went (Ray's median run)."""

    layout: str
    ray_tuples_per_s: float
    sim_tuples_per_s: float
    pace: float
    ray_p50_ms: float
    sim_p50_ms: float
    ray_p99_ms: float
    sim_p99_ms: float
    cpu_share: tuple
    load_1min: float
    actors: tuple[ActorFigures, ...] = ()
    ray_elapsed_s: float = float("nan")
    sim_elapsed_s: float = float("nan")
    ray_mean_ms: float = float("nan")
    sim_mean_ms: float = float("nan")
    tuples: int = CHECK_TUPLES  # of the unpaced runs
    repeats: int = 3  # Ray runs in each mode, the median kept
    #: the speed probe over the profile's, the median of the probes around the Ray runs (a
    #: check's: before its first round and after each; a check before rounds: before,
    #: between and after the layout's runs) (above 1: the host was slower than when the
    #: profile was fitted; the simulator's compute was scaled by it), nan where the profile
    #: has no probe
    drift: float = float("nan")
    #: the lowest and the highest of those probes over the profile's
    drift_range: tuple[float, float] = (float("nan"), float("nan"))
    #: the processors' idle and softirq shares in Ray's median unpaced run (``ProcStat``):
    #: time no process used, and the kernel's delivery of loopback packets, which no
    #: process's CPU time counts; nan where not measured
    ray_idle: float = float("nan")
    ray_softirq: float = float("nan")
    #: what the simulator's unpaced run charged for the kernel's delivery of its messages
    #: (``MessageCosts.kernel_ns``: in the senders' busy time), seconds: beside
    #: ``ray_softirq``
    sim_kernel_s: float = float("nan")
    #: Ray's own spread over its ``repeats`` runs, max / min: unpaced throughput and paced
    #: p50 (nan where not measured): how far a layout's Ray figure moves from run to run
    ray_tp_spread: float = float("nan")
    ray_p50_spread: float = float("nan")
    #: per actor, where the paced runs' latency went
    paced_actors: tuple[PacedFigures, ...] = ()
    #: the check's first layout run again after the others (:func:`check`'s ``again``): not
    #: a layout of its own, but how far the same layout moves within one check
    again: bool = False

    @property
    def throughput_ratio(self) -> float:
        return self.sim_tuples_per_s / self.ray_tuples_per_s

    @property
    def p50_ratio(self) -> float:
        return self.sim_p50_ms / self.ray_p50_ms if self.ray_p50_ms else float("nan")

    @property
    def mean_ratio(self) -> float:
        return self.sim_mean_ms / self.ray_mean_ms if self.ray_mean_ms else float("nan")

    @property
    def p99_ratio(self) -> float:
        return self.sim_p99_ms / self.ray_p99_ms if self.ray_p99_ms else float("nan")


class ProcStat:
    """The machine's processor time by kind (``/proc/stat``'s first line: ``user``, ``nice``,
    ``system``, ``idle``, ``iowait``, ``irq``, ``softirq``, ``steal``) sampled every ``every``
    seconds in a thread while the ``with`` block runs, so that a run's window can be cut out
    afterwards (:meth:`shares`). The kernel counts in ticks (``USER_HZ``, commonly 100 a
    second), so a share over a run of a second on two processors is good to about 1%. Where
    there is no ``/proc/stat`` it samples nothing and :meth:`shares` is None."""

    KINDS = TICK_KINDS

    def __init__(self, every: float = 0.01) -> None:
        self.every = every
        self.samples: list[tuple[int, np.ndarray]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    read = staticmethod(processor_ticks)

    def _take(self) -> bool:
        counts = self.read()
        if counts is not None:
            self.samples.append((time.monotonic_ns(), counts))
        return counts is not None

    def _sample(self) -> None:
        while not self._stop.wait(self.every) and self._take():
            pass

    def __enter__(self) -> ProcStat:
        if self._take():  # the first and the last here: a window may span the whole block
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
            self._take()

    def shares(self, lo_ns: int, hi_ns: int) -> dict[str, float] | None:
        """Each kind's share of the processors' time between two ``time.monotonic_ns``
        instants (the counters interpolated linearly between samples); None without samples
        around both."""
        if len(self.samples) < 2 or not self.samples[0][0] <= lo_ns < hi_ns:
            return None
        if hi_ns > self.samples[-1][0]:
            return None
        t = np.array([s[0] for s in self.samples], dtype=np.float64)
        counts = np.stack([s[1] for s in self.samples])
        at = [
            np.array([np.interp(x, t, counts[:, k]) for k in range(counts.shape[1])])
            for x in (lo_ns, hi_ns)
        ]
        spent = at[1] - at[0]
        total = spent.sum()
        return dict(zip(self.KINDS, (spent / total).tolist(), strict=True)) if total > 0 else None


def workload(n: int, window: int, inequality: bool, seed: int = 1):
    """``(query, data)``: a band join at match rate 2, or SPO-Join's ``r.a < s.a AND r.b >
    s.b`` at about 2 matches a probe, over a count ``window``."""
    if inequality:
        data = sources.inequality_workload(n, window, 2.0, seed=seed)
        return Query(less("a") & greater("b"), window=CountWindow(window)), data
    data = sources.synthetic(n, low=0, high=10 * n, seed=seed)
    x, s = data.column("x").to_numpy(), data.column("stream").to_numpy()
    eps = sources.band_for_match_rate(x[s == 0], x[s == 1], window=window, match_rate=2)
    return Query(band("x", eps), window=CountWindow(window)), data


def _one(query, data, topo, backend, *, batch, chunk, pace, machine=None) -> dict:
    kw: dict = {"batch_size": batch, "chunk_rows": chunk, "collect": "count", "progress": False}
    if backend == "sim":
        kw |= {"machine": machine, "arrival": Arrival.constant(pace or FLOOD)}
    elif pace is not None:
        kw["pace"] = pace
    if pace is not None:
        kw["max_delay"] = 0.0  # every chunk is one batch
    m = run(query, data, topo, backend=backend, **kw).metrics
    return {
        "window_ns": m["window_ns"],
        "tuples_per_s": m["input_tuples_per_s"],
        "p50_ms": m["latency_ms"]["p50"],
        "p99_ms": m["latency_ms"]["p99"],
        "mean_ms": m["latency_ms"]["mean"],
        "elapsed_s": m["elapsed_s"],
        "actors": {
            a: (v["busy_s"], v.get("cpu_s"), v.get("step_cpu_s")) for a, v in m["actors"].items()
        },
        "lags": {a: v["lag_ms"] for a, v in m["actors"].items() if "lag_ms" in v},
        "kernel_s": sum(v.get("kernel_ns", 0) for v in m["actors"].values()) / 1e9,
    }


def _paced_figures(ray: dict, sim: dict) -> tuple[PacedFigures, ...]:
    """Per actor of Ray's paced run ``ray`` and the simulator's ``sim`` (``_one``'s), their
    steps' median lags."""
    nan = dict.fromkeys(("start_p50", "end_p50", "cpu_p50"), float("nan"))
    return tuple(
        PacedFigures(
            a,
            r["start_p50"],
            r["end_p50"],
            s["start_p50"],
            s["end_p50"],
            r["cpu_p50"],
            r.get("wait_mean", float("nan")),
            r.get("step_p50", float("nan")),
            s.get("step_p50", float("nan")),
        )
        for a in ray["actors"]
        for r, s in [(ray["lags"].get(a, nan), sim["lags"].get(a, nan))]
    )


@dataclass
class _RayRuns:
    """One layout's Ray runs in :func:`_ray_rounds`."""

    query: Query
    data: object
    topo: Topology
    share: tuple
    flood: list[dict] = dataclasses.field(default_factory=list)
    paced: list[dict] = dataclasses.field(default_factory=list)
    paced_input: tuple = ()  # (pace, chunk, tuples)
    shares: dict = dataclasses.field(default_factory=dict)  # ProcStat's, its median run
    load_1min: float = float("nan")

    @property
    def rate(self) -> float:
        return statistics.median(r["tuples_per_s"] for r in self.flood)

    @property
    def middle(self) -> dict:
        """The unpaced run of median throughput."""
        return sorted(self.flood, key=lambda r: r["tuples_per_s"])[len(self.flood) // 2]

    def median(self, key: str) -> float:
        return statistics.median(r[key] for r in self.paced)


def _ray_rounds(
    names: list[str],
    *,
    tuples: int,
    window: int,
    batch: int,
    pace_share: float,
    chunk_ms: float,
    paced_seconds: float,
    repeat: int,
    paced_inputs: dict[str, tuple] | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, _RayRuns], list[float]]:
    """The Ray runs of a check over ``names``, in rounds: each round runs every layout once,
    unpaced (``repeat`` rounds), then paced at a share of the layout's median unpaced rate
    (``repeat`` rounds; at ``paced_inputs[name]``'s pace, chunk and tuples where given). So
    each layout's median is taken over runs spread across the whole sitting, the other
    layouts' alike: a slow spell of the host falls on a run of every layout, not on all the
    runs of one. Returns the runs by layout and the speed probe before the first round and
    after each (the host's speed over the sitting); ``progress`` is told of each round as it
    ends. The first run starts Ray on this host's processors if none is running."""
    cpus = os.cpu_count() or 1
    runs: dict[str, _RayRuns] = {}
    for name in names:
        make, inequality = CHECK_LAYOUTS[name]
        query, data = workload(tuples, window, inequality)
        runs[name] = _RayRuns(query, data, make(), ())
    probes = [speed_probe()]
    with ProcStat() as stat:
        for k in range(repeat):
            for r in runs.values():
                if not k:  # the share of a processor busy processes get, before its runs
                    r.share = measure_cpu_share(cpus, seconds=0.3, rounds=1)[0]
                r.flood.append(
                    _one(r.query, r.data, r.topo, "ray", batch=batch, chunk=batch, pace=None)
                )
            probes.append(speed_probe())
            if progress is not None:
                progress(f"unpaced round {k + 1} of {repeat}")
    for name, r in runs.items():
        r.shares = stat.shares(*r.middle["window_ns"]) or {}
        r.paced_input = (paced_inputs or {}).get(name) or _paced_input(
            r.data, r.rate, pace_share, chunk_ms, paced_seconds
        )
    for k in range(repeat):
        for r in runs.values():
            pace, chunk, paced_data = r.paced_input
            r.paced.append(
                _one(r.query, paced_data, r.topo, "ray", batch=chunk, chunk=chunk, pace=pace)
            )
            r.load_1min = os.getloadavg()[0]
        probes.append(speed_probe())
        if progress is not None:
            progress(f"paced round {k + 1} of {repeat}")
    return runs, probes


def _planned(layouts: list[str] | None, **options: Any) -> tuple[list[str], Callable]:
    """The layouts named (every check layout by default; an unknown one is refused) and
    :func:`_ray_rounds` with ``options`` (the check's sizes, pace and ``repeat``)."""
    names = list(CHECK_LAYOUTS) if layouts is None else layouts
    unknown = [n for n in names if n not in CHECK_LAYOUTS]
    if unknown:
        raise ValueError(f"unknown layout(s) {unknown}; known: {list(CHECK_LAYOUTS)}")
    positive_int("repeat", options["repeat"])
    return names, functools.partial(_ray_rounds, **options)


def check(
    profile: MachineProfile,
    *,
    layouts: list[str] | None = None,
    tuples: int = CHECK_TUPLES,
    window: int = 2**13,
    batch: int = 1024,
    pace_share: float = 0.25,
    chunk_ms: float = 10.0,
    paced_seconds: float = 2.0,
    repeat: int = CHECK_REPEAT,
    report: Callable[[CheckRow], None] | None = None,
    progress: Callable[[str], None] | None = None,
    again: bool = True,
) -> list[CheckRow]:
    """Run each layout on Ray (``repeat`` times each mode, the median kept: Ray's figures vary
    by a third from run to run here), in rounds over the layouts (:func:`_ray_rounds`), and
    then once on the simulator with ``profile`` (module docstring); returns a
    :class:`CheckRow` per layout, each passed to ``report`` as it is simulated, and tells
    ``progress`` of each round of Ray runs. The first Ray run starts Ray on this host's
    processors if none is running.

    With ``again`` and two layouts or more, the first runs once more after the rounds, its
    runs back to back, as a row with ``again`` set: the same layout's ``sim / ray`` minutes
    apart, the precision a layout's ratio against another's can be known with in one check
    (:func:`table`)."""
    names, rounds = _planned(
        layouts,
        tuples=tuples,
        window=window,
        batch=batch,
        pace_share=pace_share,
        chunk_ms=chunk_ms,
        paced_seconds=paced_seconds,
        repeat=repeat,
    )
    cpus = os.cpu_count() or 1
    reference = profile.info.get("speed_probe_ns")
    sittings = [(rounds(names, progress=progress), False)]
    if again and len(names) > 1:
        sittings.append((rounds(names[:1]), True))
    rows = []
    for (runs, probes), repeated in sittings:
        # the host's speed over the rounds against the fit's: the simulator's compute is
        # scaled by the median (a probe takes some 70 ms; a slow spell of a second or two
        # must not scale the whole check)
        drifts = [p / reference if reference else float("nan") for p in probes]
        drift = statistics.median(drifts)
        for name, r in runs.items():
            machine = profile.with_cpus(cpus, r.share)
            if reference:  # the compute as fast as the host was meanwhile
                machine = machine.scaled(cpu=1 / drift)
            pace, chunk, paced_data = r.paced_input
            sim_flood, sim_paced = _simulated(
                r.query, r.data, paced_data, r.topo, machine, batch, chunk, pace
            )
            middle = r.middle
            row = CheckRow(
                layout=f"{name}, again" if repeated else name,
                ray_tuples_per_s=r.rate,
                sim_tuples_per_s=sim_flood["tuples_per_s"],
                pace=pace,
                ray_p50_ms=r.median("p50_ms"),
                sim_p50_ms=sim_paced["p50_ms"],
                ray_p99_ms=r.median("p99_ms"),
                sim_p99_ms=sim_paced["p99_ms"],
                ray_mean_ms=r.median("mean_ms"),
                sim_mean_ms=sim_paced["mean_ms"],
                cpu_share=tuple(round(float(v), 2) for v in r.share),
                load_1min=r.load_1min,
                actors=tuple(
                    ActorFigures(a, busy, cpu, sim_busy, step, sim_step)
                    for a, (busy, cpu, step) in middle["actors"].items()
                    for sim_busy, _, sim_step in [
                        sim_flood["actors"].get(a, (float("nan"), None, None))
                    ]
                ),
                ray_elapsed_s=middle["elapsed_s"],
                sim_elapsed_s=sim_flood["elapsed_s"],
                sim_kernel_s=sim_flood["kernel_s"],
                tuples=tuples,
                repeats=repeat,
                drift=drift,
                drift_range=(min(drifts), max(drifts)),
                ray_idle=r.shares.get("idle", float("nan")),
                ray_softirq=r.shares.get("softirq", float("nan")),
                ray_tp_spread=_spread([x["tuples_per_s"] for x in r.flood]),
                ray_p50_spread=_spread([x["p50_ms"] for x in r.paced]),
                paced_actors=_paced_figures(
                    sorted(r.paced, key=lambda x: x["p50_ms"])[len(r.paced) // 2], sim_paced
                ),
                again=repeated,
            )
            rows.append(row)
            if report is not None:
                report(row)
    return rows


def _paced_input(data, ray_rate, pace_share, chunk_ms, paced_seconds) -> tuple[float, int, object]:
    """``(pace, chunk, paced_data)`` of a layout's paced runs: ``pace_share`` of Ray's unpaced
    rate, a chunk (one batch) per ``chunk_ms`` of input, ``paced_seconds`` of input (at least
    20 chunks)."""
    pace = float(max(100.0, round(pace_share * ray_rate, -2)))
    chunk = max(1, int(pace * chunk_ms / 1000))
    paced_data = data.slice(0, min(len(data), max(20 * chunk, int(pace * paced_seconds))))
    return pace, chunk, paced_data


def _simulated(query, data, paced_data, topo, machine, batch, chunk, pace) -> tuple[dict, dict]:
    """The simulator's unpaced and paced runs of a check layout (``_one``'s figures)."""
    flood = _one(query, data, topo, "sim", batch=batch, chunk=batch, pace=None, machine=machine)
    paced = _one(
        query, paced_data, topo, "sim", batch=chunk, chunk=chunk, pace=pace, machine=machine
    )
    return flood, paced


@dataclass(frozen=True)
class SelfRow:
    """One layout's Ray figures in two passes over the check's layouts
    (:func:`ray_against_itself`), the first pass's then the second's: each the median of
    ``repeats`` runs, as a check's are, and the median of each pass's speed probes."""

    layout: str
    pace: float
    tuples_per_s: tuple[float, float]
    p50_ms: tuple[float, float]
    p99_ms: tuple[float, float]
    mean_ms: tuple[float, float]
    probe_ns: tuple[float, float]
    load_1min: tuple[float, float]
    repeats: int  # runs in each pass, each mode

    @staticmethod
    def _ratio(pair: tuple[float, float]) -> float:
        return pair[1] / pair[0] if pair[0] else float("nan")

    @property
    def throughput_ratio(self) -> float:
        return self._ratio(self.tuples_per_s)

    @property
    def p50_ratio(self) -> float:
        return self._ratio(self.p50_ms)

    @property
    def p99_ratio(self) -> float:
        return self._ratio(self.p99_ms)

    @property
    def mean_ratio(self) -> float:
        return self._ratio(self.mean_ms)

    @property
    def probe_ratio(self) -> float:
        """The host's speed probe in the second pass over the first (above 1: slower)."""
        return self._ratio(self.probe_ns)


def ray_against_itself(
    *,
    layouts: list[str] | None = None,
    tuples: int = CHECK_TUPLES,
    window: int = 2**13,
    batch: int = 1024,
    pace_share: float = 0.25,
    chunk_ms: float = 10.0,
    paced_seconds: float = 2.0,
    repeat: int = CHECK_REPEAT,
    progress: Callable[[str], None] | None = None,
) -> list[SelfRow]:
    """How far a check's reference moves against itself over the minutes a check spans: the
    Ray runs of :func:`check` (the same workloads, modes and rounds, ``repeat`` runs each,
    the median kept) over all ``layouts`` in a first pass, then over all of them again in a
    second, the second pass's paced runs at the first's pace. A model that matched every
    layout's Ray figures in the first pass exactly meets, in the second, what the second
    pass's figures over the first's (:class:`SelfRow`'s ratios; :func:`noise`) say: the
    precision one check can have on this host, where a check's layouts run minutes after its
    fit. Each pass's speed probes (before its first round and after each) give its
    ``probe_ns``, their median. ``progress`` is told of each round as it ends. The first
    run starts Ray on this host's processors if none is running."""
    names, rounds = _planned(
        layouts,
        tuples=tuples,
        window=window,
        batch=batch,
        pace_share=pace_share,
        chunk_ms=chunk_ms,
        paced_seconds=paced_seconds,
        repeat=repeat,
    )
    passes: list[tuple[dict[str, _RayRuns], list[float]]] = []
    for k in range(2):
        tell = None if progress is None else (lambda step, k=k: progress(f"pass {k + 1}: {step}"))
        paces = {n: r.paced_input for n, r in passes[0][0].items()} if k else None
        passes.append(rounds(names, paced_inputs=paces, progress=tell))

    (first, first_probes), (second, second_probes) = passes
    probe_ns = statistics.median(first_probes), statistics.median(second_probes)

    def pair(get: Callable[[_RayRuns], float], name: str) -> tuple[float, float]:
        return get(first[name]), get(second[name])

    return [
        SelfRow(
            layout=name,
            pace=first[name].paced_input[0],
            tuples_per_s=pair(lambda r: r.rate, name),
            p50_ms=pair(lambda r: r.median("p50_ms"), name),
            p99_ms=pair(lambda r: r.median("p99_ms"), name),
            mean_ms=pair(lambda r: r.median("mean_ms"), name),
            probe_ns=probe_ns,
            load_1min=pair(lambda r: r.load_1min, name),
            repeats=repeat,
        )
        for name in names
    ]


def noise(rows: list[SelfRow]) -> dict:
    """What :func:`ray_against_itself`'s rows say, counted as a check counts ``sim / ray``:
    on how many layouts the second pass's figures are within the check's band of the
    first's (throughput, p50, both; and throughput and mean latency), their ranges, and how
    far apart the layouts' throughput ratios lie (max / min − 1, a check's "a layout
    against another"); the same for the throughput ratios with the host's drift taken out
    (each times its layout's probe ratio, as a check scales the simulator by the probe).

    The counts are what a model that had matched the first pass exactly would read against
    the second. ``both_within_midway`` is the most a model that does not follow the host
    can read: one whose figures lie midway between the passes (their geometric mean) is
    within the band of both where the square root of each ratio is."""
    if not rows:
        raise ValueError("no rows")
    tp = np.array([r.throughput_ratio for r in rows])
    p50 = np.array([r.p50_ratio for r in rows])
    mean = np.array([r.mean_ratio for r in rows])
    steady = tp * np.array([r.probe_ratio for r in rows])
    return {
        "layouts": len(rows),
        "throughput_within": int(sum(_within(v) for v in tp)),
        "p50_within": int(sum(_within(v) for v in p50)),
        "both_within": int(sum(_within(a) and _within(b) for a, b in zip(tp, p50, strict=True))),
        "mean_within": int(sum(_within(a) and _within(b) for a, b in zip(tp, mean, strict=True))),
        "both_within_midway": int(
            sum(_within(a**0.5) and _within(b**0.5) for a, b in zip(tp, p50, strict=True))
        ),
        "throughput_ratios": (float(tp.min()), float(tp.max())),
        "p50_ratios": (float(np.nanmin(p50)), float(np.nanmax(p50))),
        "apart": float(tp.max() / tp.min() - 1),
        "drift_free_throughput_ratios": (float(steady.min()), float(steady.max())),
        "drift_free_apart": float(steady.max() / steady.min() - 1),
    }


def noise_lines(rows: list[SelfRow]) -> list[str]:
    """:func:`noise` in words."""
    f = noise(rows)
    n = f["layouts"]
    return [
        f"Ray against itself (the second pass over the first, each {_runs(rows[0].repeats)}"
        f"): within 0.80-1.25 on throughput and p50 on {f['both_within']} of {n} "
        f"layouts (throughput {f['throughput_within']}, p50 {f['p50_within']}; throughput "
        f"and mean {f['mean_within']}; a model midway between the passes "
        f"{f['both_within_midway']}); throughput {f['throughput_ratios'][0]:.2f}-"
        f"{f['throughput_ratios'][1]:.2f}, p50 {f['p50_ratios'][0]:.2f}-"
        f"{f['p50_ratios'][1]:.2f}; the layouts' throughput ratios {f['apart']:.0%} apart "
        f"({f['drift_free_apart']:.0%} with the host's drift taken out: "
        f"{f['drift_free_throughput_ratios'][0]:.2f}-{f['drift_free_throughput_ratios'][1]:.2f})",
    ]


def self_markdown(rows: list[SelfRow], seconds: float) -> str:
    """A results page for :func:`ray_against_itself`: the host, the rows and :func:`noise`."""
    lines = [
        "# Ray against itself on this host (`experiments/ray_against_itself.py`)",
        "",
        f"{datetime.datetime.now():%Y-%m-%d %H:%M}, {os.cpu_count()} processors "
        f"({cpu_model()}), {platform.platform()}; {seconds / 60:.1f} minutes. The Ray runs of "
        "`streamjoin calibrate --check` (its layouts, workloads and modes, each figure "
        f"{_runs(rows[0].repeats if rows else CHECK_REPEAT)}) over every layout, "
        "then over every layout again, the second pass's paced runs at the first's pace. "
        "`B / A`: the second pass's figure over the first's, what a model that had matched "
        "the first pass exactly would read in the second. `probe`: the speed probe's median "
        "around the layout's runs, second pass over first (above 1: the host slower).",
        "",
        "| layout | pace t/s | Ray t/s A | B | B / A | p50 ms A | B | B / A | p99 B / A "
        "| mean B / A | probe B / A | load A, B |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.layout} | {r.pace:,.0f} | {r.tuples_per_s[0]:,.0f} | "
            f"{r.tuples_per_s[1]:,.0f} | {r.throughput_ratio:.2f} | {r.p50_ms[0]:.2f} | "
            f"{r.p50_ms[1]:.2f} | {r.p50_ratio:.2f} | {r.p99_ratio:.2f} | "
            f"{r.mean_ratio:.2f} | {r.probe_ratio:.2f} | "
            f"{r.load_1min[0]:.1f}, {r.load_1min[1]:.1f} |"
        )
    return "\n".join([*lines, "", *(noise_lines(rows) if rows else []), ""])


def replay(
    rows: list[CheckRow],
    profile: MachineProfile,
    *,
    reference_ns: float | None,
    cpus: int,
    window: int = 2**13,
    batch: int = 1024,
    chunk_ms: float = 10.0,
    paced_seconds: float = 2.0,
    report: Callable[[CheckRow], None] | None = None,
) -> list[CheckRow]:
    """The rows of a past check with the simulator's side run again on ``profile``: its Ray
    figures as they were, each layout simulated at the pace, processor share and host speed
    recorded (``drift`` against ``reference_ns``, the checked profile's speed probe,
    re-referred to ``profile``'s own), on the ``cpus`` of the host checked. No Ray run: a
    model or profile change is tried against the same Ray runs, deterministically."""
    new_reference = profile.info.get("speed_probe_ns")
    out = []
    for row in rows:
        make, inequality = CHECK_LAYOUTS[row.layout.removesuffix(", again")]
        topo = make()
        query, data = workload(row.tuples, window, inequality)
        chunk = max(1, int(row.pace * chunk_ms / 1000))
        paced_data = data.slice(0, min(len(data), max(20 * chunk, int(row.pace * paced_seconds))))
        machine = profile.with_cpus(cpus, row.cpu_share)
        drift = row.drift
        if reference_ns and new_reference and not math.isnan(drift):
            drift = drift * reference_ns / new_reference  # the host's speed over this profile's
            machine = machine.scaled(cpu=1 / drift)
        flood, paced = _simulated(query, data, paced_data, topo, machine, batch, chunk, row.pace)
        new = dataclasses.replace(
            row,
            sim_tuples_per_s=flood["tuples_per_s"],
            sim_p50_ms=paced["p50_ms"],
            sim_p99_ms=paced["p99_ms"],
            sim_mean_ms=paced["mean_ms"],
            sim_elapsed_s=flood["elapsed_s"],
            sim_kernel_s=flood["kernel_s"],
            drift=drift,
            actors=tuple(
                dataclasses.replace(
                    a,
                    sim_busy_s=flood["actors"].get(a.actor, (float("nan"), None, None))[0],
                    sim_step_s=flood["actors"].get(a.actor, (float("nan"), None, None))[2],
                )
                for a in row.actors
            ),
            paced_actors=tuple(
                dataclasses.replace(
                    a,
                    sim_start_ms=lag.get("start_p50", float("nan")),
                    sim_end_ms=lag.get("end_p50", float("nan")),
                    sim_step_ms=lag.get("step_p50", float("nan")),
                )
                for a in row.paced_actors
                for lag in [paced["lags"].get(a.actor, {})]
            ),
        )
        out.append(new)
        if report is not None:
            report(new)
    return out


def save_rows(path: str | os.PathLike, rows: list[CheckRow], profile: MachineProfile) -> None:
    """Write a check's rows as JSON, with what :func:`replay` needs to simulate them again:
    the host's processors and the checked profile's speed probe."""
    with open(path, "w") as f:
        json.dump(
            {
                "cpus": os.cpu_count() or 1,
                "reference_ns": profile.info.get("speed_probe_ns"),
                "profile": profile.name,
                "sharing": profile.sharing,
                "date": f"{datetime.datetime.now():%Y-%m-%d %H:%M}",
                "rows": [dataclasses.asdict(r) for r in rows],
            },
            f,
            indent=1,
        )
        f.write("\n")


def load_rows(path: str | os.PathLike) -> tuple[list[CheckRow], dict]:
    """The rows :func:`save_rows` wrote, and the rest of what it wrote (``cpus``,
    ``reference_ns``, ``profile``, ``date``); a ``ValueError`` naming the file if it holds
    no check."""
    try:
        with open(path) as f:
            d = json.load(f)
        rows = [
            CheckRow(
                **{
                    **r,
                    "cpu_share": tuple(r["cpu_share"]),
                    "drift_range": tuple(r["drift_range"]),
                    "actors": tuple(ActorFigures(**a) for a in r["actors"]),
                    "paced_actors": tuple(PacedFigures(**a) for a in r["paced_actors"]),
                }
            )
            for r in d["rows"]
        ]
        for r in rows:  # what the simulator's runs are built from
            positive_int("tuples", r.tuples)
            positive_number("pace", r.pace, "rate in tuples/s")
            for share in r.cpu_share:
                positive_number("cpu_share", share)
        positive_int("cpus", d["cpus"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{os.fspath(path)}: not the rows of a check ({e})") from None
    unknown = {r.layout.removesuffix(", again") for r in rows} - set(CHECK_LAYOUTS)
    if unknown:
        raise ValueError(f"{os.fspath(path)}: unknown layout(s) {sorted(unknown)}")
    return rows, {k: v for k, v in d.items() if k != "rows"}


#: The check's band: a ``sim / ray`` ratio within it is a layout met.
WITHIN = (0.8, 1.25)


def _within(ratio: float) -> bool:
    return WITHIN[0] <= ratio <= WITHIN[1]


def _spread(values: list[float]) -> float:
    """max / min of ``values`` (nan where there is nothing to compare)."""
    low = min(values, default=0.0)
    return max(values) / low if low > 0 else float("nan")


def table(rows: list[CheckRow]) -> str:
    """The rows as a text table, with how many are within 0.80–1.25 and the spread of the
    layouts' throughput ratios against one another; with a row run ``again``, how far that
    layout's ratios moved from its first run (the same comparison with itself)."""
    head = (
        f"{'layout':<26}{'ray t/s':>11}{'sim t/s':>11}{'sim/ray':>8}"
        f"{'pace':>10}{'p50 ray':>9}{'sim':>8}{'ratio':>7}{'p99 ray':>9}{'sim':>8}{'ratio':>7}"
        f"{'mean ray':>9}{'sim':>8}{'ratio':>7}{'share':>11}{'drift':>6}{'load':>6}"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"{r.layout:<26}{r.ray_tuples_per_s:>11,.0f}{r.sim_tuples_per_s:>11,.0f}"
            f"{r.throughput_ratio:>8.2f}{r.pace:>10,.0f}{r.ray_p50_ms:>9.2f}{r.sim_p50_ms:>8.2f}"
            f"{r.p50_ratio:>7.2f}{r.ray_p99_ms:>9.2f}{r.sim_p99_ms:>8.2f}{r.p99_ratio:>7.2f}"
            f"{r.ray_mean_ms:>9.2f}{r.sim_mean_ms:>8.2f}{r.mean_ratio:>7.2f}"
            f"{'/'.join(f'{v:.2f}' for v in r.cpu_share):>11}{r.drift:>6.2f}{r.load_1min:>6.1f}"
        )
    repeated = [r for r in rows if r.again]
    rows = [r for r in rows if not r.again]
    if rows:
        within = [r.layout for r in rows if _within(r.throughput_ratio) and _within(r.p50_ratio)]
        by_mean = [r.layout for r in rows if _within(r.throughput_ratio) and _within(r.mean_ratio)]
        tp = np.array([r.throughput_ratio for r in rows])
        p99 = np.array([r.p99_ratio for r in rows])
        tails = sum(_within(v) for v in p99)
        lines.append(
            f"within 0.80-1.25 on throughput and p50: {len(within)} of {len(rows)} layouts"
            f"{' (' + ', '.join(within) + ')' if within else ''}; on throughput and mean "
            f"latency: {len(by_mean)} of {len(rows)}; throughput ratios "
            f"{tp.min():.2f}-{tp.max():.2f} (a layout against another: off by up to "
            f"{tp.max() / tp.min() - 1:.0%}); p99 within on {tails} of {len(rows)} "
            f"({np.nanmin(p99):.2f}-{np.nanmax(p99):.2f})"
        )
        spreads = [(r.ray_tp_spread, r.ray_p50_spread) for r in rows if r.repeats > 1]
        if spreads and not np.isnan(spreads[0][0]):
            lines.append(
                f"Ray's own runs (max / min over {rows[0].repeats} a layout): throughput "
                f"{min(t for t, _ in spreads):.2f}-{max(t for t, _ in spreads):.2f}, "
                f"p50 {min(p for _, p in spreads):.2f}-{max(p for _, p in spreads):.2f}"
            )
        lows = [r.drift_range[0] for r in rows if not math.isnan(r.drift_range[0])]
        if lows:
            high = max(r.drift_range[1] for r in rows if not math.isnan(r.drift_range[1]))
            lines.append(
                f"The host's speed over the check (the speed probe over the fit's): "
                f"{min(lows):.2f}-{high:.2f}, a move of {high / min(lows) - 1:.0%} (the "
                "simulator's compute follows the median; Ray's figures follow the host only "
                "in part)"
            )
    for last in repeated:
        first = next((r for r in rows if r.layout == last.layout.removesuffix(", again")), None)
        if first is not None:
            pair = first.throughput_ratio, last.throughput_ratio
            lines.append(
                f"Again at the end, {first.layout}: sim / Ray throughput {pair[0]:.2f} then "
                f"{pair[1]:.2f}, p50 {first.p50_ratio:.2f} then {last.p50_ratio:.2f} (a layout "
                f"against itself minutes later: off by {max(pair) / min(pair) - 1:.0%}; Ray's "
                f"throughput {last.ray_tuples_per_s / first.ray_tuples_per_s:.2f}x the first)"
            )
    return "\n".join(lines)


def _range(low_high: tuple[float, float]) -> str:
    low, high = low_high
    return "" if np.isnan(low) else f" ({low:.2f}–{high:.2f})"


def _runs(n: int) -> str:
    return "from one run" if n == 1 else f"the median of {n} runs"


def markdown(
    rows: list[CheckRow], profile: MachineProfile, seconds: float, replayed: str | None = None
) -> str:
    """A results page: the table, the profile checked (name, source, when it was fitted and
    under what load) and this host, for ``calibrate --check --report FILE``; ``replayed``:
    the check whose Ray figures the rows took (:func:`replay`)."""
    info = profile.info
    cond = info.get("conditions", {})
    fitted = (
        f"fitted {info.get('date', '?')} in {cond.get('seconds', '?')} s at load "
        f"{'–'.join(str(v) for v in cond.get('load_1min_start_end', ['?']))}"
        if info
        else "no fit record"
    )
    cpu = cpu_model()
    # where it came from, without this machine's paths
    source = "this host's cache" if profile.source.startswith("this host") else profile.source
    lines = [
        "# The simulator against Ray on this host (`streamjoin calibrate --check`)",
        "",
        f"{datetime.datetime.now():%Y-%m-%d %H:%M}, {os.cpu_count()} processors ({cpu}), "
        f"{platform.platform()}; profile {profile.name!r} ({source}; {fitted}; "
        f"{profile.variability.summary().strip() if profile.variability else 'no spread'}); "
        f"{seconds / 60:.1f} minutes. Each layout: a band join at match rate 2 (spo(2): "
        "`r.a < s.a AND r.b > s.b`) over a count window of 8,192 per stream; Ray's figures "
        f"{_runs(rows[0].repeats if rows else 3)}, then the simulator with this "
        "host's processors shared by all "
        f"actors. Unpaced: {rows[0].tuples if rows else CHECK_TUPLES:,} tuples as fast as the "
        "join takes them; paced: a quarter of "
        "Ray's unpaced rate, a batch per 10 ms of input; Ray's runs in rounds over the layouts, "
        "each round running every layout once. `drift`: a fixed join's steps timed before the "
        "first round and after each over the same at the fit, the median (the simulator's "
        "compute scaled by it) and, in brackets, the lowest and the highest."
        + (
            f" Replayed: Ray's figures are those of the check of {replayed}, the simulator's "
            "were run again on this profile at the pace, share and drift recorded."
            if replayed
            else ""
        ),
        "",
        "| layout | Ray t/s | sim t/s | sim / Ray | pace t/s | p50 Ray ms | p50 sim | ratio "
        "| p99 Ray ms | p99 sim | ratio | mean Ray ms | mean sim | ratio | CPU share | drift "
        "| load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.layout} | {r.ray_tuples_per_s:,.0f} | {r.sim_tuples_per_s:,.0f} | "
            f"{r.throughput_ratio:.2f} | {r.pace:,.0f} | {r.ray_p50_ms:.2f} | "
            f"{r.sim_p50_ms:.2f} | {r.p50_ratio:.2f} | {r.ray_p99_ms:.2f} | {r.sim_p99_ms:.2f} | "
            f"{r.p99_ratio:.2f} | {r.ray_mean_ms:.2f} | {r.sim_mean_ms:.2f} | "
            f"{r.mean_ratio:.2f} | {'/'.join(f'{v:.2f}' for v in r.cpu_share)} | "
            f"{r.drift:.2f}{_range(r.drift_range)} | {r.load_1min:.1f} |"
        )
    summary = table(rows).splitlines()
    lines += [
        "",
        *[
            line
            for line in summary
            if line.startswith(("within", "Ray's own", "The host's speed", "Again"))
        ],
        "",
    ]
    if any(not np.isnan(r.ray_tp_spread) for r in rows):
        lines += [
            "Ray's own runs of each layout, max / min (throughput, p50): "
            + "; ".join(f"{r.layout} {r.ray_tp_spread:.2f}, {r.ray_p50_spread:.2f}" for r in rows),
            "",
        ]
    lines += actor_table(rows)
    lines += lag_table(rows)
    return "\n".join(lines)


def lag_table(rows: list[CheckRow]) -> list[str]:
    """Where each layout's paced latency went, per actor (markdown lines; none without
    figures): the stage at which the simulator's path to the collector parts from Ray's."""
    rows = [r for r in rows if r.paced_actors]
    if not rows:
        return []
    lines = [
        "Per actor, paced (Ray's run of median p50 and the simulator's): when its steps "
        "began and when their logic ended, ms after the newest tuple each step handled "
        "arrived (the median over its steps; the emitter's from the chunk's arrival). A "
        "step's begin counts its message's way there (sending, the wire, waking and "
        "receiving) and its wait behind earlier steps; the collector's begin is about the "
        "latency of the pairs it receives. `sim − Ray`: how much earlier (negative) or later "
        "the simulator has the step begin and end. `step`: from its begin to its end (the "
        "median over its steps), on Ray the CPU its thread took (the median) and how long the "
        "thread waited for a processor, runnable while others ran, from its previous step's "
        "end to this one's: its sends, its wake-up for the step's message and the step (the "
        "mean over its steps, from Linux's scheduler statistics; – elsewhere): the operating "
        "system's placement of woken processes, which the simulator does not model (a step "
        "takes a free processor as it starts and holds it to its end).",
        "",
        "| layout | actor | begins: Ray ms | sim | sim − Ray | ends: Ray ms | sim | sim − Ray "
        "| step: Ray ms | Ray CPU | Ray waited | sim |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def ms(v: float, sign: str = "") -> str:
        return "–" if math.isnan(v) else f"{v:{sign}.2f}"

    for r in rows:
        for a in r.paced_actors:
            lines.append(
                f"| {r.layout} | {a.actor} | {ms(a.ray_start_ms)} | {ms(a.sim_start_ms)} | "
                f"{ms(a.sim_start_ms - a.ray_start_ms, '+')} | {ms(a.ray_end_ms)} | "
                f"{ms(a.sim_end_ms)} | {ms(a.sim_end_ms - a.ray_end_ms, '+')} | "
                f"{ms(a.ray_step_ms)} | {ms(a.ray_cpu_ms)} | "
                f"{ms(a.ray_wait_ms)} | {ms(a.sim_step_ms)} |"
            )
    return [*lines, ""]


def actor_table(rows: list[CheckRow]) -> list[str]:
    """Where each layout's unpaced time went, per actor (markdown lines; none without
    figures): what a layout that misses needs explained before any constant is fitted."""
    rows = [r for r in rows if r.actors]
    if not rows:
        return []
    lines = [
        "Per actor, unpaced (Ray's median run and the simulator's): busy seconds (Ray: wall "
        "time in the actor's steps, time it was descheduled included; sim: its steps' "
        "charges, receiving its messages included) and, on Ray, its process's CPU seconds "
        "(reader threads and the runtime included; – where not reported). `busy share` is "
        "busy time over the run's elapsed time. `steps`: the steps alone, messaging left "
        "out: on Ray the CPU seconds of the thread that ran them (a shared-index core's pool "
        "threads not included), on the simulator the compute they were charged (the tasks "
        "its pool ran not included). `messaging`: the rest, on Ray the process's CPU beyond its "
        "steps (receiving, merging and sending; the runtime's threads, and a shared-index "
        "core's pool threads, besides), on the simulator its busy time beyond its steps' "
        "compute. Below, the processors' time the actors' CPU (Ray) or "
        "steps (sim) fill, of what the run's elapsed time offers, and on Ray what no "
        "process used: the processors idle, and the kernel's softirq work (the loopback's "
        "delivery of the frames, which no process's CPU time counts), beside what the "
        "simulator charged for that delivery (`sim: kernel`, part of its senders' busy time: "
        "the profile's `kernel_ns`, 0 in a profile fitted before it was measured).",
        "",
        "| layout | actor | Ray busy s | Ray CPU s | sim busy s | sim / Ray busy "
        "| busy share Ray | sim | steps: Ray CPU s | sim s | sim / Ray "
        "| messaging: Ray CPU s | sim s | sim / Ray |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def seconds(v: float | None) -> str:
        return "–" if v is None else f"{v:.3f}"

    for r in rows:
        for a in r.actors:
            steps = (
                f"{a.sim_step_s / a.ray_step_cpu_s:.2f}"
                if a.sim_step_s is not None and a.ray_step_cpu_s
                else "–"
            )
            ray_msg = sim_msg = None
            if (
                a.ray_cpu_s is not None
                and a.ray_step_cpu_s is not None
                and a.sim_step_s is not None
            ):
                ray_msg, sim_msg = a.ray_cpu_s - a.ray_step_cpu_s, a.sim_busy_s - a.sim_step_s
            messaging = f"{seconds(ray_msg)} | {seconds(sim_msg)} | " + (
                f"{sim_msg / ray_msg:.2f}" if ray_msg and sim_msg is not None else "–"
            )
            lines.append(
                f"| {r.layout} | {a.actor} | {a.ray_busy_s:.3f} | {seconds(a.ray_cpu_s)} | "
                f"{a.sim_busy_s:.3f} | "
                f"{a.sim_busy_s / a.ray_busy_s if a.ray_busy_s else float('nan'):.2f} | "
                f"{a.ray_busy_s / r.ray_elapsed_s:.2f} | {a.sim_busy_s / r.sim_elapsed_s:.2f} | "
                f"{seconds(a.ray_step_cpu_s)} | {seconds(a.sim_step_s)} | {steps} | "
                f"{messaging} |"
            )
    lines += [
        "",
        "| layout | Ray: actors' CPU (busy where not reported) / processors · elapsed "
        "| sim: busy / processors · elapsed | Ray: idle | softirq | sim: kernel |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    cpus = os.cpu_count() or 1
    for r in rows:
        ray_cpu = sum(a.ray_busy_s if a.ray_cpu_s is None else a.ray_cpu_s for a in r.actors)
        sim_busy = sum(a.sim_busy_s for a in r.actors)
        lines.append(
            f"| {r.layout} | {ray_cpu / (cpus * r.ray_elapsed_s):.2f} | "
            f"{sim_busy / (cpus * r.sim_elapsed_s):.2f} | {r.ray_idle:.2f} | "
            f"{r.ray_softirq:.2f} | {r.sim_kernel_s / (cpus * r.sim_elapsed_s):.2f} |"
        )
    return [*lines, ""]
