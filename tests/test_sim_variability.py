"""The simulator's spread of steps and messages (``streamjoin.runtime.sim.variability``):
tables measured as quantiles, factors drawn from them per core, exact results and
deterministic metrics with it, and latencies that spread as a real host's do."""

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from layouts import LAYOUTS
from strategies import predicates, tables, windows

import streamjoin as sj
from streamjoin.runtime import sim
from streamjoin.runtime.sim.profile import MachineProfile
from streamjoin.runtime.sim.variability import (
    PROBABILITIES,
    Draws,
    Variability,
    spread_table,
    table_mean,
)


def _skewed(n: int = 4000, seed: int = 0) -> np.ndarray:
    """Samples with a long right tail, as a host's step times have."""
    return np.random.default_rng(seed).lognormal(0.0, 0.3, n)


#: A spread of both kinds, wider than a quiet host's, so its effects show on small runs.
WIDE = Variability(
    step=spread_table(_skewed(seed=1), mean_one=True),
    message=spread_table(_skewed(seed=2) ** 2, mean_one=False),
)


def test_spread_tables_are_quantiles_over_the_mean_or_the_median():
    x = _skewed()
    by_median = spread_table(x, mean_one=False)
    assert len(by_median) == len(PROBABILITIES)
    assert by_median[PROBABILITIES.index(0.5)] == pytest.approx(1.0, abs=1e-4)
    np.testing.assert_allclose(by_median, np.quantile(x, PROBABILITIES) / np.median(x), atol=1e-4)
    by_mean = spread_table(x, mean_one=True)
    assert table_mean(by_mean) == pytest.approx(1.0, abs=1e-3)
    assert all(b >= a for a, b in zip(by_mean, by_mean[1:], strict=False))
    # the shape is the same: one table is the other scaled
    np.testing.assert_allclose(np.array(by_mean) / by_mean[8], by_median, rtol=1e-3)
    assert table_mean(by_median) > 1.0  # a right tail: the mean lies above the median
    assert spread_table(x[:19], mean_one=True) == ()  # too few to say
    assert spread_table(np.zeros(50), mean_one=False) == ()


def test_bad_variability_is_refused_naming_the_problem():
    good = spread_table(_skewed(), mean_one=True)
    with pytest.raises(ValueError, match="must hold 17 quantiles"):
        Variability(step=good[:5])
    with pytest.raises(ValueError, match="non-decreasing"):
        Variability(message=good[::-1])
    with pytest.raises(ValueError, match="finite factors >= 0"):
        Variability(step=(-1.0, *good[1:]))
    with pytest.raises(ValueError, match="seed"):
        Variability(step=good, seed=-1)
    with pytest.raises(ValueError, match="seed"):
        Variability(step=good, seed=1.5)
    assert Variability(step=good, seed=np.int64(3)).to_dict()["seed"] == 3  # JSON-ready
    d = sim.default_profile().to_dict()
    d["variability"] = {"step": [1.0, 2.0]}
    with pytest.raises(ValueError, match="bad 'variability' in machine profile"):
        MachineProfile.from_dict(d)
    d["variability"] = {"steps": list(good)}
    with pytest.raises(ValueError, match="bad 'variability'"):
        MachineProfile.from_dict(d)


def test_a_cores_draws_follow_the_table_and_depend_on_its_name_and_the_seed():
    draws = Draws(WIDE, "core0")
    steps = np.array([draws.step() for _ in range(20_000)])
    inner = [i for i, p in enumerate(PROBABILITIES) if 0.05 <= p <= 0.95]
    np.testing.assert_allclose(
        np.quantile(steps, [PROBABILITIES[i] for i in inner]),
        [WIDE.step[i] for i in inner],
        rtol=0.03,
    )
    assert steps.mean() == pytest.approx(1.0, abs=0.01)
    again = Draws(WIDE, "core0")
    assert [again.step() for _ in range(50)] == steps[:50].tolist()
    other = Draws(WIDE, "core1")
    assert [other.step() for _ in range(50)] != steps[:50].tolist()
    reseeded = Draws(Variability(step=WIDE.step, seed=1), "core0")
    assert [reseeded.step() for _ in range(50)] != steps[:50].tolist()
    # a core's messages draw from a stream of their own: its steps' draws stay the same
    mixed = Draws(WIDE, "core0")
    first = [(mixed.step(), mixed.message())[0] for _ in range(50)]
    assert first == steps[:50].tolist()
    none = Draws(Variability(), "core0")
    assert {none.step() for _ in range(10)} == {1.0} and none.message() == 1.0
    assert not Variability() and WIDE


def test_variability_in_json_and_the_summary(tmp_path):
    p = sim.default_profile().with_variability(WIDE)
    p.save(tmp_path / "p.json")
    back = sim.MachineProfile.load(tmp_path / "p.json")
    assert back.variability == WIDE
    assert "spread: step p10/p50/p90/p99" in back.summary()
    # other variants keep it; the shipped profile has none
    assert back.scaled(cpu=2.0).with_cpus(2).variability == WIDE
    assert not sim.default_profile().variability
    assert "spread" not in sim.default_profile().summary()


@pytest.mark.parametrize("layout", ["single", "grid", "handshake", "shared", "spo"])
@settings(max_examples=examples(10), deadline=None)
@given(data=st.data())
def test_sim_with_variability_equals_oracle(layout, data):
    """Steps and messages of random lengths (a message's way at up to about 10 times its
    median): every link stays FIFO and the pairs are the join's."""
    topo = LAYOUTS[layout]()
    table = data.draw(tables(False, max_rows=70))
    query = sj.Query(data.draw(predicates()), window=data.draw(windows()))
    seed = data.draw(st.integers(0, 3))
    machine = sim.default_profile().with_variability(
        Variability(step=WIDE.step, message=WIDE.message, seed=seed)
    )
    expected = sj.oracle.join(query, table)
    for batch_size in (1, 7):
        res = sj.run(
            query,
            table,
            topo,
            batch_size=batch_size,
            backend="sim",
            machine=machine,
            arrival=sim.Arrival.constant(5_000),
        )
        assert res.same_pairs(expected), f"{topo.name}, batch {batch_size}, seed {seed}"
        assert np.all(res.pairs.column("latency_ns").to_numpy() >= 0)


def _paced(machine, seed: int = 0):
    """A paced band join on one core, far below what it sustains: every chunk waits for
    nothing but its own steps and messages."""
    query = sj.Query(sj.band("x", 3), window=sj.CountWindow(200))
    data = sj.sources.synthetic(4_000, low=0, high=4_000, seed=seed)
    res = sj.run(
        query,
        data,
        sj.topologies.single("bplus_tree"),
        batch_size=20,
        chunk_rows=20,
        collect="pairs",
        backend="sim",
        machine=machine,
        arrival=sim.Arrival.constant(2_000),
        max_delay=0.0,
    )
    return res


def test_a_spread_spreads_latencies_keeps_the_compute_and_stays_deterministic():
    base = sim.default_profile()
    flat, spread = _paced(base), _paced(base.with_variability(WIDE))
    flat_ms, spread_ms = flat.metrics["latency_ms"], spread.metrics["latency_ms"]
    assert flat.same_pairs(spread.pairs)
    # without a spread the chunks' latencies hardly vary (only by the steps' work); with it
    # the tail moves out, the median little
    assert spread_ms["p99"] - spread_ms["p50"] > 3 * (flat_ms["p99"] - flat_ms["p50"])
    assert spread_ms["p50"] == pytest.approx(flat_ms["p50"], rel=0.15)
    # the step table has mean 1: the compute charged over 200 steps stays about the same
    core = [
        a["step_cpu_s"] for a in (flat.metrics["actors"]["core"], spread.metrics["actors"]["core"])
    ]
    assert core[1] == pytest.approx(core[0], rel=0.05)
    # the same profile, the same figures; another seed, others
    again = _paced(base.with_variability(WIDE))
    np.testing.assert_array_equal(again.latency_ns(), spread.latency_ns())
    assert again.metrics["latency_ms"] == spread_ms
    reseeded = _paced(base.with_variability(Variability(WIDE.step, WIDE.message, seed=5)))
    assert reseeded.metrics["latency_ms"] != spread_ms


def test_message_spread_alone_lengthens_the_mean_way():
    """The message table is over the median: its right tail makes the mean latency longer,
    while the steps' compute is charged as without it."""
    base = sim.default_profile()
    flat = _paced(base)
    only = _paced(base.with_variability(Variability(message=WIDE.message)))
    assert only.metrics["latency_ms"]["mean"] > flat.metrics["latency_ms"]["mean"]
    assert (
        only.metrics["actors"]["core"]["step_cpu_s"] == flat.metrics["actors"]["core"]["step_cpu_s"]
    )
