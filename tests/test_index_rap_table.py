"""``rap_table`` (PanJoin §III-B): Alg. 1 on the paper's examples, LLAT chaining, random action
sequences at tiny subwindows / P / σ against a sorted-array oracle, and whole joins against
the reference join."""

from __future__ import annotations

import math

import numpy as np
import pytest
from budget import examples
from hypothesis import settings
from hypothesis import strategies as st
from subwindow_index_drivers import compact_twins_agree, increasing_actions, panjoin_matches_oracle
from window_index_oracle import (
    JOIN_PREDICATES,
    JOIN_WINDOWS,
    SortedOracle,
    join_matches_oracle,
    machine,
    probe_pairs,
    random_actions,
)

import streamjoin.indexes.panjoin.rap_table  # noqa: F401  (registers "rap_table")
from streamjoin import indexes
from streamjoin.indexes.blocks.key_codes import CODE_MAX, encode
from streamjoin.indexes.panjoin.llat import PTR_G
from streamjoin.indexes.panjoin.rap_table import RaPTable, adjust_splitters

#: Subwindows of 8 items: a 40-tuple count window spans six of them.
TINY = {"subwindow_size": 8, "partitions": 3, "sigma": 1.1}

OPTIONS = st.fixed_dictionaries(
    {
        "subwindow_size": st.integers(1, 16),
        "partitions": st.integers(1, 5),
        "sigma": st.floats(1.01, 2.0),
        "domain": st.sampled_from([(-(2.0**31), 2.0**31), (0.0, 10.0), (-1e300, 1e300)]),
        "layout": st.sampled_from(["compact", "wide"]),
    }
)

TestRaPTableMachine = machine("rap_table", OPTIONS, exact_expiry=False).TestCase
TestRaPTableMachine.settings = settings(
    max_examples=examples(100), stateful_step_count=40, deadline=None
)


def rap_table(**options):
    return indexes.get("rap_table")(1, **options)


def balanced(store) -> bool:
    """No partition both overflows its normal entry and holds two distinct keys: nothing an
    adjustment could still split."""
    t, width = store._t, store._llat.keys.shape[1]
    return bool(np.all((t.count <= width) | (t.kmin == t.kmax)))


@pytest.mark.parametrize("layout", ["compact", "wide"])
@pytest.mark.parametrize(
    ("subwindow_size", "partitions", "sigma"),
    [(8, 2, 1.1), (16, 4, 1.25), (50, 7, 1.5), (1, 1, 2.0)],
)
def test_random_actions(subwindow_size, partitions, sigma, layout):
    options = {
        "subwindow_size": subwindow_size,
        "partitions": partitions,
        "sigma": sigma,
        "domain": (0.0, 60.0),
        "layout": layout,
    }
    rng = np.random.default_rng(subwindow_size)
    random_actions(rap_table(**options), rng, steps=120, window=300)
    increasing_actions(rap_table(**options), rng, steps=120, window=60)


def test_splitters_on_the_fig_3_histogram():
    """Alg. 1: N = 16, P = 4, prefix sums 2, 5, 10, 16; bal_2 = 8 in (5, 10] puts s_2 in the
    3rd partition, at (8 - 5) / 5 of its [min, max] (§III-B1, Fig. 3)."""
    count = np.array([2, 3, 5, 6])
    kmin, kmax = np.array([0.0, 20.0, 40.0, 70.0]), np.array([10.0, 35.0, 60.0, 100.0])
    high = adjust_splitters(count, kmin, kmax, np.array([15.0, 38.0, 65.0, np.inf]))
    assert high.tolist() == [20.0 + 2 / 3 * 15.0, 40.0 + 3 / 5 * 20.0, 70.0 + 2 / 6 * 30.0, np.inf]


@pytest.mark.parametrize("partitions", [4, 16, 1024])
def test_fig_4_worst_case_converges_in_log_p_of_2_32_adjustments(partitions):
    """§III-B1, Fig. 4: every key in the first partition, the largest 2^32 - 1, then each next
    one P times smaller, the rest 0. Each adjustment peels one value off, so the table needs
    ceil(log_P 2^32) of them before the first partition holds a single key."""
    values = []
    v = 2**32 - 1
    while v:
        values.append(v)
        v //= partitions
    n = 8 * partitions
    data = np.array(values + [0] * (n - len(values)), dtype=np.float64)[None, :]
    # the first table's first partition is (-inf, 2^32]: it takes every key
    index = rap_table(subwindow_size=n, partitions=partitions, domain=(0.0, partitions * 2.0**32))
    bound = math.ceil(32 / math.log2(partitions))
    adjustments = 0
    for step in range(bound + 2):
        index.insert(data, np.arange(step * n, (step + 1) * n))
        index.expire(step * n)
        newest = index._subwindows[-1]
        if balanced(newest):
            break
        assert newest._t.count[0] == n - adjustments, "one value leaves the first partition"
        adjustments += 1
    index.check()
    assert adjustments == bound


def test_adjustment_balances_skewed_keys():
    """§V-A1: from a table for the 32-bit range, a few adjustments balance gaussian keys."""
    rng = np.random.default_rng(3)
    index = rap_table(subwindow_size=4096, partitions=16, sigma=1.25)
    for step in range(4):
        index.insert(rng.normal(1000, 5, (1, 4096)), np.arange(step * 4096, (step + 1) * 4096))
    index.check()
    counts = [s._t.count.max() for s in index._subwindows]
    assert counts[0] == 4096 and counts[-1] <= 2 * 4096 / 16


def test_partition_sizes_count_the_items_between_splitters():
    rng = np.random.default_rng(4)
    index = rap_table(subwindow_size=200, partitions=5, domain=(0.0, 100.0))
    values = rng.uniform(0, 100, (1, 150))
    index.insert(values, np.arange(150))
    store = index._subwindows[-1]
    sizes = store.partition_sizes()
    edges = np.concatenate([[-np.inf], store._t.high])
    want = [
        np.sum((values > a) & (values <= b)) for a, b in zip(edges[:-1], edges[1:], strict=True)
    ]
    assert sizes.tolist() == want and sizes.sum() == len(store) == 150
    sizes[0] = -1  # a copy: the store is untouched
    index.check()


def test_llat_chains_equal_keys_into_reserved_entries():
    """§III-B2: a partition overflowing its normal entry takes reserved entries, at most P."""
    index = rap_table(subwindow_size=100, partitions=4, sigma=1.25)
    index.insert(np.full((1, 100), 7.0), np.arange(100))
    store = index._subwindows[-1]
    width = store._llat.keys.shape[1]
    assert width == 32 and store._llat.meta[PTR_G] == 4 + 3  # 100 items: 4 entries of 32
    index.check()
    assert probe_pairs(index, [7.0], 0.0, 0.0) == [(0, r) for r in range(100)]


@pytest.mark.parametrize("layout", ["compact", "wide"])
def test_increasing_keys_pile_into_the_last_partition(layout):
    """§III-B3: keys above the previous subwindow's range all land in the last partition.
    Compact, the full subwindow is coded from its own keys, not from its predecessor's range:
    integer keys get distinct codes, and a probe among them returns its matches only."""
    index = rap_table(subwindow_size=64, partitions=8, layout=layout)
    oracle = SortedOracle()
    index.insert(*oracle.batch(np.arange(128.0)))
    index.check()
    newest = index._subwindows[1]
    assert newest._t.count[-1] == 64 and newest.compact == (layout == "compact")
    assert probe_pairs(index, [100.0], -1.0, 1.0, oracle) == [(0, 99), (0, 100), (0, 101)]
    assert probe_pairs(index, [100.0], -1.0, 1.0) == [(0, 99), (0, 100), (0, 101)]
    if layout == "compact":
        base, scale = newest._t.coder
        codes = [int(encode(float(k), base, scale)) for k in range(64, 128)]
        assert codes == sorted(set(codes)) and CODE_MAX not in codes[:-1]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subwindow_size": 0}, r"subwindow_size must be an integer in \[1, "),
        ({"partitions": 0}, r"partitions must be an integer in \[1, "),
        ({"sigma": 1.0}, "sigma must be a finite number in \\(1, 16\\]"),
        ({"sigma": "big"}, "sigma must be a finite number in \\(1, 16\\]"),
        ({"sigma": 1e12}, "sigma must be a finite number in \\(1, 16\\]"),
        ({"domain": (5.0, 5.0)}, "domain must be finite with lo < hi"),
        ({"domain": (0.0, np.inf)}, "domain must be finite with lo < hi"),
        ({"domain": 3.0}, "domain must be a pair of numbers"),
        ({"layout": "packed"}, "layout must be 'wide' or 'compact'"),
    ],
)
def test_rejects_bad_options(options, message):
    with pytest.raises(ValueError, match=f"rap_table {message}"):
        rap_table(**options)


@pytest.mark.parametrize("batch_size", [1, 3, 64])
@pytest.mark.parametrize("window", JOIN_WINDOWS)
@pytest.mark.parametrize("predicate", JOIN_PREDICATES)
@pytest.mark.parametrize("self_join", [False, True], ids=["two_way", "self_join"])
@pytest.mark.parametrize("layout", ["compact", "wide"])
def test_join_matches_oracle(predicate, window, self_join, batch_size, layout):
    options = {**TINY, "layout": layout}
    join_matches_oracle("rap_table", options, predicate, window, self_join, batch_size)


def test_panjoin_topology_matches_oracle():
    panjoin_matches_oracle("rap_table", {"partitions": 3, "domain": (0.0, 50.0)})


def test_full_subwindows_hold_compact_items():
    """Each full subwindow is packed into 8-byte items coded from its own keys; the newest,
    still filling, stays wide: half the LLAT bytes of the full ones, the same pairs."""
    rng = np.random.default_rng(4)
    batches = [rng.normal(0, 100, 500) for _ in range(4)] + [rng.normal(0, 100, 100)]
    compact_twins_agree(
        lambda layout: rap_table(subwindow_size=500, partitions=16, layout=layout),
        batches,
        rng.normal(0, 100, 50),
    )


def test_compact_refs_below_the_subwindows_first_are_refused():
    """A compact subwindow stores refs as offsets from its first: a smaller one is refused
    before anything is stored (the index contract has refs increase)."""
    store = RaPTable(100, partitions=4, layout="compact")
    store.insert(np.array([1.0, 2.0]), np.array([10, 11]))
    with pytest.raises(ValueError, match="below the subwindow's first"):
        store.insert(np.array([3.0]), np.array([5]))
    assert len(store) == 2
    store.check()
