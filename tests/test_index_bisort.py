"""``bisort`` (PanJoin §III-D, §III-E): random action sequences at tiny subwindows, index
arrays and buffers against a sorted-array oracle, and whole joins against the reference join."""

from __future__ import annotations

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from subwindow_index_drivers import increasing_actions, panjoin_matches_oracle
from window_index_oracle import (
    JOIN_PREDICATES,
    JOIN_WINDOWS,
    join_matches_oracle,
    machine,
    probe_pairs,
    random_actions,
)

import streamjoin as sj
import streamjoin.indexes.panjoin.bisort  # noqa: F401  (registers "bisort")
from streamjoin import indexes
from streamjoin.actors.base import RunSettings
from streamjoin.actors.handshake import HandshakeConfig
from streamjoin.actors.join_core import JoinCore, warm_batch
from streamjoin.actors.panjoin import WorkerCommand
from streamjoin.indexes.base import key_range
from streamjoin.indexes.blocks.key_codes import item_bounds
from streamjoin.indexes.panjoin.bisort import (
    _SWEEP_GAP,
    BUFFERED,
    MAIN,
    STRIDE,
    BISort,
    BISortIndex,
    fill_states,
    stream_bytes,
)
from streamjoin.indexes.panjoin.subwindows import band_bounds
from streamjoin.modes import LAYOUTS

#: Subwindows of 8 items: a 40-tuple count window spans six of them.
TINY = {"subwindow_size": 8, "partitions": 3, "buffer_size": 4}

OPTIONS = st.fixed_dictionaries(
    {
        "subwindow_size": st.integers(1, 12),
        "partitions": st.integers(1, 4),
        "buffer_size": st.integers(0, 5),
        "layout": st.sampled_from(LAYOUTS),
    }
)

TestBISortMachine = machine("bisort", OPTIONS, exact_expiry=False).TestCase
TestBISortMachine.settings = settings(
    max_examples=examples(100), stateful_step_count=40, deadline=None
)


def bisort(**options):
    return indexes.get("bisort")(1, **options)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    ("subwindow_size", "partitions", "buffer_size"), [(8, 2, 3), (16, 3, 0), (64, 5, 7), (1, 1, 1)]
)
def test_random_actions(subwindow_size, partitions, buffer_size, layout):
    options = {
        "subwindow_size": subwindow_size,
        "partitions": partitions,
        "buffer_size": buffer_size,
        "layout": layout,
    }
    rng = np.random.default_rng(subwindow_size)
    random_actions(bisort(**options), rng, steps=120, window=300)
    increasing_actions(bisort(**options), rng, steps=120, window=60)


def test_buffer_fills_then_merges_into_main_array():
    """§III-D: batches wait in the buffer until one does not fit; then buffer and batch merge
    into the main array, and the index array samples every ceil(M / P)-th key."""
    index = bisort(subwindow_size=100, partitions=4, buffer_size=5)
    t = lambda: index._subwindows[-1]._t  # noqa: E731
    index.insert(np.array([[3.0, 1.0, 2.0]]), np.arange(3))
    assert (t().meta[MAIN], t().meta[BUFFERED]) == (0, 3)
    index.insert(np.array([[2.0, 0.0, 9.0]]), np.arange(3, 6))
    assert (t().meta[MAIN], t().meta[BUFFERED]) == (6, 0)
    index.insert(np.arange(20.0)[None, ::-1], np.arange(6, 26))  # larger than the buffer
    assert (t().meta[MAIN], t().meta[BUFFERED], t().meta[STRIDE]) == (26, 0, 7)
    index.check()
    assert probe_pairs(index, [2.0], 0.0, 0.0) == [(0, 2), (0, 3), (0, 23)]


def test_full_subwindow_is_one_run():
    """A batch that fills the subwindow merges the buffer into the main array even if it would
    fit the buffer: a full subwindow never changes again and is probed as one run."""
    index = bisort(subwindow_size=10, partitions=2, buffer_size=8)
    t = lambda: index._subwindows[0]._t  # noqa: E731
    index.insert(np.array([[5.0, 1.0, 1.0, 7.0, 3.0]]), np.arange(5))
    index.insert(np.array([[2.0, 1.0, 6.0]]), np.arange(5, 8))
    assert (t().meta[MAIN], t().meta[BUFFERED]) == (0, 8)
    index.insert(np.array([[1.0, 0.0, 4.0]]), np.arange(8, 11))  # fills it; one opens a new one
    assert (t().meta[MAIN], t().meta[BUFFERED]) == (10, 0)
    index.check()
    assert probe_pairs(index, [1.0], 0.0, 0.0) == [(0, 1), (0, 2), (0, 6), (0, 8)]


def test_equal_probe_keys_share_their_range():
    """§III-E: sorted equal probe keys get the same result range."""
    index = bisort(subwindow_size=1000, partitions=8, buffer_size=0)
    values = np.repeat(np.arange(50.0), 20)
    index.insert(values[None, :], np.arange(1000))
    probes = [7.0, 7.0, 3.0, 7.0]
    got = probe_pairs(index, probes, -1.0, 1.0)
    want = sorted(
        (i, int(r)) for i, k in enumerate(probes) for r in np.flatnonzero(abs(values - k) <= 1)
    )
    assert got == want and len(got) == 4 * 60


def test_ranges_are_the_main_array_items_in_each_interval():
    """§III-D: a probe's result as an <id_start, id_end> record of the main array; the exact
    pairs are the records' items that pass the band test (the buffer is probed apart)."""
    rng = np.random.default_rng(5)
    store = BISort(300, partitions=7, buffer_size=16, layout="wide")
    keys = np.sort(rng.integers(0, 40, 290).astype(np.float64))
    store.insert(keys, np.arange(290))
    store.insert(np.array([3.0, 5.0]), np.array([290, 291]))  # stays in the buffer
    probes = np.sort(rng.integers(-5, 45, 30).astype(np.float64))
    vlo, vhi = band_bounds(probes, -1.5, 2.0)
    starts, ends = store.ranges(vlo, vhi)
    main_keys, main_refs = store._t.keys[:290], store._t.refs[:290]
    for i in range(len(probes)):
        inside = np.flatnonzero((main_keys >= vlo[i]) & (main_keys <= vhi[i]))
        want = (inside[0], inside[-1] + 1) if len(inside) else (starts[i], starts[i])
        assert (starts[i], ends[i]) == want
    pos, refs = store.probe(probes, vlo, vhi, -1.5, 2.0, 0)
    from_ranges = {
        (i, int(main_refs[j]))
        for i in range(len(probes))
        for j in range(starts[i], ends[i])
        if -1.5 <= main_keys[j] - probes[i] <= 2.0
    }
    buffer = ((290, 3.0), (291, 5.0))
    buffered = {(i, r) for i, p in enumerate(probes) for r, k in buffer if -1.5 <= k - p <= 2.0}
    assert set(zip(pos.tolist(), refs.tolist(), strict=True)) == from_ranges | buffered
    assert len(pos) == len(from_ranges) + len(buffered)


def test_subwindows_expire_whole():
    index = bisort(subwindow_size=4, partitions=2, buffer_size=2)
    index.insert(np.arange(10.0)[None, :], np.arange(10))
    assert [len(s) for s in index._subwindows] == [4, 4, 2]
    index.expire(5)  # the oldest subwindow ends at ref 3: dropped; the next one is filtered
    assert len(index) == 6
    index.check()
    assert probe_pairs(index, [0.0], -np.inf, np.inf) == [(0, r) for r in range(5, 10)]
    index.expire(10)
    assert len(index) == 0 and len(index._subwindows) == 1
    index.check()


def _sorted_pairs(pos: np.ndarray, refs: np.ndarray) -> np.ndarray:
    """``(i, ref)`` pairs, each coded as one int64 ``i · 2^32 + ref``, sorted: a sorted
    array of millions of codes compares far faster than a list of tuples."""
    return np.sort(pos.astype(np.int64) << 32 | refs.astype(np.int64))


def store_pairs(store, probes, lo, hi, min_ref, key_of):
    """``store.probe`` of sorted ``probes`` as sorted ``(i, ref)`` pairs; a compact store's
    superset refined on the full keys ``key_of[ref]``, as the join core refines it. A compact
    probe must return every pair the band test keeps."""
    vlo, vhi = band_bounds(probes, lo, hi)
    pos, refs = store.probe(probes, vlo, vhi, lo, hi, min_ref)
    if store.layout == "compact":
        d = key_of[refs] - probes[pos]
        keep = (d >= lo) & (d <= hi)
        pos, refs = pos[keep], refs[keep]
    return _sorted_pairs(pos, refs)


def brute_pairs(keys, refs, probes, lo, hi, min_ref):
    """Every (probe, item) pair tested, a few hundred probes at a time (a 5,000 × 20,000
    difference matrix would take gigabytes). A difference that is NaN (``inf - inf``) is in no
    band."""
    found_i, found_ref = [], []
    live = refs >= min_ref
    for start in range(0, len(probes), 256):
        with np.errstate(over="ignore", invalid="ignore"):  # inf - inf is no pair
            d = keys[None, :] - probes[start : start + 256, None]
        i, j = np.nonzero((d >= lo) & (d <= hi) & live[None, :])
        found_i.append(i + start)
        found_ref.append(refs[j])
    if not found_i:
        return _sorted_pairs(np.empty(0, np.int64), np.empty(0, np.int64))
    return _sorted_pairs(np.concatenate(found_i), np.concatenate(found_ref))


@settings(max_examples=examples(60), deadline=None)
@given(
    layout=st.sampled_from(LAYOUTS),
    seed=st.integers(0, 2**32 - 1),
    items=st.integers(0, 3000),
    probes=st.integers(0, 120),
    partitions=st.integers(1, 40),
    buffer_size=st.integers(0, 700),
    spread=st.sampled_from([4, 60, 10**6]),
    band=st.sampled_from([(0.0, 0.0), (-1.0, 2.0), (-30.0, 30.0), (-np.inf, 0.5)]),
    full=st.booleans(),
)
def test_store_probe_sweeps_and_searches_exactly(
    layout, seed, items, probes, partitions, buffer_size, spread, band, full
):
    """§III-D/§III-E: a store's probe -- the main array and the buffer, each swept (a dense
    batch, at most ``_SWEEP_GAP`` items per probe) or searched through the index array --
    returns exactly the brute-force pairs. Small ``spread`` makes long runs of equal keys (ends
    more than ``_END_AHEAD`` items on, equal keys across the buffer/main boundary); clustered
    probes leave gaps of more than ``_SWEEP_AHEAD`` items; ``min_ref`` drops expired refs. A
    ``full`` compact subwindow is packed into coded items."""
    rng = np.random.default_rng(seed)
    capacity = max(1, items + (not full))
    store = BISort(capacity, partitions=partitions, buffer_size=buffer_size, layout=layout)
    keys = rng.integers(0, spread, items).astype(np.float64)
    refs = np.arange(items, dtype=np.int64)
    for part in np.array_split(np.arange(items), rng.integers(1, 6)):  # some batches empty
        order = np.argsort(keys[part], kind="stable")
        store.insert(keys[part][order], refs[part][order])
    store.check()
    assert store.packed == (layout == "compact" and len(store) == capacity)
    centre = rng.integers(0, spread)
    probe_keys = np.sort(
        np.concatenate(
            [
                rng.integers(-2, spread + 2, probes - probes // 2),
                centre + rng.integers(-1, 2, probes // 2),
            ]
        ).astype(np.float64)
    )
    lo, hi = band
    min_ref = int(rng.integers(0, items + 1))
    got = store_pairs(store, probe_keys, lo, hi, min_ref, keys)
    np.testing.assert_array_equal(got, brute_pairs(keys, refs, probe_keys, lo, hi, min_ref))


@settings(max_examples=examples(60), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 300),
    band=st.sampled_from([(0.0, 0.0), (-2.5, 1e300), (-np.inf, 0.0), (1.0, np.inf)]),
    specials=st.booleans(),
)
def test_band_bounds_are_the_widened_intervals_made_monotone(seed, n, band, specials):
    """The subwindow indexes' widened intervals: each probe's ``key_range``, NaN made unbounded,
    then a suffix minimum / prefix maximum, so both are non-decreasing (the sweeps rely on it)
    -- whether or not any step back occurs (NaN keys, sorted last, and infinite ones make
    them)."""
    rng = np.random.default_rng(seed)
    keys = rng.uniform(-1e6, 1e6, n)
    if specials and n:
        keys[rng.random(n) < 0.2] = rng.choice([np.nan, np.inf, -np.inf, 1.7e308, -0.0])
    keys = np.sort(keys)  # NaNs last
    lo, hi = band
    vlo, vhi = band_bounds(keys, lo, hi)
    with np.errstate(invalid="ignore", over="ignore"):
        want_lo, want_hi = [], []
        for k in keys:
            a, b = key_range(k, lo, hi)
            want_lo.append(-np.inf if np.isnan(a) else a)
            want_hi.append(np.inf if np.isnan(b) else b)
    want_lo = np.minimum.accumulate(np.array(want_lo)[::-1])[::-1]
    want_hi = np.maximum.accumulate(np.array(want_hi))
    np.testing.assert_array_equal(vlo, want_lo)
    np.testing.assert_array_equal(vhi, want_hi)
    assert np.all(vlo <= vhi)


def _spread_keys(rng, kind: str, n: int) -> np.ndarray:
    """``n`` keys spread as ``kind``: even, skewed over thirty orders of magnitude, in a few
    tight clusters far apart, or mixed with the float64 extremes (both infinities, the
    largest finite magnitudes, signed zeros, subnormals)."""
    if kind == "even":
        return rng.uniform(0, 1e6, n)
    if kind == "skewed":
        return np.exp(rng.uniform(0, 70, n))
    if kind == "clustered":
        return rng.integers(0, 4, n) * 1e5 + rng.integers(0, 50, n)
    extremes = np.array([-np.inf, np.inf, -1.7e308, 1.7e308, -0.0, 0.0, 5e-324, -5e-324])
    return np.where(rng.random(n) < 0.3, rng.choice(extremes, n), rng.uniform(-1e3, 1e3, n))


@settings(max_examples=examples(40), deadline=None)
@given(
    layout=st.sampled_from(LAYOUTS),
    kind=st.sampled_from(["even", "skewed", "clustered", "extremes"]),
    seed=st.integers(0, 2**32 - 1),
    items=st.integers(1000, 6000),
    partitions=st.integers(1, 64),
    band=st.sampled_from([(0.0, 0.0), (-1.0, 1.0), (-1e4, 50.0), (-np.inf, 0.0)]),
    full=st.booleans(),
)
def test_sparse_probes_search_from_interpolated_guesses_exactly(
    layout, kind, seed, items, partitions, band, full
):
    """A sparse batch (more than ``_SWEEP_GAP`` items per probe) searches each partition from
    a position interpolated between its two samples: wherever the keys make that guess wrong
    -- skewed, clustered, infinite or equal samples, keys at float64's limits -- the ranges and
    pairs are exactly the brute-force ones (starts left of the guess, past the keys read at it,
    ends past them)."""
    rng = np.random.default_rng(seed)
    keys = _spread_keys(rng, kind, items)
    refs = rng.permutation(items).astype(np.int64)
    order = np.lexsort((refs, keys))
    keys, refs = keys[order], refs[order]
    if layout == "compact" and not np.isfinite(keys).all():
        keys = np.clip(keys, -1e300, 1e300)  # a packed subwindow codes finite keys only
        order = np.lexsort((refs, keys))
        keys, refs = keys[order], refs[order]
    store = BISort(items + (not full), partitions=partitions, buffer_size=0, layout=layout)
    store.insert(keys, refs)
    store.check()
    probes = max(1, items // (2 * _SWEEP_GAP))
    probe_keys = np.sort(
        np.concatenate(
            [_spread_keys(rng, kind, probes // 2), rng.choice(keys, probes - probes // 2)]
        )
    )
    key_of = np.empty(items)
    key_of[refs] = keys
    lo, hi = band
    got = store_pairs(store, probe_keys, lo, hi, 0, key_of)
    np.testing.assert_array_equal(got, brute_pairs(keys, refs, probe_keys, lo, hi, 0))
    vlo, vhi = band_bounds(probe_keys, lo, hi)
    starts, ends = store.ranges(vlo, vhi)
    main = store._t.keys[:items]
    if store.packed:  # the items whose codes are those of keys in the interval
        vlo, vhi = item_bounds(vlo, vhi, *store._t.coder)
    assert np.array_equal(starts, np.searchsorted(main, vlo, "left"))
    assert np.array_equal(ends, np.maximum(starts, np.searchsorted(main, vhi, "right")))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("probes", [1, 7, 500, 5000])
def test_sweep_and_search_paths_agree_on_large_runs(probes, layout):
    """Both paths of a 20,000-item main array (and a full buffer; compact: the 20,500 items of
    the full subwindow, packed): 1 and 7 probes search it, 500 and 5000 sweep it
    (``_SWEEP_GAP`` items per probe); the sweep's steps of ``_SWEEP_AHEAD`` items and the
    rebounding search after them both run."""
    assert _SWEEP_GAP * 7 < 20_000 <= _SWEEP_GAP * 500
    rng = np.random.default_rng(probes)
    items = 20_000
    keys = np.sort(rng.integers(0, 3000, items).astype(np.float64))
    refs = rng.permutation(items).astype(np.int64)
    order = np.lexsort((refs, keys))
    keys, refs = keys[order], refs[order]
    compact = layout == "compact"
    store = BISort(items + 500 + (not compact), partitions=100, buffer_size=500, layout=layout)
    store.insert(keys, refs)
    extra = np.sort(rng.integers(0, 3000, 500).astype(np.float64))
    store.insert(extra, np.arange(items, items + 500))
    assert store._t.meta[BUFFERED] == (0 if compact else 500) and store.packed == compact
    store.check()
    probe_keys = np.sort(rng.integers(-5, 3005, probes).astype(np.float64))
    all_keys = np.concatenate([keys, extra])
    all_refs = np.concatenate([refs, np.arange(items, items + 500)])
    key_of = np.empty(items + 500)
    key_of[all_refs] = all_keys
    main = store._t.keys[: store._t.meta[MAIN]]
    for lo, hi in [(0.0, 0.0), (-2.5, 2.5), (-400.0, 10.0)]:
        got = store_pairs(store, probe_keys, lo, hi, 100, key_of)
        np.testing.assert_array_equal(got, brute_pairs(all_keys, all_refs, probe_keys, lo, hi, 100))
        vlo, vhi = band_bounds(probe_keys, lo, hi)
        starts, ends = store.ranges(vlo, vhi)
        if layout == "compact":  # the items whose codes are those of keys in the interval
            vlo, vhi = item_bounds(vlo, vhi, *store._t.coder)
        assert np.array_equal(starts, np.searchsorted(main, vlo, "left"))
        assert np.array_equal(ends, np.maximum(starts, np.searchsorted(main, vhi, "right")))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subwindow_size": 0}, r"subwindow_size must be an integer in \[1, 4294967295\]"),
        ({"subwindow_size": 2**32}, r"subwindow_size must be an integer in \[1, 4294967295\]"),
        ({"partitions": 0}, r"partitions must be an integer in \[1, 16777216\]"),
        ({"partitions": 10**12}, r"partitions must be an integer in \[1, 16777216\]"),
        ({"buffer_size": -1}, r"buffer_size must be an integer in \[0, 16777216\]"),
        ({"buffer_size": 2.5}, "buffer_size must be an integer"),
        ({"threads": 0}, r"threads must be an integer in \[1, 1024\]"),
        ({"threads": 10**6}, r"threads must be an integer in \[1, 1024\]"),
        ({"layout": "packed"}, "layout must be 'wide' or 'compact'"),
    ],
)
def test_rejects_bad_options(options, message):
    with pytest.raises(ValueError, match=f"bisort {message}"):
        bisort(**options)


@pytest.mark.parametrize(
    ("window", "options", "size", "partitions"),
    [
        (sj.CountWindow(2**20), {}, 2**19, 2**12),
        (sj.CountWindow(2**18, 2**21), {}, None, None),  # per stream: checked below
        (sj.CountWindow(2**10), {}, 2**16, 2**9),
        (sj.CountWindow(2**40), {}, 2**22, 2**15),
        (sj.CountWindow(2**20), {"partitions": 64}, 2**16, 64),  # the user's, as given
        (sj.CountWindow(2**20), {"subwindow_size": 2**17}, 2**17, 512),
        (sj.TimeWindow(1000), {}, 2**16, 512),  # no count known
    ],
)
def test_a_join_core_sizes_its_subwindows_by_its_count_window(window, options, size, partitions):
    """A join core over a count window of W tuples a stream gives BI-Sort subwindows of W / 2
    (between 2^16 and 2^22) and partitions of 128 items, unless the user set either option."""
    query = sj.Query(sj.band("x", 1.0), window=window)
    core = JoinCore(query, "bisort", options)
    for y, part in core.parts.items():
        index = part.index
        want = size if size is not None else min(max(window.size(y) // 2, 2**16), 2**22)
        assert index.subwindow_size == want
        store = index._subwindows[-1]
        assert store.partitions == (partitions if partitions is not None else want // 128)


@pytest.mark.parametrize(
    ("window", "segment", "low_latency", "size"),
    [
        (sj.CountWindow(2**20), None, False, 2**18),  # a segment of W / 2 a core
        (sj.CountWindow(2**20), 2**21, False, 2**20),  # the segment given
        (sj.CountWindow(2**20), None, True, 2**18),  # home to every second batch
        (sj.CountWindow(2**20, 2**22), None, True, None),  # per stream: below
        (sj.TimeWindow(1000), None, False, 2**16),  # no count known: BI-Sort's default
        (sj.TimeWindow(1000), None, True, 2**16),
    ],
)
def test_a_handshake_core_sizes_its_subwindows_by_its_segment(window, segment, low_latency, size):
    """Both handshake chains' cores size BI-Sort's subwindows by the part of each count
    window a core keeps (W / n), as a join core does by its window."""
    query = sj.Query(sj.band("x", 1.0), window=window)
    config = HandshakeConfig(k=0, n=2, segment=segment, low_latency=low_latency, index="bisort")
    core = config.build(query, RunSettings(), None)
    for y, part in core.parts.items():
        want = size if size is not None else window.size(y) // 2 // 2
        assert part.index.subwindow_size == want


@pytest.mark.parametrize(
    ("window", "subwindows", "subwindow_size", "options", "size"),
    [
        (sj.CountWindow(2**20), 4, None, {}, 2**17),  # subwindows of 2^18: runs of half
        (sj.CountWindow(2**20), 64, None, {}, 2**16),  # of 2^14: BI-Sort's least
        (sj.CountWindow(2**20), 4, 2**20, {}, 2**19),  # the manager's size given
        (sj.CountWindow(2**20), 4, None, {"subwindow_size": 2**16}, 2**16),  # the user's
        (sj.TimeWindow(1000), 4, None, {}, 2**16),  # 4,096 a subwindow
    ],
)
def test_a_panjoin_worker_sizes_its_subwindows_indexes_by_the_managers_subwindows(
    window, subwindows, subwindow_size, options, size
):
    """A PanJoin worker sizes the BI-Sort in each of its subwindows by the tuples the
    manager puts in one, as a join core does by its window, unless the user set options."""
    query = sj.Query(sj.band("x", 1.0), window=window)
    topo = sj.topologies.panjoin(
        2, subwindows, "bisort", subwindow_size, index_options=options or None
    )
    worker = topo.graph.nodes["worker0"]["config"].build(query, RunSettings(), None)
    worker.on_batch("in", WorkerCommand(warm_batch(1, False), create=[7]))
    assert worker.parts[7].index.subwindow_size == size


def test_a_panjoin_over_sized_subwindows_matches_another_index():
    """PanJoin's subwindows of a whole window (2^18 tuples: BI-Sort's runs of 2^17 in each)
    return the pairs of the B+-tree's (both checked against the oracle on smaller inputs)."""
    w = 2**18
    data = sj.sources.synthetic(w + 40_000, low=0, high=3 * w, seed=4)
    query = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(w))
    runs = [
        sj.run(query, data, sj.topologies.panjoin(2, 1, index), batch_size=1024)
        for index in ("bisort", "bplus_tree")
    ]
    assert runs[0].count > 50_000 and runs[0].same_pairs(runs[1])


def test_a_join_over_sized_subwindows_matches_another_index():
    """The join core's sized subwindows (2^17 items here, many probes searching each) return
    the pairs of the B+-tree's join and of BI-Sort's own with the default 2^16 (both checked
    against the oracle on smaller inputs; the oracle takes minutes at this size)."""
    w = 2**18
    data = sj.sources.synthetic(w + 40_000, low=0, high=3 * w, seed=3)
    query = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(w))
    runs = [
        sj.run(query, data, sj.topologies.single(index, **options), batch_size=1024)
        for index, options in [
            ("bisort", {}),
            ("bisort", {"subwindow_size": 2**16}),
            ("bplus_tree", {}),
        ]
    ]
    assert runs[0].count > 50_000
    for other in runs[1:]:
        assert runs[0].same_pairs(other)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("batch_size", [1, 3, 64])
@pytest.mark.parametrize("window", JOIN_WINDOWS)
@pytest.mark.parametrize("predicate", JOIN_PREDICATES)
@pytest.mark.parametrize("self_join", [False, True], ids=["two_way", "self_join"])
def test_join_matches_oracle(predicate, window, self_join, batch_size, layout):
    options = {**TINY, "layout": layout}
    join_matches_oracle("bisort", options, predicate, window, self_join, batch_size)


def test_panjoin_topology_matches_oracle():
    panjoin_matches_oracle("bisort", {"partitions": 2, "buffer_size": 2})


# --- probing with several threads ------------------------------------------------------------


@pytest.mark.parametrize(("threads", "layout"), [(2, "wide"), (3, "compact")])
def test_threads_random_actions(threads, layout):
    """Every probe batch cut among the threads (even 4 keys): the same pairs as the oracle."""
    index = bisort(threads=threads, layout=layout, **TINY)
    index.parallel_min_probes = 1
    rng = np.random.default_rng(threads)
    random_actions(index, rng, steps=120, window=300)


def test_threads_match_one_thread_on_large_batches():
    """Batches of 5,000 probes with duplicate keys, in three subwindows and their buffers: the
    slices of two threads give exactly the pairs one thread finds, in the same batch order."""
    rng = np.random.default_rng(7)
    one = bisort(subwindow_size=4000, partitions=16, buffer_size=500)
    two = bisort(subwindow_size=4000, partitions=16, buffer_size=500, threads=2)
    assert two.parallel_min_probes <= 5000
    ref = 0
    for _ in range(6):
        keys = rng.integers(0, 3000, 2000).astype(np.float64)[None, :]
        refs = np.arange(ref, ref + 2000)
        ref += 2000
        for ix in (one, two):
            ix.insert(keys, refs)
            ix.expire(ref - 9000)
        probes = rng.integers(-10, 3010, 5000).astype(np.float64)[None, :]
        lo, hi = np.array([-2.0]), np.array([3.0])
        got = [ix.probe(probes, lo, hi) for ix in (one, two)]
        assert len(got[0][0]) > 5000
        assert sorted(zip(*got[0], strict=True)) == sorted(zip(*got[1], strict=True))


@pytest.mark.parametrize("batch_size", [3, 64])
@pytest.mark.parametrize("window", JOIN_WINDOWS)
def test_threads_join_matches_oracle(monkeypatch, window, batch_size):
    monkeypatch.setattr(BISortIndex, "parallel_min_probes", 1)
    join_matches_oracle("bisort", {**TINY, "threads": 2}, "band", window, False, batch_size)


@pytest.mark.parametrize(
    ("capacity", "buffer", "batch"), [(4096, 128, 100), (1000, 0, 64), (512, 600, 7)]
)
def test_the_traffic_model_replays_the_insert_policy(capacity, buffer, batch):
    """``fill_states`` (what ``stream_bytes`` charges) puts each batch where ``insert_bisort``
    does: the main array and the buffer of a real subwindow after every batch are the model's."""
    store = BISort(capacity, partitions=32, buffer_size=buffer)
    rng = np.random.default_rng(1)
    ref = 0
    for n, _, after in fill_states(capacity, buffer, batch):
        keys = np.sort(rng.uniform(0, 1e6, n))
        store.insert(keys, np.arange(ref, ref + n))
        ref += n
        assert (int(store._t.meta[MAIN]), int(store._t.meta[BUFFERED])) == after
    assert len(store) == capacity
    model = stream_bytes(capacity, buffer, 32, batch, 2 * capacity)
    assert model["total"] == pytest.approx(model["insert"] + model["probe"]) and model["insert"] > 0
    # a full subwindow is one run that every later probe batch reads
    assert stream_bytes(capacity, buffer, 32, batch, 4 * capacity)["probe"] > model["probe"]


@pytest.mark.parametrize(
    ("first", "then", "message"),
    [
        (np.arange(10, 20), np.arange(3, 5), "below the subwindow's first"),
        (np.arange(0, 4), np.array([2**32 + 1]), "span 2\\*\\*32 or more"),
    ],
)
def test_compact_refs_out_of_range_are_refused_before_anything_changes(first, then, message):
    """Compact items hold refs as 32-bit offsets from the subwindow's first: a ref below it or
    2**32 past it cannot be stored, and is refused before the subwindow changes."""
    store = BISort(100, partitions=4, buffer_size=0, layout="compact")
    store.insert(np.arange(float(len(first))), first)
    before = (len(store), store._t.meta.copy())
    with pytest.raises(ValueError, match=message):
        store.insert(np.array([1.0] * len(then)), then)
    assert len(store) == before[0] and np.array_equal(store._t.meta, before[1])
    store.check()


def test_compact_join_on_increasing_keys_is_exact():
    """Keys that keep increasing leave each subwindow's code behind (they share its top code):
    probes return many candidates, and the refinement keeps the join exact."""
    n = 4000
    data = {"ts": np.arange(n), "x": np.arange(n) * 0.5, "stream": np.arange(n) % 2}
    q = sj.Query(sj.band("x", 2.0), window=sj.CountWindow(300))
    topology = sj.topologies.single("bisort", subwindow_size=128, buffer_size=16, layout="compact")
    assert sj.run(q, data, topology, batch_size=64).same_pairs(sj.oracle.join(q, data))
