"""Kernels shared by the tree indexes: merging two sorted runs while dropping expired items,
against a sort of their concatenation."""

from __future__ import annotations

import numpy as np
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.indexes.blocks.sorted_runs import merge_runs, merge_runs_into

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
