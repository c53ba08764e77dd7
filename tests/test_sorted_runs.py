"""Kernels shared by the tree indexes: merging two sorted runs while dropping expired items,
against a sort of their concatenation."""

from __future__ import annotations

import numpy as np
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from streamjoin.indexes.blocks.sorted_runs import lower_bound_row, merge_runs, merge_runs_into
from streamjoin.indexes.pim.bplus_tree import _pair_lower_bound

small_keys = st.lists(st.integers(-3, 3).map(float), max_size=40)


def sorted_run(keys: list[float], first_ref: int) -> tuple[np.ndarray, np.ndarray]:
    """A ``(key, ref)``-sorted run of ``keys`` with refs ``first_ref, first_ref + 1, …`` given
    in arrival order (a stable sort, as the indexes build their runs)."""
    k = np.asarray(keys, dtype=np.float64)
    r = np.arange(first_ref, first_ref + len(k), dtype=np.int64)
    order = np.argsort(k, kind="stable")
    return k[order], r[order]


def oracle(a_keys, a_refs, b_keys, b_refs, min_ref):
    keys, refs = np.concatenate([a_keys, b_keys]), np.concatenate([a_refs, b_refs])
    order = np.lexsort((refs, keys))
    keys, refs = keys[order], refs[order]
    keep = refs >= min_ref
    return keys[keep], refs[keep]


@settings(max_examples=examples(200), deadline=None)
@given(a=small_keys, b=small_keys, cut=st.integers(-1, 90))
def test_merge_matches_sorting_the_concatenation(a, b, cut):
    """Duplicate keys across and within runs, empty runs, nothing or everything expired."""
    a_keys, a_refs = sorted_run(a, 0)
    b_keys, b_refs = sorted_run(b, len(a))  # later arrivals: refs above a's
    want = oracle(a_keys, a_refs, b_keys, b_refs, cut)
    keys, refs = merge_runs(a_keys, a_refs, b_keys, b_refs, cut)
    assert np.array_equal(keys, want[0]) and np.array_equal(refs, want[1])
    assert len(keys) == len(want[0]) and keys.dtype == np.float64 and refs.dtype == np.int64
    # into buffers with room to spare, as PIM-Tree's merge reuses them
    out_k, out_r = np.full(len(a) + len(b) + 5, np.nan), np.full(len(a) + len(b) + 5, -7)
    n = merge_runs_into(a_keys, a_refs, b_keys, b_refs, cut, out_k, out_r)
    assert n == len(want[0])
    assert np.array_equal(out_k[:n], want[0]) and np.array_equal(out_r[:n], want[1])


@settings(max_examples=examples(300), deadline=None)
@given(
    keys=st.lists(st.integers(-4, 4), max_size=40),
    refs=st.lists(st.integers(0, 3), min_size=40, max_size=40),
    x=st.integers(-5, 5),
    r=st.integers(-1, 4),
    bounds=st.tuples(st.integers(0, 40), st.integers(0, 40)),
)
def test_node_searches_find_the_first_item_not_below(keys, refs, x, r, bounds):
    """The tree nodes' searches (in a row of a 2-d array): the first position in ``[start,
    stop)`` whose key (``lower_bound_row``), or whose ``(key, ref)`` (``_pair_lower_bound``),
    is not below the one sought, ``stop`` if none; an empty or inverted range returns
    ``start``. Duplicates, a key below and above all."""
    items = sorted(zip(keys, refs[: len(keys)], strict=True))
    k_row = np.zeros((3, 41))
    r_row = np.zeros((3, 41), dtype=np.int64)
    k_row[1, : len(items)] = [k for k, _ in items]
    r_row[1, : len(items)] = [v for _, v in items]
    start, stop = min(bounds[0], len(items)), min(bounds[1], len(items))
    want = start
    while want < stop and k_row[1, want] < x:
        want += 1
    assert lower_bound_row(k_row, 1, start, stop, float(x)) == (want if stop > start else start)
    want = start
    while want < stop and (k_row[1, want], r_row[1, want]) < (x, r):
        want += 1
    pair = _pair_search(k_row, r_row, 1, start, stop, float(x), r)
    assert pair == (want if stop > start else start)


@njit
def _pair_search(keys, refs, node, start, stop, k, r):
    """``_pair_lower_bound`` (inlined into its callers) in a function of its own."""
    return _pair_lower_bound(keys, refs, node, start, stop, k, r)
