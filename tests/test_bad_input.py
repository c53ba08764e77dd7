"""Bad input near the limits: either an exact answer (checked against the oracle, and the oracle
against a brute force in Python ints) or a clear error before any work.

- ``ts`` near ±2**63: window arithmetic saturates (docs/design.md §1), on ``local`` and ``sim``;
- uint64 and datetime ``ts`` that do not fit int64: :class:`streamjoin.InputError`;
- windows beyond int64 and band bounds beyond float64: ``ValueError`` at construction;
- a source that raises mid-stream: :class:`streamjoin.sources.SourceError`, its exception as
  the cause, no result.
"""

import numpy as np
import pytest

import streamjoin as sj
from streamjoin.sources import SourceError

I64_MAX = 2**63 - 1
I64_MIN = -(2**63)
F64_MAX = float(np.finfo(np.float64).max)
LOCAL_SIM = ("local", "sim")


def brute_force(query: sj.Query, data: dict) -> set[tuple[int, int]]:
    """docs/design.md §1 over Python ints: every pair, window differences that cannot wrap."""
    stream = [int(v) for v in data.get("stream", np.zeros(len(data["ts"])))]
    ts = [int(v) for v in data["ts"]]
    x = [float(v) for v in data["x"]]
    cond = query.predicate.conditions[0]
    w = query.window
    pairs = set()
    for g in range(len(ts)):
        for e in range(g):
            if not query.self_join and stream[e] == stream[g]:
                continue
            y = 0 if query.self_join else stream[e]
            if w.kind == "time":
                if ts[g] - ts[e] > query.window_size(y):
                    continue
            else:  # the last w_Y of Y before g
                before = sum(1 for k in range(e + 1, g) if query.self_join or stream[k] == y)
                if before >= query.window_size(y):
                    continue
            if query.self_join:
                a, b = e, g
                ok = cond.lo <= x[b] - x[a] <= cond.hi or cond.lo <= x[a] - x[b] <= cond.hi
            else:
                a, b = (e, g) if stream[e] == 0 else (g, e)
                ok = cond.lo <= x[b] - x[a] <= cond.hi
            if ok:
                pairs.add((a, b))
    return pairs


def as_set(pairs) -> set[tuple[int, int]]:
    return set(zip(pairs.column("r").to_pylist(), pairs.column("s").to_pylist(), strict=True))


def near_limits(placement: str, n: int = 160, seed: int = 0) -> dict:
    """Two streams whose ``ts`` sit near the int64 limits: ``max`` (both just below the
    maximum), ``min`` (both just above the minimum), ``split`` (R at the minimum, S at the
    maximum: differences beyond int64 both ways), ``wide`` (each stream spreads over the
    whole int64 range, so consecutive rows are up to ~2**62 apart)."""
    rng = np.random.default_rng(seed)
    stream = rng.integers(0, 2, n).astype(np.int8)
    ts = np.empty(n, dtype=np.int64)
    for s in (0, 1):
        k = int((stream == s).sum())
        if placement == "max":
            vals = I64_MAX - rng.integers(0, 40, k)
        elif placement == "min":
            vals = I64_MIN + rng.integers(0, 40, k)
        elif placement == "split":
            vals = I64_MIN + rng.integers(0, 40, k) if s == 0 else I64_MAX - rng.integers(0, 40, k)
        else:
            vals = np.concatenate(
                [[I64_MIN, I64_MAX], rng.integers(I64_MIN, I64_MAX, k, dtype=np.int64)]
            )[:k]
        ts[stream == s] = np.sort(np.asarray(vals, dtype=np.int64))
    return {"stream": stream, "ts": ts, "x": rng.integers(0, 6, n).astype(np.float64)}


PLACEMENTS = ("max", "min", "split", "wide")
WINDOWS = (1, 2**62, I64_MAX)


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("self_join", [False, True])
def test_oracle_equals_python_int_brute_force_near_int64_limits(placement, window, self_join):
    data = near_limits(placement)
    if self_join:
        data = {"ts": np.sort(data["ts"]), "x": data["x"]}
    q = sj.Query(sj.band("x", 1), window=sj.TimeWindow(window), self_join=self_join)
    assert as_set(sj.oracle.join(q, data)) == brute_force(q, data)


def test_these_inputs_wrap_in_int64():
    """The cases above are not vacuous: ``x.ts - y.ts <= w`` in int64 gets them wrong."""
    for placement in ("split", "wide"):
        ts = near_limits(placement)["ts"]
        g, e = np.triu_indices(len(ts), 1)
        with np.errstate(over="ignore"):
            wrapped = ts[e] - ts[g] <= I64_MAX  # int64: always true
        exact = np.array([int(a) - int(b) <= I64_MAX for a, b in zip(ts[e], ts[g], strict=True)])
        assert wrapped.all() and not exact.all()


@pytest.mark.parametrize("backend", LOCAL_SIM)
@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("window", WINDOWS)
def test_time_window_near_int64_limits_equals_oracle(backend, placement, window):
    data = near_limits(placement, n=300, seed=window % 7)
    q = sj.Query(sj.band("x", 1), window=sj.TimeWindow(window))
    # sim replays ts by default; a span beyond its clock takes a rate instead (tested below)
    pace = 1e5 if backend == "sim" and placement in ("split", "wide") else None
    res = sj.run(q, data, backend=backend, batch_size=16, pace=pace)
    assert res.same_pairs(sj.oracle.join(q, data))


@pytest.mark.parametrize("backend", LOCAL_SIM)
@pytest.mark.parametrize(
    "layout",
    [
        lambda: sj.topologies.grid(2, 2),
        lambda: sj.topologies.handshake(2, low_latency=True),
        lambda: sj.topologies.panjoin(2, 4),
    ],
)
def test_saturating_window_on_other_topologies(backend, layout):
    data = near_limits("min", n=200, seed=3)
    q = sj.Query(sj.band("x", 1), window=sj.TimeWindow(2**62))
    res = sj.run(q, data, layout(), backend=backend, batch_size=8)
    assert res.same_pairs(sj.oracle.join(q, data))


def test_sim_replay_beyond_its_clock_is_an_input_error():
    ts = np.array([I64_MIN, I64_MIN + 1, I64_MAX - 1, I64_MAX], dtype=np.int64)
    data = {"stream": np.array([0, 1, 0, 1]), "ts": ts, "x": np.ones(4)}
    q = sj.Query(sj.band("x", 1), window=sj.TimeWindow(5))
    with pytest.raises(sj.InputError, match="beyond the simulator's clock"):
        sj.run(q, data, backend="sim")
    slow = sj.runtime.sim.Arrival.replay(ts_unit_ns=1)  # 2**64 ns is still ~585 years
    with pytest.raises(sj.InputError, match="replay faster"):
        sj.run(q, data, backend="sim", arrival=slow)


# --- ts that does not fit int64 ------------------------------------------------------------


@pytest.mark.parametrize("backend", LOCAL_SIM)
def test_uint64_ts_within_int64_is_exact(backend):
    data = near_limits("max", n=200)
    unsigned = {**data, "ts": data["ts"].astype(np.uint64)}
    q = sj.Query(sj.band("x", 1), window=sj.TimeWindow(3))
    res = sj.run(q, unsigned, backend=backend, batch_size=16)
    assert res.same_pairs(sj.oracle.join(q, data))
    assert res.same_pairs(sj.oracle.join(q, unsigned))


@pytest.mark.parametrize("backend", LOCAL_SIM)
@pytest.mark.parametrize("as_source", [False, True])
def test_uint64_ts_beyond_int64_is_an_input_error(backend, as_source):
    ts = np.arange(2**63 - 4, 2**63 + 4, dtype=np.uint64)  # row 4 is 2**63
    data = {"stream": np.tile([0, 1], 4), "ts": ts, "x": np.ones(8)}
    q = sj.Query(sj.band("x", 1), window=sj.TimeWindow(10))
    source = sj.sources.Stream(data, chunk_rows=3) if as_source else data
    with pytest.raises(sj.InputError, match=r"column 'ts' row 4 is 9223372036854775808, beyond"):
        sj.run(q, source, backend=backend)


@pytest.mark.parametrize(
    ("ts", "message"),
    [
        (np.array(["2000-01-01", "2600-01-01"], "datetime64[s]"), "row 1 is 2600-01-01T00:00:00"),
        (np.array(["1600-01-01", "2000-01-01"], "datetime64[D]"), "row 0 is 1600-01-01, outside"),
        (np.array(["2000-01-01", "NaT"], "datetime64[ms]"), "null \\(NaT\\) value at row 1"),
    ],
)
def test_datetime_ts_beyond_int64_nanoseconds_is_an_input_error(ts, message):
    data = {"stream": np.array([0, 1]), "ts": ts, "x": np.ones(2)}
    q = sj.Query(sj.band("x", 1), window=sj.TimeWindow(10))
    with pytest.raises(sj.InputError, match=message):
        sj.oracle.join(q, data)


def test_datetime_ts_within_range_is_exact_nanoseconds():
    ts = np.array(["1677-09-22", "2262-04-10", "2262-04-10"], "datetime64[D]")
    cols = sj.validation.validate(
        {"ts": ts, "x": np.ones(3)}, sj.Query(sj.band("x", 1), sj.TimeWindow(1), self_join=True)
    )
    assert cols.ts.tolist() == ts.astype("datetime64[ns]").astype(np.int64).tolist()
    assert cols.ts[0] < 0 < cols.ts[1]


# --- windows and band bounds beyond their types -------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: sj.CountWindow(2**70), "count window size must be at most 2\\*\\*63 - 1"),
        (lambda: sj.CountWindow(5, 2**63), "count window size must be at most"),
        (lambda: sj.TimeWindow(2**70), "time window length must be at most 2\\*\\*63 - 1"),
        (lambda: sj.TimeWindow(np.uint64(2**63)), "time window length must be at most"),
        (lambda: sj.TimeWindow(0), "time window length must be a positive integer, got 0"),
        (lambda: sj.CountWindow(0), "count window size must be a positive integer, got 0"),
        (lambda: sj.band("x", 10**400), "band eps must be finite, got an integer of 401 digits"),
        (lambda: sj.band("x", lo=-(10**400), hi=0), "band lo must be finite"),
        (lambda: sj.band("x", lo=0, hi=2**1024), "band hi must be finite"),
    ],
)
def test_sizes_beyond_their_type_are_value_errors_at_construction(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("backend", LOCAL_SIM)
@pytest.mark.parametrize("kind", ["count", "time"])
@pytest.mark.parametrize(
    "layout",
    [
        lambda: sj.topologies.single(),
        lambda: sj.topologies.handshake(3),
        lambda: sj.topologies.panjoin(2, 4),
        lambda: sj.topologies.split(2),
    ],
)
def test_largest_windows_equal_oracle(backend, kind, layout):
    data = sj.sources.synthetic(300, low=0, high=40, seed=2)
    window = (sj.CountWindow if kind == "count" else sj.TimeWindow)(I64_MAX)
    q = sj.Query(sj.band("x", 1), window=window)
    res = sj.run(q, data, layout(), backend=backend, batch_size=32)
    assert res.same_pairs(sj.oracle.join(q, data))


@pytest.mark.parametrize("backend", LOCAL_SIM)
@pytest.mark.parametrize(
    "condition",
    [
        sj.band("x", F64_MAX),
        sj.band("x", 2**70),
        sj.band("x", lo=-F64_MAX, hi=F64_MAX),
        sj.band("x", lo=F64_MAX / 2, hi=F64_MAX),
        sj.band("x", lo=2**53, hi=F64_MAX),
    ],
)
@pytest.mark.parametrize("index", ["bisort", "bplus_tree", "pim_tree", "rap_table", "nested_loop"])
def test_band_bounds_near_float64_max_equal_oracle(backend, condition, index):
    data = sj.sources.synthetic(200, low=-(2**52), high=2**52, seed=5)
    q = sj.Query(condition, window=sj.CountWindow(40))
    res = sj.run(q, data, sj.topologies.single(index), backend=backend, batch_size=16)
    assert res.same_pairs(sj.oracle.join(q, data))


def test_brute_force_agrees_on_count_windows_and_bands():
    data = near_limits("wide", n=90)
    for q in (
        sj.Query(sj.band("x", 1), window=sj.CountWindow(I64_MAX)),
        sj.Query(sj.band("x", lo=-1, hi=2), window=sj.CountWindow(3, 5)),
    ):
        assert as_set(sj.oracle.join(q, data)) == brute_force(q, data)


# --- a source that fails --------------------------------------------------------------------


class Failing(sj.sources.Source):
    """Two chunks of 3 rows, then the given exception; remembers whether it was closed."""

    def __init__(self, error: Exception, before: int = 2) -> None:
        self.error, self.before, self.closed = error, before, False

    def __iter__(self):
        try:
            for k in range(self.before):
                yield {
                    "stream": np.array([0, 1, 0]),
                    "ts": np.arange(3 * k, 3 * k + 3),
                    "x": np.ones(3),
                }
            raise self.error
        finally:
            self.closed = True


@pytest.mark.parametrize("backend", LOCAL_SIM)
def test_source_failing_mid_stream_is_a_source_error(backend):
    q = sj.Query(sj.band("x", 1), window=sj.TimeWindow(5))
    cause = OSError("disk gone")
    source = Failing(cause)
    with pytest.raises(
        SourceError, match="source Failing failed after 6 rows: OSError: disk gone"
    ) as e:
        sj.run(q, source, backend=backend, batch_size=2)
    assert e.value.rows == 6
    assert e.value.__cause__ is cause
    assert source.closed


class Unopenable(sj.sources.Source):
    def __iter__(self):
        raise PermissionError("no access to /data")


def test_source_failing_to_open_is_a_source_error():
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(5))
    with pytest.raises(SourceError, match="failed after 0 rows: PermissionError: no access"):
        sj.run(q, Unopenable())


def test_source_input_error_passes_unchanged():
    """A source's own InputError already names the problem: not wrapped."""
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(5))
    error = sj.InputError("partition 3 changed between reads")
    with pytest.raises(sj.InputError) as e:
        sj.run(q, Failing(error, before=1))
    assert e.value is error


def test_source_error_survives_copy_and_pickle():
    import copy
    import pickle

    err = SourceError("source X failed after 5 rows: OSError: gone", 5)
    for again in (copy.copy(err), pickle.loads(pickle.dumps(err)), type(err)(*err.args)):
        assert str(again) == str(err) and again.rows == 5


def test_partition_plan_takes_ts_ranges_over_all_of_int64():
    """The Spark source plans on Python ints: ranges spanning all of int64 do not wrap."""
    from streamjoin.spark_bridge.partitions import PartitionRange, buffered_rows, plan_jobs

    parts = [
        PartitionRange(0, 100, I64_MIN, I64_MAX),
        PartitionRange(1, 10, I64_MAX - 1, I64_MAX),
        PartitionRange(2, 10, I64_MIN, I64_MIN + 1),
    ]
    jobs = plan_jobs(parts, rows_per_job=10)
    assert [[p.pid for p in job] for job in jobs] == [[2], [0], [1]]
    held, peak = buffered_rows(jobs)
    # after job 0, partition 2 is held whole (job 1 starts at the same minimum); after job 1,
    # 1 of partition 0's 100 rows, spread over 2**64 values, is at or above job 2's minimum
    # (int64 would wrap that range's width to 0)
    assert (held, peak) == (10, 110)
