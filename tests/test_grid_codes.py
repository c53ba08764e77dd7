"""Grid codes (``grid_codes``): monotone codes that a merge re-fits exactly from the old codes,
and PIM-Tree's compact T_S built on them: exact after refinement, and fine enough that probes
return barely more candidates than matches on drifting keys, far outliers and keys of both
signs."""

from __future__ import annotations

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from window_index_oracle import SortedOracle, probe_pairs

from streamjoin import indexes
from streamjoin.indexes.blocks.grid_codes import (
    CODE_MAX,
    bulk_window,
    choose_grid,
    fit_grid,
    grid_bounds,
    grid_code,
    grid_item,
    grid_span,
    image,
    image_range,
    merge_grid_items_into,
    regrid,
    route_items,
)

floats = st.one_of(
    st.floats(allow_nan=False),
    st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 1.0, -1.0, 2.0**52, 1.7e9]),
    st.integers(-(2**53), 2**53).map(float),
)


def _grid(keys: list[float], shift: int = 0) -> tuple[int, int]:
    images = [int(image(k)) for k in keys]
    return fit_grid(min(images), max(images), shift)


def _code(k: float, grid: tuple[int, int]) -> int:
    return int(grid_code(k, np.uint64(grid[0]), np.uint64(grid[1])))


@settings(max_examples=examples(300), deadline=None)
@given(
    a=floats, b=floats, fitted=st.lists(floats, min_size=1, max_size=4), shift=st.integers(0, 40)
)
def test_codes_are_monotone_and_zero_has_one_code(a, b, fitted, shift):
    grid = _grid(fitted, min(shift, 32))
    a, b = sorted((a, b))
    assert _code(a, grid) <= _code(b, grid)
    assert int(image(-0.0)) == int(image(0.0)), "-0.0 == 0.0 must share a code"
    assert all(0 <= _code(k, grid) <= CODE_MAX for k in fitted)


@settings(max_examples=examples(300), deadline=None)
@given(
    old_keys=st.lists(floats, min_size=1, max_size=30),
    new_keys=st.lists(floats, max_size=10),
    shift=st.integers(0, 32),
)
def test_a_regrid_maps_old_codes_to_exactly_the_new_codes(old_keys, new_keys, shift):
    """A merge re-gridding old codes must give each key the very code it would get on the new
    grid from the key itself: probes code their bounds from keys."""
    old = _grid(old_keys, shift)
    codes = [_code(k, old) for k in old_keys]
    assert all(0 <= c <= CODE_MAX for c in codes), "fitted keys are never clamped"
    lo, hi = image_range(*old, min(codes), max(codes))
    images = [int(image(k)) for k in new_keys]
    new = fit_grid(min([lo, *images]), max([hi, *images]), old[1])
    assert new[0] % (1 << new[1]) == 0 and new[1] >= old[1]
    add, by = regrid(old, new)
    for k, c in zip(old_keys, codes, strict=True):
        with np.errstate(over="ignore"):
            moved = (np.uint64(c) + add) >> by
        assert int(moved) == _code(k, new), k
    for k in new_keys:
        assert (
            0 <= _code(k, new) <= CODE_MAX and _code(k, new) == (int(image(k)) - new[0]) >> new[1]
        )


def test_fit_grid_takes_the_finest_shift_that_covers_the_range():
    for lo, hi in [(0, 0), (5, 2**32 + 4), (2**63, 2**64 - 1), (2**40 + 3, 2**40 + 2**33)]:
        base, shift = fit_grid(lo, hi)
        assert base <= lo and (hi - base) >> shift <= CODE_MAX and base % (1 << shift) == 0
        if shift:
            b = lo >> (shift - 1) << (shift - 1)
            assert (hi - b) >> (shift - 1) > CODE_MAX, "one step finer would not cover it"
    assert fit_grid(0, 10, shift=7) == (0, 7), "a shift never shrinks below the one asked"
    with pytest.raises(ValueError, match="not coarser"):
        regrid((0, 8), (0, 4))


def test_the_bulk_window_cuts_far_keys_and_a_coarse_old_grid_leaves_the_new_keys_out():
    keys = np.sort(np.concatenate([np.zeros(3), 1.7e9 + np.arange(10_000.0)]))
    lo, hi = bulk_window(keys)
    assert lo > int(image(0.0)) and lo <= int(image(1.7e9)) and hi == int(image(keys[-1]))
    assert bulk_window(np.array([5.0])) == (int(image(5.0)), int(image(5.0)))
    own, takes = choose_grid(lo, hi, None, None)
    assert takes and own == fit_grid(lo, hi)
    coarse = fit_grid(int(image(-1e6)), int(image(1e6)))  # shift 32
    kept, takes = choose_grid(lo, hi, coarse, (int(image(-1e6)), int(image(1e6))))
    assert (kept, takes) == (coarse, False), "new keys wait rather than take 2**31-wide codes"
    near = fit_grid(lo - 2**20, hi)
    both, takes = choose_grid(lo, hi, near, (lo - 2**20, hi))
    assert takes and both[1] >= near[1] and grid_span(both)[0] <= lo - 2**20


def test_images_order_as_the_keys():
    keys = [-np.inf, -1e300, -1.0, -5e-324, -0.0, 0.0, 5e-324, 1.0, 1e300, np.inf]
    images = [int(image(k)) for k in keys]
    assert images == sorted(images) and images[4] == images[5]
    assert len(set(images)) == len(keys) - 1, "distinct keys, distinct images (but +-0.0)"


def _candidates_per_match(keys: np.ndarray, band: float, window: int = 8192) -> float:
    """Candidates a compact PIM-Tree's probes return per live match, for ``keys`` inserted in
    batches of 1,024 with a count window of ``window``, probed with keys from the window; the
    side run of full keys must end small (a few outliers at most)."""
    index = indexes.get("pim_tree")(1, layout="compact", merge_ratio=0.125)
    oracle = SortedOracle()
    for part in np.array_split(keys, len(keys) // 1024):
        index.insert(*oracle.batch(part))
        index.expire(oracle.expire(oracle.next_ref - window))
    index.check()
    assert index.merges > 10
    probes = np.sort(np.random.default_rng(3).choice(keys[-window:], 500))
    raw = probe_pairs(index, probes, -band, band)
    exact = probe_pairs(index, probes, -band, band, oracle)
    assert set(exact) <= set(raw) and exact == oracle.probe(probes, -band, band)
    assert len(exact) >= 500
    assert len(index._coded.side_keys) <= 8, "the last window's keys are coded in T_S"
    return len(raw) / len(exact)


@pytest.mark.parametrize(
    "case",
    [
        "increasing",
        "epoch_seconds",
        "outliers",
        "both_signs",
        "phase_change",
        "zeros_among_epoch_seconds",
        "wide_range_then_epoch_seconds",
    ],
)
def test_compact_pim_tree_codes_stay_fine(case):
    """Merges re-fit the grid to the keys T_S holds: keys that drift (timestamps), far outliers
    (kept with full keys in the side run: a 0.0 among epoch seconds would otherwise widen the
    grid 2**31-fold, 1,690 candidates a match), keys of both signs, and a jump from one range to
    another (the new keys wait in the side run until no old item's coarse code survives) keep
    probes at barely more candidates than matches."""
    rng = np.random.default_rng(1)
    n = 60_000
    if case == "increasing":
        keys, band = np.arange(n) * 3.0 + rng.uniform(0, 1, n), 4.0
    elif case == "epoch_seconds":
        keys, band = 1.7e9 + np.arange(n) * 0.01 + rng.uniform(0, 0.01, n), 0.02
    elif case == "outliers":
        keys, band = rng.uniform(0, 1e6, n), 40.0
        keys[[5000, 21_000, 30_000, n - 100]] = [1e15, -1e15, 1e15, -1e300]
    elif case == "both_signs":
        keys, band = rng.uniform(-1e6, 1e6, n), 80.0
    elif case == "phase_change":
        keys, band = (
            np.concatenate([rng.uniform(0, 1, n // 2), rng.uniform(1e6, 2e6, n // 2)]),
            40.0,
        )
    elif case == "zeros_among_epoch_seconds":
        keys, band = 1.7e9 + np.arange(n) * 0.01, 0.02
        keys[rng.integers(0, n - 100, 40)] = 0.0
    else:
        keys = np.concatenate([rng.uniform(-1e6, 1e6, n // 2), 1.7e9 + np.arange(n // 2) * 0.01])
        band = 0.02
    assert _candidates_per_match(keys, band) <= 1.05


def test_compact_refs_spanning_2_32_are_refused_before_anything_changes():
    index = indexes.get("pim_tree")(1, layout="compact", merge_ratio=0.5)
    index.insert(np.arange(8.0)[None, :], np.arange(8))
    with pytest.raises(ValueError, match="2\\*\\*32 refs"):
        index.insert(np.array([[1.0]]), np.array([2**32 + 5]))
    assert len(index) == 8
    index.check()
    index.expire(2**32)
    index.insert(np.array([[1.0]]), np.array([2**32 + 5]))  # the old items expired: fine
    assert len(index) == 9


@pytest.mark.parametrize("name", ["pim_tree", "im_tree"])
def test_compact_t_s_takes_half_the_bytes(name):
    """At 2**16 items the compact T_S buffers take 8 bytes an item where the wide take 16."""
    rng = np.random.default_rng(0)
    keys = rng.uniform(0, 1e6, 2**17)
    sizes = {}
    for layout in ("wide", "compact"):
        index = indexes.get(name)(1, layout=layout, window=2**16)
        for i in range(0, len(keys), 1024):
            index.insert(keys[None, i : i + 1024], np.arange(i, i + 1024))
            index.expire(i + 1024 - 2**16)
        ts = sum(a.nbytes for a in (*index._ts_buf, *index._spare))
        sizes[layout] = (ts, index.nbytes)
    assert sizes["compact"][0] * 2 == sizes["wide"][0]
    assert sizes["compact"][1] < 0.6 * sizes["wide"][1]


@pytest.mark.parametrize("name", ["pim_tree", "im_tree"])
def test_compact_probe_of_an_infinite_key_and_bound_scans_to_the_end(name):
    """``-inf + inf`` is a NaN bound on either side (on x86 a negative NaN, whose image lies
    below ``-inf``'s): an infinite key and bound match every finite key, which a compact T_S
    must return as candidates (they stood in T_S, past code 0, when only T_I was right)."""
    index = indexes.get(name)(1, layout="compact", merge_ratio=1.0, window=6)
    oracle = SortedOracle()
    index.insert(*oracle.batch([1.0, -2.0, 3e10, 4.0, -np.inf, np.inf]))
    assert index.merges == 1 and len(index._ts_keys) == 6
    for key, lo, hi in [(-np.inf, 0.0, np.inf), (np.inf, -np.inf, -np.inf), (-np.inf, -1, np.inf)]:
        with np.errstate(invalid="ignore"):  # inf - inf in the oracle's brute force
            expected = oracle.probe([key], lo, hi)
        assert len(expected) >= 4
        assert probe_pairs(index, [key], lo, hi, oracle) == expected


def test_fit_grid_at_the_edge_of_32_bits():
    """A range of exactly 2**32 images needs one more shift, 2**32 - 1 does not: a grid one
    image too short clamps the top item, whose code a later regrid moves wrong."""
    for lo in (0, 5, 2**63, 2**64 - 1 - 2**32):
        assert fit_grid(lo, lo + CODE_MAX) == (lo, 0)
        base, shift = fit_grid(lo, lo + CODE_MAX + 1)
        assert shift == 1 and (lo + CODE_MAX + 1 - base) >> shift <= CODE_MAX
        assert fit_grid(lo, lo + 2**33, 1)[1] == 2, "a shift asked for grows as needed"


@pytest.mark.parametrize("nan_bits", [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001])
def test_grid_bounds_of_a_nan_bound_reach_the_ends(nan_bits):
    """A NaN bound (an infinite key and bound) widens to its end whatever its sign bit, which
    depends on the CPU (x86's default NaN is negative, ARM's positive)."""
    nan = np.array([nan_bits], dtype=np.uint64).view(np.float64)[0]
    for base, shift in [(0, 32), (2**63, 0), (2**62, 20)]:
        b, s = np.uint64(base), np.uint64(shift)
        lo, hi = grid_bounds(nan, 1.0, b, s)
        assert lo == 0
        lo, hi = grid_bounds(-1.0, nan, b, s)
        assert hi == 2**64 - 1


def test_compact_refs_spanning_exactly_2_32_are_refused():
    """Refs 0 … 2**32 - 1 fit the 32-bit ref half of an item; ref 2**32 would wrap onto 0."""
    index = indexes.get("pim_tree")(1, layout="compact", merge_ratio=1.0, window=2)
    index.insert(np.array([[1.0, 2.0]]), np.arange(2))
    assert index.merges == 1
    with pytest.raises(ValueError, match="2\\*\\*32 refs"):
        index.insert(np.array([[1.0]]), np.array([2**32]))
    index.insert(np.array([[1.0, 1.0]]), np.array([2**32 - 2, 2**32 - 1]))
    assert index.merges == 2, "the largest offsets stand in T_S"
    pos, refs = index.probe(np.array([[1.0]]), np.array([0.0]), np.array([0.0]))
    assert sorted(refs.tolist()) == [0, 2**32 - 2, 2**32 - 1]
    index.check()


def test_a_merge_puts_old_items_before_new_ones_of_the_same_code():
    """``merge_grid_items_into``'s order within a code: T_S's old items (smaller refs) first,
    then T_I's in key order, so that equal codes stay in ref order as T_I hands them over."""
    keys = [1.0, 1.0 + 2**-41, 1.0 + 2**-40]
    base, shift = _grid(keys, 20)
    b, s = np.uint64(base), np.uint64(shift)
    assert len({_code(k, (base, shift)) for k in keys}) == 1, "one code for all"
    old = np.array([grid_item(keys[0], 10, b, s, 10), grid_item(keys[2], 11, b, s, 10)])
    ti_keys, ti_refs = np.array(keys[:2]), np.array([12, 13])
    out = np.empty(4, dtype=np.uint64)
    zero = np.uint64(0)
    n = merge_grid_items_into(old, zero, zero, zero, 10, ti_keys, ti_refs, b, s, 10, 0, out)
    assert n == 4
    assert (out & np.uint64(CODE_MAX)).tolist() == [0, 1, 2, 3]


@settings(max_examples=examples(200), deadline=None)
@given(keys=st.lists(floats, min_size=1, max_size=6), shift=st.integers(0, 32))
def test_image_range_holds_exactly_the_images_of_its_codes(keys, shift):
    """``image_range`` of codes ``c … d`` runs from the first image of code ``c`` to the last of
    code ``d``: every key coded in between has its image inside, and the images just outside
    code outside (a merge fits the next grid over it)."""
    grid = _grid(keys, shift)
    base, shift = grid
    for k in keys:
        c = _code(k, grid)
        lo, hi = image_range(base, shift, c, c)
        assert lo <= int(image(k)) <= hi
        assert (lo - base) >> shift == c and (hi - base) >> shift == c
        assert hi == 2**64 - 1 or (hi + 1 - base) >> shift == c + 1


@settings(max_examples=examples(100), deadline=None)
@given(keys=st.lists(floats, min_size=1, max_size=6), shift=st.integers(0, 32))
def test_inserts_route_by_the_bound_probes_descend_with(keys, shift):
    """``route_items`` is each key's lowest item bound, the one a probe of the key descends
    T_S with (``grid_bounds``), so a key is inserted into the subindex its probes start in."""
    grid = np.array(_grid(keys, shift), dtype=np.uint64)
    routes = route_items(np.array(keys), grid)
    for k, route in zip(keys, routes, strict=True):
        assert route == grid_bounds(k, k, grid[0], grid[1])[0]
        assert route == np.uint64(_code(k, (int(grid[0]), int(grid[1])))) << np.uint64(32)


def test_a_side_item_older_than_t_s_joins_it_with_its_ref():
    """An outlier waits in the side run while T_S's refs count from a later ref; when the grid
    grows to reach it, it joins T_S and the refs must count from it (they wrapped round to
    2**32 - 1 when T_S kept its old ref base)."""
    index = indexes.get("pim_tree")(1, layout="compact", merge_ratio=1.0, window=128)
    oracle = SortedOracle()
    rng = np.random.default_rng(0)
    index.insert(*oracle.batch([1e300, *rng.uniform(0, 1, 127)]))
    assert index.merges == 1 and len(index._coded.side_keys) == 1 and index._coded.ref_base == 1
    index.insert(*oracle.batch(np.geomspace(1, 1.1e300, 128)))  # the grid now reaches 1e300
    assert index.merges == 2 and len(index._coded.side_keys) == 0
    index.check()
    got = probe_pairs(index, [1e300], -1e290, 1e290, oracle)
    assert got == oracle.probe([1e300], -1e290, 1e290) and (0, 0) in got
