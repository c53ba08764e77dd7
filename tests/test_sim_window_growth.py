"""What a join core's steps cost more past the windows its profile was fitted on: a profile's
``WindowCosts`` (interpolated in the items held, stored in JSON, scaled), charged to every
join actor that holds window parts or a shared core's windows by what it holds after the
step (a shared core's with the tasks that probe and insert), a warning where a core
outgrows the fitted windows without them, and the measurement that calibration runs."""

import dataclasses
import math
import warnings

import numpy as np
import pyarrow as pa
import pytest

import streamjoin as sj
from streamjoin.actors.join_core import JoinCore
from streamjoin.actors.panjoin import PanJoinWorker
from streamjoin.actors.shared_index.core import SharedIndexCore
from streamjoin.actors.shared_index.kernels import W_INSERTED, W_PROBES
from streamjoin.runtime import sim
from streamjoin.runtime.sim import window_growth
from streamjoin.runtime.sim.costs import CostModel, _WindowGrowth
from streamjoin.runtime.sim.profile import FITTED_HELD

#: 1,000 ns more a probe and 800 a stored tuple (400 at its insert, 400 at its expiry) from
#: two items held on: a charge one can count by hand
FLAT = sim.WindowCosts(((1, 0, 0), (2, 1_000, 800)))


def _profile(**windows) -> sim.MachineProfile:
    """The shipped profile without after-idle costs, with ``windows``."""
    p = sim.default_profile().with_after_idle(sim.IdleCosts())
    return dataclasses.replace(p, windows=windows)


def test_window_costs_are_interpolated_in_the_log_of_the_items_held(tmp_path):
    costs = sim.WindowCosts(((2**15, 0, 0), (2**17, 100, 400), (2**21, 300, 1_200)))
    assert costs.at(2**14) == (0.0, 0.0) and costs.at(2**15) == (0.0, 0.0)
    assert costs.at(2**16) == pytest.approx((50, 200))  # halfway in log2(held)
    assert costs.at(2**19) == pytest.approx((200, 800))
    assert costs.at(2**17) == (100, 400) and costs.at(2**30) == (300, 1_200)
    assert costs.charge(2**17, probes=3, stored=2) == pytest.approx(3 * 100 + 2 * 400 / 2)
    assert costs.charge(2**30, probes=0, stored=0) == 0.0
    assert costs.scaled(2.0).at(2**21) == (150, 600)
    p = _profile(bplus_tree=costs)
    p.save(tmp_path / "m.json")
    again = sim.MachineProfile.load(tmp_path / "m.json")
    assert again.windows == p.windows and again.to_dict() == p.to_dict()
    assert p.scaled(cpu=2.0).windows["bplus_tree"] == costs.scaled(2.0)
    assert "past the fitted windows, bplus_tree" in p.summary()
    assert sim.default_profile().windows == {}  # the shipped one has none
    for bad in ([(2, 0, 0), (1, 0, 0)], [(1, -1, 0)], [(0, 0, 0)], [(1, 2)], "points"):
        with pytest.raises(ValueError, match="window costs must be"):
            sim.WindowCosts(bad)
    with pytest.raises(ValueError, match="bad 'windows' in machine profile"):
        sim.MachineProfile.from_dict({"windows": {"hash": [[2, 1, 0], [1, 1, 0]]}})


def test_a_core_is_charged_its_window_costs_by_the_items_it_holds():
    """Step by step on a join core: 1,000 ns a probe and 400 a tuple inserted or expired
    more (``FLAT``), from the first item held; nothing for an index without costs."""
    window = 64
    query = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(window))
    core = JoinCore(query, "bplus_tree")
    grown = CostModel(_profile(bplus_tree=FLAT)).bind(core)
    plain = CostModel(_profile()).bind(core)
    other = CostModel(_profile(hash=FLAT)).bind(core)
    feed = window_growth._Feed(query, 4 * window, np.random.default_rng(1), batch=32)
    names = core.COUNTERS
    charged = 0
    for k in range(12):
        before = core.counters()
        core.on_batch("in", feed.batch(store=k % 3 != 2))
        after = core.counters()
        d = dict(zip(names, np.subtract(after, before), strict=True))
        stored = min(feed.count // 2, window)  # a stream's tuples in the window
        if k % 3 == 2:  # a batch that only probes stores and expires nothing
            assert d["inserted"] == d["expired"] == 0 and d["probes"] > 0
        assert core.held_items() == 2 * stored
        extra = grown("batch", None, before, after, 0) - plain("batch", None, before, after, 0)
        assert extra == pytest.approx(1_000 * d["probes"] + 400 * (d["inserted"] + d["expired"]))
        assert other("batch", None, before, after, 0) == plain("batch", None, before, after, 0)
        charged += extra
    assert charged > 0 and core.work.expired > 0  # the window filled, and tuples expired


@pytest.mark.parametrize(
    ("topo", "grown"),
    [
        (sj.topologies.single("bplus_tree"), ("core",)),
        (sj.topologies.split(2, "bplus_tree"), ("core0", "core1")),
        (sj.topologies.grid(2, 2, "bplus_tree"), ("core0_0", "core1_1")),
        (sj.topologies.handshake(2, "bplus_tree"), ("core0", "core1")),
        (sj.topologies.panjoin(2, 4, "bplus_tree"), ("worker0", "worker1")),  # subwindows
        (sj.topologies.shared_index(2, "bplus_tree"), ("core",)),  # its index's plain costs
    ],
    ids=["single", "split", "grid", "handshake", "panjoin", "shared_index"],
)
def test_a_layouts_join_cores_are_charged_for_their_windows(topo, grown):
    """The simulated run stays exact and deterministic; the cores that hold window parts
    (or subwindows, or a shared core's windows) are charged more with window costs, the
    emitter the same."""
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(256))
    data = sj.sources.synthetic(3_000, low=0, high=3_000, seed=1)
    kw = {"backend": "sim", "batch_size": 64, "arrival": sim.Arrival.constant(2e4)}
    base = sj.run(q, data, topo, machine=_profile(), **kw)
    runs = [sj.run(q, data, topo, machine=_profile(bplus_tree=FLAT), **kw) for _ in range(2)]
    assert runs[0].same_pairs(sj.oracle.join(q, data))
    virtual = [
        {n: {k: v for k, v in a.items() if k != "compute_wall_ns"} for n, a in actors.items()}
        for actors in (r.metrics["actors"] for r in runs)
    ]
    assert virtual[0] == virtual[1]  # deterministic (but for the host's own step times)
    before, after = base.metrics["actors"], runs[0].metrics["actors"]
    assert after["emitter"]["step_cpu_s"] == pytest.approx(before["emitter"]["step_cpu_s"])
    for name, actor in after.items():
        if actor["role"] in ("emitter", "collector", "manager"):
            continue
        more = actor["step_cpu_s"] - before[name]["step_cpu_s"]
        if name in grown or (grown and actor["role"] == "join_core"):
            assert more > 1e-3 * before[name]["step_cpu_s"], name
        else:
            assert more == pytest.approx(0.0, abs=1e-12), name


@pytest.mark.parametrize(("index", "charged"), [("bplus_tree", True), ("bisort", False)])
def test_a_panjoin_worker_is_charged_by_all_its_subwindows_hold_but_over_subwindow_indexes(
    index, charged
):
    """A tree's probe of a subwindow is charged at all the worker holds; an index with
    subwindows of its own (its probe searches as many runs as its sizing makes) not, with
    the warning a core without window costs gets once it outgrows the fitted windows."""
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(256))
    worker = PanJoinWorker(q, index)
    assert worker.held_items() == 0 and worker.window_costs_apply == charged
    worker.held_items = lambda: 2 * FITTED_HELD + 1  # type: ignore[method-assign]
    growth = CostModel(_profile(**{index: FLAT}))._window_growth(worker)
    assert isinstance(growth, _WindowGrowth) == charged
    counters = worker.counters()
    if charged:
        assert growth(counters, counters) == 0.0  # nothing probed or stored
        return
    with pytest.warns(UserWarning, match=f"'{index}:panjoin', and a core holds") as caught:
        assert growth(counters, counters) == 0.0
        assert growth(counters, counters) == 0.0  # once
    assert len(caught) == 1 and "no calibration measures them for this actor" in str(
        caught[0].message
    )


@pytest.mark.parametrize("windows", ["bplus_tree", "shared:bplus_tree"])
def test_a_shared_core_charges_its_window_costs_with_the_tasks_that_incur_them(windows):
    """A shared-index core's probes and inserts cost ``FLAT`` more in the tasks that make
    them (its threads share those), its expiries in the step's serial part; its cost key's
    window costs, else its index's in a plain core."""
    window = 64
    query = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(window))
    core = SharedIndexCore(query, "bplus_tree", threads=1)
    grown = CostModel(_profile(**{windows: FLAT})).bind_tasks(core)
    plain = CostModel(_profile()).bind_tasks(core)
    feed = window_growth._Feed(query, 4 * window, np.random.default_rng(2), batch=32)
    for _ in range(10):
        before = core.counters()
        core.on_batch("in", feed.batch())
        after = core.counters()
        d = dict(zip(core.COUNTERS, np.subtract(after, before), strict=True))
        tasks = core.last_tasks
        assert tasks[:, W_PROBES].sum() == d["probes"] > 0  # every task of the step is here
        (serial, per_task), (serial0, per_task0) = (
            f("batch", None, before, after, 0) for f in (grown, plain)
        )
        more = 1_000 * tasks[:, W_PROBES] + 400 * tasks[:, W_INSERTED]
        assert np.subtract(per_task, per_task0) == pytest.approx(more)
        assert serial - serial0 == pytest.approx(400 * d["expired"], abs=1e-6)
    assert core.work.expired > 0
    core.close()


def test_a_core_outgrowing_the_fitted_windows_without_window_costs_warns_once():
    big = FITTED_HELD  # a stream's window: a core holds 2 * FITTED_HELD items when full
    q = sj.Query(sj.equal("x"), window=sj.CountWindow(big + 512))
    data = sj.sources.synthetic(2 * big + 3_000, low=0, high=big, seed=1)
    kw = {"backend": "sim", "batch_size": 1024, "collect": "count"}
    with pytest.warns(UserWarning, match="no costs for windows past") as caught:
        sj.run(q, data, sj.topologies.single("hash"), machine=_profile(), **kw)
    assert sum("no costs for windows past" in str(w.message) for w in caught) == 1
    assert "'hash'" in str(caught[0].message) and "streamjoin calibrate" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # with window costs, or a window within, none
        sj.run(q, data, sj.topologies.single("hash"), machine=_profile(hash=FLAT), **kw)
        small = sj.Query(sj.equal("x"), window=sj.CountWindow(big))
        sj.run(small, data, sj.topologies.single("hash"), machine=_profile(), **kw)


def test_the_measurements_feed_is_a_join_input_the_oracle_agrees_with():
    """The batches the measurement times join as the oracle says (so it times a join's
    real work): those that store, read as one input; those that only probe join the window
    as it stands."""
    window = 100
    query = sj.Query(sj.band("x", 2), window=sj.CountWindow(window))
    feed = window_growth._Feed(query, 300, np.random.default_rng(3), batch=24)
    core = JoinCore(query, "bplus_tree")
    stored, pairs = [], []
    for k in range(30):
        batch = feed.batch(store=k % 4 != 3)
        out = core.on_batch("in", batch)
        if batch.store:
            stored.append(batch)
            pairs += [(r, s) for _, p in out for r, s in zip(p.r, p.s, strict=True)]
    streams = np.concatenate([b.stream for b in stored])
    x = np.concatenate([b.attrs[0] for b in stored]).astype(np.int64)  # integer keys
    table = pa.table({"stream": streams, "ts": np.zeros(len(x), dtype=np.int64), "x": x})
    expected = sj.oracle.join(query, table)
    assert sorted(pairs) == sorted(
        zip(expected["r"].to_pylist(), expected["s"].to_pylist(), strict=True)
    )
    assert len(pairs) > 0


def test_window_growth_is_measured_past_the_largest_fitted_window():
    """A measurement over one larger window: the first point is the fitted windows' (zero),
    the next at the items the core held; with nothing charged (no coefficients) the steps'
    whole time is residual, a probe's and a stored tuple's positive."""
    costs = sim.measure_window_growth("hash", {}, windows=(2**15,), seconds=0.2)
    (h0, p0, s0), (h1, p1, s1) = costs.points
    assert (h0, p0, s0) == (FITTED_HELD, 0.0, 0.0) and h1 == 2**16
    assert p1 >= 0 and s1 >= 0 and math.isfinite(p1 + s1)
    core = window_growth._Core("hash", {}, 2**10, seed=0)
    while len(core.store_rows) < window_growth.PROBES:
        core.turn(window_growth.PROBES)
    per_probe, per_stored = core.residuals()
    assert per_probe > 0 and per_stored > 0
    assert not window_growth.measurable("nested_loop") and not window_growth.measurable("po_join")
