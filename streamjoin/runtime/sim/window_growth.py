"""What a join core's steps cost more once its window outgrows the caches, measured for a
machine profile (:class:`~streamjoin.runtime.sim.profile.WindowCosts`).

A profile's join costs are fitted on windows of at most
:data:`~streamjoin.runtime.sim.profile.FITTED_HELD` items a core, which fit this machine's
caches; they charge a probe, an insert and an expiry the same however large the window.
They are not: on large windows a probe's leaves, an insert's and an expiry's, and the rows of
the tuple store its candidates are checked against are misses, and a core's steps take
longer (``experiments/results/sim_windows.md`` has the figures).

:func:`measure_window_growth` measures it for one index: a :class:`~streamjoin.actors.
join_core.JoinCore` over a count window of ``W`` tuples a stream is filled, then fed the
emitter's batches of a band join (or an equi-join) at a match rate of about 2, batches that
probe and store (probe, insert, expire) alternating with batches that only probe (as a split
join's core receives them); each step's host time less what the fitted
coefficients charge it is its residual, per probe on the probing steps, per stored tuple
(less the probes' part) on the others. The same at the largest fitted window is subtracted,
so the points say what the coefficients miss at each size, 0 where they were fitted.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque

import numpy as np
import pyarrow as pa

from streamjoin import indexes as registry
from streamjoin.actors.emitter import Emitter
from streamjoin.actors.join_core import JoinCore
from streamjoin.batch import Batch
from streamjoin.query import CountWindow, Query, band, equal
from streamjoin.runtime.sim.profile import FEATURES, FITTED_HELD, WindowCosts
from streamjoin.validation import validate

#: Count windows (tuples a stream) :func:`measure_window_growth` measures past the fitted
#: ones: a core then holds twice as many items.
WINDOWS = (2**16, 2**18, 2**20)
#: Those of a quick calibration (seconds, not a profile to plan large windows with).
QUICK_WINDOWS = (2**15,)
#: Tuples a batch (the default batch size).
BATCH = 1024
#: Width of the band join measured (keys in ``[0, 4 W)``: about 2 matches a probe).
BAND = 4
#: Steps a core runs in turn before the next size's core: a shared host's speed drifts
#: within minutes, so every size is measured in every stretch of time.
TURN = 32
#: Steps at the start of a turn not kept: they find the other cores' data in the caches (a
#: core that runs alone has its own there; shorter turns read higher).
SKIP = 4
#: Probing steps timed at each window.
PROBES = 48
#: Stretches of the storing steps whose means' median is kept (:meth:`_Core.residuals`).
BLOCKS = 4
#: Seconds of turns after which the storing steps' span may be cut short.
SECONDS = 3.0
#: A storing step that merged nothing and took this many times the median one is taken as the
#: host's stall, not the index's work (stalls of tens of milliseconds in steps of half of one
#: come once in a few hundred steps on a shared host).
HICCUP = 30


def measurable(index: str) -> bool:
    """Whether :func:`measure_window_growth` measures ``index``: not one whose probes scan
    the window (a window of 2^20 would take minutes) nor SPO-Join's stages (their own
    layout)."""
    cls = registry.get(index)
    return cls.probe_cost != "linear" and index != "po_join"


def measure_window_growth(
    index: str,
    coefs: dict,
    windows: tuple[int, ...] = WINDOWS,
    seed: int = 0,
    seconds: float = SECONDS,
) -> WindowCosts:
    """The extra ns a probe and a stored tuple cost a core over ``index`` at each of
    ``windows`` (tuples a stream), past what ``coefs`` (its fitted join costs,
    ``{feature: ns}``) charge, less the same at the largest fitted window.

    Every size's core stores as many tuples as a quarter of the largest window holds a
    stream (so that periodic work, a PIM-Tree's merge every eighth of a window or BI-Sort's
    buffer merges, is in the mean) and probes :data:`PROBES` times, all sizes' cores taking turns of :data:`TURN` steps;
    after ``seconds`` of turns, each stops once it has stored :data:`PROBES` times (an index
    whose probes take microseconds, RaP-Table's over unsized subwindows)."""
    cores = [_Core(index, coefs, w, seed) for w in (FITTED_HELD // 2, *windows)]
    stores = max(PROBES, max(windows, default=0) // 2 // BATCH)
    deadline = time.perf_counter() + seconds
    while any(len(c.store_rows) < stores for c in cores):
        if time.perf_counter() > deadline and all(len(c.store_rows) >= PROBES for c in cores):
            break  # a slow index's probes: its storing steps' span cut short
        for core in cores:
            core.turn(stores)
    (p0, s0), *rest = (core.residuals() for core in cores)
    points = [(float(FITTED_HELD), 0.0, 0.0)]
    for w, (probe, store) in zip(windows, rest, strict=True):
        points.append((float(2 * w), max(0.0, probe - p0), max(0.0, store - s0)))
    return WindowCosts(points=tuple(points))


class _Core:
    """A join core over ``index`` whose count window of ``window`` tuples a stream is full,
    and its steps' host time less their charge (``coefs``)."""

    def __init__(self, index: str, coefs: dict, window: int, seed: int) -> None:
        query, keys = _workload(index, window)
        self.core = JoinCore(query, index)
        self.core.warm()
        self.feed = _Feed(query, keys, np.random.default_rng(seed))
        while self.feed.count < 2 * window:  # both streams' windows filled, unprobed
            batch = self.feed.batch()
            for y, part in self.core.parts.items():
                part.insert(batch, np.flatnonzero(batch.stream == y))
        names = FEATURES["join"]
        self.names = names[1:]
        self.calls = coefs.get("calls", 0.0)
        self.weights = np.array([coefs.get(f, 0.0) for f in self.names])
        self.probe_rows: list[float] = []
        self.store_rows: list[tuple] = []

    def turn(self, stores: int) -> None:
        """:data:`TURN` steps, probing and storing in turn until :data:`PROBES` probing
        steps are kept, then storing, up to ``stores`` storing steps kept."""
        for k in range(TURN):
            store = len(self.probe_rows) >= PROBES or k % 2 == 1
            if store and len(self.store_rows) >= stores:
                return
            ns, residual, work = self._step(self.feed.batch(store=store))
            if k < SKIP:
                continue
            if store:
                self.store_rows.append(
                    (ns, residual, work["probes"], work["inserted"], work["merges"])
                )
            else:
                self.probe_rows.append(residual / max(1.0, work["probes"]))

    def _step(self, batch: Batch) -> tuple[int, float, dict]:
        before = np.array(self.core.counters(), dtype=float)
        t0 = time.perf_counter_ns()
        self.core.on_batch("in", batch)
        ns = time.perf_counter_ns() - t0
        delta = np.array(self.core.counters(), dtype=float) - before
        residual = ns - self.calls - float(self.weights @ delta)
        return ns, residual, dict(zip(self.names, delta, strict=True))

    def residuals(self) -> tuple[float, float]:
        """``(per probe, per stored tuple)``: the probing steps' median (each alike); for the
        storing steps the median over :data:`BLOCKS` stretches of them of their mean (a merge
        is rare; a stretch of the host's noise is one of several) less their probes, without
        a stall (:data:`HICCUP`)."""
        per_probe = float(np.median(self.probe_rows))
        rows = np.array(self.store_rows)
        typical = np.median(rows[:, 0])
        kept = (rows[:, 0] <= HICCUP * typical) | (rows[:, 4] > 0)
        per_stored = []
        for block, keep in zip(
            np.array_split(rows, BLOCKS), np.array_split(kept, BLOCKS), strict=True
        ):
            _, residual, probes, stored, _ = block[keep].sum(axis=0)
            per_stored.append((residual - per_probe * probes) / max(1.0, stored))
        return per_probe, float(np.median(per_stored))


def _workload(index: str, window: int) -> tuple[Query, int]:
    """``(query, keys)``: a join at a match rate of about 2 over a count window of
    ``window`` and integer keys in ``[0, keys)`` (as the calibration's workloads): a band join
    of width :data:`BAND` over ``4 window`` keys, or an equi-join over ``window / 2`` keys for
    an index without range probes."""
    query = Query(band("x", BAND), window=CountWindow(window))
    if registry.get(index).unsupported(query.predicate) is None:
        return query, 4 * window
    return Query(equal("x"), window=CountWindow(window)), max(1, window // 2)


class _Feed:
    """The batches of a two-way join's input (streams alternating, integer keys uniform in
    ``[0, keys)``) as the emitter stamps them; a batch that only probes (:meth:`batch` with
    ``store=False``) is the next one to be stored, probing the window as it stands, as a split
    join's core receives another core's tuples."""

    def __init__(self, query: Query, keys: int, rng, batch: int = BATCH) -> None:
        self.query, self.keys, self.rng = query, keys, rng
        self.emitter = Emitter(query, batch)
        self.waiting: deque[Batch] = deque()
        self.count = 0  # tuples stored, both streams
        self.horizon = np.zeros(2, dtype=np.int64)  # of the last batch stored

    def batch(self, store: bool = True) -> Batch:
        if not self.waiting:
            self._more()
        batch = self.waiting[0]
        if not store:  # it expires nothing: the batch stored next does
            return dataclasses.replace(batch, store=False, horizon=self.horizon.copy())
        self.waiting.popleft()
        self.count += len(batch)
        self.horizon = batch.horizon
        return batch

    def _more(self, n: int = 64 * BATCH) -> None:
        """Stamp ``n`` more tuples into batches."""
        table = pa.table(
            {
                "stream": (np.arange(n) % 2).astype(np.int8),
                "ts": np.zeros(n, dtype=np.int64),
                "x": self.rng.integers(0, self.keys, n),
            }
        )
        cols = validate(table, self.query)
        self.waiting.extend(b for _, b in self.emitter.on_chunk(cols, 0))
