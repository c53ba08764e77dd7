"""``pim_tree``: random action sequences at tiny node sizes, merge ratios and insertion depths
(splits, merges and repartitioning all the time) against a sorted-array oracle, the partitions'
adaptation to the value distribution, and whole joins against the reference join."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from budget import examples
from hypothesis import settings
from hypothesis import strategies as st
from window_index_oracle import (
    JOIN_PREDICATES,
    JOIN_WINDOWS,
    SortedOracle,
    join_matches_oracle,
    machine,
    probe_pairs,
    random_actions,
)

from streamjoin import indexes
from streamjoin.indexes.pim.bplus_tree import LEAF_HWM, PREFETCH_ITEMS

OPTIONS = st.fixed_dictionaries(
    {
        "merge_ratio": st.sampled_from([0.05, 0.2, 0.5, 1.0]),
        "insertion_depth": st.integers(0, 4),
        "window": st.one_of(st.none(), st.integers(1, 60)),
        "fanout": st.integers(3, 5),
        "leaf_size": st.integers(3, 5),
        "css_fanout": st.integers(2, 4),
        "css_leaf_size": st.integers(1, 3),
        "layout": st.sampled_from(["wide", "compact"]),
    }
)

TestPIMTreeMachine = machine("pim_tree", OPTIONS, exact_expiry=False).TestCase
TestPIMTreeMachine.settings = settings(
    max_examples=examples(120), stateful_step_count=50, deadline=None
)

TINY = {"fanout": 3, "leaf_size": 3, "css_fanout": 3, "css_leaf_size": 2}


@pytest.mark.parametrize(
    "options",
    [
        {"merge_ratio": 0.1, "insertion_depth": 2},
        {"merge_ratio": 0.5, "insertion_depth": 4, "css_fanout": 2, "css_leaf_size": 1},
        {"merge_ratio": 1.0, "insertion_depth": 1, "window": 600},
        {"merge_ratio": 0.02, "insertion_depth": 3, "fanout": 4, "leaf_size": 4},
        {"merge_ratio": 0.1, "insertion_depth": 2, "layout": "compact"},
        {"merge_ratio": 0.5, "insertion_depth": 4, "css_fanout": 2, "layout": "compact"},
    ],
)
def test_random_actions_many_partitions(options):
    index = indexes.get("pim_tree")(1, **{**TINY, **options})
    random_actions(index, np.random.default_rng(len(str(options))), steps=150, window=600)
    assert len(index._tops) > 1


def _fill(index, values, first_ref=0):
    values = np.asarray(values, dtype=np.float64)
    refs = np.arange(first_ref, first_ref + len(values))
    for i in range(0, len(values), 50):
        index.insert(values[None, i : i + 50], refs[i : i + 50])
        index.expire(refs[i] - 1000)
    index.check()
    return first_ref + len(values)


def test_partitions_follow_the_value_distribution():
    """Each merge re-cuts T_I along T_S's nodes at depth D_I (§3.3.1, §5 'Impact of skewed
    data'): inserts spread evenly over the subindexes, even as the distribution moves."""
    index = indexes.get("pim_tree")(
        1, merge_ratio=0.5, insertion_depth=2, window=1000, css_fanout=5, css_leaf_size=4
    )
    rng = np.random.default_rng(3)
    ref = _fill(index, rng.normal(0, 1, 3000))
    upper = index._upper[np.isfinite(index._upper)]
    assert len(upper) >= 5 and np.all(np.abs(upper[:-1]) < 3)  # quantiles (the last: the max)
    ref = _fill(index, rng.normal(100, 1, 3000), ref)  # the window moved on entirely
    upper = index._upper[np.isfinite(index._upper)]
    assert len(upper) >= 5 and np.all(np.abs(upper[:-1] - 100) < 3), "bounds moved with the data"
    n_ti = index._n_ti
    ref = _fill(index, rng.normal(100, 1, 400), ref)
    held = [len(t) for t in indexes.bplus_tree.check_forest(index._forest, index._tops)]
    assert sum(held) == n_ti + 400 and max(held) < 3 * (sum(held) / len(held))


def test_partition_inserts_count_the_inserts_since_the_last_merge():
    """The per-subindex insert counters (Fig. 13a) sum to the inserts since the last merge,
    match what each subindex holds (``check()``), and a merge hands them over whole."""
    index = indexes.get("pim_tree")(1, merge_ratio=0.2, insertion_depth=2, window=500, **TINY)
    rng = np.random.default_rng(5)
    since_merge, ref = 0, 0
    for _ in range(60):
        n = int(rng.integers(1, 40))
        merges = index.merges
        index.insert(rng.normal(0, 10, (1, n)), np.arange(ref, ref + n))
        ref += n
        index.expire(ref - 500)
        since_merge += n
        if index.merges > merges:
            assert index.merges == merges + 1
            assert index.last_partition_inserts.sum() == since_merge
            since_merge = 0
        counts = index.partition_inserts
        assert counts.sum() == since_merge == index._n_ti
        assert len(counts) == len(index._tops)
        index.check()
    assert index.merges >= 5 and index.merge_seconds > 0
    assert len(index.last_partition_inserts) > 1  # T_S was not empty at the last merges


def test_probe_walks_the_leaf_chain_across_subindexes():
    """A wide band starts in one subindex and follows the chain through the next ones
    (Alg. 2 l. 27-34), through empty ones too, and stops once past the band."""
    index = indexes.get("pim_tree")(1, merge_ratio=1.0, insertion_depth=3, window=100, **TINY)
    _fill(index, np.arange(0.0, 200.0, 2.0))  # 100 even keys, merged into T_S
    index.insert(np.arange(1.0, 200.0, 20.0)[None, :], np.arange(100, 110))  # odd keys in T_I
    index.check()
    assert len(index._ts_refs) == 100 and index._n_ti == 10 and len(index._tops) > 10
    got = probe_pairs(index, [50.0], -40.0, 45.0)  # keys 10 … 95
    want = [(0, r) for r in range(5, 48)] + [(0, 100 + i) for i in range(1, 5)]
    assert got == sorted(want)
    assert not index._locks.any()


def test_merge_drops_expired_items():
    index = indexes.get("pim_tree")(1, merge_ratio=0.25, window=40, **TINY)
    index.insert(np.arange(40.0)[None, :], np.arange(40))  # merged at once: 40 >= 10
    assert index._n_ti == 0 and len(index) == 40
    index.expire(30)
    assert len(index) == 40  # flagged, still held ...
    assert probe_pairs(index, [0.0], -np.inf, np.inf) == [(0, r) for r in range(30, 40)]
    index.insert(np.arange(10.0)[None, :], np.arange(40, 50))  # ... until the next merge
    index.check()
    assert len(index) == 20 and index._n_ti == 0


def test_pickles_as_arrays():
    index = indexes.get("pim_tree")(1, merge_ratio=0.3, insertion_depth=2, **TINY)
    _fill(index, np.random.default_rng(0).normal(0, 10, 500))
    copy = pickle.loads(pickle.dumps(index))
    copy.check()
    assert probe_pairs(copy, [1.0, 5.0], -3, 3) == probe_pairs(index, [1.0, 5.0], -3, 3)


@pytest.mark.parametrize(
    "options",
    [
        {"merge_ratio": 0},
        {"merge_ratio": 1.5},
        {"insertion_depth": -1},
        {"window": 0},
        {"fanout": 2},
        {"css_leaf_size": 0},
        {"layout": "packed"},
    ],
)
def test_rejects_bad_options(options):
    with pytest.raises(ValueError, match="pim_tree"):
        indexes.get("pim_tree")(1, **options)


@pytest.mark.parametrize("batch_size", [1, 3, 64])
@pytest.mark.parametrize("window", JOIN_WINDOWS)
@pytest.mark.parametrize("predicate", JOIN_PREDICATES)
@pytest.mark.parametrize("self_join", [False, True], ids=["two_way", "self_join"])
def test_join_matches_oracle(predicate, window, self_join, batch_size):
    layout = "compact" if batch_size == 3 else "wide"  # both layouts, every predicate and window
    options = {"merge_ratio": 0.25, "insertion_depth": 1, "layout": layout, **TINY}
    join_matches_oracle("pim_tree", options, predicate, window, self_join, batch_size)


@pytest.mark.parametrize("batch_size", [1, 64])
@pytest.mark.parametrize("window", JOIN_WINDOWS)
@pytest.mark.parametrize("self_join", [False, True], ids=["two_way", "self_join"])
def test_compact_join_matches_oracle_at_other_batch_sizes(window, self_join, batch_size):
    """The compact layout's band join at batch sizes beside test_join_matches_oracle's 3."""
    options = {"merge_ratio": 0.25, "insertion_depth": 1, "layout": "compact", **TINY}
    join_matches_oracle("pim_tree", options, "band", window, self_join, batch_size)


@pytest.mark.parametrize("layout", ["wide", "compact"])
def test_large_window_merges_into_reused_buffers(layout):
    """A window large enough for the batched probe's pipeline and the inserts' leaf prefetching
    (T_I with PREFETCH_ITEMS items or more), over merges that swap T_S's buffers; equal keys
    straddle T_S, T_I and leaf ends."""
    rng = np.random.default_rng(5)
    index = indexes.get("pim_tree")(1, merge_ratio=1.0, window=2**16, layout=layout)
    oracle = SortedOracle()
    n = prefetching = 0
    steady = []  # T_S buffers in use once the window is full
    while n < 10 * 2**16:
        values = rng.integers(0, 5000, 4096) if n % 3 else rng.normal(2500, 2000, 4096)
        index.insert(*oracle.batch(values))
        n += len(values)
        index.expire(oracle.expire(n - 2**16))
        prefetching += index._forest.meta[LEAF_HWM] * index.leaf_size >= PREFETCH_ITEMS
        if n >= 4 * 2**16 and not any(index._ts_buf[0] is b for b in steady):
            steady.append(index._ts_buf[0])
        probe_keys = rng.normal(2500, 2500, 64).round()
        got = probe_pairs(index, probe_keys, -1.5, 3.0, oracle)
        assert got == oracle.probe(probe_keys, -1.5, 3.0)
    assert index.merges >= 8 and len(steady) == 2, "merges alternate between two buffers"
    assert prefetching > 0
    index.check()


def test_memory_traffic_model_counts_what_the_kernels_touch():
    """The roofline model (benchmarks/test_tree_indexes.py): a wide probe reads 4 + 1 lines of
    T_S (keys, refs) and 8 + 1 of T_I; a compact T_S has no ref line; the merge's share falls as
    merges get rarer and halves with 8-byte T_S items."""
    from streamjoin.indexes.pim.pim_tree import memory_traffic

    wide, compact = memory_traffic(2**20), memory_traffic(2**20, layout="compact")
    assert wide["probe_bytes"] == 14 * 64 and compact["probe_bytes"] == 13 * 64
    assert wide["cold_lines"] == 14 + 16 and wide["insert_bytes"] == 24 * 64
    assert (
        compact["merge_bytes"] < wide["merge_bytes"] < memory_traffic(2**20, 1 / 16)["merge_bytes"]
    )
    assert wide["total_bytes"] == sum(
        wide[k] for k in ("probe_bytes", "insert_bytes", "merge_bytes")
    )
