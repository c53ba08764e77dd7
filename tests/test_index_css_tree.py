"""``css_tree``: the Alg. 3 build and the descent on their own, random action sequences at tiny
node sizes against a sorted-array oracle, and whole joins against the reference join."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from window_index_oracle import keys, machine, probe_pairs, random_actions

import streamjoin as sj
from streamjoin import indexes
from streamjoin.indexes.css_tree import build_css_tree, descend_css_tree
from streamjoin.indexes.sorted_runs import lower_bound

OPTIONS = st.fixed_dictionaries({"fanout": st.integers(2, 5), "leaf_size": st.integers(1, 4)})

TestCSSTreeMachine = machine("css_tree", OPTIONS, exact_expiry=False).TestCase
TestCSSTreeMachine.settings = settings(max_examples=100, stateful_step_count=50, deadline=None)


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.integers(-10, 10).map(float), max_size=80),
    x=st.one_of(keys, st.sampled_from([-np.inf, np.inf]), st.integers(-12, 12).map(float)),
    fanout=st.integers(2, 5),
    leaf_size=st.integers(1, 5),
)
def test_descent_finds_the_first_item_not_below(values, x, fanout, leaf_size):
    sorted_keys = np.sort(np.asarray(values, dtype=np.float64))
    n = len(sorted_keys)
    inner, offsets = build_css_tree(sorted_keys, fanout, leaf_size)
    leaf = descend_css_tree(inner, offsets, fanout, x, len(offsets) - 1)
    start = min(leaf * leaf_size, n)
    found = lower_bound(sorted_keys, start, min(start + leaf_size, n), x)
    assert found == np.searchsorted(sorted_keys, x, side="left")


@pytest.mark.parametrize(
    ("n", "fanout", "leaf_size"),
    [(0, 3, 2), (1, 2, 1), (7, 2, 1), (8, 2, 1), (26, 3, 1), (27, 3, 1), (1000, 5, 3)],
)
def test_build_depth_and_level_sizes(n, fanout, leaf_size):
    inner, offsets = build_css_tree(np.arange(float(n)), fanout, leaf_size)
    n_leaves = -(-n // leaf_size)
    depth = len(offsets) - 1
    assert fanout**depth > n_leaves >= (fanout ** (depth - 1) if depth else 0)
    assert np.isin(np.arange(leaf_size - 1, n, leaf_size), inner).all()  # every full leaf's max
    assert np.isfinite(inner).sum() == n_leaves  # one key per leaf, +inf elsewhere


@pytest.mark.parametrize(("fanout", "leaf_size"), [(2, 1), (3, 2), (4, 3), (5, 1)])
def test_random_actions_deep_trees(fanout, leaf_size):
    index = indexes.get("css_tree")(1, fanout=fanout, leaf_size=leaf_size)
    random_actions(index, np.random.default_rng(fanout * 10 + leaf_size), steps=150, window=600)


def test_expiry_is_lazy_until_the_next_insert():
    index = indexes.get("css_tree")(1, fanout=3, leaf_size=2)
    index.insert(np.arange(10.0)[None, :], np.arange(10))
    index.expire(6)
    assert len(index) == 10  # still held ...
    assert probe_pairs(index, [0.0], -np.inf, np.inf) == [
        (0, r) for r in range(6, 10)
    ]  # ... not returned
    index.insert(np.array([[3.0]]), np.array([10]))
    index.check()
    assert len(index) == 5


@pytest.mark.parametrize("options", [{"fanout": 1}, {"leaf_size": 0}])
def test_rejects_degenerate_nodes(options):
    with pytest.raises(ValueError, match="at least"):
        indexes.get("css_tree")(1, **options)


PREDICATES = [sj.band("x", 3), sj.equal("x"), sj.less("x")]
WINDOWS = [sj.CountWindow(40), sj.TimeWindow(4)]


@pytest.mark.parametrize("batch_size", [1, 3, 64])
@pytest.mark.parametrize("window", WINDOWS, ids=["count", "time"])
@pytest.mark.parametrize("predicate", PREDICATES, ids=["band", "equal", "less"])
@pytest.mark.parametrize("self_join", [False, True], ids=["two_way", "self_join"])
def test_join_matches_oracle(predicate, window, self_join, batch_size):
    data = sj.sources.synthetic(300, low=0, high=50, seed=batch_size, self_join=self_join)
    q = sj.Query(predicate, window=window, self_join=self_join)
    topo = sj.topologies.single("css_tree", fanout=3, leaf_size=2)
    res = sj.run(q, data, topo, batch_size=batch_size)
    assert res.same_pairs(sj.oracle.join(q, data))
