"""``hash``: a chained hash table for equi-joins, in flat numpy arrays.

Items are appended to entry arrays in ref order; each bucket heads a chain that runs from the
newest entry to the oldest (``next`` points to a lower position). Expiry moves ``head`` past a
prefix of entries, so a chain walk simply stops at the first position below ``head``; dropped
entries are reclaimed when the arrays are compacted and the buckets rebuilt.

Keys are hashed on their float64 bit pattern (``-0.0`` folded into ``0.0``, which compares
equal) with Fibonacci hashing.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from streamjoin.indexes.base import WindowIndex, grow, in_band, register
from streamjoin.query import Predicate

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _key_bits(keys: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(keys + 0.0).view(np.uint64)  # + 0.0 turns -0.0 into 0.0


@njit(cache=True, nogil=True, inline="always")
def _bucket(bits, shift):
    return np.int64((bits * _GOLDEN) >> shift)


@njit(cache=True, nogil=True)
def link_entries(buckets, nxt, bits, start, end, shift):
    """Push entries ``[start, end)`` onto the front of their bucket chains."""
    for e in range(start, end):
        b = _bucket(bits[e], shift)
        nxt[e] = buckets[b]
        buckets[b] = e


@njit(cache=True, nogil=True)
def probe_chains(buckets, nxt, ekeys, head, keys, key_bits, shift, lo, hi):
    """``(probe_pos, entry)`` for entries at or above ``head`` with ``lo <= key_e - key <= hi``."""
    out_p = np.empty(64, dtype=np.int64)
    out_e = np.empty(64, dtype=np.int64)
    n = 0
    for i in range(keys.shape[0]):
        e = buckets[_bucket(key_bits[i], shift)]
        while e >= head:
            if in_band(ekeys[e], keys[i], lo, hi):
                if n == out_p.shape[0]:
                    out_p = grow(out_p, n + 1)
                    out_e = grow(out_e, n + 1)
                out_p[n] = i
                out_e[n] = e
                n += 1
            e = nxt[e]
    return out_p[:n], out_e[:n]


@register
class HashIndex(WindowIndex):
    """Chained hash table on the primary key; serves ``equal`` conditions.

    Complexity: ``insert`` O(1) amortised, ``probe`` O(1 + matches) expected per key,
    ``expire`` O(log n) (compaction amortised into inserts). Memory: 32 bytes per entry plus
    8 bytes per bucket (load factor at most 1/2 of the entry capacity).
    """

    name = "hash"
    probe_cost = "const"

    def __init__(self, n_keys: int = 1) -> None:
        super().__init__(n_keys)
        self._alloc(16)
        self._head = 0
        self._tail = 0

    @classmethod
    def unsupported(cls, predicate: Predicate) -> str | None:
        if not predicate.conditions[0].is_equality:
            return "hash serves equi-joins only (an equal(...) condition)"
        return None

    def _alloc(self, cap: int) -> None:
        self._keys = np.empty(cap, dtype=np.float64)
        self._bits = np.empty(cap, dtype=np.uint64)
        self._refs = np.empty(cap, dtype=np.int64)
        self._next = np.empty(cap, dtype=np.int64)
        n_buckets = 2 * cap
        self._shift = np.uint64(64 - (n_buckets.bit_length() - 1))
        self._buckets = np.full(n_buckets, -1, dtype=np.int64)

    def _rebuild(self, cap: int) -> None:
        """Move live entries to the front of arrays of capacity ``cap`` and relink."""
        live = slice(self._head, self._tail)
        keys, bits, refs = self._keys[live].copy(), self._bits[live].copy(), self._refs[live].copy()
        n = len(refs)
        self._alloc(cap)
        self._keys[:n], self._bits[:n], self._refs[:n] = keys, bits, refs
        self._head, self._tail = 0, n
        link_entries(self._buckets, self._next, self._bits, 0, n, self._shift)

    def insert(self, keys: np.ndarray, refs: np.ndarray) -> None:
        n = len(refs)
        if n == 0:
            return
        if self._tail + n > self._keys.shape[0]:
            cap = self._keys.shape[0]
            while (self._tail - self._head) + n > cap // 2:
                cap *= 2
            self._rebuild(cap)
        t = self._tail
        self._keys[t : t + n] = keys[0]
        self._bits[t : t + n] = _key_bits(keys[0])
        self._refs[t : t + n] = refs
        link_entries(self._buckets, self._next, self._bits, t, t + n, self._shift)
        self._tail = t + n

    def probe(self, keys, lo, hi):
        k = np.ascontiguousarray(keys[0])
        pos, e = probe_chains(
            self._buckets,
            self._next,
            self._keys,
            self._head,
            k,
            _key_bits(k),
            self._shift,
            lo[0],
            hi[0],
        )
        return pos, self._refs[e]

    def expire(self, before_ref: int) -> None:
        live = self._refs[self._head : self._tail]
        self._head += int(np.searchsorted(live, before_ref, side="left"))

    def __len__(self) -> int:
        return self._tail - self._head

    @property
    def nbytes(self) -> int:
        return sum(
            a.nbytes for a in (self._keys, self._bits, self._refs, self._next, self._buckets)
        )

    def check(self) -> None:
        h, t = self._head, self._tail
        assert 0 <= h <= t <= self._keys.shape[0]
        assert np.all(np.diff(self._refs[h:t]) > 0), "refs must be strictly increasing"
        assert np.array_equal(self._bits[h:t], _key_bits(self._keys[h:t]))
        seen = np.zeros(t - h, dtype=np.int64)
        for b, head in enumerate(self._buckets):
            prev, e = np.iinfo(np.int64).max, int(head)
            while e >= h:
                assert e < t and e < prev, "chains must run from newer to older entries"
                assert _bucket(self._bits[e], self._shift) == b, "entry in the wrong bucket"
                seen[e - h] += 1
                prev, e = e, int(self._next[e])
        assert np.all(seen == 1), "every live entry is on exactly one chain, once"
