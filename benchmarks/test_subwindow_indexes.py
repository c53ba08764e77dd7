"""Insert + probe throughput of a ``bisort`` window at 2**20-item subwindows (pytest-benchmark).

Run: ``python -m pytest benchmarks/test_subwindow_indexes.py --benchmark-enable -o addopts=""
-p no:cacheprovider``.

Workload (PanJoin §V-A3 at this machine's scale): a count window of ``W = 2**21`` uniform keys
(two subwindows of ``N_Sub = 2**20``), filled before timing. Each round streams ``N_Sub``
tuples in batches of ``b`` (32K or 1K): sort the batch by key once, probe the window with it (a
band join of selectivity 1, i.e. one match per probe key in a full subwindow on average), insert
it with its order, expire what left the window -- as the join core does
(``WindowIndex.takes_order``), so each batch is sorted once, and that sort is timed. A round is
one subwindow's worth, so the newest subwindow passes through every fill level once: BI-Sort's
merges cost O(fill) per batch, and a shorter round from the empty subwindow the window starts
with would flatter it. Throughput = streamed tuples
(each probed and inserted) per second; ``extra_info`` splits the time into probing and
inserting.

Against the limit: for ``bisort`` and ``rap_table`` the run also reports the bytes their
kernels must move per tuple (:func:`streamjoin.indexes.panjoin.bisort.stream_bytes`,
:func:`streamjoin.indexes.traffic.rap_table`, models written from the code) and the
throughput as a fraction of what this machine's copy bandwidth allows for them
(:class:`streamjoin.roofline.Roofline`, measured in the same process): whole, insert alone and
probe alone (``extra_info``).

``bisort`` runs with its defaults besides ``P = N_Sub / 128`` (the paper's partition size)
and 16-byte items: a sorted insertion buffer of ``N_Sub / 32``, one thread. ``bisort_2threads`` is the same with
``threads=2``: probe batches of 4K keys or more are cut between two threads (PanJoin §III-E's
multi-threaded probing; the 1K batches stay on one). BI-Sort's targets are for one core; this
shows what a second core adds to the probe when the machine has one free.

Item layouts (docs/design.md §2): ``bisort_compact`` and ``rap_table_compact`` hold 8-byte items (a
key code and a relative ref, :mod:`streamjoin.indexes.blocks.key_codes`); their probes return a
superset that is refined on the stored keys inside the timed probe phase, as the join core
does (:func:`refine`); they are the indexes' defaults. ``bisort`` and ``rap_table`` hold 16-byte
items (float64 key, int64 ref, ``layout="wide"``) and probe exactly: the pairs compare the
layouts side by side in one run. ``wib_tree`` (16-byte items, its default) and
``wib_tree_compact`` (full subwindows packed) likewise.

Baseline, in the same run: the fair naive index -- the window as one array sorted by key;
insert merges the sorted batch into the window in one linear pass (which also drops what
``expire`` marked), probe merge-scans the whole window once with the sorted batch. Both passes
are O(window + batch) per batch; BI-Sort's subwindows, buffer and index array are what it adds.
"""

import time

import numpy as np
import pytest
from numba import njit

from streamjoin.indexes import traffic
from streamjoin.indexes.base import in_band
from streamjoin.indexes.blocks.key_order import stable_key_order
from streamjoin.indexes.panjoin.bisort import BISortIndex, stream_bytes
from streamjoin.indexes.panjoin.rap_table import RaPTableIndex
from streamjoin.indexes.panjoin.wib_tree import WiBTreeIndex
from streamjoin.roofline import Roofline

N_SUB = 2**20
WINDOW = 2 * N_SUB
KEY_RANGE = 2.0**30
EPS = KEY_RANGE / (2 * N_SUB)  # 2·EPS·N_SUB / KEY_RANGE = 1 match per probe per subwindow
BATCHES = {32 * 1024: N_SUB // (32 * 1024), 1024: N_SUB // 1024}  # batches per round
ROUNDS = {32 * 1024: 3, 1024: 1}  # the baseline takes ~15 s per round of 1K batches


@njit(cache=True, nogil=True)
def _merge_scan(keys, refs, probes, lo, hi, min_ref, out_p, out_r, write):
    n = 0
    start = 0
    for i in range(probes.shape[0]):
        p = probes[i]
        while start < keys.shape[0] and keys[start] - p < lo:
            start += 1
        j = start
        while j < keys.shape[0] and keys[j] - p <= hi:
            if refs[j] >= min_ref and in_band(keys[j], p, lo, hi):
                if write:
                    out_p[n] = i
                    out_r[n] = refs[j]
                n += 1
            j += 1
    return n


@njit(cache=True, nogil=True)
def merge_scan(keys, refs, probes, lo, hi, min_ref):
    """``(i, ref)`` for items with ``lo <= key - probes[i] <= hi`` and ``ref >= min_ref``;
    ``keys`` and ``probes`` ascending. A linear pass over the window counts the matches, a
    second one stores them: O(n + m + matches)."""
    none = np.empty(0, dtype=np.int64)
    n = _merge_scan(keys, refs, probes, lo, hi, min_ref, none, none, False)
    out_p = np.empty(n, dtype=np.int64)
    out_r = np.empty(n, dtype=np.int64)
    _merge_scan(keys, refs, probes, lo, hi, min_ref, out_p, out_r, True)
    return out_p, out_r


@njit(cache=True, nogil=True)
def refine(pos, refs, probes, key_of, lo, hi):
    """How many candidates ``(pos, ref)`` hold ``lo <= key_of[ref] - probes[pos] <= hi``: the
    join core's refinement of a compact index's superset (one read of the stored key per
    candidate, :func:`streamjoin.actors.join_kernels.probe_pairs`)."""
    n = 0
    for t in range(pos.shape[0]):
        n += in_band(key_of[refs[t]], probes[pos[t]], lo, hi)
    return n


@njit(cache=True, nogil=True)
def merge_live(keys, refs, batch_keys, batch_refs, min_ref, out_keys, out_refs):
    """Merge the sorted window ``keys`` with the sorted batch into ``out``, dropping window items
    with ``ref < min_ref``; on equal keys window items come first. Returns the items written.
    O(n + len(batch))."""
    i = j = w = 0
    n, nb = keys.shape[0], batch_keys.shape[0]
    while i < n and j < nb:
        if keys[i] <= batch_keys[j]:
            if refs[i] >= min_ref:
                out_keys[w] = keys[i]
                out_refs[w] = refs[i]
                w += 1
            i += 1
        else:
            out_keys[w] = batch_keys[j]
            out_refs[w] = batch_refs[j]
            w += 1
            j += 1
    for k in range(i, n):
        if refs[k] >= min_ref:
            out_keys[w] = keys[k]
            out_refs[w] = refs[k]
            w += 1
    for k in range(j, nb):
        out_keys[w] = batch_keys[k]
        out_refs[w] = batch_refs[k]
        w += 1
    return w


class SortedWindow:
    """The baseline: the whole window in one array sorted by key, merged into a spare array of
    the same capacity on every insert (so no pass allocates or sorts the window).

    Like the chained indexes it takes the batch's stable key order (``takes_order``) and sorts
    only what comes without one. Complexity: ``insert`` of b items O(w + b) with the order, else
    O(b log b) more; ``probe`` of m keys O(w + m + matches) in key order, else O(m log m) more;
    ``expire`` O(1) (the next insert drops the items).
    """

    takes_order = True

    def __init__(self) -> None:
        self._arrays = [np.empty(0), np.empty(0, dtype=np.int64)]
        self._spare = [np.empty(0), np.empty(0, dtype=np.int64)]
        self._n = 0
        self._before = np.iinfo(np.int64).min

    def insert(self, keys, refs, order=None):
        order = stable_key_order(keys[0], order)
        order = np.arange(len(refs)) if order is None else order
        need = self._n + len(refs)
        if len(self._spare[0]) < need:
            self._spare = [np.empty(2 * need), np.empty(2 * need, dtype=np.int64)]
        win_keys, win_refs = (a[: self._n] for a in self._arrays)
        self._n = merge_live(
            win_keys, win_refs, keys[0][order], refs[order], self._before, *self._spare
        )
        self._arrays, self._spare = self._spare, self._arrays

    def probe(self, keys, lo, hi):
        order = stable_key_order(keys[0])  # None: in key order already
        probes = keys[0] if order is None else keys[0][order]
        win_keys, win_refs = (a[: self._n] for a in self._arrays)
        pos, refs = merge_scan(win_keys, win_refs, probes, lo[0], hi[0], self._before)
        return (pos, refs) if order is None else (order[pos], refs)

    def expire(self, before_ref):
        self._before = max(self._before, int(before_ref))


class Stream:
    """Uniform keys in ``[0, KEY_RANGE)`` with refs ``0, 1, …``; keeps the window at WINDOW.
    ``clock`` times the probe and insert phases (wall time by default); the batch's sort counts
    to the probe phase. A round's keys are drawn before it (:meth:`draw`), outside the timing."""

    def __init__(self, index, seed: int = 1, clock=time.perf_counter) -> None:
        self.index = index
        self.clock = clock
        self.rng = np.random.default_rng(seed)
        self.next_ref = 0
        self.key_of = np.empty(WINDOW + 8 * N_SUB)  # the stored keys, by ref (the refinement)
        self.times = {"probe": 0.0, "insert": 0.0}
        self.matches = 0
        self.step(self.draw(WINDOW)[0], probe=False)

    def draw(self, b: int, batches: int = 1) -> np.ndarray:
        """Keys of ``batches`` batches of ``b``: float64 (batches, 1, b)."""
        return self.rng.uniform(0, KEY_RANGE, (batches, 1, b))

    def step(self, keys: np.ndarray, probe: bool = True) -> None:
        """Probe with, insert and expire one batch of ``keys`` float64 (1, b)."""
        b = keys.shape[1]
        refs = np.arange(self.next_ref, self.next_ref + b)
        if self.next_ref + b > len(self.key_of):
            self.key_of = np.resize(self.key_of, 2 * len(self.key_of))
        self.key_of[self.next_ref : self.next_ref + b] = keys[0]
        self.next_ref += b
        t0 = self.clock()
        order = stable_key_order(keys[0])  # once per batch, as the join core does
        if probe:
            probes = keys[:, order]
            pos, refs_found = self.index.probe(probes, np.array([-EPS]), np.array([EPS]))
            if getattr(self.index, "exact", True):
                self.matches += len(pos)
            else:  # a compact index's candidates, refined on the stored keys
                self.matches += refine(pos, refs_found, probes[0], self.key_of, -EPS, EPS)
        t1 = self.clock()
        self.index.insert(keys, refs, order=order)
        self.index.expire(self.next_ref - WINDOW)
        t2 = self.clock()
        self.times["probe"] += t1 - t0
        self.times["insert"] += t2 - t1

    def round(self, batches: np.ndarray) -> None:
        for keys in batches:
            self.step(keys)


INDEXES = {
    "bisort": lambda: BISortIndex(subwindow_size=N_SUB, partitions=N_SUB // 128, layout="wide"),
    "bisort_compact": lambda: BISortIndex(
        subwindow_size=N_SUB, partitions=N_SUB // 128, layout="compact"
    ),
    "bisort_2threads": lambda: BISortIndex(
        subwindow_size=N_SUB, partitions=N_SUB // 128, threads=2, layout="wide"
    ),
    "rap_table": lambda: RaPTableIndex(
        subwindow_size=N_SUB, partitions=N_SUB // 128, domain=(0.0, KEY_RANGE), layout="wide"
    ),
    # compact items in the subwindows after the first, refined
    "rap_table_compact": lambda: RaPTableIndex(
        subwindow_size=N_SUB, partitions=N_SUB // 128, domain=(0.0, KEY_RANGE), layout="compact"
    ),
    "wib_tree": lambda: WiBTreeIndex(subwindow_size=N_SUB, layout="wide"),
    "wib_tree_compact": lambda: WiBTreeIndex(subwindow_size=N_SUB, layout="compact"),
    "sorted_baseline": SortedWindow,
}


def _bytes_per_tuple(name: str, index, batch: int) -> dict[str, float] | None:
    """``{"insert", "probe", "total"}`` bytes per tuple by the index's model
    (:func:`streamjoin.indexes.panjoin.bisort.stream_bytes`, :mod:`streamjoin.indexes.traffic`); None
    for the baseline."""
    layout = index._subwindows[-1].layout if hasattr(index, "_subwindows") else None
    if name.startswith("bisort"):
        buffer = index._subwindows[-1].buffer_size
        return stream_bytes(N_SUB, buffer, N_SUB // 128, batch, WINDOW, layout)
    if name.startswith("rap_table"):
        m = traffic.rap_table(
            WINDOW, batch, subwindow_size=N_SUB, partitions=N_SUB // 128, layout=layout
        )
    elif name.startswith("wib_tree"):
        m = traffic.wib_tree(WINDOW, batch, subwindow_size=N_SUB, layout=layout)
    else:
        return None
    insert = m["insert_bytes"] + m["upkeep_bytes"]
    return {"insert": insert, "probe": m["probe_bytes"], "total": m["total_bytes"]}


@pytest.fixture(scope="session")
def roofline():
    """This machine's copy bandwidth and dependent-miss latency, measured in this process."""
    return Roofline.measure()


@pytest.mark.parametrize("batch", BATCHES, ids=["batch32K", "batch1K"])
@pytest.mark.parametrize("index", INDEXES)
def test_insert_probe_throughput(benchmark, index, batch, roofline):
    benchmark.group = f"window 2**21, subwindow 2**20, batch {batch}, selectivity 1"
    stream = Stream(INDEXES[index]())
    stream.round(stream.draw(batch, 4))  # warm: compile; the window is full already
    stream.times = {"probe": 0.0, "insert": 0.0}
    stream.matches = 0
    benchmark.pedantic(
        stream.round,
        setup=lambda: ((stream.draw(batch, BATCHES[batch]),), {}),
        rounds=ROUNDS[batch],
        iterations=1,
    )
    total = ROUNDS[batch] * BATCHES[batch] * batch
    benchmark.extra_info["tuples_per_s"] = BATCHES[batch] * batch / benchmark.stats.stats.mean
    benchmark.extra_info["probe_tuples_per_s"] = total / stream.times["probe"]
    benchmark.extra_info["insert_tuples_per_s"] = total / stream.times["insert"]
    benchmark.extra_info["matches_per_probe"] = stream.matches / total
    model = _bytes_per_tuple(index, stream.index, batch)
    if model is not None:
        # the bytes the index's kernels must move per tuple against this machine's copy
        # bandwidth: the share of the memory roofline reached, whole and by phase
        info = benchmark.extra_info
        info["roofline"] = str(roofline)
        info["model_bytes_per_tuple"] = model
        info["roofline_fraction"] = roofline.fraction(info["tuples_per_s"], model["total"])
        info["insert_roofline_fraction"] = roofline.fraction(
            info["insert_tuples_per_s"], model["insert"]
        )
        info["probe_roofline_fraction"] = roofline.fraction(
            info["probe_tuples_per_s"], model["probe"]
        )
    assert 1 < stream.matches / total < 3  # about 2: one per full subwindow


@pytest.mark.parametrize("layout", ["wide", "compact"])
def test_bisort_matches_baseline_on_benchmark_shape(layout):
    """The benchmark's configuration is exact: both indexes return the same pairs (small). A
    compact index's candidates are refined on the full keys, as the join core does: integer
    keys get exact codes, but a probe past a packed subwindow's range meets its extreme codes."""
    rng = np.random.default_rng(2)
    bisort = BISortIndex(subwindow_size=4096, partitions=32, layout=layout)
    baseline = SortedWindow()
    key_of = np.empty(20_000)
    found = 0
    for start in range(0, 20_000, 1000):
        keys = rng.uniform(0, 2**16, (1, 1000)).round()
        lo, hi = np.array([-3.0]), np.array([3.0])
        got = []
        for ix in (bisort, baseline):
            pos, refs = ix.probe(keys, lo, hi)
            if ix is bisort and not bisort.exact:
                d = key_of[refs] - keys[0, pos]
                keep = (d >= lo[0]) & (d <= hi[0])
                pos, refs = pos[keep], refs[keep]
            got.append(sorted(zip(pos.tolist(), refs.tolist(), strict=True)))
        assert got[0] == got[1]
        found += len(got[0])
        key_of[start : start + 1000] = keys[0]
        for ix in (bisort, baseline):
            ix.insert(keys, np.arange(start, start + 1000))
            ix.expire(start - 8192)
    assert found > 10_000
