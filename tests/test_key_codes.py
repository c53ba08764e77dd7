"""Compact index items (``streamjoin.indexes.blocks.key_codes``) and the exactness of the indexes that
hold them: codes are monotone, probes over codes return supersets, and the refinement on full
keys gives the oracle's pairs where many distinct keys share one code and where band bounds
fall exactly on a code boundary."""

from __future__ import annotations

import numpy as np
import pytest
from budget import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st
from window_index_oracle import SortedOracle, probe_pairs

import streamjoin as sj
from streamjoin import indexes
from streamjoin.indexes.blocks.key_codes import (
    CODE_MAX,
    encode,
    fit,
    fit_final,
    fit_unsorted,
    item_bounds,
    item_codes,
    item_refs,
    pack_items,
)

ANY_FLOAT = st.floats(allow_nan=False)  # infinities and subnormals included
FINITE = st.floats(allow_nan=False, allow_infinity=False)


def _code(k: float, base: float, scale: float) -> int:
    return int(encode(np.float64(k), base, scale))


@settings(max_examples=examples(300), deadline=None)
@given(
    fitted=st.lists(FINITE, min_size=1, max_size=5),
    a=ANY_FLOAT,
    b=ANY_FLOAT,
)
def test_codes_are_monotone(fitted, a, b):
    """k1 <= k2 implies code(k1) <= code(k2), for any fitted code and any two keys (clamped
    ones, infinities and keys near the float limits included): what makes a code range a
    superset of a key range."""
    base, scale = fit(np.array(fitted))
    lo, hi = sorted((a, b))
    assert 0 <= _code(lo, base, scale) <= _code(hi, base, scale) <= CODE_MAX


@settings(max_examples=examples(200), deadline=None)
@given(low=st.integers(-(2**52), 2**52), width=st.integers(0, 2**30))
@example(low=-(2**52), width=1)  # its headroom of half a unit rounds away at 2**52
def test_integer_ranges_below_2_31_get_exact_codes(low, width):
    """Integers over a fitted range of fewer than 2**31 values: scale >= 1, so distinct integers
    have distinct codes, and the range's ends (and its headroom) are inside the codes."""
    ends = np.array([low, low + width], dtype=np.float64)
    base, scale = fit(ends)
    assert scale >= 1.0
    ks = np.unique(np.linspace(ends[0], ends[1], 50).round())
    c = [_code(k, base, scale) for k in ks]
    assert all(x < y for x, y in zip(c, c[1:], strict=False))
    assert c[0] > 0 and c[-1] < CODE_MAX


@settings(max_examples=examples(200), deadline=None)
# a fitted range wider than the largest float (its fit once looped for ever)
@example(fitted=[-1.7e308, 1.7e308], keys=[0.0, 1.7e308], bounds=[-1.0, 1.0])
@given(
    fitted=st.lists(FINITE, min_size=1, max_size=5),
    keys=st.lists(ANY_FLOAT, min_size=1, max_size=40),
    bounds=st.lists(ANY_FLOAT, min_size=2, max_size=2),
)
def test_item_bounds_hold_every_item_in_the_interval(fitted, keys, bounds):
    """Items packed from sorted keys (refs in any order) are sorted by code, carry their keys'
    codes and decode to their refs (counted from a base); every item whose key lies in
    ``[vlo, vhi]`` lies inside the interval's item bounds (a search over items returns a
    superset)."""
    base, scale = fit(np.array(fitted))
    k = np.sort(np.array(keys))
    refs = 2**40 + np.random.default_rng(len(k)).permutation(len(k)).astype(np.int64)
    items = pack_items(k, refs, base, scale, 2**40)
    assert items.dtype == np.uint64 and np.all(item_codes(items[1:]) >= item_codes(items[:-1]))
    got = item_refs(items, 2**40)
    assert got.tolist() == refs.tolist()
    key_of = dict(zip(refs.tolist(), k.tolist(), strict=True))
    assert item_codes(items).tolist() == [_code(key_of[r], base, scale) for r in got.tolist()]
    vlo, vhi = sorted(bounds)
    ilo, ihi = item_bounds(np.array([vlo]), np.array([vhi]), base, scale)
    for item, ref in zip(items, got.tolist(), strict=True):
        if vlo <= key_of[ref] <= vhi:
            assert ilo[0] <= item <= ihi[0]


def _bisort(**options):
    return indexes.get("bisort")(1, **{"layout": "compact", **options})


def test_many_distinct_keys_sharing_one_code_are_refined_exactly():
    """Full subwindows packed over keys from 0.5 to 1e12 code them about 233 apart: keys 1e-13
    apart share one code, as do neighbouring wide keys. Probes return those collisions as
    candidates (checked: there are many), and refined on the full keys they give exactly the
    oracle's pairs, from packed subwindows and from the one still filling."""
    rng = np.random.default_rng(11)
    index = _bisort(subwindow_size=600, partitions=8, buffer_size=50)
    oracle = SortedOracle()
    extra_candidates = 0
    for step in range(12):
        wide = rng.uniform(1e3, 1e12, 60)
        close = 0.5 + rng.integers(0, 20, 60) * 1e-13  # distinct keys within one code
        index.insert(*oracle.batch(np.concatenate([wide, close])))
        index.check()
        probes = np.concatenate([rng.choice(wide, 3), [0.5, 0.5 + 7e-13, 1e11]])
        for lo, hi in [(0.0, 0.0), (-3e-13, 2e-13), (-1e9, 1e9), (1e-13, np.inf)]:
            raw = probe_pairs(index, probes, lo, hi)
            got = probe_pairs(index, probes, lo, hi, oracle)
            assert got == oracle.probe(probes, lo, hi), (step, lo, hi)
            assert set(got) <= set(raw)
            extra_candidates += len(raw) - len(got)
    assert sum(s.packed for s in index._subwindows) >= 2
    assert extra_candidates > 1000, "the test must make codes collide"


@settings(max_examples=examples(200), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 5000),
    centre=st.floats(-1e12, 1e12),
    spread=st.sampled_from([1.0, 1e3, 1e9]),
    integers=st.booleans(),
    outliers=st.lists(st.sampled_from([-1e300, -1e15, 1e15, 1e300, -np.inf, np.inf]), max_size=2),
)
def test_a_final_fit_spreads_the_bulk_over_the_codes(seed, n, centre, spread, integers, outliers):
    """:func:`fit_final` of a sorted run: without far outliers its keys span the codes from 0
    to at least half of them (no headroom, nothing comes later); with at most two far outliers
    in a run of 2,048 keys or more, they take the extreme codes and the rest still spans at
    least an 18th of the codes (the bulk plus :data:`OUTLIER_REACH` widths each side, on a
    power-of-two scale)."""
    bulk = centre + np.random.default_rng(seed).uniform(-spread, spread, n)
    if integers:
        bulk = bulk.round()
    if bulk.min() == bulk.max():
        bulk = np.append(bulk, bulk[0] + 1.0)
    far = [x for x in outliers if len(bulk) >= 2048 and abs(x) > 1e14 + abs(centre) * 8]
    run = np.sort(np.concatenate([bulk, far]))
    base, scale = fit_final(run)
    codes = [_code(k, base, scale) for k in run]
    assert codes == sorted(codes)
    lo, hi = _code(bulk.min(), base, scale), _code(bulk.max(), base, scale)
    if not far:
        assert lo == 0 and hi >= 2**31
    else:
        assert hi - lo >= 2**32 // 18
        assert all(c in (0, CODE_MAX) for k, c in zip(run, codes, strict=True) if k in far)


@settings(max_examples=examples(200), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 5000),
    spread=st.sampled_from([1.0, 1e6, 1e300]),
    extremes=st.lists(st.sampled_from([-np.inf, np.inf, -1e15, 1e15, 0.0]), max_size=8),
)
def test_an_unsorted_fit_is_the_sorted_fit(seed, n, spread, extremes):
    """RaP-Table's fit (:func:`fit_unsorted`, quantiles by selection over keys in any order)
    is BI-Sort's (:func:`fit_final` over the same keys sorted), infinities and outliers
    included."""
    rng = np.random.default_rng(seed)
    keys = np.concatenate([rng.standard_cauchy(n) * spread, extremes])
    assert fit_unsorted(rng.permutation(keys)) == fit_final(np.sort(keys))


def test_a_packed_subwindow_takes_no_more_inserts():
    """A full compact subwindow is packed; an insert into it (beyond its capacity, outside the
    chain's contract) is refused instead of writing past its items."""
    from streamjoin.indexes.panjoin.bisort import BISort
    from streamjoin.indexes.panjoin.rap_table import RaPTable
    from streamjoin.indexes.panjoin.wib_tree import WiBTree

    for store in (
        BISort(4, partitions=2, buffer_size=2, layout="compact"),
        RaPTable(4, partitions=2, layout="compact"),
        WiBTree(4, leaf_width=2, fanout=3, layout="compact"),
    ):
        store.insert(np.arange(4.0), np.arange(4))
        with pytest.raises(ValueError, match="insert into a full subwindow"):
            store.insert(np.array([9.0]), np.array([4]))
        assert len(store) == 4
        store.check()


def _candidates_per_match(name: str, keys: np.ndarray, band: float, **options) -> float:
    """Candidates a compact index's probes return per pair they hold, for ``keys`` inserted
    in batches of 1,024 and probed with keys drawn from the last subwindow's span."""
    index = indexes.get(name)(1, subwindow_size=4096, layout="compact", **options)
    oracle = SortedOracle()
    for part in np.array_split(keys, len(keys) // 1024):
        index.insert(*oracle.batch(part))
    index.check()
    probes = np.sort(np.random.default_rng(3).choice(keys[-8192:], 500))
    raw = probe_pairs(index, probes, -band, band)
    exact = probe_pairs(index, probes, -band, band, oracle)
    assert set(exact) <= set(raw) and exact == oracle.probe(probes, -band, band)
    assert len(exact) >= 500
    return len(raw) / len(exact)


@pytest.mark.parametrize("name", ["bisort", "rap_table"])
def test_drifting_keys_keep_fine_codes_in_packed_subwindows(name):
    """Keys that keep increasing (timestamps) are coded from each full subwindow's own keys,
    not from a code fitted before they arrived: probes return barely more candidates than
    matches (a BI-Sort code fixed at its first run gave 29,445 candidates a probe)."""
    keys = np.arange(40_000) * 3.0 + np.random.default_rng(1).uniform(0, 1, 40_000)
    assert _candidates_per_match(name, keys, 4.0) <= 1.05


@pytest.mark.parametrize("name", ["bisort", "rap_table"])
def test_a_far_outlier_does_not_squeeze_the_other_keys_into_a_few_codes(name):
    """Keys of ±1e15 among keys in [0, 1e6] are clamped to the extreme codes of their
    subwindow instead of widening its code over 1e15 (which left 9,517 candidates a probe)."""
    keys = np.random.default_rng(2).uniform(0, 1e6, 40_000)
    keys[[5000, 21_000, 30_000]] = [1e15, -1e15, 1e15]
    assert _candidates_per_match(name, keys, 40.0) <= 1.05


@pytest.mark.parametrize("layout", ["compact", "wide"])
def test_band_bounds_exactly_on_a_code_boundary(layout):
    """Keys on the code grid (multiples of 1 / scale from ``base``) and bands whose ends land
    exactly on grid points, one code apart and inside one code: closed bounds keep the items on
    them, and nothing one code beyond comes through the refinement."""
    index = _bisort(subwindow_size=128, partitions=4, buffer_size=0, layout=layout)
    oracle = SortedOracle()
    grid = np.arange(0, 64) * 0.25  # fitted to [0, 15.75]: scale a power of two, grid exact
    index.insert(*oracle.batch(np.repeat(grid, 2)))  # fills the subwindow: packed
    t = index._subwindows[0]._t
    assert index._subwindows[0].packed == (layout == "compact")
    if layout == "compact":
        base, scale = t.coder
        c = [_code(k, base, scale) for k in grid]
        assert all(y > x for x, y in zip(c, c[1:], strict=False)), "grid points on codes"
        # a point between two grid points shares the lower one's code only with keys below it
        assert _code(1.125, base, scale) >= c[4]
    probes = np.array([0.0, 1.0, 1.125, 3.75, 15.75])
    for lo, hi in [(0.0, 0.0), (0.25, 0.25), (-0.25, 0.5), (0.125, 0.375), (-1.0, -0.25)]:
        got = probe_pairs(index, probes, lo, hi, oracle)
        assert got == oracle.probe(probes, lo, hi), (lo, hi)
        assert got, "the band holds grid points"


def test_a_join_with_colliding_codes_matches_the_oracle():
    """A whole band join through the compact ``bisort`` (the default layout) where the first
    subwindow's code is fitted to a narrow first run and later keys collide: the join core's
    refinement on the stored keys gives exactly the oracle's pairs."""
    rng = np.random.default_rng(5)
    n = 3000
    x = np.concatenate([rng.uniform(0, 1, 300), rng.uniform(0, 1e6, n - 300)])
    x[::7] = 0.25 + rng.integers(0, 5, len(x[::7])) * 1e-12
    data = {"ts": np.arange(n), "x": x, "stream": rng.integers(0, 2, n)}
    q = sj.Query(sj.band("x", 2e-12), window=sj.CountWindow(900))
    expected = sj.oracle.join(q, data)
    assert len(expected) > 1000
    for batch_size in (1, 64, 500):
        topology = sj.topologies.single(
            "bisort", subwindow_size=256, buffer_size=32, layout="compact"
        )
        assert sj.run(q, data, topology, batch_size=batch_size).same_pairs(expected)


def test_infinities_take_the_extreme_codes():
    base, scale = fit(np.array([-5.0, 5.0]))
    items = pack_items(np.array([-np.inf, -5.0, 0.0, 4.5, np.inf]), np.arange(5), base, scale, 0)
    c = item_codes(items)
    assert c[0] == 0 and c[-1] == CODE_MAX and 0 < c[1] < c[2] < c[3] < CODE_MAX


@pytest.mark.parametrize("name", ["bisort", "rap_table"])
def test_stationary_keys_give_few_extra_candidates(name):
    """Where compact items are meant to be used -- keys whose distribution stays put -- a
    probe's superset is barely larger than its matches: the fitted codes are fine enough
    (a regression guard for the fit; drifting keys are the documented slow case)."""
    rng = np.random.default_rng(8)
    index = indexes.get(name)(1, subwindow_size=4096, layout="compact")
    oracle = SortedOracle()
    for _ in range(8):
        index.insert(*oracle.batch(rng.uniform(-1e3, 1e3, 2048)))
    probes = rng.uniform(-1e3, 1e3, 500)
    raw = probe_pairs(index, probes, -0.1, 0.1)
    exact = probe_pairs(index, probes, -0.1, 0.1, oracle)
    assert len(exact) > 500
    assert len(raw) <= 1.05 * len(exact)


@pytest.mark.parametrize("name", ["bisort", "rap_table", "wib_tree"])
@pytest.mark.parametrize("backend", ["local", "sim"])
@pytest.mark.parametrize("batch_size", [1, 64])
def test_compact_panjoin_matches_the_oracle_on_each_backend(name, backend, batch_size):
    """The PanJoin topology with compact items in every subwindow, on the in-process backend
    and in the simulator, at single-tuple and larger batches: the oracle's pairs. (On Ray the
    same actors run; checked by hand for this change, not in the default run.)"""
    rng = np.random.default_rng(batch_size)
    n = 1500
    data = {"ts": np.arange(n), "x": rng.normal(0, 20, n).round(2), "stream": rng.integers(0, 2, n)}
    q = sj.Query(sj.band("x", 0.3), window=sj.CountWindow(400))
    small = {
        "bisort": {"subwindow_size": 32, "buffer_size": 8, "partitions": 4},
        "rap_table": {"subwindow_size": 32, "partitions": 4},
        "wib_tree": {"subwindow_size": 32, "leaf_width": 3, "fanout": 3},
    }
    options = {**small[name], "layout": "compact"}  # compact runs reached
    topology = sj.topologies.panjoin(2, 3, index=name, index_options=options)
    result = sj.run(q, data, topology, backend=backend, batch_size=batch_size)
    assert result.same_pairs(sj.oracle.join(q, data))
