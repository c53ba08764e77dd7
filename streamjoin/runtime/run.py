"""``run()``: validate everything at the boundary, pick an executor, return a :class:`Result`."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from streamjoin import __version__
from streamjoin.batch import Columns, validate
from streamjoin.query import Query
from streamjoin.runtime.build import Settings, check_topology
from streamjoin.runtime.result import Result, machine_info
from streamjoin.runtime.trace import RunTrace
from streamjoin.sources import Source, read_validated
from streamjoin.topologies import Topology, single

BACKENDS = ("local", "ray", "sim")


def _slices(cols: Columns, rows: int) -> Iterator[Columns]:
    for a in range(0, len(cols), rows):
        b = a + rows
        yield Columns(cols.stream[a:b], cols.ts[a:b], cols.attrs[:, a:b])


def _validated_chunks(source: Source, query: Query, rows: int) -> Iterator[Columns]:
    """The source's chunks, validated (also ``ts`` order across chunks; the source's own
    errors as SourceError), handed over ``rows`` at a time (as in-memory input)."""
    for cols in read_validated(source, query):
        yield from _slices(cols, rows) if len(cols) > rows else (cols,)


def _paced(chunks: Iterator[Columns], rate: float) -> Iterator[Columns]:
    """Hand chunks over no faster than ``rate`` tuples per second of wall time."""
    start = time.perf_counter()
    sent = 0
    for cols in chunks:
        wait = start + sent / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        yield cols
        sent += len(cols)


class _Progress:
    """A tqdm bar over input rows that appears only on runs longer than ``delay`` seconds."""

    def __init__(self, total: int | None, enabled: bool | None, delay: float = 2.0) -> None:
        if enabled is None:
            enabled = sys.stderr.isatty()
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=total,
                unit=" tuples",
                unit_scale=True,
                delay=delay,
                desc="joining",
                leave=False,
            )

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def run(
    query: Query,
    data,
    topology: Topology | None = None,
    *,
    backend: str = "local",
    batch_size: int = 1024,
    max_delay: float | None = None,
    collect: str = "pairs",
    ordered: bool = False,
    chunk_rows: int | None = None,
    pace: float | None = None,
    progress: bool | None = None,
    address: str | None = None,
    delivery_seed: int | None = None,
    machine=None,
    arrival=None,
) -> Result:
    """Run ``query`` over ``data`` on ``topology`` and return the exact result with metrics.

    Parameters
    ----------
    query : Query
    data : pyarrow.Table | pandas.DataFrame | dict of numpy arrays | streamjoin.sources.Source
        In-memory input is validated whole before anything runs; a Source is validated chunk
        by chunk as it is read.
    topology : Topology, optional
        Default: ``topologies.single()`` with the index chosen from the predicate.
    backend : {"local", "ray", "sim"}
        Where the actors run: in this process with deterministic FIFO delivery, one Ray
        actor per node (``ray.init()`` locally unless Ray is already initialised or
        ``address`` names a cluster), or on simulated cores under a virtual clock
        (:mod:`streamjoin.runtime.sim`: latency and throughput of a modelled machine).
    batch_size : int
        Tuples per batch the emitter sends (a batch also closes after ``max_delay``).
    max_delay : float, optional
        Seconds a tuple may wait in an open batch before the batch closes.
    collect : {"pairs", "count"}
        Keep every pair (``Result.pairs``) or only count them (large runs).
    ordered : bool
        Return pairs in order of the later tuple's row (as tuple-at-a-time processing emits).
    chunk_rows : int, optional
        Rows handed to the emitter at a time (default: ``batch_size``; a Source's larger
        chunks are cut to this size).
        All rows of a chunk share one ingest time, so latency counts from the chunk hand-over.
        With ``pace`` (or a ``sim`` arrival rate) the default is one millisecond of input.
    pace : float, optional
        Hand the input over at this many tuples per second of wall time (default: as fast as
        the join takes it), to measure latency at a given input rate. On ``sim``: a constant
        arrival rate in virtual time.
    progress : bool, optional
        Show a progress bar on runs longer than two seconds (default: when stderr is a tty).
    address : str, optional
        Ray cluster address for ``backend="ray"``.
    delivery_seed : int, optional
        ``local`` only: deliver messages in a seeded random order that keeps each edge FIFO,
        to test a topology against the interleavings of a real parallel backend.
    machine : MachineProfile, path to its JSON, or dict, optional
        ``sim`` only: the cost coefficients (default: the shipped profile).
    arrival : streamjoin.runtime.sim.Arrival, optional
        ``sim`` only: when input arrives (default: ``pace`` as a constant rate, else a
        replay of ``ts``).
    """
    if not isinstance(query, Query):
        raise ValueError(f"query must be a streamjoin.Query, got {type(query).__name__}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; available: {', '.join(BACKENDS)}")
    batch_size = _positive_int("batch_size", batch_size)
    if pace is not None and not (isinstance(pace, int | float) and pace > 0):
        raise ValueError(f"pace must be a positive rate in tuples/s, got {pace!r}")
    if backend == "sim":
        from streamjoin.runtime.sim import sim_defaults

        arrival, chunk_rows = sim_defaults(arrival, pace, chunk_rows, batch_size, data, query)
    elif machine is not None or arrival is not None:
        raise ValueError("machine= and arrival= are for backend='sim'")
    if chunk_rows is None:
        chunk_rows = batch_size if pace is None else max(1, int(pace // 1000))
    chunk_rows = _positive_int("chunk_rows", chunk_rows)
    if max_delay is not None and not (isinstance(max_delay, int | float) and max_delay >= 0):
        raise ValueError(f"max_delay must be a number of seconds >= 0, got {max_delay!r}")
    if collect not in ("pairs", "count"):
        raise ValueError(f"collect must be 'pairs' or 'count', got {collect!r}")
    if ordered and collect == "count":
        raise ValueError("ordered=True needs collect='pairs' (a count has no order)")
    topology = single() if topology is None else topology
    check_topology(topology, query)
    settings = Settings(
        batch_size=batch_size,
        max_delay_ns=None if max_delay is None else int(max_delay * 1e9),
        collect=collect,
        ordered=ordered,
        delivery_seed=delivery_seed,
    )

    if isinstance(data, Source):
        data.check(query)
        total, chunks = data.n_rows, _validated_chunks(data, query, chunk_rows)
    else:
        cols = validate(data, query)
        total, chunks = len(cols), _slices(cols, chunk_rows)

    if pace is not None and backend != "sim":  # sim: pace is the virtual arrival rate
        chunks = _paced(chunks, pace)
    bar = _Progress(total, progress)
    try:
        if backend == "ray":
            from streamjoin.runtime.ray_executor import run_ray

            trace = run_ray(query, topology, chunks, settings, bar, address=address)
        elif backend == "sim":
            from streamjoin.runtime.sim import run_sim

            trace = run_sim(
                query, topology, chunks, settings, bar, machine=machine, arrival=arrival
            )
        else:
            from streamjoin.runtime.local import run_local

            trace = run_local(query, topology, chunks, settings, bar)
    finally:
        bar.close()
    result = _result(query, topology, backend, settings, trace, pace)
    if backend == "sim":
        from streamjoin.runtime.sim import sim_metrics

        result.metrics.update(sim_metrics(trace))
    return result


def _result(query, topology, backend, settings: Settings, trace: RunTrace, pace) -> Result:
    col = trace.collector
    end = col.last_ns if col.last_ns is not None else trace.end_ns
    elapsed_s = max(end - trace.start_ns, 1) / 1e9
    hist = col.histogram
    pairs = None
    if settings.collect == "pairs":
        r, s, lat = col.arrays(ordered=settings.ordered)
        pairs = pa.table({"r": r, "s": s, "latency_ns": lat})
        q = np.percentile(lat, [50, 95, 99]) / 1e6 if len(lat) else [math.nan] * 3
        latency = {
            "p50": q[0],
            "p95": q[1],
            "p99": q[2],
            "max": lat.max() / 1e6 if len(lat) else math.nan,
        }
    else:
        latency = {f"p{p}": hist.percentile(p) / 1e6 for p in (50, 95, 99)}
        latency["max"] = hist.max / 1e6 if hist.total else math.nan
    metrics = {
        "query": str(query),
        "topology": topology.name,
        "backend": backend,
        "settings": {
            "batch_size": settings.batch_size,
            "max_delay_s": None if settings.max_delay_ns is None else settings.max_delay_ns / 1e9,
            "collect": settings.collect,
            "ordered": settings.ordered,
            "pace": pace,
        },
        "input_tuples": trace.input_tuples,
        "output_pairs": col.count,
        "elapsed_s": elapsed_s,
        "input_tuples_per_s": trace.input_tuples / elapsed_s,
        "output_pairs_per_s": col.count / elapsed_s,
        "latency_ms": {k: float(v) for k, v in latency.items()},
        "actors": trace.actor_metrics(),
        "machine": machine_info(),
        "version": __version__,
    }
    return Result(pairs=pairs, count=col.count, metrics=metrics, histogram=hist)
