"""``bplus_tree``: random action sequences at tiny node sizes against a sorted-array oracle,
and whole joins against the reference join."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from budget import examples
from hypothesis import settings
from hypothesis import strategies as st
from window_index_oracle import SortedOracle, machine, probe_pairs, random_actions

import streamjoin as sj
from streamjoin import indexes
from streamjoin.indexes.pim.bplus_tree import HEIGHT, LEAF_HWM, PREFETCH_ITEMS

OPTIONS = st.fixed_dictionaries({"fanout": st.integers(3, 6), "leaf_size": st.integers(3, 6)})

TestBPlusTreeMachine = machine("bplus_tree", OPTIONS, exact_expiry=True).TestCase
TestBPlusTreeMachine.settings = settings(
    max_examples=examples(100), stateful_step_count=50, deadline=None
)


@pytest.mark.parametrize(("fanout", "leaf_size"), [(3, 3), (4, 4), (5, 3), (3, 6)])
def test_random_actions_deep_trees(fanout, leaf_size):
    index = indexes.get("bplus_tree")(1, fanout=fanout, leaf_size=leaf_size)
    random_actions(index, np.random.default_rng(fanout * 10 + leaf_size), steps=150, window=600)


def test_grows_and_shrinks_back_to_a_leaf():
    index = indexes.get("bplus_tree")(1, fanout=3, leaf_size=3)
    rng = np.random.default_rng(7)
    values = rng.integers(0, 5, 2000).astype(np.float64)
    index.insert(values[None, :], np.arange(2000))
    index.check()
    assert index._tree.meta[HEIGHT] > 5
    assert probe_pairs(index, [2.0], 0.0, 0.0) == [(0, r) for r in np.flatnonzero(values == 2)]
    for before in range(100, 2001, 100):
        index.expire(before)
        index.check()
    assert len(index) == 0 and index._tree.meta[HEIGHT] == 0
    assert probe_pairs(index, [2.0], -np.inf, np.inf) == []


def test_pickles_as_arrays():
    index = indexes.get("bplus_tree")(1, fanout=4, leaf_size=4)
    index.insert(np.arange(100.0)[None, ::-1], np.arange(100))
    index.expire(30)
    copy = pickle.loads(pickle.dumps(index))
    copy.check()
    assert probe_pairs(copy, [50.0], -10, 10) == probe_pairs(index, [50.0], -10, 10)


@pytest.mark.parametrize(
    "options", [{"fanout": 2}, {"leaf_size": 2}, {"fanout": 2**20}, {"leaf_size": "x"}]
)
def test_rejects_tiny_huge_and_odd_nodes(options):
    with pytest.raises(ValueError, match=r"must be an integer in \[3, 65536\]"):
        indexes.get("bplus_tree")(1, **options)


PREDICATES = [sj.band("x", 3), sj.equal("x"), sj.less("x")]
WINDOWS = [sj.CountWindow(40), sj.TimeWindow(4)]


@pytest.mark.parametrize("batch_size", [1, 3, 64])
@pytest.mark.parametrize("window", WINDOWS, ids=["count", "time"])
@pytest.mark.parametrize("predicate", PREDICATES, ids=["band", "equal", "less"])
@pytest.mark.parametrize("self_join", [False, True], ids=["two_way", "self_join"])
def test_join_matches_oracle(predicate, window, self_join, batch_size):
    data = sj.sources.synthetic(300, low=0, high=50, seed=batch_size, self_join=self_join)
    q = sj.Query(predicate, window=window, self_join=self_join)
    topo = sj.topologies.single("bplus_tree", fanout=4, leaf_size=4)
    res = sj.run(q, data, topo, batch_size=batch_size)
    assert res.same_pairs(sj.oracle.join(q, data))


@pytest.mark.parametrize("options", [{}, {"fanout": 3, "leaf_size": 3}, {"leaf_size": 5}])
def test_large_tree_prefetching_inserts(options):
    """Trees with room for PREFETCH_ITEMS items or more descend for the item a few places on
    while inserting or deleting one, and use that descent at the item's turn unless a split,
    merge or borrow came between: the items and probes must be the same as without. Tiny
    nodes split, merge and borrow within almost every lookahead."""
    rng = np.random.default_rng(11)
    index = indexes.get("bplus_tree")(1, **options)
    oracle = SortedOracle()
    n = 0
    while n < 2 * PREFETCH_ITEMS:
        # many duplicates (splits among equal keys) and runs landing in one leaf
        values = rng.integers(0, 3000, 4096) if n % 2 else rng.normal(0, 1e6, 4096)
        index.insert(*oracle.batch(values))
        n += len(values)
        index.expire(oracle.expire(n - 3 * PREFETCH_ITEMS // 2))
        probe_keys = rng.integers(0, 3000, 8).astype(np.float64)
        assert probe_pairs(index, probe_keys, -2.0, 2.0) == oracle.probe(probe_keys, -2.0, 2.0)
    assert index._tree.meta[LEAF_HWM] * index.leaf_size >= PREFETCH_ITEMS, "prefetching"
    index.check()
