"""int64 join keys compared exactly (query.py's semantics): the exact test, the input's image
and residual rows, and joins over keys whose float64 images collide, on every index and
backend, against the oracle. Random layouts meet such keys through ``strategies.tables``."""

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import streamjoin as sj
from streamjoin import indexes
from streamjoin.actors.join_kernels import (
    Conditions,
    ImageConditions,
    image_slack,
    int_diff_in,
    split_bounds,
)
from streamjoin.actors.join_spec import JoinSpec
from streamjoin.actors.window_part import WindowPart
from streamjoin.batch import Batch
from streamjoin.validation import InputError, int_rows, validate

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
int64s = st.one_of(
    st.integers(INT64_MIN, INT64_MAX),
    st.integers(INT64_MIN, INT64_MIN + 4096),
    st.integers(INT64_MAX - 4096, INT64_MAX),
    st.integers(2**53 - 4096, 2**53 + 4096),
    st.integers(-3, 3),
)
bounds = st.one_of(
    st.integers(-(2**65), 2**65).map(float),
    st.integers(-4096, 4096).map(float),
    st.sampled_from([-math.inf, math.inf, 5e-324, -5e-324, 0.5, -0.5, 2.0**63, -(2.0**64)]),
)


@settings(max_examples=examples(600), deadline=None)
@given(r=int64s, s=int64s, lo=bounds, hi=bounds)
def test_the_exact_test_is_python_integer_arithmetic(r, s, lo, hi):
    (r_image,), (r_res,) = int_rows(np.array([r]))
    (s_image,), (s_res,) = int_rows(np.array([s]))
    sp = split_bounds(np.array([lo]), np.array([hi]))[0]
    got = int_diff_in(r_image, r_res, s_image, s_res, *sp)
    assert got == (lo <= s - r <= hi)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(int64s, min_size=1, max_size=20))
def test_image_plus_residual_is_the_value(values):
    image, residual = int_rows(np.array(values, dtype=np.int64))
    for v, i, r in zip(values, image, residual, strict=True):
        assert i == float(v)  # the nearest float64
        assert int(i) + int(r) == v and abs(r) <= 2**9


@settings(max_examples=examples(800), deadline=None)
@given(magnitude=st.floats(2.0**52, 2.0**63), r=int64s, s=int64s, lo=bounds, width=bounds)
def test_widened_float_test_holds_whenever_the_exact_one_does(magnitude, r, s, lo, width):
    # the superset the indexes return: lo - slack <= fl(image_s - image_r) <= hi + slack,
    # all in float64 as the kernels compute it, for every pair the exact test keeps
    slack = image_slack(max(magnitude, float(max(abs(r), abs(s)))))
    d = float(s) - float(r)
    for a, b in ((lo, lo + abs(width)), (float(s - r), float(s - r)), (float(s - r - 1), lo)):
        if a <= s - r <= b:
            assert a - slack <= d <= b + slack


def _colliding(n: int, seed: int, base: int = 2**62) -> dict:
    """Keys ``base + i`` for small i: 2,048 distinct keys per float64 image near 2**62."""
    rng = np.random.default_rng(seed)
    x = base + rng.integers(-3000, 3000, n)
    x[::9] = INT64_MAX - rng.integers(0, 3, len(x[::9]))  # differences beyond int64
    x[::13] = INT64_MIN + rng.integers(0, 3, len(x[::13]))
    ts = np.sort(rng.integers(0, n, n))
    return {"stream": rng.integers(0, 2, n).astype(np.int8), "ts": ts, "x": x}


def _serving(query) -> list[str]:
    return [
        name for name in indexes.names() if indexes.get(name).unsupported(query.predicate) is None
    ]


PREDICATES = [
    sj.band("x", 5),
    sj.band("x", lo=1, hi=1),  # one difference, a code boundary of every coded index
    sj.band("x", lo=-1024, hi=2048),  # bounds on image boundaries near 2**62
    sj.equal("x"),
    # many pairs a probe, so slow on every index: run with -m slow (the random tables of the
    # other tests meet both shapes on a few indexes)
    pytest.param(sj.less("x") & sj.band("x", 3000), marks=pytest.mark.slow),
    pytest.param(sj.greater_equal("x") & sj.not_equal("x"), marks=pytest.mark.slow),
]


@pytest.mark.parametrize("predicate", PREDICATES, ids=str)
def test_every_index_is_exact_on_keys_whose_images_collide(predicate):
    data = _colliding(400, seed=3)
    query = sj.Query(predicate, sj.CountWindow(100, 60))
    expected = sj.oracle.join(query, data)
    assert len(expected) > 0
    for name in _serving(query):
        for batch_size in (1, 64):
            res = sj.run(query, data, sj.topologies.single(name), batch_size=batch_size)
            assert res.same_pairs(expected), f"{name}, batch {batch_size}"


def test_compact_layouts_are_exact_on_wide_keys():
    data = _colliding(600, seed=4)
    query = sj.Query(sj.band("x", 40), sj.TimeWindow(120))
    expected = sj.oracle.join(query, data)
    # archived subindexes and full (packed) subwindows in 600 rows
    small = {
        "chained": {"subindex_size": 32},
        **{name: {"subwindow_size": 64} for name in ("bisort", "rap_table", "wib_tree")},
    }
    names = ("pim_tree", "im_tree", "bisort", "rap_table", "wib_tree", "chained", "css_tree")
    for name in names:
        options = {"layout": "compact", **small.get(name, {})}
        topo = sj.topologies.single(name, index_options=options)
        assert sj.run(query, data, topo).same_pairs(expected), name
    topo = sj.topologies.shared_index(3, task_size=5, window=64, layout="compact")
    assert sj.run(query, data, topo, batch_size=32).same_pairs(expected), "shared pim_tree"


def test_a_float_image_would_have_been_wrong():
    # the test above fails for a join on the images alone: check that it would
    data = _colliding(300, seed=5)
    query = sj.Query(sj.band("x", lo=1, hi=1), sj.CountWindow(100))
    exact = sj.oracle.join(query, data)
    on_images = {**data, "x": data["x"].astype(np.float64)}
    assert not sj.oracle.same_pairs(sj.oracle.join(query, on_images), exact)


@pytest.mark.parametrize(
    "make",
    [
        lambda: sj.topologies.grid(2, 2),
        lambda: sj.topologies.split(2),
        lambda: sj.topologies.panjoin(2, 2),
        lambda: sj.topologies.handshake(3, segment=2),
        lambda: sj.topologies.handshake(2, low_latency=True),
        lambda: sj.topologies.spo(2, merge_every=16),  # merges: the workers build structures
        lambda: sj.topologies.shared_index(2, task_size=7),
        # the same kernels as the line above with a B+-tree's arrays in them: compiled for
        # wide keys a second time at once when the two run side by side on an empty cache
        pytest.param(
            lambda: sj.topologies.shared_index(2, index="bplus_tree", merge="blocking"),
            marks=pytest.mark.slow,
        ),
    ],
)
@pytest.mark.parametrize("self_join", [False, True])
def test_every_topology_is_exact_on_wide_keys(make, self_join):
    data = _colliding(400, seed=6)
    if self_join:
        del data["stream"]
    query = sj.Query(sj.band("x", 10), sj.CountWindow(80), self_join=self_join)
    expected = sj.oracle.join(query, data)
    topo = make()
    for batch_size in (1, 32):
        res = sj.run(query, data, topo, batch_size=batch_size)
        assert res.same_pairs(expected), f"{topo.name}, batch {batch_size}"


def test_the_switch_to_exact_mid_run_keeps_earlier_pairs():
    # small keys first (joined on images alone), then keys beyond 2**52 join the same window
    rng = np.random.default_rng(7)
    small = rng.integers(-50, 50, 300)
    wide = 2**62 + rng.integers(-50, 50, 300)
    x = np.concatenate([small, wide, small])
    data = {"stream": rng.integers(0, 2, 900).astype(np.int8), "x": x}
    query = sj.Query(sj.band("x", 3), sj.CountWindow(400))
    expected = sj.oracle.join(query, data)
    for name in ("pim_tree", "bplus_tree", "bisort", "nested_loop"):
        res = sj.run(query, data, sj.topologies.single(name), batch_size=100)
        assert res.same_pairs(expected), name


def test_kernels_get_the_integer_conditions_only_once_exact():
    """Until an integer beyond 2**52 is seen, the conditions are ``ImageConditions``, whose
    kernels hold no integer code (with it inlined, every candidate θ tested cost ~115 ns of
    reference counting); the first such integer switches them to ``Conditions``."""
    query = sj.Query(sj.band("x", 3) & sj.band("y", 5), sj.CountWindow(8))
    spec = JoinSpec(query, "pim_tree")
    small = validate({"stream": np.array([0, 1], np.int8), "x": [1, 2], "y": [0, 1]}, query)
    spec.observe(small.attrs)
    assert type(spec.conds) is ImageConditions and not spec.exact
    wide = validate({"stream": np.array([0, 1], np.int8), "x": [2**60, 2], "y": [0, 1]}, query)
    spec.observe(wide.attrs)
    assert type(spec.conds) is Conditions and spec.exact
    # x served on images (bounds widened), then y and x again on exact integers
    assert spec.conds.ints.tolist() == [False, True, True]


@pytest.mark.parametrize("kind", ["pandas", "arrow", "uint64", "int32"])
def test_inputs_as_users_give_them(kind):
    data = _colliding(300, seed=8)
    query = sj.Query(sj.band("x", 20), sj.CountWindow(100))
    if kind == "pandas":
        given_ = pd.DataFrame(data)
    elif kind == "arrow":
        given_ = pa.table(data)
    elif kind == "uint64":  # within int64
        given_ = {**data, "x": (data["x"] - INT64_MIN // 2).clip(0).astype(np.uint64)}
        data = {**data, "x": given_["x"].astype(np.int64)}
    else:  # narrow integers: exact as before
        given_ = {**data, "x": (data["x"] % 1000).astype(np.int32)}
        data = given_
    expected = sj.oracle.join(query, data)
    assert sj.run(query, given_).same_pairs(expected)


def test_mixed_int_and_float_compare_as_float64():
    # an integer against a float takes its nearest float64 (query.py)
    data = {"stream": np.array([0, 1, 1], np.int8), "a": np.array([2**62 + 1, 0, 0])}
    data["b"] = np.array([0.0, 2.0**62, 2.0**62 + 1024.0])
    query = sj.Query(sj.band("a", lo=0, hi=0, attr_s="b"), sj.CountWindow(5))
    pairs = sj.oracle.join(query, data)
    assert list(zip(pairs["r"].to_pylist(), pairs["s"].to_pylist(), strict=True)) == [(0, 1)]
    assert sj.run(query, data).same_pairs(pairs)


def test_bad_integer_inputs_are_refused_up_front():
    query = sj.Query(sj.band("x", 1), sj.CountWindow(5))
    data = {"stream": np.array([0, 1], np.int8), "x": np.array([1, 2**63], dtype=np.uint64)}
    with pytest.raises(InputError, match=r"join column 'x' row 1 .* beyond the int64 maximum"):
        sj.run(query, data)
    listed = {"stream": [0, 1, 0], "x": [1, 2**63, 3]}  # numpy would make these floats
    with pytest.raises(InputError, match=r"column 'x' row 1 is 9223372036854775808, beyond"):
        sj.run(query, listed)
    assert sj.run(query, {**listed, "x": [1.0, 2.0**63, 3]}).same_pairs(
        sj.oracle.join(query, {**listed, "x": [1.0, 2.0**63, 3]})
    )
    with pytest.raises(ValueError, match="not a float64"):
        sj.band("x", lo=2**60 + 1, hi=2**61)
    sj.band("x", lo=2**53, hi=2**60)  # float64 integers are fine


@pytest.mark.parametrize("index", ["nested_loop", "pim_tree", "bisort"])
def test_images_rounding_apart_by_a_whole_ulp_at_the_band_edges(index):
    # near 2**62 images step by 1,024; 2**62 + 512 rounds down to even, 2**62 + 3,584 up, so
    # the images' difference (4,096) is a whole ulp beyond the integers' (3,072)
    low, high = 2**62 + 512, 2**62 + 3584
    assert float(high) - float(low) == 4096.0
    data = {"stream": np.array([0, 1, 1, 0], np.int8), "x": np.array([low, high, low, high])}
    for lo, hi, pairs in [
        (3072, 3072, [(0, 1)]),  # s - r == 3,072 exactly: on both edges
        (3073, 5000, []),
        (2000, 3071, []),
        (-3072, -3072, [(3, 2)]),  # r = high, s = low: -3,072
        (-3072, -3071, [(3, 2)]),
    ]:
        query = sj.Query(sj.band("x", lo=lo, hi=hi), sj.CountWindow(4))
        res = sj.run(query, data, sj.topologies.single(index), batch_size=1)
        assert (
            sorted(zip(res.pairs["r"].to_pylist(), res.pairs["s"].to_pylist(), strict=True))
            == pairs
        ), (lo, hi)


def _by_definition(query, data) -> list[tuple[int, int]]:
    """The pairs of a two-way count-window join, from the definition: Python integers for
    two integer values, float64 otherwise (query.py), nothing taken from ``validate``."""
    stream = [int(x) for x in data["stream"]]
    vals = {
        a: [v if isinstance(v, int) else float(v) for v in np.asarray(data[a]).tolist()]
        for a in query.attrs
    }

    def theta(r, s):
        for c in query.predicate:
            vr, vs = vals[c.attr][r], vals[c.attr_s][s]
            both = isinstance(vr, int) and isinstance(vs, int)
            d = vs - vr if both else float(np.float64(float(vs)) - np.float64(float(vr)))
            if (c.lo <= d <= c.hi) == c.negated:
                return False
        return True

    out = []
    for g, x in enumerate(stream):
        earlier = [e for e in range(g) if stream[e] == 1 - x]
        for e in earlier[max(0, len(earlier) - query.window_size(1 - x)) :]:
            r, s = (g, e) if x == 0 else (e, g)
            if theta(r, s):
                out.append((r, s))
    return sorted(out)


def _pairs(table) -> list[tuple[int, int]]:
    return sorted(zip(table["r"].to_pylist(), table["s"].to_pylist(), strict=True))


def test_integers_between_2_52_and_2_53_of_opposite_signs_are_exact():
    # images are exact up to 2**53, but a difference of two of them rounds beyond 2**53: the
    # oracle and the join decide on the integers once either value lies beyond 2**52
    r, s = -(2**52 + 1), 2**53
    assert float(s) - float(r) == 3 * 2**52 != s - r
    data = {"stream": np.array([0, 1, 0, 1], np.int8), "x": np.array([r, s, s, r])}
    for lo, hi in [(0, 3 * 2**52), (3 * 2**52 + 2, 2**60), (-(2**60), -(3 * 2**52))]:
        query = sj.Query(sj.band("x", lo=lo, hi=hi), sj.CountWindow(2))
        want = _by_definition(query, data)
        assert _pairs(sj.oracle.join(query, data)) == want, (lo, hi)
        assert _pairs(sj.run(query, data, batch_size=1).pairs) == want, (lo, hi)


def _rows_as_batches(query, data) -> list[Batch]:
    """Each input row as its own one-tuple batch (idx its rank in its stream, every earlier
    tuple in its window)."""
    cols = validate(data, query)
    idx = np.zeros(len(cols), dtype=np.int64)
    for x in (0, 1):
        idx[cols.stream == x] = np.arange(int((cols.stream == x).sum()))
    zero = np.zeros(1, dtype=np.int64)
    return [
        Batch(
            seq=np.array([g]),
            stream=cols.stream[g : g + 1],
            idx=idx[g : g + 1],
            ts=cols.ts[g : g + 1],
            ingest_ns=zero,
            lo_idx=zero,
            attrs=np.ascontiguousarray(cols.attrs[:, g : g + 1]),
        )
        for g in range(len(cols))
    ]


@pytest.mark.parametrize("stored", ["float", "small int"])
@pytest.mark.parametrize("index", ["nested_loop", "pim_tree"])
def test_a_probe_switching_to_exact_writes_the_stored_residuals_out_first(stored, index):
    # the stored tuple's residual row is left unwritten (all NaN, or all 0): whatever memory
    # holds there, the probe whose integer beyond 2**52 switches the part to exact reads its
    # residual only after writing it out
    a = [2.0**62, 0.0] if stored == "float" else [2**52, 0]
    data = {"stream": np.array([0, 1], np.int8), "a": np.array(a), "b": np.array([0, 2**52 + 1])}
    if stored == "float":
        data["b"] = np.array([0, 2**62 + 1])
    for lo in (0, 1):
        query = sj.Query(sj.band("a", lo=lo, hi=lo, attr_s="b"), sj.CountWindow(2))
        spec = JoinSpec(query, index)
        part = WindowPart(spec)
        r, s = _rows_as_batches(query, data)
        part.insert(r, np.array([0]))
        assert not part.store._kept[2:].any()  # the residual rows are not written yet
        part.store.attrs[2:] = 7.0  # what unwritten memory may hold
        got = part.probe(s, 1, np.array([0]))
        pairs = sorted(zip(got.r.tolist(), got.s.tolist(), strict=True))
        assert pairs == _by_definition(query, data) == _pairs(sj.oracle.join(query, data)), lo


@pytest.mark.parametrize("index", ["nested_loop", "pim_tree", "bisort"])
def test_a_larger_magnitude_after_the_switch_widens_again(index):
    # the first integer beyond 2**52 is 2**53 + 1 (images round by 1 there); keys near 2**62,
    # whose images round by up to 512 each, come later: the widening has to follow them
    low, high = 2**62 + 512, 2**62 + 3584  # images 4,096 apart, integers 3,072
    data = {"stream": np.array([0, 1, 0, 1], np.int8), "x": np.array([2**53 + 1, 0, low, high])}
    for lo, hi in [(3072, 3072), (3000, 3100), (-3072, 3072), (3073, 4096)]:
        query = sj.Query(sj.band("x", lo=lo, hi=hi), sj.CountWindow(4))
        want = _by_definition(query, data)
        res = sj.run(query, data, sj.topologies.single(index), batch_size=1)
        assert _pairs(res.pairs) == want, (lo, hi)


@pytest.mark.parametrize(
    "make",
    [
        lambda: sj.topologies.single("pim_tree"),
        lambda: sj.topologies.shared_index(2, task_size=1),
        lambda: sj.topologies.shared_index(2, index="bplus_tree", merge="blocking"),
    ],
)
def test_floats_stored_before_the_switch_still_compare_as_floats(make):
    # R's float keys are stored while the store leaves their (NaN) residual row unwritten; S's
    # integers beyond 2**52 then switch the join to exact, and an integer against a float
    # still compares in float64 (query.py): 2**62 + i against 2.0**62 is a difference of 0
    n = 96
    rng = np.random.default_rng(9)
    data = {
        "stream": (np.arange(n) >= n // 2).astype(np.int8),
        "a": np.full(n, 2.0**62),
        "b": 2**62 + rng.integers(1, 512, n),  # images 2.0**62
    }
    query = sj.Query(sj.band("a", lo=0, hi=0, attr_s="b"), sj.CountWindow(n))
    want = _by_definition(query, data)
    assert len(want) == (n // 2) ** 2 and _pairs(sj.oracle.join(query, data)) == want
    for batch_size in (4, 32):
        res = sj.run(query, data, make(), batch_size=batch_size)
        assert _pairs(res.pairs) == want, batch_size


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("batch_size", [1, 2])
def test_spo_workers_note_the_integers_of_the_pieces_they_build(workers, batch_size):
    # S's keys beyond 2**52 reach a worker first in a merged piece (a worker without a
    # structure yet does not probe, so it never saw them go by); R's small keys probing them
    # must still be decided on the integers: 2**62 + 1 - 0 is not 2**62, though its image is
    data = {
        "stream": np.array([1] * 4 + [0] * 4, np.int8),
        "x": np.array([2**62 + 1] * 4 + [0] * 4),
    }
    for lo in (2**62, 2**62 + 1024):
        query = sj.Query(sj.band("x", lo=lo, hi=lo), sj.CountWindow(10))
        want = _by_definition(query, data)
        topo = sj.topologies.spo(workers, merge_every=2)
        assert _pairs(sj.run(query, data, topo, batch_size=batch_size).pairs) == want, lo


@pytest.mark.parametrize("index", ["nested_loop", "pim_tree"])
def test_a_stored_key_beyond_2_52_switches_the_part_before_small_keys_probe_it(index):
    # the first tuple is stored before anything probes (an empty part is not probed), then a
    # small key probes it alone: the part has to know of the stored integer from its insert
    data = {"stream": np.array([0, 1, 1], np.int8), "x": np.array([2**62 + 1, 0, 1])}
    for lo in (-(2**62), -(2**62) - 1024):  # 1 - (2**62 + 1) is -2**62; 0 - (2**62 + 1) is not
        query = sj.Query(sj.band("x", lo=lo, hi=lo), sj.CountWindow(3))
        want = _by_definition(query, data)
        res = sj.run(query, data, sj.topologies.single(index), batch_size=1)
        assert _pairs(res.pairs) == want, lo


@pytest.mark.parametrize("r_first", [True, False])
@pytest.mark.parametrize("index", ["nested_loop", "bplus_tree"])
def test_an_integer_against_a_float_compares_in_float64_either_way_round(r_first, index):
    # the probing tuple is r or s: both kernel orientations decide an integer (beyond 2**52,
    # so the part is exact) against a float on the images, at and off the band's edges
    rng = np.random.default_rng(11)
    a = 2**62 + rng.integers(-2000, 2000, 16)  # R's integers
    b = 2.0**62 + 1024.0 * rng.integers(-2, 3, 16)  # S's floats
    order = [0] * 16 + [1] * 16 if r_first else [1] * 16 + [0] * 16
    stream = np.array(order, np.int8)
    data = {"stream": stream, "a": np.zeros(32, np.int64), "b": np.zeros(32)}
    data["a"][stream == 0], data["b"][stream == 1] = a, b
    for lo, hi in [(0, 0), (-1024, 0), (1024, 3072)]:
        query = sj.Query(sj.band("a", lo=lo, hi=hi, attr_s="b"), sj.CountWindow(32))
        want = _by_definition(query, data)
        assert want and want == _pairs(sj.oracle.join(query, data)), (lo, hi)
        res = sj.run(query, data, sj.topologies.single(index), batch_size=4)
        assert _pairs(res.pairs) == want, (lo, hi)


@pytest.mark.parametrize("make", [lambda: sj.topologies.spo(2, merge_every=8), lambda: None])
def test_wide_keys_seen_only_in_stored_runs_switch_the_actor(make):
    # the wide keys come first, when the workers' windows are empty (no probe sees them); the
    # runs that store them later must switch the worker, or small probes meet them in float64
    rng = np.random.default_rng(9)
    n = 300
    x = rng.integers(-5, 5, n)
    x[:12] = 2**62 + rng.integers(-3, 3, 12)
    data = {"stream": (np.arange(n) % 2).astype(np.int8), "x": x}
    query = sj.Query(sj.band("x", lo=-(2.0**62), hi=-(2.0**62) + 4), sj.CountWindow(400))
    expected = sj.oracle.join(query, data)
    images = sj.oracle.join(query, {**data, "x": x.astype(np.float64)})
    assert len(expected) and not sj.oracle.same_pairs(images, expected)
    topo = make() or sj.topologies.single()
    for batch_size in (4, 16):
        assert sj.run(query, data, topo, batch_size=batch_size).same_pairs(expected)
