"""Insert + probe throughput of a ``bisort`` window at 2**20-item subwindows (pytest-benchmark).

Run: ``python -m pytest benchmarks/test_subwindow_indexes.py --benchmark-enable -o addopts=""
-p no:cacheprovider``.

Workload (PanJoin §V-A3 at this machine's scale): a count window of ``W = 2**21`` uniform keys
(two subwindows of ``N_Sub = 2**20``), filled before timing. Each round streams batches of
``b`` tuples (16 batches of 32K or 64 of 1K): probe the window with the batch (a band join of selectivity 1, i.e. one match per
probe key in a full subwindow on average), insert the batch, expire what left the window.
Throughput = streamed tuples (each probed and inserted) per second; ``extra_info`` splits the
time into probing and inserting.

Baseline, in the same run: the naive index a user would write first -- the window as one array
sorted by key; insert sorts the concatenation, probe sorts the batch and merge-scans the whole
window once, expire filters by ref.
"""

import time

import numpy as np
import pytest
from numba import njit

from streamjoin.indexes.base import in_band
from streamjoin.indexes.bisort import BISortIndex

N_SUB = 2**20
WINDOW = 2 * N_SUB
KEY_RANGE = 2.0**30
EPS = KEY_RANGE / (2 * N_SUB)  # 2·EPS·N_SUB / KEY_RANGE = 1 match per probe per subwindow
BATCHES = {32 * 1024: 16, 1024: 64}  # batches per round


@njit(cache=True, nogil=True)
def _merge_scan(keys, refs, probes, lo, hi, out_p, out_r, write):
    n = 0
    start = 0
    for i in range(probes.shape[0]):
        p = probes[i]
        while start < keys.shape[0] and keys[start] - p < lo:
            start += 1
        j = start
        while j < keys.shape[0] and keys[j] - p <= hi:
            if in_band(keys[j], p, lo, hi):
                if write:
                    out_p[n] = i
                    out_r[n] = refs[j]
                n += 1
            j += 1
    return n


@njit(cache=True, nogil=True)
def merge_scan(keys, refs, probes, lo, hi):
    """``(i, ref)`` for items with ``lo <= key - probes[i] <= hi``; ``keys`` and ``probes``
    ascending. A linear pass over the window counts the matches, a second one stores them:
    O(n + m + matches)."""
    none = np.empty(0, dtype=np.int64)
    n = _merge_scan(keys, refs, probes, lo, hi, none, none, False)
    out_p = np.empty(n, dtype=np.int64)
    out_r = np.empty(n, dtype=np.int64)
    _merge_scan(keys, refs, probes, lo, hi, out_p, out_r, True)
    return out_p, out_r


class SortedWindow:
    """The baseline: the whole window sorted by key."""

    def __init__(self) -> None:
        self.keys = np.empty(0)
        self.refs = np.empty(0, dtype=np.int64)

    def insert(self, keys, refs):
        k, r = np.concatenate([self.keys, keys[0]]), np.concatenate([self.refs, refs])
        order = np.argsort(k, kind="stable")
        self.keys, self.refs = k[order], r[order]

    def probe(self, keys, lo, hi):
        order = np.argsort(keys[0])
        pos, refs = merge_scan(self.keys, self.refs, keys[0][order], lo[0], hi[0])
        return order[pos], refs

    def expire(self, before_ref):
        live = self.refs >= before_ref
        self.keys, self.refs = self.keys[live], self.refs[live]


class Stream:
    """Uniform keys in ``[0, KEY_RANGE)`` with refs ``0, 1, …``; keeps the window at WINDOW."""

    def __init__(self, index, seed: int = 1) -> None:
        self.index = index
        self.rng = np.random.default_rng(seed)
        self.next_ref = 0
        self.times = {"probe": 0.0, "insert": 0.0}
        self.matches = 0
        self.step(WINDOW, probe=False)

    def step(self, b: int, probe: bool = True) -> None:
        keys = self.rng.uniform(0, KEY_RANGE, (1, b))
        refs = np.arange(self.next_ref, self.next_ref + b)
        self.next_ref += b
        t0 = time.perf_counter()
        if probe:
            pos, _ = self.index.probe(keys, np.array([-EPS]), np.array([EPS]))
            self.matches += len(pos)
        t1 = time.perf_counter()
        self.index.insert(keys, refs)
        self.index.expire(self.next_ref - WINDOW)
        t2 = time.perf_counter()
        self.times["probe"] += t1 - t0
        self.times["insert"] += t2 - t1

    def round(self, b: int) -> None:
        for _ in range(BATCHES[b]):
            self.step(b)


INDEXES = {
    "bisort": lambda: BISortIndex(subwindow_size=N_SUB, partitions=N_SUB // 128),
    "sorted_baseline": SortedWindow,
}


@pytest.mark.parametrize("batch", BATCHES, ids=["batch32K", "batch1K"])
@pytest.mark.parametrize("index", INDEXES)
def test_insert_probe_throughput(benchmark, index, batch):
    benchmark.group = f"window 2**21, subwindow 2**20, batch {batch}, selectivity 1"
    stream = Stream(INDEXES[index]())
    stream.round(batch)  # warm: compile, and reach the steady state of the chain
    stream.times = {"probe": 0.0, "insert": 0.0}
    stream.matches = 0
    benchmark.pedantic(stream.round, args=(batch,), rounds=3, iterations=1)
    total = 3 * BATCHES[batch] * batch
    benchmark.extra_info["tuples_per_s"] = BATCHES[batch] * batch / benchmark.stats.stats.mean
    benchmark.extra_info["probe_tuples_per_s"] = total / stream.times["probe"]
    benchmark.extra_info["insert_tuples_per_s"] = total / stream.times["insert"]
    benchmark.extra_info["matches_per_probe"] = stream.matches / total
    assert 1 < stream.matches / total < 3  # about 2: one per full subwindow


def test_bisort_matches_baseline_on_benchmark_shape():
    """The benchmark's configuration is exact: both indexes return the same pairs (small)."""
    rng = np.random.default_rng(2)
    bisort, baseline = BISortIndex(subwindow_size=4096, partitions=32), SortedWindow()
    for start in range(0, 20_000, 1000):
        keys = rng.uniform(0, 2**16, (1, 1000)).round()
        lo, hi = np.array([-3.0]), np.array([3.0])
        got = [sorted(zip(*ix.probe(keys, lo, hi), strict=True)) for ix in (bisort, baseline)]
        assert got[0] == got[1]
        for ix in (bisort, baseline):
            ix.insert(keys, np.arange(start, start + 1000))
            ix.expire(start - 8192)
