"""The same scenarios under every backend, checked against the oracle.

On Ray each run starts its actors as processes (about 0.8 s an actor on the 2-core VM), so by
default Ray runs the first scenario of the layouts in :data:`RAY_DEFAULT`; ``pytest -m slow``
runs every layout's first scenario there. ``local`` and ``sim`` run every scenario."""

import numpy as np
import pytest
from layouts import LAYOUTS

import streamjoin as sj
from streamjoin.runtime.sim import Arrival


@pytest.fixture(params=sj.runtime.BACKENDS)
def backend(request):
    if request.param == "ray":
        request.getfixturevalue("ray_session")
    return request.param


def self_join(predicate, window):
    return sj.Query(predicate, window=window, self_join=True)


ASYMMETRIC = sj.band("x", lo=-1, hi=3)

#: (query, self-join input, layout, batch size, keys drawn from 0..high: few values, many ties)
SCENARIOS = [
    (sj.Query(sj.band("x", 2), window=sj.CountWindow(30, 50)), False, "single", 1, 60),
    (sj.Query(sj.equal("x") & sj.less("y"), window=sj.TimeWindow(20)), False, "single", 64, 60),
    (self_join(ASYMMETRIC, sj.CountWindow(40)), True, "split", 16, 60),
    (sj.Query(sj.band("x", 3), window=sj.TimeWindow(30, 10)), False, "grid", 8, 60),
    (self_join(ASYMMETRIC, sj.TimeWindow(10)), True, "grid", 8, 60),
    (self_join(sj.equal("x"), sj.CountWindow(30)), True, "grid", 64, 3),
    (sj.Query(sj.band("x", 3), window=sj.CountWindow(50)), False, "grid_direct", 1, 60),
    (self_join(sj.less("x"), sj.CountWindow(12)), True, "grid_direct", 1, 4),
    (self_join(sj.equal("x"), sj.CountWindow(60)), True, "panjoin", 4, 60),
    (sj.Query(sj.band("x", 2), window=sj.CountWindow(40, 70)), False, "handshake", 8, 60),
    (self_join(sj.band("x", 2), sj.CountWindow(40)), True, "handshake", 8, 60),
    (self_join(ASYMMETRIC, sj.TimeWindow(3)), True, "handshake", 3, 8),
    (sj.Query(sj.band("x", 2), window=sj.TimeWindow(15, 40)), False, "handshake_ll", 4, 60),
    (self_join(ASYMMETRIC & sj.less_equal("y"), sj.TimeWindow(5)), True, "handshake_ll", 4, 6),
    (self_join(sj.less("x"), sj.CountWindow(20)), True, "handshake_ll", 16, 60),
    (sj.Query(sj.band("x", 2), window=sj.CountWindow(40, 70)), False, "shared", 8, 60),
    (self_join(ASYMMETRIC, sj.TimeWindow(10)), True, "shared", 16, 60),
    # two disjoint probe boxes (r stored, s stored), each refined in its own orientation
    (self_join(sj.band("x", lo=1, hi=3), sj.CountWindow(40)), True, "shared_compact", 4, 60),
    (self_join(sj.equal("x") & sj.less("y"), sj.CountWindow(30)), True, "shared_bplus", 4, 6),
    (sj.Query(sj.less("x") & sj.greater("y"), window=sj.CountWindow(60)), False, "spo", 8, 60),
    (self_join(sj.less_equal("x", "y") & sj.not_equal("y"), sj.TimeWindow(8)), True, "spo", 4, 9),
    (sj.Query(sj.band("x", 2, "y") & sj.not_equal("x"), sj.CountWindow(40)), False, "grid", 8, 60),
    (sj.Query(sj.less("x") & sj.greater("y"), window=sj.CountWindow(60)), False, "spo_tree", 8, 60),
    (self_join(sj.greater("x") & sj.less("y"), sj.TimeWindow(8)), True, "spo_tree", 4, 9),
]


#: Layouts whose first scenario runs on Ray in the default run: several ports into one core,
#: a cycle (end of stream by the driver), threads in an actor (over wide and compact T_S
#: items: the state an actor builds differs; one of them pipelined), and a mutable/immutable
#: split whose workers pass batches on and combine pairs along trees (reports of their own
#: type). The rest run the same logic objects and meet Ray in the failure and security tests
#: (``spo`` with direct workers in the filters' test); ``-m slow`` runs every
#: layout's first scenario on Ray.
RAY_DEFAULT = {"grid", "handshake_ll", "shared", "shared_compact", "spo_tree"}


def _cases() -> list:
    """Every (backend, scenario); on Ray only a layout's first scenario, in the default run
    for :data:`RAY_DEFAULT`, otherwise slow."""
    cases, on_ray = [], set()
    for backend in sj.runtime.BACKENDS:
        for scenario in SCENARIOS:
            layout = scenario[2]
            marks = ()
            if backend == "ray":
                if layout in on_ray or layout not in RAY_DEFAULT:
                    marks = (pytest.mark.slow,)
                on_ray.add(layout)
            cases.append(pytest.param(backend, *scenario, marks=marks))
    return cases


@pytest.mark.parametrize(
    ("backend", "query", "one_stream", "layout", "batch_size", "high"), _cases()
)
def test_backend_equals_oracle(request, backend, query, one_stream, layout, batch_size, high):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    data = sj.sources.synthetic(
        600, low=0, high=high, attrs=("x", "y"), self_join=one_stream, seed=batch_size
    )
    expected = sj.oracle.join(query, data)
    assert len(expected) > 0
    res = sj.run(query, data, LAYOUTS[layout](), backend=backend, batch_size=batch_size)
    assert res.same_pairs(expected)
    assert res.metrics["backend"] == backend
    cores = [
        a
        for a in res.metrics["actors"].values()
        if a["role"]
        in ("join_core", "manager", "handshake_core", "handshake_ll_core", "spo_mutable")
    ]
    assert sum(a["tuples_in"] for a in cores) >= 600
    assert np.all(res.pairs.column("latency_ns").to_numpy() >= 0)


def test_ray_actor_failure_names_the_actor(ray_session):
    from faults import inject  # (imports Ray)

    from streamjoin.runtime.ray.executor import ActorFailed

    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(5))
    data = sj.sources.synthetic(100, low=0, high=10, seed=1)
    topology = inject(sj.topologies.single("bplus_tree"), "core", fault="raise")
    with pytest.raises(ActorFailed, match="actor 'core' \\(join_core\\) failed: RuntimeError"):
        sj.run(q, data, topology, backend="ray")


class DecreasingAcrossChunks(sj.sources.Source):
    """R's ts goes back from 5 to 4 at row 3, in the second chunk; a third chunk waits."""

    closed = False

    def __iter__(self):
        try:
            yield {"stream": np.array([0, 1]), "ts": np.array([5, 6]), "x": np.array([1.0, 1])}
            yield {"stream": np.array([1, 0]), "ts": np.array([7, 4]), "x": np.array([1.0, 1])}
            yield {"stream": np.array([0]), "ts": np.array([9]), "x": np.array([1.0])}
        finally:
            self.closed = True


def test_decreasing_ts_across_chunks_is_the_same_input_error_on_every_backend(backend):
    """Checked in the run's pipeline before any executor sees the chunk (on Ray the emitter's
    own check would surface as ActorFailed), so ``except sj.InputError`` works everywhere."""
    q = sj.Query(sj.band("x", 1), window=sj.TimeWindow(5))
    source = DecreasingAcrossChunks()
    message = (
        r"^column 'ts' decreases within stream R at row 3 \(5 then 4\); a time window needs "
        "non-decreasing ts per stream$"
    )
    with pytest.raises(sj.InputError, match=message):
        sj.run(q, source, backend=backend)
    assert source.closed  # the source is let go at once, not left to the garbage collector


def test_source_failing_mid_run_on_ray_returns_nothing(ray_session):
    class Failing(sj.sources.Source):
        def __iter__(self):
            yield {"stream": np.array([0, 1, 0]), "ts": np.arange(3), "x": np.ones(3)}
            raise ConnectionResetError("peer went away")

    q = sj.Query(sj.band("x", 1), window=sj.TimeWindow(5))
    with pytest.raises(sj.sources.SourceError, match="after 3 rows: ConnectionResetError") as e:
        sj.run(q, Failing(), backend="ray", batch_size=1)
    assert isinstance(e.value.__cause__, ConnectionResetError)


def test_a_paced_runs_steps_say_when_they_began_and_ended_after_the_tuples_arrival(backend):
    """Each batch goes along emitter → core → collector: every actor's steps began and ended
    after the newest tuple they handled arrived, each no earlier than the one before it on
    the path, and the collector's begin at about the latency its pairs are stamped with (a
    median over steps, not over pairs)."""
    q = sj.Query(sj.band("x", 5), window=sj.CountWindow(200))
    data = sj.sources.synthetic(4000, low=0, high=20_000, seed=3)
    kw = {"pace": 20_000} if backend != "sim" else {"arrival": Arrival.constant(2e4)}
    res = sj.run(
        q,
        data,
        sj.topologies.single(),
        backend=backend,
        batch_size=100,
        chunk_rows=100,
        max_delay=0.0,
        progress=False,
        **kw,
    )
    lag = {a: v["lag_ms"] for a, v in res.metrics["actors"].items()}
    assert lag["emitter"]["steps"] == 40
    # a step a batch; on Ray a core that fell behind (a busy host) merges the batches waiting
    assert lag["core"]["steps"] == 40 if backend != "ray" else 0 < lag["core"]["steps"] <= 40
    path = [lag[a][k] for a in ("emitter", "core", "collector") for k in ("start_p50", "end_p50")]
    assert path[0] == 0 and path == sorted(path)
    # a step's CPU is within its wall time (the thread's, on local and Ray)
    assert 0 < lag["core"]["cpu_p50"] <= 1.25 * lag["core"]["step_p50"]
    assert lag["core"]["step_p50"] <= lag["core"]["end_p50"]
    # how long a step's thread waited for a processor: Ray's hosts count it (Linux)
    assert ("wait_mean" in lag["core"]) == (backend == "ray")
    assert lag["core"].get("wait_mean", 0) >= 0
    # a step stamps its pairs at one time against one chunk's arrival: one latency a step
    # (a median over pairs leans to the steps with many pairs: 15% off on a busy host)
    per_step = np.unique(res.latency_ns())
    start, latency = lag["collector"]["start_p50"], np.median(per_step) / 1e6
    if lag["core"]["steps"] == 40:
        assert start == pytest.approx(latency, rel=0.1)
    else:  # a merged step's older batch waited a batch's interval (5 ms) longer
        assert 0.9 * latency - 5 <= start <= 1.1 * latency
