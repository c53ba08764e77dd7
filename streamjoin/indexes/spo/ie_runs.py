"""The immutable part of ``po_join``: a linked set of PO-Join structures (SPO-Join §4.2–§4.3).

A *run* is one PO-Join structure: the items one merge of the mutable part produced, frozen.
Its arrays are IE-Join's (Khayyat et al., VLDB J. 2017, §3.1), over two key rows ``a`` (the
first served condition) and ``b`` (the second):

- ``a_keys``/``a_refs``: the items sorted by ``(a, ref)`` (IE-Join's L1);
- ``a_other``: each item's ``b`` key, in that order (for the exact test of a candidate);
- ``b_keys``: the ``b`` keys sorted (L2);
- ``perm``: for each position in b-order, the item's position in a-order — the *permutation
  array* P of SPO-Join Alg. 2, built in O(n) from the two sorted orders the mutable part's
  B+-tree leaves already hold (§4.2: no sort, never the quadratic construction).

A probe ``lo <= item - key <= hi`` per row is IE-Join's bit-array scan, batched: the probe keys
are visited in ``b`` order, and the set of items whose ``b`` lies in the current probe's
``b``-interval is kept as marks in a bit array over a-positions (positions enter at the top of
the interval and leave at the bottom, each once per batch: one pass over the run). Each probe
then finds its ``a``-interval by binary search (its *offsets* in L1, the role of IE-Join's
offset arrays; Alg. 3) and reads the marked positions in it through the summary level
(:mod:`~streamjoin.indexes.spo.bitsets`). A batch of m probes into a run of n items costs
O(n + m log n + Σ (a-interval / 4096 + marked words read) + matches).

Runs sit one after another in flat arrays, oldest first (the *linked set*, newest to oldest in
the paper's Fig. 1); the oldest leaves whole once its newest item has expired, and items of a
run straddling the window's edge are skipped exactly by their ref (``min_ref``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from streamjoin.indexes.base import grow, in_band, key_range
from streamjoin.indexes.blocks.sorted_runs import lower_bound
from streamjoin.indexes.spo.bitsets import mark, marked_in, new_bits, unmark


class RunArrays(NamedTuple):
    """Every run's IE-Join arrays, concatenated; run ``r`` is ``[starts[r], starts[r + 1])``."""

    #: float64 (cap,): first key row, ascending within each run (L1)
    a_keys: np.ndarray
    #: int64 (cap,): refs in a-order
    a_refs: np.ndarray
    #: float64 (cap,): second key row, in a-order
    a_other: np.ndarray
    #: float64 (cap,): second key row, ascending within each run (L2)
    b_keys: np.ndarray
    #: int32 (cap,): a-position (within its run) of the item at each b-position (P)
    perm: np.ndarray


@njit(cache=True, nogil=True, inline="always")
def upper_bound(keys, start, stop, x):
    """First position in ``[start, stop)`` with ``keys[pos] > x`` (``stop`` if none)."""
    while start < stop:
        mid = (start + stop) >> 1
        if keys[mid] <= x:
            start = mid + 1
        else:
            stop = mid
    return start


@njit(cache=True, nogil=True)
def build_run(runs, at, a_slots, b_slots, slot_keys, slot_refs, keep_from):
    """Write the run of the slots listed in ``a_slots`` (in a-order) and ``b_slots`` (the same
    slots in b-order) at position ``at`` of ``runs``; ``slot_keys`` float64 ``(2, slots)``,
    ``slot_refs`` int64. Slots whose ref is below ``keep_from`` (expired) are left out. Returns
    the run's length.

    SPO-Join Alg. 2 (permutation computation): a counter numbers the slots in a-order
    (l. 3–5), and reading those numbers in b-order gives P (l. 6–7). O(n), no sort: both
    orders come from the mutable part's sorted leaves.
    """
    tmp = np.full(slot_refs.shape[0], -1, dtype=np.int64)
    n = 0
    for s in a_slots:
        if slot_refs[s] >= keep_from:
            runs.a_keys[at + n] = slot_keys[0, s]
            runs.a_refs[at + n] = slot_refs[s]
            runs.a_other[at + n] = slot_keys[1, s]
            tmp[s] = n
            n += 1
    j = 0
    for s in b_slots:
        if tmp[s] >= 0:
            runs.b_keys[at + j] = slot_keys[1, s]
            runs.perm[at + j] = tmp[s]
            j += 1
    return n


@njit(cache=True, nogil=True, inline="always")
def gallop(keys, start, stop, x, strict):
    """First position in ``[start, stop)`` with ``keys[pos] >= x`` (``> x`` if ``strict``),
    when every key before ``start`` is below it: doubling steps from ``start``, then a binary
    search. O(log(distance))."""
    if start >= stop or (keys[start] > x if strict else keys[start] >= x):
        return start
    at, step = start, 1  # keys[at] is below the bound
    while at + step < stop and (keys[at + step] <= x if strict else keys[at + step] < x):
        at += step
        step *= 2
    end = min(at + step, stop)
    if strict:
        return upper_bound(keys, at + 1, end, x)
    return lower_bound(keys, at + 1, end, x)


@njit(cache=True, nogil=True)
def offsets(a_keys, s0, s1, ka, by_a, lo, hi, al, ah):
    """Each probe's a-interval in the run ``[s0, s1)`` of L1: ``al[i]``, ``ah[i]`` (absolute
    positions), the role of IE-Join's offset arrays. SPO-Join Alg. 3: the probes, sorted, are
    located one after another, each search starting where the previous one ended (galloping
    rather than Alg. 3's linear step). The widened bounds are made non-decreasing first, which
    drops no match (a key below a smaller probe's widened bound fails every larger probe too).
    O(m log(n / m)) for m probes into n items."""
    at_lo = at_hi = s0
    vlo_run = vhi_run = -np.inf
    for t in range(by_a.shape[0]):
        i = by_a[t]
        vlo, vhi = key_range(ka[i], lo, hi)
        vlo_run, vhi_run = max(vlo_run, vlo), max(vhi_run, vhi)
        at_lo = gallop(a_keys, at_lo, s1, vlo_run, False)
        at_hi = s1 if vhi_run == np.inf else gallop(a_keys, max(at_hi, at_lo), s1, vhi_run, True)
        al[i] = at_lo
        ah[i] = at_hi


@njit(cache=True, nogil=True)
def probe_runs(runs, starts, ka, kb, by_a, by_b, lo, hi, min_ref, bits, summary):
    """Items of the runs between ``starts`` with ``lo[c] <= item[c] - key[c] <= hi[c]`` for
    both rows and ``ref >= min_ref``: ``(probe_pos, refs)`` int64.

    ``ka``/``kb``: the probe keys (m,); ``by_a``/``by_b``: the probes in ascending ``ka`` /
    ``kb`` order; ``bits``/``summary``: a cleared bit array for the largest run (left
    cleared). A second row unbounded both ways marks nothing: every item in the a-interval is
    a candidate.
    """
    out_p = np.empty(64, dtype=np.int64)
    out_r = np.empty(64, dtype=np.int64)
    n = 0
    m = ka.shape[0]
    al_all = np.empty(m, dtype=np.int64)
    ah_all = np.empty(m, dtype=np.int64)
    # a probe's marked positions are collected here first: growing the output inside the
    # word loops made numba count references on every word
    cand = np.empty(bits.shape[0] * 64, dtype=np.int64)
    b_all = lo[1] == -np.inf and hi[1] == np.inf
    down = hi[1] == np.inf  # the b-interval is open upwards: it grows as kb falls
    for r in range(starts.shape[0] - 1):
        s0, s1 = starts[r], starts[r + 1]
        size = s1 - s0
        if size == 0:
            continue
        offsets(runs.a_keys, s0, s1, ka, by_a, lo[0], hi[0], al_all, ah_all)
        bot = top = size if down else 0  # marked: the b-positions [bot, top)
        for t in range(m):
            i = by_b[m - 1 - t] if down else by_b[t]
            if not b_all:
                # IE-Join's scan: the b-interval only moves up as kb grows, so positions
                # enter at the top and leave at the bottom, each once per run and batch; an
                # interval open upwards is swept downwards instead, where it only grows
                vlo, vhi = key_range(kb[i], lo[1], hi[1])
                if down:
                    while bot > 0 and runs.b_keys[s0 + bot - 1] >= vlo:
                        bot -= 1
                        mark(bits, summary, runs.perm[s0 + bot])
                else:
                    while top < size and runs.b_keys[s0 + top] <= vhi:
                        mark(bits, summary, runs.perm[s0 + top])
                        top += 1
                    while bot < top and runs.b_keys[s0 + bot] < vlo:
                        unmark(bits, summary, runs.perm[s0 + bot])
                        bot += 1
                if bot == top:
                    continue
            al, ah = al_all[i] - s0, ah_all[i] - s0
            if al >= ah:
                continue
            if b_all:
                n_cand = ah - al
                for p in range(al, ah):
                    cand[p - al] = p
            else:
                n_cand = marked_in(bits, summary, al, ah, cand)
            if n + n_cand > out_p.shape[0]:
                out_p = grow(out_p, n + n_cand)
                out_r = grow(out_r, n + n_cand)
            for c in range(n_cand):
                q = s0 + cand[c]
                if (
                    in_band(runs.a_keys[q], ka[i], lo[0], hi[0])
                    and in_band(runs.a_other[q], kb[i], lo[1], hi[1])
                    and runs.a_refs[q] >= min_ref
                ):
                    out_p[n] = i
                    out_r[n] = runs.a_refs[q]
                    n += 1
        if top > bot:  # clear the rest: whole words are cheaper than a mark at a time
            bits[: (size + 63) >> 6] = 0
            summary[: (((size + 63) >> 6) + 63) >> 6] = 0
    return out_p[:n], out_r[:n]


class RunSet:
    """The linked set of runs of one ``po_join`` index, oldest first, in :class:`RunArrays`.

    ``add`` appends a run built from the mutable part's sorted slots; ``expire`` drops whole
    runs from the front; ``probe`` searches them all. Space is reclaimed by moving the live
    runs to the front when the arrays fill (amortised O(1) per item, as the tuple store).
    """

    def __init__(self) -> None:
        self.arrays = _alloc(64)
        self.starts = [0]  # run r is [starts[r], starts[r + 1]), absolute positions
        self.newest_refs: list[int] = []  # each run's largest ref
        self.largest = 0

    def __len__(self) -> int:
        return self.starts[-1] - self.starts[0]

    @property
    def n_runs(self) -> int:
        return len(self.newest_refs)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)

    def add(self, a_slots, b_slots, slot_keys, slot_refs, keep_from: int) -> int:
        """Append the run of the listed slots (see :func:`build_run`); returns its length.
        O(n)."""
        need = len(a_slots)
        end = self.starts[-1]
        if end + need > len(self.arrays.a_keys):
            self._make_room(need)
            end = self.starts[-1]
        n = build_run(self.arrays, end, a_slots, b_slots, slot_keys, slot_refs, keep_from)
        if n:
            self.starts.append(end + n)
            self.newest_refs.append(int(self.arrays.a_refs[end : end + n].max()))
            self.largest = max(self.largest, n)
        return n

    def _make_room(self, need: int) -> None:
        first, end = self.starts[0], self.starts[-1]
        live = end - first
        cap = len(self.arrays.a_keys)
        if 2 * (live + need) > cap:
            while 2 * (live + need) > cap:
                cap *= 2
            fresh = _alloc(cap)
            for new, old in zip(fresh, self.arrays, strict=True):
                new[:live] = old[first:end]
            self.arrays = fresh
        else:  # 1-d copies of overlapping ranges move like memmove
            for arr in self.arrays:
                arr[:live] = arr[first:end]
        self.starts = [s - first for s in self.starts]

    def expire(self, before_ref: int) -> int:
        """Drop the runs whose every ref is below ``before_ref``; returns how many items."""
        gone = 0
        while self.newest_refs and self.newest_refs[0] < before_ref:
            self.newest_refs.pop(0)
            gone += self.starts[1] - self.starts[0]
            self.starts.pop(0)
        if not self.newest_refs:
            self.largest = 0
        return gone

    def probe(
        self, ka, kb, by_a, by_b, lo, hi, min_ref: int, first: int = 0, end: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:func:`probe_runs` over runs ``first`` to ``end - 1`` (default: every run)."""
        bits, summary = new_bits(self.largest)
        starts = self.starts[first : (self.n_runs if end is None else end) + 1]
        return probe_runs(
            self.arrays,
            np.array(starts, dtype=np.int64),
            ka,
            kb,
            by_a,
            by_b,
            lo,
            hi,
            min_ref,
            bits,
            summary,
        )

    def check(self, min_ref: int) -> None:
        """Assert every run is sorted in both orders, ``perm`` maps b-order onto a-order, refs
        grow from run to run and only the oldest run holds refs below ``min_ref``."""
        a = self.arrays
        last = None
        for r in range(self.n_runs):
            s0, s1 = self.starts[r], self.starts[r + 1]
            keys, refs = a.a_keys[s0:s1], a.a_refs[s0:s1]
            assert s1 > s0, "no empty run"
            assert np.all(
                (keys[1:] > keys[:-1]) | ((keys[1:] == keys[:-1]) & (refs[1:] > refs[:-1]))
            )
            assert np.all(np.diff(a.b_keys[s0:s1]) >= 0), "L2 ascending"
            perm = a.perm[s0:s1].astype(np.int64)
            assert sorted(perm.tolist()) == list(range(s1 - s0)), "P is a permutation"
            assert np.array_equal(a.a_other[s0:s1][perm], a.b_keys[s0:s1]), "P maps L2 onto L1"
            assert self.newest_refs[r] == refs.max()
            if last is not None:
                assert refs.min() > last, "runs in arrival order"
            if r > 0:
                assert refs.min() >= min_ref, "only the oldest run straddles the window edge"
            last = refs.max()


def _alloc(cap: int) -> RunArrays:
    return RunArrays(
        np.empty(cap),
        np.empty(cap, dtype=np.int64),
        np.empty(cap),
        np.empty(cap),
        np.empty(cap, dtype=np.int32),
    )
