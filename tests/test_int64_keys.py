"""int64 join keys compared exactly (query.py's semantics): the exact test, the input's image
and residual rows, and joins over keys whose float64 images collide, on every index and
backend, against the oracle. Random layouts meet such keys through ``strategies.tables``."""

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streamjoin as sj
from streamjoin import indexes
from streamjoin.actors.join_kernels import image_slack, int_diff_in, split_bounds
from streamjoin.batch import InputError, int_rows

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


@settings(max_examples=2000, deadline=None)
@given(r=int64s, s=int64s, lo=bounds, hi=bounds)
def test_the_exact_test_is_python_integer_arithmetic(r, s, lo, hi):
    (r_image,), (r_res,) = int_rows(np.array([r]))
    (s_image,), (s_res,) = int_rows(np.array([s]))
    sp = split_bounds(np.array([lo]), np.array([hi]))[0]
    got = int_diff_in(r_image, r_res, s_image, s_res, *sp)
    assert got == (lo <= s - r <= hi)


@settings(max_examples=500, deadline=None)
@given(st.lists(int64s, min_size=1, max_size=20))
def test_image_plus_residual_is_the_value(values):
    image, residual = int_rows(np.array(values, dtype=np.int64))
    for v, i, r in zip(values, image, residual, strict=True):
        assert i == float(v)  # the nearest float64
        assert int(i) + int(r) == v and abs(r) <= 2**10


@settings(max_examples=3000, deadline=None)
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
    sj.less("x") & sj.band("x", 3000),
    sj.greater_equal("x") & sj.not_equal("x"),
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
    for name in ("pim_tree", "im_tree", "bisort", "rap_table"):
        topo = sj.topologies.single(name, index_options={"layout": "compact"})
        assert sj.run(query, data, topo).same_pairs(expected), name


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
        lambda: sj.topologies.spo(2),
        lambda: sj.topologies.shared_index(2, task_size=7),
        lambda: sj.topologies.shared_index(2, index="bplus_tree", merge="blocking"),
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
