"""``wib_tree`` (PanJoin §III-C): random action sequences at tiny subwindows, leaves and
fan-outs against a sorted-array oracle, equal-key leaves chained in the LLAT, and whole joins
against the reference join."""

from __future__ import annotations

import numpy as np
import pytest
from budget import examples
from hypothesis import settings
from hypothesis import strategies as st
from subwindow_index_drivers import compact_twins_agree, increasing_actions, panjoin_matches_oracle
from window_index_oracle import (
    JOIN_PREDICATES,
    JOIN_WINDOWS,
    join_matches_oracle,
    machine,
    probe_pairs,
    random_actions,
)

import streamjoin as sj
import streamjoin.indexes.panjoin.wib_tree  # noqa: F401  (registers "wib_tree")
from streamjoin import indexes
from streamjoin.actors.join_core import JoinCore
from streamjoin.indexes.panjoin.llat import chain_entries
from streamjoin.indexes.panjoin.wib_tree import HEIGHT, LEAVES, WiBTree

#: Subwindows of 8 items: a 40-tuple count window spans six of them.
TINY = {"subwindow_size": 8, "leaf_width": 2, "fanout": 3}

OPTIONS = st.fixed_dictionaries(
    {
        "subwindow_size": st.integers(1, 24),
        "leaf_width": st.integers(2, 5),
        "fanout": st.integers(3, 5),
        "layout": st.sampled_from(["compact", "wide"]),
    }
)

TestWiBTreeMachine = machine("wib_tree", OPTIONS, exact_expiry=False).TestCase
TestWiBTreeMachine.settings = settings(
    max_examples=examples(100), stateful_step_count=40, deadline=None
)


def wib_tree(**options):
    return indexes.get("wib_tree")(1, **options)


def equal_flags_in_key_order(store) -> list[bool]:
    return [bool(store._t.leaf_equal[leaf]) for leaf in store._leaves_in_order()]


@pytest.mark.parametrize("layout", ["compact", "wide"])
@pytest.mark.parametrize(
    ("subwindow_size", "leaf_width", "fanout"), [(8, 2, 3), (40, 3, 3), (120, 4, 4), (2, 2, 3)]
)
def test_random_actions(subwindow_size, leaf_width, fanout, layout):
    options = {
        "subwindow_size": subwindow_size,
        "leaf_width": leaf_width,
        "fanout": fanout,
        "layout": layout,
    }
    rng = np.random.default_rng(subwindow_size)
    random_actions(wib_tree(**options), rng, steps=120, window=300)
    increasing_actions(wib_tree(**options), rng, steps=120, window=60)


def test_grows_deep_with_tiny_nodes():
    rng = np.random.default_rng(5)
    values = np.concatenate([rng.normal(0, 1e3, 1500), np.arange(1500.0)])
    index = wib_tree(subwindow_size=3000, leaf_width=3, fanout=3)
    for start in range(0, 3000, 250):
        index.insert(values[None, start : start + 250], np.arange(start, start + 250))
    index.check()
    store = index._subwindows[-1]
    assert store._t.meta[HEIGHT] >= 6 and store._t.meta[LEAVES] >= 3000 // 3
    probes = [-50.0, 0.0, 700.25]
    want = sorted(
        (i, int(r)) for i, k in enumerate(probes) for r in np.flatnonzero(np.abs(values - k) <= 2)
    )
    assert probe_pairs(index, probes, -2.0, 2.0) == want


def test_equal_keys_chain_llat_entries_then_split_off():
    """§III-C: one key never splits a leaf; its leaf chains LLAT entries. Other keys arriving
    in its range move to new leaves on either side."""
    index = wib_tree(subwindow_size=200, leaf_width=4, fanout=3)
    index.insert(np.full((1, 50), 5.0), np.arange(50))
    store = index._subwindows[-1]
    t, llat = store._t, store._llat
    assert t.meta[LEAVES] == 1 and t.leaf_equal[0]
    assert len(chain_entries(llat, t.leaf_head[0])) == 13
    index.insert(np.array([[4.0, 5.0, 6.0, 5.0]]), np.arange(50, 54))
    index.check()
    assert equal_flags_in_key_order(store) == [False, True, False]
    assert probe_pairs(index, [5.0], 0.0, 0.0) == [(0, r) for r in [*range(50), 51, 53]]
    assert probe_pairs(index, [5.0], -1.0, -1.0) == [(0, 50)]


def test_heavy_median_run_becomes_an_equal_key_leaf():
    index = wib_tree(subwindow_size=100, leaf_width=8, fanout=3)
    index.insert(np.array([[1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 9.0, 3.0]]), np.arange(9))
    index.check()
    assert equal_flags_in_key_order(index._subwindows[-1]) == [False, True, False]
    assert probe_pairs(index, [3.0], 0.0, 6.0) == [(0, r) for r in range(2, 9)]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subwindow_size": 0}, r"subwindow_size must be an integer in \[1, "),
        ({"leaf_width": 1}, r"leaf_width must be an integer in \[2, 65536\]"),
        ({"fanout": 2}, r"fanout must be an integer in \[3, 65536\]"),
        ({"fanout": "64"}, "fanout must be an integer"),
        ({"fanout": 10**12}, r"fanout must be an integer in \[3, 65536\]"),
        ({"layout": "packed"}, "layout must be 'wide' or 'compact'"),
    ],
)
def test_rejects_bad_options(options, message):
    with pytest.raises(ValueError, match=f"wib_tree {message}"):
        wib_tree(**options)


@pytest.mark.parametrize("batch_size", [1, 3, 64])
@pytest.mark.parametrize("window", JOIN_WINDOWS)
@pytest.mark.parametrize("predicate", JOIN_PREDICATES)
@pytest.mark.parametrize("self_join", [False, True], ids=["two_way", "self_join"])
def test_join_matches_oracle(predicate, window, self_join, batch_size):
    options = {**TINY, "layout": "compact" if batch_size == 3 else "wide"}  # both, everywhere
    join_matches_oracle("wib_tree", options, predicate, window, self_join, batch_size)


@pytest.mark.parametrize("layout", ["compact", "wide"])
def test_panjoin_topology_matches_oracle(layout):
    panjoin_matches_oracle("wib_tree", {"leaf_width": 3, "fanout": 3, "layout": layout})


def test_full_subwindows_hold_compact_items():
    """Each full subwindow is packed into 8-byte items coded from its own keys (its leaves
    never split again); the newest, still filling, stays wide: half the LLAT's item bytes of
    the full ones, the same pairs after refinement -- on keys that increase, with ties and
    with far outliers."""
    rng = np.random.default_rng(4)
    batches = [
        np.concatenate([np.arange(400) + 400.0 * b, rng.normal(0, 100, 90).round(), [1e15] * 10])
        for b in range(4)
    ] + [rng.normal(0, 100, 100)]
    compact_twins_agree(
        lambda layout: wib_tree(subwindow_size=500, leaf_width=16, layout=layout),
        batches,
        np.concatenate([rng.normal(0, 100, 30), rng.uniform(0, 1600, 30), [1e15]]),
    )


def test_compact_refs_spanning_2_32_are_refused_before_anything_changes():
    store = WiBTree(100, layout="compact")
    store.insert(np.array([1.0, 2.0]), np.array([5, 6]))
    with pytest.raises(ValueError, match="span 2\\*\\*32"):
        store.insert(np.array([3.0]), np.array([5 + 2**32]))
    with pytest.raises(ValueError, match="refs must increase"):
        store.insert(np.array([3.0]), np.array([4]))
    assert len(store) == 2
    store.check()


@pytest.mark.parametrize(
    ("window", "options", "size"),
    [
        (sj.CountWindow(2**20), {}, 2**20),
        (sj.CountWindow(2**10), {}, 2**16),
        (sj.CountWindow(2**40), {}, 2**22),
        (sj.CountWindow(2**20), {"subwindow_size": 2**17}, 2**17),  # the user's, as given
        (sj.CountWindow(2**20), {"leaf_width": 64}, 2**20),  # another option: still sized
        (sj.TimeWindow(1000), {}, 2**16),  # no count known
    ],
)
def test_a_join_core_sizes_its_subwindows_by_its_count_window(window, options, size):
    """A join core over a count window of W tuples a stream gives WiB+-Tree subwindows of W
    (between 2^16 and 2^22), unless the user set their size."""
    core = JoinCore(sj.Query(sj.band("x", 1.0), window=window), "wib_tree", options)
    assert [part.index.subwindow_size for part in core.parts.values()] == [size, size]


def test_a_join_over_sized_subwindows_matches_another_index():
    """The join core's sized subwindows (2^17 items at W = 2^17) return the pairs of the
    B+-tree's join (both checked against the oracle on smaller inputs; the oracle takes
    minutes at this size)."""
    w = 2**17
    data = sj.sources.synthetic(w + 30_000, low=0, high=3 * w, seed=4)
    query = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(w))
    wib, bplus = (
        sj.run(query, data, sj.topologies.single(index), batch_size=1024)
        for index in ("wib_tree", "bplus_tree")
    )
    assert wib.count > 20_000
    assert wib.same_pairs(bplus)
