"""The mutable part of ``po_join`` (SPO-Join §4.1): a B+-tree per key row, whose probe results
become bit arrays over the part's slots, intersected by AND.

New items take the next *slot* (their position in arrival order) and go into one
:mod:`~streamjoin.indexes.pim.bplus_tree` per key row, as ``(key, slot)`` items: insertion stays
O(log n) per item, and each tree's leaf chain lists the slots in that row's key order — what a
probe needs and what the merge into a PO-Join structure starts from (§4.2).

A probe of one key row is a range of that row's key order (the leaf items between two
bounds), i.e. the slots ranked ``[l, h)`` in it. Its bit array over slots is
``prefix(h) XOR prefix(l)``, where ``prefix(k)`` holds the ``k`` first slots in key order; the
part keeps ``prefix`` at every ``g``-th rank (rebuilt once per probed batch, O(n² / (64 g))
words) and toggles the at most ``2 g`` slots in between, so a row costs ``n / 64`` words
instead of a bit per matching item. The rows' arrays are ANDed and the set bits are the
candidates (§4.1 "instead of a hash table, a bit set": the intersection needs no hashing).

Two other intersections, kept for the paper's comparison (§6.1: bit set against hash set):
``"scatter"`` sets one bit per item of the first row's range and tests the second row's items
against them (the paper's literal bit set), ``"hash"`` puts the first row's slots in a hash set
and looks the second row's up. Both cost O(items in both ranges) per probe.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from streamjoin.indexes.base import grow, in_band, key_range
from streamjoin.indexes.blocks.key_order import stable_key_order
from streamjoin.indexes.blocks.sorted_runs import lower_bound
from streamjoin.indexes.pim.bplus_tree import (
    HEIGHT,
    ROOT,
    chain_items,
    check_forest,
    insert_items,
    new_forest,
    new_tree,
    reserve,
)
from streamjoin.indexes.spo.bitsets import ONE, trailing_zeros
from streamjoin.indexes.spo.ie_runs import upper_bound

INTERSECTIONS = ("bitset", "scatter", "hash")
_HASH_EMPTY = -1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True, nogil=True, inline="always")
def _bucket(s, shift):
    """Fibonacci hashing: the top bits of ``s · 2^64/φ`` (``64 - shift`` of them)."""
    return np.int64((np.uint64(s) * _GOLDEN) >> np.uint64(shift))


@njit(cache=True, nogil=True)
def build_prefixes(sorted_slots, g, n_words):
    """``table[k]``: the bit array of the slots ranked ``[0, k·g)`` in one row's key order;
    uint64 ``(n // g + 1, n_words)``. O(n² / (64 g))."""
    n = sorted_slots.shape[0]
    nb = n // g + 1
    table = np.zeros((nb, n_words), dtype=np.uint64)
    for k in range(1, nb):
        table[k] = table[k - 1]
        for j in range((k - 1) * g, k * g):
            s = sorted_slots[j]
            table[k, s >> 6] |= ONE << np.uint64(s & 63)
    return table


@njit(cache=True, nogil=True, inline="always")
def _row_range(sorted_keys, n, key, lo, hi):
    """Ranks ``[l, h)`` of the items of one row within the widened probe interval."""
    vlo, vhi = key_range(key, lo, hi)
    first = lower_bound(sorted_keys, 0, n, vlo)
    return first, upper_bound(sorted_keys, first, n, vhi)


@njit(cache=True, nogil=True, inline="always")
def _matches(slot_keys, slot_refs, s, keys, i, lo, hi, min_ref):
    """The exact test of slot ``s`` against probe ``i`` on every key row."""
    if slot_refs[s] < min_ref:
        return False
    for c in range(keys.shape[0]):  # noqa: SIM110 (numba: no all() over a generator)
        if not in_band(slot_keys[c, s], keys[c, i], lo[c], hi[c]):
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _range_bits(table, sorted_slots, g, first, end, out):
    """``out`` := the bit array of the slots ranked ``[first, end)`` in one row's key order:
    two prefix rows XORed, then the slots between ``g``-multiples and the bounds toggled."""
    lb, hb = first // g, end // g
    low, high = table[lb], table[hb]
    for w in range(out.shape[0]):
        out[w] = high[w] ^ low[w]
    for j in range(lb * g, first):
        s = sorted_slots[j]
        out[s >> 6] ^= ONE << np.uint64(s & 63)
    for j in range(hb * g, end):
        s = sorted_slots[j]
        out[s >> 6] ^= ONE << np.uint64(s & 63)


@njit(cache=True, nogil=True)
def probe_bitsets(
    sorted_keys, sorted_slots, tables, g, slot_keys, slot_refs, keys, lo, hi, min_ref
):
    """Slots matching each probe on both key rows: ``(probe_pos, slot)`` int64.

    Per probe and row, the bit array of the row's range is two prefix rows XORed and the
    slots ranked between them toggled; the rows are ANDed word by word, and the set bits of
    the result are tested exactly (the ranges were widened). O(m · (log n + n / 64 + g) +
    matches).
    """
    n = sorted_keys.shape[1]
    n_words = tables.shape[2]
    acc = np.empty(n_words, dtype=np.uint64)
    row = np.empty(n_words, dtype=np.uint64)
    # set bits are collected here first: growing the output inside the word loop made numba
    # count references on every word (10x slower)
    cand = np.empty(n_words * 64, dtype=np.int64)
    out_p = np.empty(64, dtype=np.int64)
    out_s = np.empty(64, dtype=np.int64)
    n_out = 0
    for i in range(keys.shape[1]):
        l0, h0 = _row_range(sorted_keys[0], n, keys[0, i], lo[0], hi[0])
        l1, h1 = _row_range(sorted_keys[1], n, keys[1, i], lo[1], hi[1])
        if l0 >= h0 or l1 >= h1:
            continue
        _range_bits(tables[0], sorted_slots[0], g, l0, h0, acc)
        _range_bits(tables[1], sorted_slots[1], g, l1, h1, row)
        n_cand = 0
        for w in range(n_words):
            word = acc[w] & row[w]
            while word:
                cand[n_cand] = w * 64 + np.int64(trailing_zeros(word))
                n_cand += 1
                word &= word - ONE
        if n_out + n_cand > out_p.shape[0]:
            out_p = grow(out_p, n_out + n_cand)
            out_s = grow(out_s, n_out + n_cand)
        for q in range(n_cand):
            s = cand[q]
            if _matches(slot_keys, slot_refs, s, keys, i, lo, hi, min_ref):
                out_p[n_out] = i
                out_s[n_out] = s
                n_out += 1
    return out_p[:n_out], out_s[:n_out]


@njit(cache=True, nogil=True)
def probe_pairwise(sorted_keys, sorted_slots, slot_keys, slot_refs, keys, lo, hi, min_ref, hashed):
    """The paper's per-item intersections (§4.1, §6.1): the first row's slots set one bit
    each (or go into a hash set, ``hashed``), the second row's are tested against them.
    A single row emits its range. O(m · (log n + items in both ranges)) (+ n / 64 words to
    clear the bit array per probe). Returns ``(probe_pos, slot)``."""
    n_rows, n = sorted_keys.shape
    n_words = max(1, (slot_refs.shape[0] + 63) // 64)
    bits = np.zeros(n_words, dtype=np.uint64)
    table = np.full(16, _HASH_EMPTY, dtype=np.int64)
    cap, shift = 16, 60
    out_p = np.empty(64, dtype=np.int64)
    out_s = np.empty(64, dtype=np.int64)
    n_out = 0
    for i in range(keys.shape[1]):
        l0, h0 = _row_range(sorted_keys[0], n, keys[0, i], lo[0], hi[0])
        if l0 >= h0:
            continue
        if n_rows == 1:
            l1, h1 = l0, h0
        else:
            l1, h1 = _row_range(sorted_keys[1], n, keys[1, i], lo[1], hi[1])
            if hashed:
                cap, shift = 16, 60
                while cap < 2 * (h0 - l0):
                    cap *= 2
                    shift -= 1
                if table.shape[0] != cap:
                    table = np.empty(cap, dtype=np.int64)
                table[:] = _HASH_EMPTY
                for j in range(l0, h0):
                    s = sorted_slots[0, j]
                    b = _bucket(s, shift)
                    while table[b] != _HASH_EMPTY:
                        b = (b + 1) & (cap - 1)
                    table[b] = s
            else:
                bits[:] = 0
                for j in range(l0, h0):
                    s = sorted_slots[0, j]
                    bits[s >> 6] |= ONE << np.uint64(s & 63)
        for j in range(l1, h1):
            s = sorted_slots[n_rows - 1, j]
            if n_rows > 1:
                if hashed:
                    b = _bucket(s, shift)
                    while table[b] != _HASH_EMPTY and table[b] != s:
                        b = (b + 1) & (cap - 1)
                    if table[b] != s:
                        continue
                elif not (bits[s >> 6] >> np.uint64(s & 63)) & ONE:
                    continue
            if _matches(slot_keys, slot_refs, s, keys, i, lo, hi, min_ref):
                if n_out == out_p.shape[0]:
                    out_p = grow(out_p, n_out + 1)
                    out_s = grow(out_s, n_out + 1)
                out_p[n_out] = i
                out_s[n_out] = s
                n_out += 1
    return out_p[:n_out], out_s[:n_out]


class MutablePart:
    """Slots of the newest items, a B+-tree per key row over them, and their probes.

    Complexity (n items held, K rows): ``insert`` of b items O(K · b · (log b + height ·
    log(fanout))); ``probe`` of m keys O(K · n + K · n² / (64 g)) once per call (leaf chains
    and prefix rows) plus O(m · K · (log n + n / 64 + g) + matches) (``"bitset"``) or
    O(m · (log n + items in both ranges)) (``"scatter"``, ``"hash"``); ``take`` O(K · n).

    Parameters
    ----------
    n_keys : int
        Key rows (1 or 2).
    intersect : {"bitset", "scatter", "hash"}
        How the rows' results are intersected (module docstring).
    fanout, leaf_size : int
        Of each B+-tree.
    """

    def __init__(
        self, n_keys: int, intersect: str = "bitset", fanout: int = 32, leaf_size: int = 64
    ) -> None:
        if intersect not in INTERSECTIONS:
            raise ValueError(f"intersect must be one of {INTERSECTIONS}, got {intersect!r}")
        self.k = n_keys
        self.intersect = intersect
        self.fanout, self.leaf_size = fanout, leaf_size
        self.trees = [new_tree(fanout, leaf_size, 16, 16) for _ in range(n_keys)]
        self.slot_keys = np.zeros((2, 64))  # two rows always: a run needs a second one
        self.slot_refs = np.empty(64, dtype=np.int64)
        self.n = 0
        self._view = None  # (sorted keys, sorted slots, prefix tables, g) until the next insert

    def __len__(self) -> int:
        return self.n

    @property
    def nbytes(self) -> int:
        trees = sum(a.nbytes for t in self.trees for a in t)
        return trees + self.slot_keys.nbytes + self.slot_refs.nbytes

    def insert(self, keys: np.ndarray, refs: np.ndarray, order: np.ndarray | None = None) -> None:
        """Give the items the next slots and add them to every row's tree."""
        b = len(refs)
        if b == 0:
            return
        n = self.n
        if n + b > len(self.slot_refs):
            cap = len(self.slot_refs)
            while n + b > cap:
                cap *= 2
            slot_keys = np.zeros((2, cap))
            slot_keys[:, :n] = self.slot_keys[:, :n]
            slot_refs = np.empty(cap, dtype=np.int64)
            slot_refs[:n] = self.slot_refs[:n]
            self.slot_keys, self.slot_refs = slot_keys, slot_refs
        self.slot_keys[: self.k, n : n + b] = keys
        self.slot_refs[n : n + b] = refs
        slots = np.arange(n, n + b, dtype=np.int64)
        for c in range(self.k):
            row = np.ascontiguousarray(keys[c])
            by_key = stable_key_order(row, order if c == 0 else None)
            self.trees[c] = reserve(self.trees[c], n + b, b)  # n + b items in all
            if by_key is None:
                insert_items(self.trees[c], row, slots)
            else:
                insert_items(self.trees[c], row[by_key], slots[by_key])
        self.n = n + b
        self._view = None

    def sorted_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Each row's keys and slots in key order, from its tree's leaf chain (leaf 0 is the
        first leaf): float64 and int64 ``(K, n)``. O(K · n)."""
        keys = np.empty((self.k, self.n))
        slots = np.empty((self.k, self.n), dtype=np.int64)
        for c, t in enumerate(self.trees):
            keys[c], slots[c] = chain_items(t, 0, self.n)
        return keys, slots

    def _probe_view(self):
        if self._view is None:
            keys, slots = self.sorted_rows()
            g = max(8, -(-self.n // 256))  # at most 257 prefix rows
            n_words = max(1, -(-self.n // 64))
            tables = np.empty((self.k, self.n // g + 1, n_words), dtype=np.uint64)
            if self.intersect == "bitset" and self.k > 1:
                for c in range(self.k):
                    tables[c] = build_prefixes(slots[c], g, n_words)
            self._view = (keys, slots, tables, g)
        return self._view

    def probe(self, keys: np.ndarray, lo: np.ndarray, hi: np.ndarray, min_ref: int):
        """Items with ``lo[c] <= item[c] - keys[c, i] <= hi[c]`` on every row and
        ``ref >= min_ref``: ``(probe_pos, refs)`` int64."""
        if self.n == 0 or keys.shape[1] == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        s_keys, s_slots, tables, g = self._probe_view()
        args = (self.slot_keys, self.slot_refs, keys, lo, hi, min_ref)
        if self.intersect == "bitset" and self.k > 1:
            pos, slots = probe_bitsets(s_keys, s_slots, tables, g, *args)
        else:
            pos, slots = probe_pairwise(s_keys, s_slots, *args, self.intersect == "hash")
        return pos, self.slot_refs[slots]

    def take(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Empty the part; returns what a merge builds a run from: the slots in the first
        row's key order and in the second's (the first's again for one row), and the slots'
        keys ``(2, n)`` and refs. O(K · n)."""
        _, s_slots = self.sorted_rows()
        out = (
            s_slots[0],
            s_slots[-1] if self.k > 1 else s_slots[0],
            self.slot_keys[:, : self.n].copy(),
            self.slot_refs[: self.n].copy(),
        )
        self.trees = [new_forest(1, self.fanout, self.leaf_size, reuse=t)[0] for t in self.trees]
        self.n = 0
        self._view = None
        return out

    def check(self) -> None:
        """Assert each row's tree holds exactly the slots with their keys."""
        for c, t in enumerate(self.trees):
            (held,) = check_forest(t, t.meta[None, ROOT : HEIGHT + 1])
            want = sorted(zip(self.slot_keys[c, : self.n].tolist(), range(self.n), strict=True))
            assert held == want, f"tree {c} holds exactly the slots"
        assert np.all(np.diff(self.slot_refs[: self.n]) > 0), "slots in ref order"
