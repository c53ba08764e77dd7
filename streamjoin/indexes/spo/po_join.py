"""``po_join``: SPO-Join's window index (Aslam, Simonini & Beedkar, §3–§4): a mutable part for
fast inserts and a linked set of immutable PO-Join structures for fast two-condition probes.

New items go into the mutable part (§4.1, :mod:`~streamjoin.indexes.spo.mutable_part`): a
B+-tree per key row whose probe results become bit arrays over the part's slots, ANDed. When
it holds ``merge_every`` items (the threshold δ) it is merged (§4.2, Alg. 1 l. 7–14) into a
new PO-Join structure — IE-Join's sorted arrays, permutation array and offsets
(:mod:`~streamjoin.indexes.spo.ie_runs`) — built in O(δ) from the trees' sorted leaves, and
emptied. With ``subintervals = k`` a merge is divided into k structures of consecutive
arrivals (§4.5, "dividing the sliding interval"), which the ``spo`` topology spreads over its
workers. A probe searches the mutable part and every structure (§4.3, Alg. 4), each
structure with IE-Join's bit-array scan batched over the probe keys. Expiry is coarse
(§3, as the chained index): the oldest structure leaves whole once its newest item has
expired; items of the one straddling the window's edge, and expired items still in the
mutable part, are skipped exactly by their ref.

It serves any one or two conditions (``band``, ``equal``, inequalities; two one-sided
inequalities are the case it is built for: SPO-Join's Q1 and Q2). A join core gives it the
first two conditions an index can serve (:func:`~streamjoin.indexes.plan`), the rest are
residual filters.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from streamjoin.indexes.base import WindowIndex, node_size, register
from streamjoin.indexes.blocks.key_order import stable_order
from streamjoin.indexes.spo.ie_runs import RunSet
from streamjoin.indexes.spo.mutable_part import INTERSECTIONS, MutablePart

_NO_REF = np.iinfo(np.int64).min

#: δ, the items the mutable part takes before it is merged into a PO-Join structure.
#: Measured (benchmarks/test_po_join.py::test_merge_every: join core, r.a < s.a AND r.b > s.b,
#: W = 2^16, batch 1024, load 11.6): CPU per tuple relative to δ = 1024 is 0.71 at 2048, 0.57
#: at 4096, 0.51 at 8192, 0.50 at 16384. Past 4096 the gain is ~10%, while the mutable part's
#: probe cost grows with δ and a window smaller than δ is probed wholly in the mutable part
#: (not measured here): 4096.
DEFAULT_MERGE_EVERY = 4096


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"po_join {name} must be a positive integer, got {value!r}")
    return int(value)


@register
class POJoinIndex(WindowIndex):
    """SPO-Join: B+-trees with ANDed bit arrays, merged every δ items into IE-Join structures.

    Complexity (w items held, δ = ``merge_every``, K key rows): ``insert`` of b items
    O(K · b · (log b + log δ)), plus O(K · δ) per merge, i.e. O(K) per item; ``probe`` of m
    keys O(K δ + δ² / (64 g) + m · K · (log δ + δ / 64 + g)) for the mutable part and, for
    each of the ⌈w / δ⌉ structures, O(δ + m log δ + words read + matches): about one pass over
    the window per batch plus O(m (w / δ) log δ); ``expire`` O(structures dropped). Memory:
    about 40 bytes per item in the structures, the mutable part's trees beside its δ items.

    Parameters
    ----------
    n_keys : int
        Key rows, 1 or 2.
    merge_every : int or None
        δ: merge the mutable part once it holds this many items (None: only when
        :meth:`merge` is called, as the ``spo`` topology's mutable stage does).
    subintervals : int
        Structures each merge is divided into (consecutive arrivals).
    intersect : {"bitset", "scatter", "hash"}
        The mutable part's intersection (:mod:`~streamjoin.indexes.spo.mutable_part`); the
        others are kept for SPO-Join §6.1's comparison.
    fanout, leaf_size : int
        Of the mutable part's B+-trees.
    """

    name = "po_join"
    multi_attribute = True
    max_keys = 2
    takes_order = True
    #: a warm run (batches of 512: 256 per stream, or 512 for a self-join) fills the
    #: mutable part's trees, merges them and probes the structure
    warm_options = {"merge_every": 600}
    #: a batch joined with itself through one structure over it (IE-Join on the batch): the
    #: sweep on one key would meet half the batch per tuple under two inequalities
    batch_join_options = {"merge_every": 1}
    serves_terms = False

    def __init__(
        self,
        n_keys: int = 1,
        merge_every: int | None = DEFAULT_MERGE_EVERY,
        subintervals: int = 1,
        intersect: str = "bitset",
        fanout: int = 32,
        leaf_size: int = 64,
    ) -> None:
        super().__init__(n_keys)
        self.merge_every = None if merge_every is None else _positive("merge_every", merge_every)
        self.subintervals = _positive("subintervals", subintervals)
        if intersect not in INTERSECTIONS:
            raise ValueError(f"po_join intersect must be one of {INTERSECTIONS}, got {intersect!r}")
        fanout = node_size(self.name, "fanout", fanout, 3)
        leaf_size = node_size(self.name, "leaf_size", leaf_size, 3)
        self.mutable = MutablePart(n_keys, intersect, fanout, leaf_size)
        self.runs = RunSet()
        self._min_ref = _NO_REF
        self._visible: tuple[int, int] | None = None  # (first, end) structure, mutable hidden

    def insert(self, keys: np.ndarray, refs: np.ndarray, order: np.ndarray | None = None) -> None:
        every = self.merge_every
        if every is not None and len(self.mutable) == 0 and len(refs) >= every:
            # a batch of δ or more would be merged at once: sort it into structures directly
            a = stable_order(keys[0]) if order is None else order
            b = stable_order(keys[1]) if self.n_keys > 1 else a
            rows = np.zeros((2, len(refs)))
            rows[: self.n_keys] = keys
            for a_part, b_part in split_slots(a, b, self.subintervals):
                self.runs.add(a_part, b_part, rows, refs, self._min_ref)
            return
        self.mutable.insert(keys, refs, order)
        if every is not None and len(self.mutable) >= every:
            self.merge()

    def merge(self) -> None:
        """Merge the mutable part into new structures (SPO-Join §4.2) and empty it."""
        if len(self.mutable) == 0:
            return
        a_slots, b_slots, slot_keys, slot_refs = self.mutable.take()
        for a, b in split_slots(a_slots, b_slots, self.subintervals):
            self.runs.add(a, b, slot_keys, slot_refs, self._min_ref)

    def take_mutable(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Empty the mutable part without merging it here (the ``spo`` topology ships it to a
        worker): ``(a_slots, b_slots, slot_keys, slot_refs)`` as
        :meth:`~streamjoin.indexes.spo.mutable_part.MutablePart.take`. O(K · δ)."""
        return self.mutable.take()

    def add_structure(self, a_order, b_order, keys: np.ndarray, refs: np.ndarray) -> bool:
        """Add a PO-Join structure over items ``refs`` (increasing, above every ref held)
        with key rows ``keys`` (``(n_keys, n)``), given the positions in the first key's order
        and in the second's (a merge's, from another index's mutable part). Items already
        expired are left out; returns whether anything was left. O(n)."""
        rows = np.zeros((2, len(refs)))
        rows[: self.n_keys] = keys
        return self.runs.add(a_order, b_order, rows, refs, self._min_ref) > 0

    @contextmanager
    def only_structures(self, first: int, end: int) -> Iterator[None]:
        """Within the block, probes see structures ``first`` to ``end - 1`` (oldest first)
        and not the mutable part."""
        self._visible = (first, end)
        try:
            yield
        finally:
            self._visible = None

    def probe_units(self) -> float:
        """Scan units of one probe: a position search in each structure it visits and in the
        mutable part, ``Σ log2(items + 1)`` (SPO-Join Alg. 4 probes every structure of the
        linked set), so that a worker holding fewer structures is charged less."""
        first, end = self._visible or (0, self.runs.n_runs)
        starts = self.runs.starts
        units = sum(math.log2(starts[r + 1] - starts[r] + 1) for r in range(first, end))
        if self._visible is None:
            units += math.log2(len(self.mutable) + 1)
        return units

    def probe(self, keys, lo, hi):
        keys = np.ascontiguousarray(keys, dtype=np.float64)
        found = []
        first, end = self._visible or (0, self.runs.n_runs)
        if end > first and len(self.runs):
            ka, kb, lo2, hi2, by_a, by_b = two_rows(keys, lo, hi)
            found.append(self.runs.probe(ka, kb, by_a, by_b, lo2, hi2, self._min_ref, first, end))
        if len(self.mutable) and self._visible is None:
            found.append(self.mutable.probe(keys, lo, hi, self._min_ref))
        if len(found) == 1:
            return found[0]
        if not found:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        return tuple(np.concatenate(parts) for parts in zip(*found, strict=True))

    def expire(self, before_ref: int) -> None:
        self._min_ref = max(self._min_ref, before_ref)
        self.runs.expire(before_ref)
        m = self.mutable
        if len(m) and m.slot_refs[len(m) - 1] < before_ref:  # all of it expired
            m.take()

    def __len__(self) -> int:
        return len(self.runs) + len(self.mutable)

    @property
    def n_structures(self) -> int:
        """Immutable PO-Join structures held."""
        return self.runs.n_runs

    @property
    def nbytes(self) -> int:
        return self.runs.nbytes + self.mutable.nbytes

    def check(self) -> None:
        self.mutable.check()
        self.runs.check(self._min_ref)
        if len(self.runs) and len(self.mutable):
            assert self.mutable.slot_refs[0] > self.runs.newest_refs[-1], "mutable part newest"
        if self.merge_every is not None:
            assert len(self.mutable) < self.merge_every, "the mutable part merges at δ"


def two_rows(keys: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """Probe keys as the two rows a structure searches, and the probes in the order of each:
    ``(ka, kb, lo, hi, by_a, by_b)``. One row is padded with an unbounded second one."""
    by_a = stable_order(keys[0])
    if keys.shape[0] == 2:
        return keys[0], keys[1], lo, hi, by_a, stable_order(keys[1])
    m = keys.shape[1]
    lo2 = np.array([lo[0], -np.inf])
    hi2 = np.array([hi[0], np.inf])
    return keys[0], np.zeros(m), lo2, hi2, by_a, np.arange(m, dtype=np.int64)


def split_slots(a_slots: np.ndarray, b_slots: np.ndarray, pieces: int):
    """The merged slots divided into ``pieces`` runs of consecutive slots (arrivals), each
    keeping both key orders: ``[(a_slots, b_slots), …]``. O(pieces · n)."""
    n = len(a_slots)
    if pieces <= 1 or n <= 1:
        return [(a_slots, b_slots)]
    edges = np.linspace(0, n, min(pieces, n) + 1).astype(np.int64)
    out = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        a = a_slots[(a_slots >= lo) & (a_slots < hi)]
        b = b_slots[(b_slots >= lo) & (b_slots < hi)]
        out.append((a, b))
    return out
