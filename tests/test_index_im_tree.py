"""``im_tree``: random action sequences at tiny node sizes and merge ratios against a
sorted-array oracle, merges that drop expired items, and whole joins against the reference
join."""

from __future__ import annotations

import numpy as np
import pytest
from budget import examples
from hypothesis import settings
from hypothesis import strategies as st
from window_index_oracle import (
    JOIN_PREDICATES,
    JOIN_WINDOWS,
    join_matches_oracle,
    machine,
    probe_pairs,
    random_actions,
)

from streamjoin import indexes

OPTIONS = st.fixed_dictionaries(
    {
        "merge_ratio": st.sampled_from([0.05, 0.2, 0.5, 1.0]),
        "window": st.one_of(st.none(), st.integers(1, 60)),
        "fanout": st.integers(3, 5),
        "leaf_size": st.integers(3, 5),
        "css_fanout": st.integers(2, 4),
        "css_leaf_size": st.integers(1, 3),
    }
)

TestIMTreeMachine = machine("im_tree", OPTIONS, exact_expiry=False).TestCase
TestIMTreeMachine.settings = settings(
    max_examples=examples(80), stateful_step_count=50, deadline=None
)

TINY = {"fanout": 3, "leaf_size": 3, "css_fanout": 3, "css_leaf_size": 2}


@pytest.mark.parametrize("merge_ratio", [0.02, 0.1, 0.5, 1.0])
def test_random_actions_deep_trees(merge_ratio):
    index = indexes.get("im_tree")(1, merge_ratio=merge_ratio, **TINY)
    random_actions(index, np.random.default_rng(int(merge_ratio * 100)), steps=150, window=600)


def test_one_mutable_tree_merged_at_m_times_w():
    """T_I is a single B+-tree (§3.2) and merges into T_S when it holds m · w items."""
    index = indexes.get("im_tree")(1, merge_ratio=0.25, window=100, **TINY)
    for start in range(0, 100, 5):
        index.insert(np.arange(start, start + 5.0)[None, :], np.arange(start, start + 5))
        index.check()
        assert len(index._tops) == 1
        assert index._n_ti == (start + 5) % 25 and len(index._ts_refs) == start + 5 - index._n_ti
    index.expire(90)
    assert probe_pairs(index, [95.0], -3, 3) == [(0, r) for r in range(92, 99)]
    index.insert(np.arange(100.0, 125.0)[None, :], np.arange(100, 125))  # merges: drops 0 … 89
    index.check()
    assert len(index) == 35 and index._n_ti == 0


def test_rejects_an_insertion_depth():
    with pytest.raises(TypeError):
        indexes.get("im_tree")(1, insertion_depth=2)


@pytest.mark.parametrize("batch_size", [1, 3, 64])
@pytest.mark.parametrize("window", JOIN_WINDOWS)
@pytest.mark.parametrize("predicate", JOIN_PREDICATES)
@pytest.mark.parametrize("self_join", [False, True], ids=["two_way", "self_join"])
def test_join_matches_oracle(predicate, window, self_join, batch_size):
    options = {"merge_ratio": 0.25, **TINY}
    join_matches_oracle("im_tree", options, predicate, window, self_join, batch_size)
