"""The highest input rate a layout sustains on a simulated machine (DP-Join Fig. 5b):
:func:`max_sustainable_rate` bisects the arrival rate of :class:`~streamjoin.runtime.sim.Sim`
runs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from streamjoin.actors.base import RunSettings, max_delay_ns
from streamjoin.checks import positive_int
from streamjoin.query import Query
from streamjoin.runtime.pipeline import default_chunk_rows, slices
from streamjoin.runtime.result import Result
from streamjoin.runtime.sim.arrival import Arrival
from streamjoin.runtime.sim.costs import CostModel
from streamjoin.runtime.sim.engine import Sim
from streamjoin.runtime.sim.host_profile import as_profile
from streamjoin.runtime.sim.profile import MachineProfile
from streamjoin.topologies import Topology, single
from streamjoin.validation import validate


@dataclass
class RateSearch:
    """Outcome of :func:`max_sustainable_rate`.

    Attributes
    ----------
    rate : float
        Highest total input rate (tuples/s, both streams) found sustainable.
    arrival : Arrival
        The arrival process at that rate (per-stream rates in ``arrival.rates``).
    runs : list of dict
        Every simulated run: ``rate``, ``sustainable``, ``drain_s``, ``span_s``,
        ``input_tuples_per_s``, ``latency_p50_ms``, ``latency_p99_ms``, ``peak_backlog``.
    """

    rate: float
    arrival: Arrival
    runs: list[dict]


def max_sustainable_rate(
    query: Query,
    data,
    topology: Topology | None = None,
    *,
    arrival: Arrival | None = None,
    machine: MachineProfile | str | dict | None = None,
    batch_size: int = 1024,
    max_delay: float | None = None,
    chunk_rows: int | None = None,
    slack: float = 0.05,
    rel_tol: float = 0.02,
    max_runs: int = 30,
) -> RateSearch:
    """Bisect the input rate for the highest one ``topology`` sustains under ``machine``.

    A rate is sustainable when the layout keeps up: after the last arrival it finishes within
    ``slack`` × the arrival span. Above capacity the backlog — and so this drain time — grows
    in proportion to the run, so the criterion separates rates within about ``slack`` of the
    capacity. Use an input several windows long, so the steady state dominates the window's
    fill-up.

    Parameters
    ----------
    query, data, topology
        As for :func:`streamjoin.run` (``data`` in memory: it is replayed at every rate
        tried).
    arrival : Arrival, optional
        The process whose rates are scaled (default ``Arrival.constant(1.0)``: one total rate
        over the input's order); e.g. ``Arrival.constant(rate_r=1, rate_s=3)`` keeps S three
        times as fast as R (DP-Join §IV-C2).
    machine, batch_size, max_delay, chunk_rows
        As for :func:`streamjoin.run` on the ``sim`` backend (``chunk_rows`` defaults to one
        millisecond of input at each rate tried).
    slack : float
        Tolerated drain time as a share of the arrival span.
    rel_tol : float
        Stop when the bracket ``[sustainable, unsustainable]`` is this tight (relative).
    max_runs : int

    Returns
    -------
    RateSearch
    """
    template = arrival or Arrival.constant(1.0)
    if template.process == "replay":
        raise ValueError("max_sustainable_rate scales a rate: use Arrival.constant or poisson")
    topology = single() if topology is None else topology
    topology.check(query)
    topology = topology.for_query(query)
    cols = validate(data, query)
    settings = RunSettings(
        batch_size=positive_int("batch_size", batch_size),
        max_delay_ns=max_delay_ns(max_delay),
        collect="count",
        markers=topology.marks_progress(query),
    )
    model = CostModel(as_profile(machine))
    base = template.total_rate
    assert base is not None  # (not a replay)
    runs: list[dict] = []

    def attempt(rate: float) -> bool:
        arr = template.scaled(rate / base)
        rows = chunk_rows or default_chunk_rows(arr.total_rate, batch_size)
        sim = Sim(machine=model, arrival=arr)
        trace = sim.run(query, topology, slices(cols, rows), settings, None)
        res = Result.from_trace(trace, query, topology, settings, backend=sim.name)
        span = max(1, trace.last_arrival_ns)
        ok = trace.drain_ns <= slack * span
        series = list(trace.queue_tuples.values())  # per core, over the same sample times
        backlog = np.sum(series, axis=0) if series else np.zeros(1)
        runs.append(
            {
                "rate": rate,
                "sustainable": ok,
                "drain_s": trace.drain_ns / 1e9,
                "span_s": span / 1e9,
                "input_tuples_per_s": res.metrics["input_tuples_per_s"],
                "latency_p50_ms": res.metrics["latency_ms"]["p50"],
                "latency_p99_ms": res.metrics["latency_ms"]["p99"],
                "peak_backlog": int(np.max(backlog)) if len(backlog) else 0,
            }
        )
        return ok

    # first guess: throughput with the whole input there at once
    flood = len(cols) * 1e6
    attempt(flood)
    guess = max(runs[0]["input_tuples_per_s"], 1.0)
    lo, hi = guess / 2, guess * 2
    while not attempt(lo) and len(runs) < max_runs:
        hi, lo = lo, lo / 4
    while attempt(hi) and len(runs) < max_runs:
        lo, hi = hi, hi * 4
    while hi / lo > 1 + rel_tol and len(runs) < max_runs:
        mid = math.sqrt(lo * hi)
        if attempt(mid):
            lo = mid
        else:
            hi = mid
    found = [r["rate"] for r in runs if r["sustainable"]]
    best = max(found) if found else 0.0
    return RateSearch(
        rate=best, arrival=template.scaled(best / base) if best else template, runs=runs
    )
