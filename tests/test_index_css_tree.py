"""``css_tree``: the Alg. 3 build and the descent on their own, random action sequences at tiny
node sizes against a sorted-array oracle, and whole joins against the reference join."""

from __future__ import annotations

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from window_index_oracle import keys, machine, probe_pairs, random_actions

import streamjoin as sj
from streamjoin import indexes
from streamjoin.indexes.blocks.sorted_runs import lower_bound
from streamjoin.indexes.pim.css_tree import build_css_tree, descend_css_tree

OPTIONS = st.fixed_dictionaries(
    {
        "fanout": st.integers(2, 5),
        "leaf_size": st.integers(1, 4),
        "layout": st.sampled_from(["wide", "compact"]),
    }
)

TestCSSTreeMachine = machine("css_tree", OPTIONS, exact_expiry=False).TestCase
TestCSSTreeMachine.settings = settings(
    max_examples=examples(100), stateful_step_count=50, deadline=None
)


@settings(max_examples=examples(300), deadline=None)
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


@pytest.mark.parametrize("layout", ["wide", "compact"])
@pytest.mark.parametrize(("fanout", "leaf_size"), [(2, 1), (3, 2), (4, 3), (5, 1)])
def test_random_actions_deep_trees(fanout, leaf_size, layout):
    index = indexes.get("css_tree")(1, fanout=fanout, leaf_size=leaf_size, layout=layout)
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


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"fanout": 1}, r"fanout must be an integer in \[2, 65536\]"),
        ({"leaf_size": 0}, r"leaf_size must be an integer in \[1, 65536\]"),
        ({"fanout": float("nan")}, r"fanout must be an integer in \[2, 65536\]"),
        ({"layout": "tiny"}, "layout"),
    ],
)
def test_rejects_degenerate_nodes(options, match):
    with pytest.raises(ValueError, match=match):
        indexes.get("css_tree")(1, **options)


def test_compact_items_take_half_the_bytes_and_find_the_same_pairs():
    """8-byte items against 16-byte ones, after a rebuild per batch over drifting keys (so
    the grid is re-fitted from old codes), probed across the range and refined."""
    rng = np.random.default_rng(5)
    wide, compact = (indexes.get("css_tree")(1, layout=layout) for layout in ("wide", "compact"))
    history = rng.normal(np.arange(10_000) // 500 * 50.0, 30.0)  # the key of each ref
    for b in range(20):
        refs = np.arange(b * 500, (b + 1) * 500)
        for index in (wide, compact):
            index.insert(history[refs][None, :], refs)
            index.expire(b * 500 - 4000)
    compact.check()
    assert len(compact) == len(wide) == 5000  # expiry is lazy until the next insert
    assert compact.nbytes < 0.55 * wide.nbytes, (compact.nbytes, wide.nbytes)
    probes = np.linspace(-100, 1100, 97)
    pos, refs = compact.probe(probes[None, :], np.array([-2.0]), np.array([3.0]))
    d = history[refs] - probes[pos]
    keep = (d >= -2.0) & (d <= 3.0)  # the join core's refinement on the stored keys
    found = sorted(zip(pos[keep].tolist(), refs[keep].tolist(), strict=True))
    assert found == probe_pairs(wide, probes, -2.0, 3.0)
    assert len(found) > 100


def test_a_compact_window_of_2_32_refs_is_refused_before_anything_changes():
    index = indexes.get("css_tree")(1, layout="compact")
    index.insert(np.array([[1.0, 2.0]]), np.array([0, 1]))
    with pytest.raises(ValueError, match="2\\*\\*32 refs"):
        index.insert(np.array([[3.0]]), np.array([2**32]))
    index.check()
    assert len(index) == 2


PREDICATES = [sj.band("x", 3), sj.equal("x"), sj.less("x")]
WINDOWS = [sj.CountWindow(40), sj.TimeWindow(4)]


@pytest.mark.parametrize("batch_size", [1, 3, 64])
@pytest.mark.parametrize("window", WINDOWS, ids=["count", "time"])
@pytest.mark.parametrize("predicate", PREDICATES, ids=["band", "equal", "less"])
@pytest.mark.parametrize("self_join", [False, True], ids=["two_way", "self_join"])
def test_join_matches_oracle(predicate, window, self_join, batch_size):
    data = sj.sources.synthetic(300, low=0, high=50, seed=batch_size, self_join=self_join)
    q = sj.Query(predicate, window=window, self_join=self_join)
    layout = "compact" if batch_size == 3 else "wide"  # both layouts, every predicate and window
    topo = sj.topologies.single("css_tree", fanout=3, leaf_size=2, layout=layout)
    res = sj.run(q, data, topo, batch_size=batch_size)
    assert res.same_pairs(sj.oracle.join(q, data))


@pytest.mark.parametrize("backend", ["sim", "ray"])
def test_compact_layout_in_a_grid_on_each_backend(request, backend):
    """Compact CSS-trees (an inexact index, refined by each core) in a 2 x 2 grid, in the
    simulator and on Ray: keys that drift, with far outliers the grid leaves to the side run."""
    if backend == "ray":
        request.getfixturevalue("ray_session")
    rng = np.random.default_rng(7)
    n = 600
    x = np.arange(n) * 0.5 + rng.normal(0, 2, n).round(1)
    x[rng.random(n) < 0.05] = 1e9  # far outliers: coded outside the grid
    data = {"ts": np.arange(n), "x": x, "stream": rng.integers(0, 2, n)}
    q = sj.Query(sj.band("x", 1.5), window=sj.CountWindow(80))
    options = {"layout": "compact", "fanout": 3, "leaf_size": 2}
    topo = sj.topologies.grid(2, 2, index="css_tree", index_options=options)
    res = sj.run(q, data, topo, backend=backend, batch_size=16)
    assert res.same_pairs(sj.oracle.join(q, data))
