"""Emitter stamping and batch closing; the synthetic sources."""

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import streamjoin as sj
from streamjoin.actors import Emitter
from streamjoin.validation import validate


class FakeClock:
    def __init__(self):
        self.now = 0

    def __call__(self):
        return self.now


def test_batches_close_on_size_and_on_delay():
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(3))
    data = {"stream": np.array([0, 1, 0, 1, 0]), "x": np.arange(5.0)}
    cols = validate(data, q)
    clock = FakeClock()
    em = Emitter(q, batch_size=2, max_delay_ns=1_000, clock=clock)
    out = em.on_chunk(cols)  # 5 tuples: two full batches, one tuple waits
    assert [len(b) for _, b in out] == [2, 2] and em.open_tuples == 1
    clock.now = 999
    assert em.on_tick() == []
    clock.now = 1_000
    ((_, last),) = em.on_tick()
    assert len(last) == 1 and em.open_tuples == 0
    assert last.seq.tolist() == [4] and last.idx.tolist() == [2]


def test_copied_counts_tuples_merged_or_cut_into_batches():
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(3))

    def chunk(n, start):
        return validate(
            {"stream": np.arange(start, start + n) % 2, "x": np.zeros(n)}, q, row_offset=start
        )

    em = Emitter(q, batch_size=4)
    em.on_chunk(chunk(4, 0))  # exactly one batch: sent as it is
    assert em.copied == 0
    em.on_chunk(chunk(3, 4))  # waits
    assert em.copied == 0
    out = em.on_chunk(chunk(3, 7))  # 3 + 3 merged (6), one batch of 4 cut, 2 left
    assert [len(b) for _, b in out] == [4] and em.copied == 6 + 4 + 2
    ((_, last),) = em.on_eof()
    assert len(last) == 2 and em.copied == 12  # the rest goes as it is
    assert last.seq.tolist() == [8, 9]


@pytest.mark.parametrize(
    ("route", "copies"),
    [
        (sj.actors.router.SingleRoute(), 0),
        (sj.actors.router.SplitRoute(2), 0),
        (sj.actors.router.GridRoute(2, 2), 6),
        (sj.actors.router.HandshakeRoute(), 6),
        (sj.actors.router.BroadcastRoute(("a", "b")), 0),
    ],
)
def test_copied_counts_the_tuples_a_route_splits_off(route, copies):
    """A route that splits a batch's R from its S copies every tuple into a part of its own
    (a grid's, a chain's), which the simulator charges as the emitter's copies; one that
    passes a batch on whole, to one core or several, copies none. A batch of one stream goes
    as it is."""
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(3))
    em = Emitter(q, batch_size=6, route=route)
    out = em.on_chunk(validate({"stream": np.arange(6) % 2, "x": np.zeros(6)}, q))
    assert em.copied == copies
    if copies:  # R's tuples in one part, S's in the other
        assert sorted(b.seq.tolist() for _, b in out) == [[0, 2, 4], [1, 3, 5]]
    em.on_chunk(validate({"stream": np.zeros(6, int), "x": np.zeros(6)}, q, row_offset=6))
    assert em.copied == copies


def test_pending_rows_are_taken_with_their_own_horizons():
    """Rows taken from an emitter's pending rows carry only their own per-row horizons: the
    whole ``(2, n)`` array went along with every batch cut from a chunk once (a copy of all
    of it per batch, quadratic: 8 s to cut 3 M rows into batches of 1,024)."""
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(5))
    n = 250
    stamped = Emitter(q, batch_size=1000)
    stamped.on_chunk(validate({"stream": np.arange(n) % 2, "x": np.zeros(n)}, q))
    (pending,) = stamped._pending
    assert pending.horizon.shape == (2, n)
    part = pending.take(np.arange(100, 150))
    assert np.array_equal(part.horizon, pending.horizon[:, 100:150])
    cut = Emitter(q, batch_size=100)
    out = cut.on_chunk(validate({"stream": np.arange(n) % 2, "x": np.zeros(n)}, q))
    ((_, rest),) = cut.on_eof()
    assert [len(b) for _, b in out] == [100, 100] and len(rest) == 50
    assert all(b.horizon.shape == (2,) for _, b in out)
    assert np.array_equal(rest.horizon, pending.horizon[:, -1]), "the last row's horizon"


def test_stamps_follow_the_definition():
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(2, 1))
    data = {"stream": np.array([0, 0, 0, 1, 1, 0]), "x": np.zeros(6)}
    em = Emitter(q, batch_size=100)
    em.on_chunk(validate(data, q))
    ((_, b),) = em.on_eof()
    assert b.idx.tolist() == [0, 1, 2, 0, 1, 3]
    # S tuples see the last w_r = 2 R tuples; R tuples the last w_s = 1 S tuple
    assert b.lo_idx.tolist() == [0, 0, 0, 1, 1, 1]
    assert b.horizon.tolist() == [2, 1]  # after 4 R and 2 S: no window reaches below


def test_time_window_lo_idx_across_chunks():
    q = sj.Query(sj.equal("x"), window=sj.TimeWindow(10))
    em = Emitter(q, batch_size=100)
    a = {"stream": np.array([0, 0, 0]), "ts": np.array([0, 5, 20]), "x": np.zeros(3)}
    b = {"stream": np.array([1, 1]), "ts": np.array([14, 31]), "x": np.zeros(2)}
    em.on_chunk(validate(a, q))
    em.on_chunk(validate(b, q, row_offset=3))
    ((_, batch),) = em.on_eof()
    # S at ts 14 sees R with ts >= 4: idx 1, 2; S at ts 31 sees R with ts >= 21: none (lo 3)
    assert batch.lo_idx[3:].tolist() == [1, 3]


@st.composite
def _time_chunks(draw):
    """Arrivals whose ``ts`` do not decrease per stream (ties, gaps and values near the int64
    limits), the windows of the two streams, and cuts into chunks."""
    self_join = draw(st.booleans())
    n = draw(st.integers(1, 60))
    stream = (
        np.zeros(n, np.int8)
        if self_join
        else np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), np.int8)
    )
    lo = np.iinfo(np.int64).min if draw(st.booleans()) else draw(st.integers(-(2**62), 2**62))
    ts = np.empty(n, np.int64)
    last = [lo, lo]
    for g in range(n):
        last[stream[g]] = min(
            last[stream[g]] + draw(st.sampled_from([0, 0, 1, 3, 7, 2**40])), np.iinfo(np.int64).max
        )
        ts[g] = last[stream[g]]
    windows = [draw(st.sampled_from([1, 2, 5, 20, 2**41, 2**63 - 1])) for _ in range(2)]
    cuts = sorted(set(draw(st.lists(st.integers(1, n), max_size=5))) | {n})
    return self_join, stream, ts, windows, cuts


@settings(max_examples=examples(300), deadline=None)
@given(_time_chunks(), st.sampled_from([1, 2, 3, 7, 1000]))
def test_time_window_stamps_match_their_definition(case, batch_size):
    """Every tuple's ``lo_idx`` is the first idx of its probed stream whose ``ts`` is within
    the window (``ts_x - ts_y <= w_Y``, exact integers), at most the tuples of that stream
    before it, whatever the chunks and batches; each batch's ``horizon[Y]`` is the largest
    ``lo_idx`` of Y's probers so far (0 before any): never above a later prober's, never
    behind what the window allows dropping."""
    self_join, stream, ts, windows, cuts = case
    q = sj.Query(
        sj.equal("x"),
        window=sj.TimeWindow(windows[0], windows[1])
        if not self_join
        else sj.TimeWindow(windows[0]),
        self_join=self_join,
    )
    em = Emitter(q, batch_size=batch_size)
    batches = []
    start = 0
    for end in cuts:
        data = {"ts": ts[start:end], "x": np.zeros(end - start)}
        if not self_join:
            data["stream"] = stream[start:end]
        batches += [b for _, b in em.on_chunk(validate(data, q, row_offset=start))]
        start = end
    batches += [b for _, b in em.on_eof()]
    lo_idx = np.concatenate([b.lo_idx for b in batches])
    idx = np.concatenate([b.idx for b in batches])
    assert np.concatenate([b.seq for b in batches]).tolist() == list(range(len(ts)))
    probed = []  # the stream each tuple probes
    for g in range(len(ts)):
        x = int(stream[g])
        y = x if self_join else 1 - x
        probed.append(y)
        w = q.window_size(y)
        ys = [h for h in range(g) if stream[h] == y]
        inside = [k for k, h in enumerate(ys) if int(ts[g]) - int(ts[h]) <= w]
        assert lo_idx[g] == (inside[0] if inside else len(ys)), g
        assert idx[g] == sum(stream[:g] == x)
    probed = np.array(probed)
    end = 0
    for b in batches:
        end += len(b)
        for y in (0, 1):
            so_far = lo_idx[:end][probed[:end] == y]
            assert b.horizon[y] == (so_far.max() if len(so_far) else 0)
            later = lo_idx[end:][probed[end:] == y]
            assert (later >= b.horizon[y]).all()


def test_interleave_rates_and_order():
    stream, ts = sj.sources.interleave(40_000, rate=1000, rate_s=3000, seed=1)
    assert np.mean(stream == 1) == pytest.approx(0.75, abs=0.01)
    for s in (0, 1):
        assert np.all(np.diff(ts[stream == s]) >= 0)
    stream, ts = sj.sources.interleave(40_000, rate=1000, process="poisson", seed=1)
    assert np.mean(stream == 1) == pytest.approx(0.5, abs=0.02)


def test_distributions_and_shifting_gaussian():
    g = sj.sources.values(100_000, "gaussian", seed=1)
    assert g.mean() == pytest.approx(0.5, abs=0.01) and g.std() == pytest.approx(0.125, rel=0.05)
    gam = sj.sources.values(100_000, "gamma", seed=1, k=3, theta=3)
    assert gam.mean() == pytest.approx(9, rel=0.03)
    sh = sj.sources.values(180_000, "shifting_gaussian", seed=1, r=1.0)
    assert sh[:40_000].mean() == pytest.approx(0.5, abs=0.01)
    assert sh[-40_000:].mean() == pytest.approx(1.5, abs=0.01)
    with pytest.raises(ValueError, match="unknown distribution 'zipf'"):
        sj.sources.values(10, "zipf")
    with pytest.raises(ValueError, match="unknown parameters"):
        sj.sources.values(10, "gamma", mean=3)


@pytest.mark.parametrize("distribution", ["uniform", "gaussian", "gamma"])
def test_band_for_match_rate_gives_that_match_rate(distribution):
    n, window = 40_000, 1000
    params = {"low": 0, "high": 10**6} if distribution == "uniform" else {}
    data = sj.sources.synthetic(n, distribution, seed=3, **params)
    x, s = data.column("x").to_numpy(), data.column("stream").to_numpy()
    eps = sj.sources.band_for_match_rate(x[s == 0], x[s == 1], window=window, match_rate=2)
    q = sj.Query(sj.band("x", eps), window=sj.CountWindow(window))
    res = sj.run(q, data, collect="count")
    probes_with_full_window = n - 2 * window
    assert res.count / probes_with_full_window == pytest.approx(2, rel=0.15)


def _eps_by_bisection(r, s, window, match_rate):
    """The band width by bisecting the sampled selectivity a hundred times over (what
    ``band_for_match_rate`` computes, the straightforward way)."""
    integer = np.issubdtype(r.dtype, np.integer) and np.issubdtype(s.dtype, np.integer)
    rng = np.random.default_rng(0)
    r = rng.choice(r, size=min(len(r), 20_000), replace=False).astype(np.float64)
    s = np.sort(rng.choice(s, size=min(len(s), 200_000), replace=False).astype(np.float64))
    lo, hi = 0.0, float(s[-1] - s[0]) + 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        hits = np.searchsorted(s, r + mid, "right") - np.searchsorted(s, r - mid, "left")
        if float(hits.mean()) / len(s) < match_rate / window:
            lo = mid
        else:
            hi = mid
    return float(np.floor(hi)) if integer else hi


@settings(max_examples=examples(40), deadline=None)
@given(
    st.sampled_from(["small ints", "large ints", "floats"]),
    st.integers(1, 600),
    st.integers(1, 600),
    st.integers(1, 5000),
    st.sampled_from([0.1, 1.0, 2.0, 16.0, 1e4]),
    st.integers(0, 2**16),
)
def test_band_for_match_rate_is_the_bisections_answer(kind, n, m, window, rate, seed):
    """Sorted probes and a bisection that stops once floats cannot get closer give the
    answer of a hundred rounds on unsorted probes, exactly."""
    rng = np.random.default_rng(seed)
    if kind == "floats":
        r, s = rng.normal(0, 1e3, n), rng.normal(5, 1e3, m)
    else:
        high = 50 if kind == "small ints" else 10**6
        r, s = rng.integers(-high, high, n), rng.integers(-high, high, m)
    eps = sj.sources.band_for_match_rate(r, s, window=window, match_rate=rate)
    assert eps == _eps_by_bisection(r, s, window, rate)


def test_handshake_workload_shape():
    t = sj.sources.handshake_workload(10_000, rate=2_000, seed=1)
    assert t.column_names == ["stream", "ts", "x", "y"]
    x = t.column("x").to_numpy()
    assert x.min() >= 1 and x.max() <= 10_000 and x.dtype.kind == "i"
    ts = t.column("ts").to_numpy()
    assert ts[-1] == pytest.approx(10_000 / 2 / 2_000 * 1000, rel=0.01)  # ms at 2,000/s each
