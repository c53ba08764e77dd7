"""``nested_loop``: no index at all, a columnar scan that evaluates the whole conjunction.

The window is an array of key rows (one per condition) in ref order; a probe compares every
probe key with every held item. It serves any conjunction of band / inequality / equality
conditions over several attributes, which makes it the baseline of the handshake join and the
fallback for predicates no tree can serve.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from streamjoin.indexes.base import WindowIndex, grow, register


@njit(cache=True, nogil=True)
def scan_window(items, start, end, keys, lo, hi):
    """Pairs ``(i, j)`` with ``lo[c] <= items[c, j] - keys[c, i] <= hi[c]`` for all ``c``.

    ``items``: float64 ``(C, cap)``, rows ``[start, end)`` held; ``keys``: float64 ``(C, m)``.
    Returns ``(probe_pos, item_pos)``. O(m · (end - start) · C).

    Each condition is one branch-free pass over the window into a mask (loops numba/LLVM
    vectorise), then matches are compacted without branches.
    """
    n_cond = keys.shape[0]
    w = end - start
    mask = np.empty(w, dtype=np.uint8)
    out_p = np.empty(64, dtype=np.int64)
    out_j = np.empty(64, dtype=np.int64)
    n = 0
    for i in range(keys.shape[1]):
        k, kl, kh = keys[0, i], lo[0], hi[0]
        row = items[0, start:end]
        for j in range(w):
            d = row[j] - k
            mask[j] = (d >= kl) & (d <= kh)
        for c in range(1, n_cond):
            k, kl, kh = keys[c, i], lo[c], hi[c]
            row = items[c, start:end]
            for j in range(w):
                d = row[j] - k
                mask[j] &= (d >= kl) & (d <= kh)
        if out_p.shape[0] < n + w:
            out_p = grow(out_p, n + w)
            out_j = grow(out_j, n + w)
        for j in range(w):  # branch-free compaction: write always, advance on a match
            out_p[n] = i
            out_j[n] = start + j
            n += mask[j]
    return out_p[:n], out_j[:n]


@register
class NestedLoop(WindowIndex):
    """Window as plain columnar arrays; probes scan all of it.

    Complexity: ``insert`` O(n) amortised, ``probe`` O(m · w · C), ``expire`` O(log w),
    memory ``8 · (C + 1)`` bytes per item (amortised doubling).
    """

    name = "nested_loop"
    probe_cost = "linear"
    multi_attribute = True
    serves_terms = False

    def __init__(self, n_keys: int = 1) -> None:
        super().__init__(n_keys)
        self._items = np.empty((n_keys, 16), dtype=np.float64)
        self._refs = np.empty(16, dtype=np.int64)
        self._start = 0
        self._end = 0

    def insert(self, keys: np.ndarray, refs: np.ndarray) -> None:
        n = len(refs)
        if n == 0:
            return
        if self._end + n > self._refs.shape[0]:
            live = self._end - self._start
            cap = self._refs.shape[0]
            while live + n > cap // 2:
                cap *= 2
            items = np.empty((self.n_keys, cap), dtype=np.float64)
            items[:, :live] = self._items[:, self._start : self._end]
            new_refs = np.empty(cap, dtype=np.int64)
            new_refs[:live] = self._refs[self._start : self._end]
            self._items, self._refs = items, new_refs
            self._start, self._end = 0, live
        self._items[:, self._end : self._end + n] = keys
        self._refs[self._end : self._end + n] = refs
        self._end += n

    def probe(self, keys, lo, hi):
        pos, j = scan_window(self._items, self._start, self._end, keys, lo, hi)
        return pos, self._refs[j]

    def expire(self, before_ref: int) -> None:
        live = self._refs[self._start : self._end]
        self._start += int(np.searchsorted(live, before_ref, side="left"))

    def __len__(self) -> int:
        return self._end - self._start

    @property
    def nbytes(self) -> int:
        return self._items.nbytes + self._refs.nbytes

    def check(self) -> None:
        assert 0 <= self._start <= self._end <= self._refs.shape[0]
        live = self._refs[self._start : self._end]
        assert np.all(np.diff(live) > 0), "refs must be strictly increasing"
        assert self._items.shape == (self.n_keys, self._refs.shape[0])
