"""PanJoin §V-A at this machine's scale: the subwindow stores ``bisort``, ``rap_table``, ``wib_tree``.

As in the paper, each measurement is one subwindow store (no chain, no join core), fed with
batches the manager has already sorted (§III-E), keys uniform 32-bit integers. BI-Sort uses
``layout="compact"``: a full subwindow holds 8-byte items as the paper's (a 32-bit key code and
ref, :mod:`streamjoin.indexes.blocks.key_codes`; its pairs here are candidates the join core would
refine), while one that is filling holds a float64 key and an int64 ref, as RaP-Table (the
wide layout here) and WiB+-Tree do: 16 bytes where the paper has 8. Throughput is input tuples per second
of one operation on one thread (the paper: insertion on 1 thread, BI-Sort's on 8, probes on 8
threads from ``N_Bat >= 128``). The paper's knobs: subwindow size ``N_Sub``, batch size
``N_Bat``, partition count ``P`` (BI-Sort's index array, RaP-Table's partitions, WiB+-Tree's
leaves: leaf width ``N_Sub / (P ln 2)``, for random inserts leave leaves ln 2 full), partition
size ``N_P = N_Sub / P`` and selectivity ``S``, the mean matches per probe tuple in a full
subwindow: a band join ``|r - s| <= eps`` with ``eps = (S · 2^32 / N_Sub - 1) / 2``. BI-Sort's
buffer is the paper's 1K, RaP-Table's σ 1.25, WiB+-Tree's fanout 64. Sections:

- ``insert`` (Fig. 10a-b, 11a-b, 12a-b): insertion throughput vs ``N_Bat`` for several ``P``
  at ``N_Sub = 2^20`` and for several ``N_Sub`` at ``P = 2^10``. Insertion into BI-Sort costs
  O(M / B) per tuple at fill level M, so a subwindow is filled untimed in batches of 2^16 and
  the batches at fill levels 1/8, 3/8, 5/8 and 7/8 are timed (the whole fill when it has fewer
  than 16 batches): the mean over a fill, by the midpoint rule.
- ``probe`` (Fig. 10c/e, 11c/e, 12c/e): probe throughput of a full subwindow vs ``N_Bat``
  (``S = 1``, same ``P`` / ``N_Sub`` series) and vs ``S`` (``N_Bat = 2^15``, ``N_Sub = 2^20``).
  Our probes return the pairs (``(probe, ref)`` arrays); BI-Sort's result can also stay its
  ``<id_start, id_end>`` records (§III-D), the format the paper measures: series
  ``bisort_ranges``.
- ``compare`` (Fig. 13): the three side by side at ``N_Sub = 2^20``, ``P = 2^13`` and at the
  paper's ``N_Sub = 2^23 = 8M``, ``P = 2^16 = 64K`` (both ``N_P = 128``): insertion vs
  ``N_Bat`` (2^8 … 2^20), probing vs ``S`` at ``N_Bat = 32K``.
- ``balance`` (Fig. 10f): RaP-Table's normalized MAE of the partition sizes ``n_p`` of each
  subwindow, ``mean_p |n_p - N / P| / (N / P)`` (the paper does not print its formula; this
  is the mean absolute error of the sizes, normalised by the ideal size: 0 when balanced, about
  2 when everything is in one partition), for subwindows 1, 2, … of a stream whose first
  partition table splits the 32-bit range evenly (§V-A1), each next one adjusted by Alg. 1.
  Even a perfect table leaves the multinomial noise ``sqrt(2 P / (π N))``, reported as the
  floor. Values: ``N(σ, k)`` k normal modes of standard deviation σ (a fraction of the range),
  ``U(w, k)`` k uniform modes of width w, ``U(1, 1)`` the whole range, and ``rank-size``
  ``⌊V / r⌋`` with r uniform on [1, 10^4] and V = 2^32 / 100: 99 % of the values in the lowest
  1 % of a range that is 1 % of the 32-bit one, as the paper's YouTube view counts.
- ``batch`` (§III-E): a sorted probe batch vs the same keys probed one at a time; 1 vs 2
  threads probing halves of a sorted batch (the stores have no ``prange``; their kernels release
  the GIL, so two Python threads run them in parallel); the cost of the chain's sorts.
- ``targets`` (BI-Sort's speed targets): a ``bisort`` *window* (chain of 2^20 subwindows, window 2^21, S = 1 per
  subwindow; the benchmark's stream, ``benchmarks/test_subwindow_indexes.py``) probing and
  inserting batches of 32K and 1K, beside the fair naive baseline there (sort the batch, merge
  it into one sorted window array; merge-scan the window per probe batch); and
  ``nested_loop`` on the handshake-join predicate ``band(x, 10) & band(y, 10)`` in predicate
  evaluations (probe × window item pairs tested) per second.

Every measurement runs in a freshly forked child of a parent that has compiled every kernel:
each starts from the same process state, and the gigabytes a measurement allocates are
returned when it ends. Single-threaded timings use the thread's CPU time (the 2 cores are
shared with other jobs, often at a load average above 2); compare within one run, and see
the load recorded in the markdown.

Writes ``experiments/results/panjoin_paper.{csv,md,png}``; a partial or quick run writes
``panjoin_paper_<sections>[_quick].*`` beside them instead, so the full results stay whole.

Run: ``python experiments/panjoin_paper.py`` (about 6-15 minutes on 2 cores; ``--quick`` for a
smoke run, ``--only insert,probe`` for some sections).

Why one file of ~1,170 lines: one paper section (§V-A), every part of which measures the same
three stores on the same workload helpers (top) in child processes (:func:`measure`); the
report (from the report banner, about 40%) writes each figure's table beside the paper's
value. It stays one file so that one file says how each figure was made and judged.
"""

from __future__ import annotations

import argparse
import csv
import functools
import math
import multiprocessing
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit
from pim_tree_paper import RESULTS, _pow2
from report import commit

import streamjoin as sj
from streamjoin import viz
from streamjoin.indexes.blocks.key_order import stable_order
from streamjoin.indexes.nested_loop import NestedLoop
from streamjoin.indexes.panjoin.bisort import BISort, BISortIndex, probe_bisort
from streamjoin.indexes.panjoin.rap_table import RaPTable, probe_rap_table
from streamjoin.indexes.panjoin.subwindows import band_bounds
from streamjoin.indexes.panjoin.wib_tree import LEAVES, WiBTree, probe_wib_tree
from streamjoin.runtime.result import machine_info

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import test_subwindow_indexes as window_bench  # noqa: E402  (the benchmark's stream, baseline)

KEY_RANGE = 2.0**32
STORES = ("bisort", "rap_table", "wib_tree")
BUFFER = 1024  # BI-Sort's insertion buffer, the paper's default (§V-A3)
SIGMA = 1.25
FANOUT = 64
FILL_BATCH = 2**16  # untimed fills
MIN_SECONDS = 0.2  # CPU seconds per probe measurement
#: Single-threaded timings count the thread's CPU time: on a machine shared with other jobs
#: (load above the core count) wall time would measure our share of the cores. Memory and
#: cache contention still show.
CLOCK = time.thread_time
SCALES = {
    "full": {
        "n_sub": 2**20,
        "n_subs": [2**14, 2**16, 2**18, 2**20, 2**22],
        "partitions": [2**10, 2**13, 2**16],
        "fixed_p": 2**10,
        "compare_p": 2**13,
        "batches": [2**8, 2**10, 2**12, 2**14, 2**16],
        "probe_batch": 2**15,
        "selectivities": [2**k for k in range(0, 11, 2)],
        "balance_n_sub": 2**20,
        "balance_p": [2**10, 2**13],
        "subwindows": 8,
        "nl_windows": [2**12, 2**14, 2**16],
        "compare_n_subs": [2**20, 2**23],
        "compare_batches": [2**k for k in range(8, 21, 2)],
    },
    "quick": {
        "n_sub": 2**16,
        "n_subs": [2**14, 2**16],
        "partitions": [2**8, 2**10],
        "fixed_p": 2**8,
        "compare_p": 2**9,
        "batches": [2**8, 2**12],
        "probe_batch": 2**12,
        "selectivities": [1, 16, 256],
        "balance_n_sub": 2**16,
        "balance_p": [2**8],
        "subwindows": 4,
        "nl_windows": [2**12],
        "compare_n_subs": [2**16],
        "compare_batches": [2**8, 2**12, 2**16],
    },
}
#: The issue's speed targets (input tuples/s; predicate evaluations/s).
TARGETS = {2**15: 20e6, 2**10: 5e6, "nested_loop": 300e6}
#: What the paper reports (C++17, 2 x 20-core Xeon Gold 6148, N_Sub = 8M unless stated).
PAPER = {
    "insert": "larger N_Bat is faster for all three (shared LLAT accesses, merges amortised); "
    "RaP-Table peaks near 100M tuples/s at N_Bat = 8M, faster with smaller P and only slightly "
    "with smaller N_Sub (Fig. 10a-b); WiB+-Tree insensitive to P, slower above N_Sub = 512K "
    "(Fig. 11a-b); BI-Sort flat below N_Bat = B = 1K, insensitive to P, much slower for large "
    "N_Sub at small N_Bat (Fig. 12a-b)",
    "probe": "RaP-Table and WiB+-Tree: smaller N_P (larger P) and smaller S faster, an 'ideal' "
    "throughput for P > 16K (Fig. 10c-e, 11c-e); BI-Sort insensitive to S (it returns "
    "<id_start, id_end> records), N_P matters only at small N_Bat, larger P slightly faster "
    "(Fig. 12c-e)",
    "compare": "insertion: BI-Sort ahead only for N_Bat > 64K (Fig. 13a); band-join probing at "
    "N_Bat = 32K: RaP-Table 1.7-2.4x WiB+-Tree and BI-Sort 1.6-7x RaP-Table for S < 2^10, "
    "BI-Sort up to 100x the others at large S (Fig. 13b); hence BI-Sort for large N_Bat or "
    "large S, else RaP-Table unless values drift or increase, else WiB+-Tree",
    "balance": "from an even split of the 32-bit range, RaP-Table converges within 3 "
    "adjustments on multimodal normal, uniform and rank-size (YouTube) values; smaller P "
    "converges sooner and to a lower MAE (Fig. 10f)",
    "batch": "batch mode (sorted batches, rebounding search) speeds WiB+-Tree probing up to "
    "2.8x (equi) and 1.3x (band) over a B-tree probed per tuple (Fig. 11f); a single thread "
    "cannot use the memory bandwidth, so probes run on 8 threads (§III-E3)",
    "targets": "targets set for us: BI-Sort window >= 20M tuples/s at batch 32K and >= 5M/s at 1K on one "
    "core (N_Sub = 2^20, S = 1); nested_loop >= 300M predicate evaluations/s/core",
}


# --------------------------------------------------------------------------------------------
# Stores, keys and timing
# --------------------------------------------------------------------------------------------


def leaf_width(n_sub: int, partitions: int) -> int:
    """WiB+-Tree leaf width for about ``partitions`` leaves (leaves end ln 2 full)."""
    return max(2, round(n_sub / (partitions * math.log(2))))


def make_store(store: str, n_sub: int, partitions: int):
    if store == "bisort":
        return BISort(n_sub, partitions=partitions, buffer_size=BUFFER, layout="compact")
    if store == "rap_table":
        return RaPTable(n_sub, partitions=partitions, sigma=SIGMA, domain=(0.0, KEY_RANGE))
    return WiBTree(n_sub, leaf_width=leaf_width(n_sub, partitions), fanout=FANOUT)


def uniform_keys(rng: np.random.Generator, n: int) -> np.ndarray:
    """32-bit unsigned integer keys as float64."""
    return rng.integers(0, 2**32, n).astype(np.float64)


def sorted_batch(keys: np.ndarray, refs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A batch as the manager hands it on: sorted by key, equal keys in ref order."""
    order = np.argsort(keys, kind="stable")
    return keys[order], refs[order]


def fill(store, keys: np.ndarray, start: int, stop: int, batch: int = FILL_BATCH) -> None:
    """Insert ``keys[start:stop]`` (refs = positions) in sorted batches, untimed."""
    for a in range(start, stop, batch):
        b = min(stop, a + batch)
        store.insert(*sorted_batch(keys[a:b], np.arange(a, b)))


def eps_for(selectivity: float, n_sub: int) -> float:
    """Band half-width giving ``selectivity`` matches per probe in a full subwindow of uniform
    32-bit integers: ``(2 eps + 1) · n_sub / 2^32 = S``."""
    return max(0.0, (selectivity * KEY_RANGE / n_sub - 1) / 2)


def _child(conn, fn, args) -> None:
    try:
        conn.send(fn(*args))
    except BaseException as e:  # handed to the parent, which raises it
        conn.send(e)
    finally:
        conn.close()


@functools.cache
def measure(fn, *args):
    """``fn(*args)`` in a freshly forked child (see the module docstring); memoised, so
    sections that share a measurement run it once."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, fn, args))
    proc.start()
    send.close()
    result = recv.recv()
    proc.join()
    if isinstance(result, BaseException):
        raise result
    return result


# --------------------------------------------------------------------------------------------
# Measurements (each runs in a child)
# --------------------------------------------------------------------------------------------


def insert_rate(store: str, n_sub: int, partitions: int, n_bat: int) -> dict:
    """Insertion throughput over one subwindow's fill (module docstring, ``insert``); small
    fills are repeated, into fresh stores, until :data:`MIN_SECONDS` of inserting."""
    keys = uniform_keys(np.random.default_rng(1), n_sub)
    if n_sub < 16 * n_bat:
        spans = [(0, n_sub // n_bat * n_bat)]
    else:
        timed = min(n_sub // 8, max(16 * n_bat, 2**15)) // n_bat * n_bat
        spans = [(level * n_sub // 8, level * n_sub // 8 + timed) for level in (1, 3, 5, 7)]
    timed_batches = [
        [sorted_batch(keys[i : i + n_bat], np.arange(i, i + n_bat)) for i in range(a, b, n_bat)]
        for a, b in spans
    ]
    elapsed, tuples = 0.0, 0
    while elapsed < MIN_SECONDS:
        s, done = make_store(store, n_sub, partitions), 0
        for (a, b), batches in zip(spans, timed_batches, strict=True):
            fill(s, keys, done, a)
            t0 = CLOCK()
            for k, r in batches:
                s.insert(k, r)
            elapsed += CLOCK() - t0
            tuples += b - a
            done = b
    row = {
        "section": "insert",
        "store": store,
        "n_sub": n_sub,
        "P": partitions,
        "n_bat": n_bat,
        "tuples_per_s": round(tuples / elapsed),
    }
    if store == "wib_tree":
        fill(s, keys, done, n_sub)
        row["leaves"] = int(s._t.meta[LEAVES])
    return row


def _time_probes(call, ranges, batches, bounds, lo, hi) -> tuple[float, int, int]:
    """Seconds, probe tuples and result size (pairs, or items in the ranges if ``ranges``) of
    repeated ``call``s over the batches (at least one pass and :data:`MIN_SECONDS`)."""
    elapsed, tuples, found, i = 0.0, 0, 0, 0
    while elapsed < MIN_SECONDS or i < len(batches):
        q, (vlo, vhi) = batches[i % len(batches)], bounds[i % len(batches)]
        t0 = CLOCK()
        out = call(q, vlo, vhi, lo, hi)
        elapsed += CLOCK() - t0
        tuples += len(q)
        found += int(np.sum(out[1] - out[0])) if ranges else len(out[0])
        i += 1
    return elapsed, tuples, found


def probe_rates(store: str, n_sub: int, partitions: int, points: tuple) -> list[dict]:
    """Probe throughput of a full subwindow at each ``(n_bat, S)`` of ``points``; BI-Sort
    also as range records."""
    rng = np.random.default_rng(2)
    s = make_store(store, n_sub, partitions)
    fill(s, uniform_keys(rng, n_sub), 0, n_sub)
    modes = {store: (lambda q, vlo, vhi, lo, hi: s.probe(q, vlo, vhi, lo, hi, 0), False)}
    if store == "bisort":
        modes["bisort_ranges"] = (lambda q, vlo, vhi, lo, hi: s.ranges(vlo, vhi), True)
    rows = []
    for n_bat, sel in points:
        eps = eps_for(sel, n_sub)
        batches = [np.sort(uniform_keys(rng, n_bat)) for _ in range(max(1, min(8, 2**16 // n_bat)))]
        bounds = [band_bounds(q, -eps, eps) for q in batches]
        for name, (call, ranges) in modes.items():
            elapsed, tuples, found = _time_probes(call, ranges, batches, bounds, -eps, eps)
            rows.append(
                {
                    "section": "probe",
                    "store": name,
                    "n_sub": n_sub,
                    "P": partitions,
                    "n_bat": n_bat,
                    "S": sel,
                    "tuples_per_s": round(tuples / elapsed),
                    "matches_per_probe": round(found / tuples, 3),
                }
            )
    return rows


def balance(dist: str, n_sub: int, partitions: int, subwindows: int) -> list[dict]:
    """RaP-Table's partition balance in consecutive subwindows (module docstring)."""
    rng = np.random.default_rng(4)
    draw = distribution(dist, np.random.default_rng(5))
    s = RaPTable(n_sub, partitions=partitions, sigma=SIGMA, domain=(0.0, KEY_RANGE))
    ideal = n_sub / partitions
    rows = []
    for k in range(1, subwindows + 1):
        fill(s, draw(rng, n_sub), 0, n_sub)
        sizes = s.partition_sizes()
        rows.append(
            {
                "section": "balance",
                "store": "rap_table",
                "dist": dist,
                "n_sub": n_sub,
                "P": partitions,
                "subwindow": k,
                "adjustments": k - 1,
                "nmae": round(float(np.mean(np.abs(sizes - ideal)) / ideal), 4),
                "max_over_ideal": round(float(sizes.max() / ideal), 2),
                "floor": round(math.sqrt(2 / (math.pi * ideal)), 4),
            }
        )
        s = s.successor()
    return rows


def distribution(name: str, rng: np.random.Generator):
    """A sampler ``draw(rng, n)`` of 32-bit integer values (module docstring, ``balance``);
    mode centres are fixed by ``rng``."""
    if name == "rank-size":
        return lambda g, n: np.floor(KEY_RANGE / 100 / g.uniform(1, 1e4, n))
    if name == "U(1, 1)":
        return uniform_keys
    kind, width, modes = name[0], *(float(x) for x in name[2:-1].split(","))
    centres = rng.uniform(0.05, 0.95, int(modes)) * KEY_RANGE

    def draw(g: np.random.Generator, n: int) -> np.ndarray:
        c = centres[g.integers(0, len(centres), n)]
        if kind == "N":
            v = g.normal(c, width * KEY_RANGE)
        else:
            v = c + (g.random(n) - 0.5) * width * KEY_RANGE
        return np.floor(np.clip(v, 0, KEY_RANGE - 1))

    return draw


@njit(nogil=True)
def _one_at_a_time(kernel, state, keys, vlo, vhi, lo, hi):
    """Probe each key alone (a batch of one), through the store's own kernel."""
    n = 0
    for i in range(keys.shape[0]):
        p, _ = kernel(*state, keys[i : i + 1], vlo[i : i + 1], vhi[i : i + 1], lo, hi, 0)
        n += p.shape[0]
    return n


def _kernel(store: str, s):
    if store == "bisort":
        return probe_bisort, (s._t,)
    if store == "rap_table":
        return probe_rap_table, (s._t, s._llat)
    return probe_wib_tree, s.kernel_state()


def batch_modes(store: str, n_sub: int, partitions: int, n_bat: int, selectivity: int) -> list:
    """Sorted batch vs one probe at a time (1K keys), and 1 vs 2 threads on a sorted batch."""
    rng = np.random.default_rng(6)
    s = make_store(store, n_sub, partitions)
    fill(s, uniform_keys(rng, n_sub), 0, n_sub)
    eps = eps_for(selectivity, n_sub)
    base = {"section": "batch", "store": store, "n_sub": n_sub, "P": partitions, "S": selectivity}
    rows = []
    q = np.sort(uniform_keys(rng, 1024))
    vlo, vhi = band_bounds(q, -eps, eps)
    kernel, state = _kernel(store, s)
    for variant in ("sorted batch", "one at a time"):
        elapsed, reps = 0.0, 0
        while elapsed < MIN_SECONDS:
            t0 = CLOCK()
            if variant == "sorted batch":
                s.probe(q, vlo, vhi, -eps, eps, 0)
            else:
                _one_at_a_time(kernel, state, q, vlo, vhi, -eps, eps)
            elapsed += CLOCK() - t0
            reps += 1
        rows.append(
            {
                **base,
                "variant": variant,
                "n_bat": 1024,
                "tuples_per_s": round(reps * 1024 / elapsed),
            }
        )
    q = np.sort(uniform_keys(rng, n_bat))
    vlo, vhi = band_bounds(q, -eps, eps)
    half = n_bat // 2
    parts = [(q[a:b], vlo[a:b], vhi[a:b]) for a, b in ((0, half), (half, n_bat))]
    with ThreadPoolExecutor(2) as pool:
        for threads in (1, 2) * 3:  # interleaved: the machine's load drifts
            elapsed, reps = 0.0, 0
            while elapsed < MIN_SECONDS:
                t0 = time.perf_counter()  # wall time: two threads' CPU time would add up
                if threads == 1:
                    s.probe(q, vlo, vhi, -eps, eps, 0)
                else:
                    list(pool.map(lambda p: s.probe(*p, -eps, eps, 0), parts))
                elapsed += time.perf_counter() - t0
                reps += 1
            rows.append(
                {
                    **base,
                    "variant": f"{threads} thread{'s' * (threads > 1)}",
                    "n_bat": n_bat,
                    "tuples_per_s": round(reps * n_bat / elapsed),
                }
            )
    return rows


def sort_costs(n_bat: int) -> list[dict]:
    """ns per tuple of the chain's batch sorts (``SubwindowIndex``) and of ``band_bounds``."""
    rng = np.random.default_rng(7)
    keys = [uniform_keys(rng, n_bat) for _ in range(8)]
    steps = {
        "stable_order (probe and insert batch)": stable_order,
        "numpy stable argsort (before)": lambda k: np.argsort(k, kind="stable"),
        "band_bounds": lambda k: band_bounds(k, -1.0, 1.0),
    }
    rows = []
    for name, step in steps.items():
        elapsed, tuples = 0.0, 0
        while elapsed < MIN_SECONDS:
            for k in keys:
                t0 = CLOCK()
                step(k)
                elapsed += CLOCK() - t0
                tuples += n_bat
        rows.append(
            {
                "section": "batch",
                "store": "chain",
                "variant": name,
                "n_bat": n_bat,
                "ns_per_tuple": round(elapsed / tuples * 1e9, 1),
            }
        )
    return rows


def window_rate(variant: str, n_bat: int) -> dict:
    """The benchmark's stream (window 2^21, N_Sub 2^20, S = 1 per subwindow), full before
    timing. BI-Sort windows are timed over N_Sub tuples, one fill cycle of the newest subwindow
    (its merges cost O(fill)); the baseline's cost does not depend on the phase: 2^17 tuples."""
    n_sub = window_bench.N_SUB
    make = {
        "bisort": lambda: BISortIndex(
            subwindow_size=n_sub, partitions=n_sub // 128, layout="compact"
        ),
        "bisort B=1K": lambda: BISortIndex(
            subwindow_size=n_sub, partitions=n_sub // 128, buffer_size=1024, layout="compact"
        ),
        "naive sort + merge": window_bench.SortedWindow,
    }[variant]
    stream = window_bench.Stream(make(), clock=CLOCK)
    stream.round(stream.draw(n_bat, 4))
    stream.times = {"probe": 0.0, "insert": 0.0}
    n = n_sub if variant.startswith("bisort") else max(2**17, 4 * n_bat)
    stream.round(stream.draw(n_bat, n // n_bat))  # keys drawn outside the timed steps
    elapsed = stream.times["probe"] + stream.times["insert"]
    return {
        "section": "targets",
        "store": variant,
        "n_sub": n_sub,
        "n_bat": n_bat,
        "tuples_per_s": round(n / elapsed),
        "probe_tuples_per_s": round(n / stream.times["probe"]),
        "insert_tuples_per_s": round(n / stream.times["insert"]),
        "target": TARGETS[n_bat],
    }


def bandwidth() -> dict:
    """One thread's memory bandwidth, GB/s: reading (np.sum) and copying 64 MB arrays."""
    a = np.random.default_rng(8).random(2**23)
    b = np.empty_like(a)
    np.copyto(b, a)
    out = {"section": "targets", "store": "memory (1 thread)"}
    for name, step, nbytes in (
        ("read_gb_per_s", lambda: a.sum(), a.nbytes),
        ("copy_gb_per_s", lambda: np.copyto(b, a), 2 * a.nbytes),
    ):
        best = math.inf
        for _ in range(5):
            t0 = CLOCK()
            step()
            best = min(best, CLOCK() - t0)
        out[name] = round(nbytes / best / 1e9, 2)
    return out


def nested_loop_rate(window: int, n_bat: int = 256) -> dict:
    """Predicate evaluations/s of ``nested_loop`` on ``band(x, 10) & band(y, 10)``."""
    data = sj.sources.handshake_workload(4 * window, seed=3)
    stream = data.column("stream").to_numpy()
    xy = np.stack([data.column(c).to_numpy().astype(np.float64) for c in ("x", "y")])
    items, probes = xy[:, stream == 1][:, :window], xy[:, stream == 0]
    index = NestedLoop(n_keys=2)
    index.insert(np.ascontiguousarray(items), np.arange(items.shape[1]))
    lo, hi = np.array([-10.0, -10.0]), np.array([10.0, 10.0])
    elapsed, evaluations, matches, i = 0.0, 0, 0, 0
    while elapsed < 2 * MIN_SECONDS:
        q = np.ascontiguousarray(probes[:, i : i + n_bat])
        t0 = CLOCK()
        pos, _ = index.probe(q, lo, hi)
        elapsed += CLOCK() - t0
        evaluations += q.shape[1] * len(index)
        matches += len(pos)
        i = (i + n_bat) % (probes.shape[1] - n_bat)
    return {
        "section": "targets",
        "store": "nested_loop",
        "window": len(index),
        "n_bat": n_bat,
        "evaluations_per_s": round(evaluations / elapsed),
        "matches_per_probe": round(matches * len(index) / evaluations, 3),
        "target": TARGETS["nested_loop"],
    }


def warm() -> None:
    """Compile every kernel once in the parent, so the forked children find them compiled."""
    rng = np.random.default_rng(0)
    for store in STORES:
        s = make_store(store, 2**12, 16)
        fill(s, uniform_keys(rng, 2**12), 0, 2**12, batch=2**10)
        q = np.sort(uniform_keys(rng, 64))
        vlo, vhi = band_bounds(q, -1e6, 1e6)
        s.probe(q, vlo, vhi, -1e6, 1e6, 0)
        kernel, state = _kernel(store, s)
        _one_at_a_time(kernel, state, q[:2], vlo[:2], vhi[:2], -1e6, 1e6)
        if store == "bisort":
            s.ranges(vlo, vhi)
    for variant in (BISortIndex(subwindow_size=64), window_bench.SortedWindow()):
        k = uniform_keys(rng, 200)[None, :]
        variant.insert(k, np.arange(200))
        variant.probe(k, np.array([-1e6]), np.array([1e6]))
    nl = NestedLoop(n_keys=2)
    nl.insert(np.ones((2, 4)), np.arange(4))
    nl.probe(np.ones((2, 2)), np.array([-1.0, -1.0]), np.array([1.0, 1.0]))


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------


def section_tasks(section: str, sc: dict) -> list:
    """``(function, args)`` of the measurements of ``section``; each returns a row or rows."""
    n_sub, batches, fixed_p = sc["n_sub"], sc["batches"], sc["fixed_p"]
    if section == "insert":
        grid = [(n_sub, p) for p in sc["partitions"]] + [
            (n, fixed_p) for n in sc["n_subs"] if n != n_sub or fixed_p not in sc["partitions"]
        ]
        return [
            (insert_rate, (st, n, p, b))
            for st in STORES
            for n, p in grid
            for b in batches
            if b <= n
        ]
    if section == "probe":
        tasks = []
        for st in STORES:
            for p in sc["partitions"]:
                points = [(b, 1) for b in batches] + [
                    (sc["probe_batch"], s) for s in sc["selectivities"]
                ]
                tasks.append((probe_rates, (st, n_sub, p, tuple(points))))
            for n in sc["n_subs"]:
                if n != n_sub or fixed_p not in sc["partitions"]:
                    points = tuple((b, 1) for b in batches if b <= n)
                    tasks.append((probe_rates, (st, n, fixed_p, points)))
        return tasks
    if section == "compare":  # P = N_Sub / 128: the paper's N_P = 8M / 64K
        tasks = []
        for n in sc["compare_n_subs"]:
            points = tuple((sc["probe_batch"], s) for s in sc["selectivities"])
            if n == n_sub and n // 128 in sc["partitions"]:  # shared with the probe section
                points = tuple((b, 1) for b in batches) + points
            tasks += [
                (insert_rate, (st, n, n // 128, b))
                for st in STORES
                for b in sc["compare_batches"]
                if b <= n
            ]
            tasks += [(probe_rates, (st, n, n // 128, points)) for st in STORES]
        return tasks
    if section == "balance":
        dists = ["U(1, 1)", "N(0.01, 4)", "N(0.001, 16)", "U(0.01, 4)", "rank-size"]
        return [
            (balance, (d, sc["balance_n_sub"], p, sc["subwindows"]))
            for p in sc["balance_p"]
            for d in dists
        ]
    if section == "batch":
        p = sc["compare_p"]
        return [
            (batch_modes, (st, n_sub, p, sc["probe_batch"], s)) for s in (1, 64) for st in STORES
        ] + [(sort_costs, (b,)) for b in (2**10, 2**15)]
    if section == "targets":
        return (
            [(bandwidth, ())]
            + [
                (window_rate, (v, b))
                for b in (2**15, 2**10)
                for v in ("bisort", "bisort B=1K", "naive sort + merge")
            ]
            + [(nested_loop_rate, (w,)) for w in sc["nl_windows"]]
        )
    raise ValueError(f"unknown section {section!r}")


SECTIONS = ("insert", "probe", "compare", "balance", "batch", "targets")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help=f"comma-separated sections of {', '.join(SECTIONS)}",
    )
    args = ap.parse_args()
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    for s in sections:
        if s not in SECTIONS:
            ap.error(f"unknown section {s!r}; choose from {', '.join(SECTIONS)}")
    sc = SCALES["quick" if args.quick else "full"]
    load0 = os.getloadavg()[0]
    t_start = time.time()
    warm()
    rows = []
    for section in sections:
        for fn, fargs in section_tasks(section, sc):
            out = measure(fn, *fargs)
            for r in out if isinstance(out, list) else [out]:
                rows.append({**r, "section": section} if section == "compare" else r)
            print(f"[{time.time() - t_start:6.0f} s] {section} {fn.__name__}{fargs}", flush=True)
    name = "panjoin_paper"
    if sections != list(SECTIONS):
        name += "_" + "_".join(sections)
    if args.quick:
        name += "_quick"
    write(rows, sections, sc, (load0, os.getloadavg()[0]), time.time() - t_start, name)


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def _m(v: float) -> str:
    """Tuples/s in millions, 3 significant digits."""
    return f"{v / 1e6:.3g}M"


def _grid(rows: list[dict], series: list[str], col: str, fmt) -> list[str]:
    """Markdown table: one line per distinct ``series`` values, one column per ``col`` value."""
    cols = sorted({r[col] for r in rows})
    lines = [
        "| " + " | ".join(series) + " | " + " | ".join(f"{col}={_pow2(c)}" for c in cols) + " |",
        "|---" * len(series) + "|---:" * len(cols) + "|",
    ]
    for key in dict.fromkeys(tuple(r[s] for s in series) for r in rows):
        cells = {r[col]: fmt(r) for r in rows if tuple(r[s] for s in series) == key}
        shown = [_pow2(k) if isinstance(k, int) else str(k) for k in key]
        lines.append(
            "| " + " | ".join(shown) + " | " + " | ".join(cells.get(c, "") for c in cols) + " |"
        )
    return lines


def _rate(rows, store, **where) -> float | None:
    """The throughput of the first row of ``store`` whose fields equal ``where`` (a field
    given as None must be absent)."""
    for r in rows:
        if r["store"] == store and all(r.get(k) == v for k, v in where.items()):
            return r["tuples_per_s"]
    return None


def _insert_summary(rows: list[dict], n_sub: int, p: int, batches: list[int]) -> list[str]:
    out = []
    for b in batches:
        rates = {s: _rate(rows, s, n_bat=b, P=p, n_sub=n_sub, S=None) for s in STORES}
        if all(rates.values()):
            best = max(rates, key=rates.get)
            out.append(
                f"insert, N_Sub={_pow2(n_sub)}, P={_pow2(p)}, N_Bat={_pow2(b)}: fastest "
                f"{best} (" + ", ".join(f"{s} {_m(v)}" for s, v in rates.items()) + ")"
            )
    return out


def _probe_summary(rows: list[dict], n_sub: int, p: int, sc: dict) -> list[str]:
    pb, sels = sc["probe_batch"], sc["selectivities"]
    at = {
        x: {s: _rate(rows, x, S=s, P=p, n_sub=n_sub, n_bat=pb) for s in sels}
        for x in ("bisort", "bisort_ranges", "rap_table", "wib_tree")
    }
    parts = [
        f"S={_pow2(s)}: rap/wib {at['rap_table'][s] / at['wib_tree'][s]:.2f}x, bisort/rap "
        f"{at['bisort'][s] / at['rap_table'][s]:.2f}x, ranges/rap "
        f"{at['bisort_ranges'][s] / at['rap_table'][s]:.3g}x"
        for s in sels
        if all(at[x][s] for x in at)
    ]
    out = [f"probe, N_Sub={_pow2(n_sub)}, P={_pow2(p)}, N_Bat={_pow2(pb)}: " + "; ".join(parts)]
    out += [
        f"probe, N_Sub={_pow2(n_sub)}, P={_pow2(p)}: {x} at S={_pow2(sels[-1])} is "
        f"{v[sels[-1]] / v[sels[0]]:.2g}x its S={sels[0]} throughput"
        for x, v in at.items()
        if v[sels[0]] and v[sels[-1]]
    ]
    return out


def _summary(section: str, sel: list[dict], sc: dict) -> list[str]:
    """Ours, in numbers, for the paper's claims of ``section``."""
    out = []
    n_sub, pb = sc["n_sub"], sc["probe_batch"]
    if section == "insert":
        out += _insert_summary(sel, n_sub, sc["compare_p"], sc["batches"])
    if section == "probe":
        for p in sorted({r["P"] for r in sel if r["n_sub"] == n_sub}):
            out += _probe_summary(sel, n_sub, p, sc)
    if section == "compare":
        for n in sc["compare_n_subs"]:
            out += _insert_summary(sel, n, n // 128, sc["compare_batches"])
            out += _probe_summary(sel, n, n // 128, sc)
    if section == "balance":
        for p in sorted({r["P"] for r in sel}):
            for d in dict.fromkeys(r["dist"] for r in sel):
                seq = sorted(
                    (r["subwindow"], r["nmae"], r["floor"])
                    for r in sel
                    if r["P"] == p and r["dist"] == d
                )
                conv = next((k for k, e, f in seq if e <= 2 * f + 0.02), None)
                out.append(
                    f"P={_pow2(p)}, {d}: nMAE "
                    + " → ".join(f"{e:.3g}" for _, e, _ in seq)
                    + f" (floor {seq[0][2]:.3g}); within 2x the floor + 0.02 from subwindow "
                    f"{conv if conv else 'never'}"
                )
    if section == "batch":
        for s in STORES:
            for sel_ in (1, 64):
                a = _rate(sel, s, variant="sorted batch", S=sel_)
                b = _rate(sel, s, variant="one at a time", S=sel_)
                t1 = [
                    r["tuples_per_s"]
                    for r in sel
                    if r["store"] == s and r.get("S") == sel_ and r["variant"] == "1 thread"
                ]
                t2 = [
                    r["tuples_per_s"]
                    for r in sel
                    if r["store"] == s and r.get("S") == sel_ and r["variant"] == "2 threads"
                ]
                if a and b and t1 and t2:
                    out.append(
                        f"{s}, S={sel_}: sorted batch of 1K / one at a time {a / b:.2f}x; "
                        f"2 threads / 1 thread {max(t2) / max(t1):.2f}x at "
                        f"N_Bat={_pow2(pb)} (best of each)"
                    )
    if section == "targets":
        for b in (2**15, 2**10):
            bis, naive = _rate(sel, "bisort", n_bat=b), _rate(sel, "naive sort + merge", n_bat=b)
            if bis and naive:
                w = next(r for r in sel if r["store"] == "bisort" and r["n_bat"] == b)
                out.append(
                    f"batch {_pow2(b)}: bisort window {_m(bis)} tuples/s = "
                    f"{bis / TARGETS[b]:.0%} of the {_m(TARGETS[b])} target, "
                    f"{bis / naive:.2f}x the naive baseline ({_m(naive)}); per tuple "
                    f"{1e9 / w['probe_tuples_per_s']:.0f} ns probing and "
                    f"{1e9 / w['insert_tuples_per_s']:.0f} ns inserting"
                )
        bw = next((r["copy_gb_per_s"] for r in sel if "copy_gb_per_s" in r), None)
        if bw:
            n, w, b = window_bench.N_SUB, window_bench.WINDOW, 2**15
            # the naive window merges 16-byte items; BI-Sort's main arrays hold 8-byte items
            # (key_codes); both probe by streaming 8 bytes an item
            naive = (w * 32 + w * 8) / b
            ours = (n // 2 * 16 + 3 * n * 8) / b  # half a subwindow merged, 3 probed
            out.append(
                f"memory traffic per tuple at N_Bat 2^15, about: naive {naive:.0f} B (the "
                f"window merged and scanned), bisort window {ours:.0f} B (half a "
                f"subwindow merged, the keys of 3 scanned); at the {bw} GB/s copied above "
                f"that allows at most {bw * 1e3 / naive:.1f}M and {bw * 1e3 / ours:.1f}M "
                "tuples/s before any computation"
            )
        nl = [r for r in sel if r["store"] == "nested_loop"]
        if nl:
            best = max(r["evaluations_per_s"] for r in nl)
            out.append(
                f"nested_loop: up to {best / 1e6:.0f}M evaluations/s = "
                f"{best / TARGETS['nested_loop']:.0%} of the 300M target"
            )
    return out


#: Why our figures differ from the paper's (the mechanisms; the numbers are in the tables).
EXPLAIN = {
    "insert": "One thread for every store (the paper: BI-Sort inserts with 8), numba kernels "
    "driven from Python, 16-byte items (float64 key, int64 ref) in RaP-Table and WiB+-Tree "
    "where the paper has 8 (BI-Sort's main arrays hold 8-byte items, a 32-bit key code and "
    "ref: streamjoin.indexes.blocks.key_codes), a "
    "shared 2-core VM, N_Sub 2^20 (2^23 in compare) instead of 8M. BI-Sort's insertion is a "
    "merge into the main array, O(M / N_Bat) item moves per tuple, bound by memory bandwidth: "
    "it grows with N_Bat and falls with N_Sub as in Fig. 12a-b, and ignores P. Below N_Bat = B "
    "it is not flat as in the paper: our buffer merges together with the batch that overflows "
    "it, every B + N_Bat tuples, where the paper merges a full buffer every B. RaP-Table pays a "
    "rebounding search on P splitters and an LLAT append per tuple, so larger P is slower and "
    "N_Sub hardly matters, as in Fig. 10a-b. WiB+-Tree's leaf width is N_Sub / (P ln 2): at "
    "P = 2^16 its leaves hold ~23 items, split every few inserts, and the tree is a level "
    "taller, hence slower than at small P (the paper finds it insensitive to P).",
    "probe": "Our RaP-Table and WiB+-Tree share one probe kernel (llat.scan_partitions): it "
    "scans every item of every partition (leaf) a probe interval touches, twice (count, then "
    "write the pairs), matching each item against the active probes. At N_Bat = 32K >= P every "
    "partition is scanned per batch: O(N_Sub) per batch plus O(S) pairs per probe, so both "
    "fall with S and gain from larger P (smaller N_P), as in Fig. 10-11. BI-Sort touches only "
    "the candidate range of each probe; copied out as pairs it is output-bound at large S, "
    "kept as <id_start, id_end> records (the paper's format) it is insensitive to S. Its P "
    "matters at small N_Bat only, as in Fig. 12c. BI-Sort's pairs are its candidates: every "
    "main-array item whose key code is in the probe's code range, which the join core refines "
    "on the stored keys (not timed here; on these uniform 32-bit keys one code spans two key "
    "values, so few candidates fall outside the band).",
    "compare": "RaP-Table ≈ WiB+-Tree here where the paper has 1.7-2.4x: the shared partition "
    "sweep dominates at N_Bat = 32K, and the two differ only in finding the start partitions "
    "(rebounding search on the splitters vs. a tree descent). BI-Sort/RaP-Table in pairs mode "
    "is above the paper's 1.6-7x at S <= 4 (BI-Sort sweeps a dense batch merge-like, §III-E), "
    "within it around S = 16-64 and below 1 from S = 256, where copying the pairs out "
    "dominates; the paper's ~100x at large S is our ranges mode (records, not pairs). The insertion crossover moves to larger batches as N_Sub grows "
    "(BI-Sort's merge is O(N_Sub) per batch): compare it with Fig. 13a at 2^23.",
    "balance": "The paper plots MAE without a formula; ours is normalised by the ideal "
    "partition size. N_Sub / P items per partition leave a sampling noise no table can beat "
    "(the floor, larger for larger P: the paper's 'smaller P, lower MAE'); splitters fitted to "
    "the previous subwindow's sample add that sample's noise too, so a converged table sits "
    "near sqrt(2) times the floor, even on uniform values. Rank-size values repeat (the "
    "smallest up to N_Sub / 4300 times, ~240 at 2^20): a run of equal keys cannot be split, "
    "which bounds the balance once runs exceed N_Sub / P (128 at P = 2^13).",
    "batch": "No prange in the stores: two threads over halves of a sorted batch (the kernels "
    "release the GIL) stand in for the paper's 8-thread probes. Two threads are timed in wall "
    "time, on a 2-core machine whose load average (above) exceeds its cores: take the "
    "speed-ups as indications only (a ratio above 2 means the 1-thread run got less of the "
    "machine). The one-at-a-time baseline is our own kernel called per "
    "key (the paper's Fig. 11f compares with a Google B-tree).",
    "targets": "Not met. Per batch the window sorts the batch once (stable_order: numpy's "
    "vectorised sort of packed key/position words, ~7 ns per tuple at 32K) for probing and "
    "inserting, computes band_bounds, and probes every live subwindow (three: the oldest, "
    "partly expired, a full one and the newest), all appending to one output. A dense batch "
    "(at most 48 items per probe in a run, as at 32K) sweeps each run merge-like (§III-E): "
    "each start counted branch-free among the 64 items after the previous one; 22-36 ns per "
    "probe per full 2^20 subwindow (measured for the 8-byte items), ~13 of them streaming its 8 MB "
    "of items at one thread's read bandwidth, the rest the counting. A sparse "
    "batch (1K) searches the index array and the partition with branch-free binary searches "
    "interleaved over 32 probes with prefetches: ~100-130 ns per probe per subwindow, cache "
    "misses in the partitions overlapped 32 at a time. Inserts merge into a sorted buffer of "
    "N_Sub / 32 and move the main array once per buffer (~M / B items per tuple); the batch "
    "that fills a subwindow merges it into one run (~1.4 ns per item moved: a data-dependent "
    "compare each, 22-41% of the copy bandwidth). The traffic estimate above leaves room; "
    "what bounds a core here is the work per item in the sweeps and merges, not the bytes. "
    "The naive sort + merge-scan, for which the issue estimated ~14M/s, ran at the rate "
    "in the table above.",
}


def write(rows: list[dict], sections: list[str], sc: dict, load, elapsed: float, name: str) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    base = os.path.join(RESULTS, name)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(base + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    m = machine_info()
    lines = [
        "# PanJoin §V-A at this machine's scale",
        "",
        "Subwindow stores measured alone, one thread, sorted batches, uniform 32-bit keys; "
        "input tuples/s in millions (M). See the docstring of `experiments/panjoin_paper.py`.",
        f"Machine: {m['cpus']} CPUs, {m['processor']}, {m['platform']}, Python {m['python']}; "
        f"load average {load[0]:.1f} at the start, {load[1]:.1f} at the end (other jobs share "
        f"the 2 cores: figures are noisy); commit {commit()} plus the working tree; "
        f"`python {' '.join(sys.argv)}`; {elapsed / 60:.1f} minutes.",
    ]
    tput = lambda r: _m(r["tuples_per_s"])  # noqa: E731
    for section in sections:
        sel = [r for r in rows if r["section"] == section]
        if not sel:
            continue
        lines += ["", f"## {section}", "", f"Paper: {PAPER[section]}.", ""]
        if section in ("insert", "compare"):
            ins = [r for r in sel if r.get("S") is None]
            lines += (
                ["Insertion, tuples/s:", ""]
                + _grid(ins, ["store", "n_sub", "P"], "n_bat", tput)
                + [""]
            )
        if section in ("probe", "compare"):
            pr = [r for r in sel if r.get("S") is not None]
            s1 = [r for r in pr if r["S"] == 1 and r["n_bat"] in sc["batches"]]
            if s1:
                lines += (
                    ["Probing at S = 1, tuples/s:", ""]
                    + _grid(s1, ["store", "n_sub", "P"], "n_bat", tput)
                    + [""]
                )
            vs = [
                r
                for r in pr
                if r["n_bat"] == sc["probe_batch"]
                and (section == "compare" or r["n_sub"] == sc["n_sub"])
            ]
            lines += (
                [f"Probing at N_Bat = {_pow2(sc['probe_batch'])}, tuples/s:", ""]
                + _grid(vs, ["store", "n_sub", "P"], "S", tput)
                + [""]
            )
            wib = [r for r in rows if r.get("leaves")]
            if wib and section == "probe":
                lines += [
                    "WiB+-Tree leaves after a fill (P is approximate, as in §V-A2): "
                    + ", ".join(
                        sorted(
                            {
                                f"N_Sub {_pow2(r['n_sub'])} P {_pow2(r['P'])}: {r['leaves']}"
                                for r in wib
                            }
                        )
                    )
                    + ".",
                    "",
                ]
        if section == "balance":
            lines += [
                "Normalized MAE of RaP-Table's partition sizes per subwindow (subwindow 1 "
                "uses the even split of the 32-bit range; k uses k - 1 adjustments):",
                "",
            ]
            lines += _grid(sel, ["dist", "P"], "subwindow", lambda r: f"{r['nmae']:.3g}")
            lines += ["", "Largest partition / ideal size:", ""]
            lines += _grid(sel, ["dist", "P"], "subwindow", lambda r: f"{r['max_over_ideal']:g}")
            lines += [""]
        if section == "batch":
            br = [r for r in sel if "tuples_per_s" in r]
            lines += [
                "Probe variants, tuples/s (CPU time; the thread rows in wall time, "
                "repeated interleaved):",
                "",
            ]
            lines += ["| store | S | variant | N_Bat | tuples/s |", "|---|---|---|---|---:|"]
            lines += [
                f"| {r['store']} | {r['S']} | {r['variant']} | {_pow2(r['n_bat'])} | "
                f"{_m(r['tuples_per_s'])} |"
                for r in br
            ]
            sc_rows = [r for r in sel if "ns_per_tuple" in r]
            lines += ["", "The chain's per-batch work, ns per tuple:", ""]
            lines += _grid(sc_rows, ["variant"], "n_bat", lambda r: f"{r['ns_per_tuple']:g}")
            lines += [""]
        if section == "targets":
            win = [r for r in sel if "probe_tuples_per_s" in r]
            lines += [
                "| window index | N_Bat | insert+probe tuples/s | probe | insert | target |",
                "|---|---|---:|---:|---:|---:|",
            ]
            lines += [
                f"| {r['store']} | {_pow2(r['n_bat'])} | {_m(r['tuples_per_s'])} | "
                f"{_m(r['probe_tuples_per_s'])} | {_m(r['insert_tuples_per_s'])} | "
                f"{_m(r['target'])} |"
                for r in win
            ]
            lines += [
                "",
                "| nested_loop window | probe batch | evaluations/s | pairs per probe | target |",
                "|---:|---:|---:|---:|---:|",
            ]
            lines += [
                f"| {r['window']} | {r['n_bat']} | {r['evaluations_per_s'] / 1e6:.0f}M | "
                f"{r['matches_per_probe']:.2g} | {r['target'] / 1e6:.0f}M |"
                for r in sel
                if r["store"] == "nested_loop"
            ]
            lines += [
                f"\nOne thread's memory bandwidth: {r['read_gb_per_s']} GB/s read, "
                f"{r['copy_gb_per_s']} GB/s copied (read + write)."
                for r in sel
                if "read_gb_per_s" in r
            ] + [""]
        lines += ["Ours: " + s + "." for s in _summary(section, sel, sc)]
        lines += ["", f"Differences: {EXPLAIN[section]}"]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    plot(rows, sections, sc, base + ".png")
    print("\n".join(lines))


# --------------------------------------------------------------------------------------------
# Figure
# --------------------------------------------------------------------------------------------

COLORS = {"bisort": "C0", "bisort_ranges": "C4", "rap_table": "C1", "wib_tree": "C2"}
STYLES = ["-", "--", ":"]


def _panel(ax, rows, x, series, title, xlabel, ylabel="tuples/s") -> None:
    """Throughput vs ``x``, one line per value of the ``series`` fields. With several stores,
    colour tells the store and line style the other field."""
    keys = list(dict.fromkeys(tuple(r[s] for s in series) for r in rows))
    by_store = series[0] == "store" and len({k[0] for k in keys}) > 1
    others = list(dict.fromkeys(k[1:] for k in keys))
    for key in keys:
        # one point per x: a probe measurement at S = 1 can appear in two sweeps
        pts = sorted(
            {r[x]: r["tuples_per_s"] for r in rows if tuple(r[s] for s in series) == key}.items()
        )
        label = ", ".join(_pow2(k) if isinstance(k, int) else str(k) for k in key)
        style = (
            {"color": COLORS[key[0]], "ls": STYLES[others.index(key[1:]) % 3]} if by_store else {}
        )
        ax.plot(*zip(*pts, strict=True), marker="o", ms=3, label=label, **style)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=6)


def plot(rows: list[dict], sections: list[str], sc: dict, path: str) -> None:
    """One figure: per store, the paper's a/b/c/e panels (Fig. 10-12); then Fig. 13a-b,
    Fig. 10f and the targets. None when the sections run have no panel (``batch`` alone)."""
    plt = viz._pyplot()
    n_sub, fixed_p, pb = sc["n_sub"], sc["fixed_p"], sc["probe_batch"]
    ins = [r for r in rows if r["section"] == "insert"]
    pr = [r for r in rows if r["section"] == "probe"]
    panels = []
    for st, fig in zip(STORES, ("12", "10", "11"), strict=True):
        mine = lambda rs, s=st: [r for r in rs if r["store"] == s]  # noqa: E731
        panels += [
            (
                mine([r for r in ins if r["n_sub"] == n_sub]),
                "n_bat",
                ["P"],
                f"{st} insert, N_Sub={_pow2(n_sub)} (Fig. {fig}a)",
                "N_Bat",
            ),
            (
                mine([r for r in ins if r["P"] == fixed_p]),
                "n_bat",
                ["n_sub"],
                f"{st} insert, P={_pow2(fixed_p)} (Fig. {fig}b)",
                "N_Bat",
            ),
            (
                mine([r for r in pr if r["S"] == 1 and r["n_sub"] == n_sub]),
                "n_bat",
                ["P"],
                f"{st} probe S=1, N_Sub={_pow2(n_sub)} (Fig. {fig}c)",
                "N_Bat",
            ),
            (
                mine([r for r in pr if r["S"] == 1 and r["P"] == fixed_p]),
                "n_bat",
                ["n_sub"],
                f"{st} probe S=1, P={_pow2(fixed_p)}",
                "N_Bat",
            ),
            (
                [
                    r
                    for r in pr
                    if r["store"].startswith(st) and r["n_bat"] == pb and r["n_sub"] == n_sub
                ],
                "S",
                ["store", "P"],
                f"{st} probe N_Bat={_pow2(pb)} (Fig. {fig}e)",
                "selectivity S",
            ),
        ]
    cmp_ = [r for r in rows if r["section"] == "compare"]
    panels += [
        (
            [r for r in cmp_ if r.get("S") is None],
            "n_bat",
            ["store", "n_sub"],
            "insert, P = N_Sub / 128 (Fig. 13a)",
            "N_Bat",
        ),
        (
            [r for r in cmp_ if r.get("S") is not None and r["n_bat"] == pb],
            "S",
            ["store", "n_sub"],
            f"band probe, N_Bat={_pow2(pb)}, P = N_Sub / 128 (Fig. 13b)",
            "selectivity S",
        ),
    ]
    panels = [p for p in panels if p[0]]
    bal = [r for r in rows if r["section"] == "balance"]
    tgt = [r for r in rows if r["section"] == "targets" and "probe_tuples_per_s" in r]
    extra = len(sc["balance_p"]) * bool(bal) + bool(tgt)
    if not panels and not extra:  # e.g. --only batch: its table is all there is
        return
    cols = 5
    n_rows = -(-(len(panels) + extra) // cols)
    fig, axes = plt.subplots(n_rows, cols, figsize=(4.2 * cols, 3.3 * n_rows), squeeze=False)
    flat = list(axes.flat)
    for ax, p in zip(flat, panels, strict=False):
        _panel(ax, *p)
    k = len(panels)
    if bal:
        for p in sc["balance_p"]:
            ax = flat[k]
            k += 1
            for d in dict.fromkeys(r["dist"] for r in bal):
                pts = sorted(
                    (r["subwindow"], r["nmae"]) for r in bal if r["dist"] == d and r["P"] == p
                )
                ax.plot(*zip(*pts, strict=True), marker="o", ms=3, label=d)
            floor = next(r["floor"] for r in bal if r["P"] == p)
            ax.axhline(floor, color="grey", ls=":", label="sampling floor")
            ax.set_yscale("log")
            ax.set_title(f"RaP-Table balance, P={_pow2(p)} (Fig. 10f)", fontsize=9)
            ax.set_xlabel("subwindow (adjustments + 1)", fontsize=8)
            ax.set_ylabel("normalized MAE", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(True, alpha=0.3, which="both")
            ax.legend(fontsize=6)
    if tgt:
        ax = flat[k]
        k += 1
        short = {"naive sort + merge": "naive"}
        labels = [f"{short.get(r['store'], r['store'])}\n{_pow2(r['n_bat'])}" for r in tgt]
        ax.bar(
            range(len(tgt)),
            [r["tuples_per_s"] for r in tgt],
            color=["C0" if r["store"].startswith("bisort") else "C7" for r in tgt],
        )
        for i, r in enumerate(tgt):
            ax.hlines(r["target"], i - 0.4, i + 0.4, color="red")
        ax.set_xticks(range(len(tgt)), labels, fontsize=6, rotation=30)
        ax.set_yscale("log")
        ax.set_ylabel("insert+probe tuples/s", fontsize=8)
        ax.set_title("bisort window 2^21 vs naive, by N_Bat (red: target)", fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in flat[k:]:
        ax.set_visible(False)
    fig.tight_layout()
    viz.save_figure(fig, path)


if __name__ == "__main__":
    main()
