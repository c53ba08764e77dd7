"""This host's machine profile: stored by ``calibrate`` under a fingerprint of the host, used
by ``Sim()`` when it is given none, the shipped one (with a warning naming the command)
otherwise; a calibration on a busy host refused unless forced; ``calibrate --check``."""

import dataclasses
import importlib
import itertools
import json
import math
import os
import time
import warnings

import numpy as np
import pytest

import streamjoin as sj
from streamjoin import cli
from streamjoin.runtime import sim
from streamjoin.runtime.sim import fidelity, host_profile

#: the module (``sim.calibrate`` is its function)
calibrate_module = importlib.import_module("streamjoin.runtime.sim.calibrate")

QUERY = sj.Query(sj.band("x", 2), window=sj.CountWindow(30))
DATA = sj.sources.synthetic(300, low=0, high=200, seed=3)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty profile cache of this test's own, no profile forced by the environment."""
    monkeypatch.setenv(host_profile.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(host_profile.PROFILE_ENV, raising=False)
    return tmp_path / "cache" / "profiles"


def _costly() -> sim.MachineProfile:
    """The shipped profile with every compute cost doubled: runs slower than the shipped."""
    return sim.default_profile().scaled(cpu=0.5)


def test_fingerprint_names_the_host_and_versions():
    fp = sim.fingerprint()
    assert set(fp) == {"cpu", "cpus", "python", "numba", "ray", "streamjoin"}
    assert fp["cpus"] >= 1 and fp["cpu"]
    other = fp | {"numba": "0.0.1"}
    assert host_profile.fingerprint_key(fp) != host_profile.fingerprint_key(other)
    assert host_profile.fingerprint_key(fp) == host_profile.fingerprint_key(dict(fp))


def test_sim_without_a_cached_profile_warns_and_runs_the_shipped_one(cache):
    with pytest.warns(
        UserWarning, match="no machine profile fitted on this host.*streamjoin calibrate"
    ):
        res = sj.run(QUERY, DATA, backend="sim")
    assert res.same_pairs(sj.oracle.join(QUERY, DATA))
    assert res.metrics["machine_profile"]["source"] == "shipped"


def test_sim_runs_this_hosts_cached_profile(cache):
    path = host_profile.store(_costly())
    assert path.parent == cache and path == sim.cached_profile_path()
    stored = json.loads(path.read_text())
    assert stored["info"]["fingerprint"] == sim.fingerprint()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a cached profile: no warning
        res = sj.run(QUERY, DATA, backend="sim")
    shipped = sj.run(QUERY, DATA, backend="sim", machine=sim.default_profile())
    assert res.same_pairs(shipped)
    assert res.metrics["machine_profile"]["source"] == f"this host's cache {path}"
    # the cached profile's doubled compute costs, not the shipped ones, were charged (its
    # messages cost the same)
    busy = res.metrics["actors"]["core"]["busy_s"]
    assert busy > 1.3 * shipped.metrics["actors"]["core"]["busy_s"]


def test_a_profile_of_another_fingerprint_is_not_used(cache):
    host_profile.store(_costly(), sim.fingerprint() | {"cpus": 4096})
    with pytest.warns(UserWarning, match="no machine profile fitted on this host"):
        assert sim.profile_for_this_host().source == "shipped"


def test_the_environment_chooses_the_profile(cache, tmp_path, monkeypatch):
    host_profile.store(_costly())
    monkeypatch.setenv(host_profile.PROFILE_ENV, "shipped")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sim.profile_for_this_host().source == "shipped"
    path = tmp_path / "mine.json"
    _costly().save(path)
    monkeypatch.setenv(host_profile.PROFILE_ENV, str(path))
    assert sim.profile_for_this_host().source.startswith(f"file {path}")


def test_a_damaged_cache_file_falls_back_loudly(cache):
    cache.mkdir(parents=True)
    sim.cached_profile_path().write_text("{not json")
    with pytest.warns(UserWarning, match="unreadable"):
        assert sim.profile_for_this_host().source == "shipped"


def test_busy_reasons():
    assert sim.busy_reasons(0.3, 0.0, 1.0, 2) == []
    assert sim.busy_reasons(float("nan"), float("nan"), float("nan"), 2) == []
    reasons = sim.busy_reasons(3.5, 0.2, 0.5, 2)
    assert len(reasons) == 3
    assert "load average 3.50" in reasons[0] and "20%" in reasons[1] and "50%" in reasons[2]
    assert sim.busy_reasons(2.0, 0.0, 1.0, 2) == []  # the calibration's own process and 1 more


def _quick_kw():
    return {
        "indexes": ["hash"],
        "quick": True,
        "ray": False,
        "idle_gap_s": None,
        "window_growth": False,
    }


@pytest.fixture
def small_fit(monkeypatch):
    """A quick fit of each index's first few workloads: for the tests of what a fit stores and
    when, not of its coefficients (a quick fit of one index took 3.6 s here, this one 1.5)."""
    real = calibrate_module._calibration_runs
    monkeypatch.setattr(
        calibrate_module,
        "_calibration_runs",
        lambda index, quick, seed: itertools.islice(real(index, quick, seed), 8),
    )


def test_a_busy_calibration_stores_nothing_unless_forced(cache, tmp_path, monkeypatch, small_fit):
    monkeypatch.setattr(calibrate_module, "busy_reasons", lambda *a: ["load average 9.00"])
    out = tmp_path / "m.json"
    with pytest.raises(calibrate_module.BusyHostError, match="load average 9.00") as e:
        sim.calibrate(out, **_quick_kw())
    assert not out.exists() and not cache.exists()
    assert e.value.profile.info["conditions"]["busy"] == ["load average 9.00"]
    prof = sim.calibrate(out, force=True, **_quick_kw())
    assert out.exists() and prof.info["conditions"]["forced"] is True
    assert not cache.exists()  # one index measured: never stored as this host's


def test_the_ray_phases_own_load_does_not_make_the_host_busy(
    cache, tmp_path, monkeypatch, small_fit
):
    """The end load is read before Ray's phase, whose own processes raise it: a load that
    rises only there is not the host's, one already high before it is."""
    from streamjoin.runtime.sim import ray_messages

    load = [0.5]
    monkeypatch.setattr(calibrate_module.os, "getloadavg", lambda: (load[0], 0.0, 0.0))
    # only the load is under test: the steal and the busy process's share this host reads
    # (another test process may hold the second processor) are taken as a quiet host's
    real = calibrate_module.busy_reasons
    quiet = lambda load, steal, share, cpus: real(load, 0.0, 1.0, cpus)  # noqa: E731
    monkeypatch.setattr(calibrate_module, "busy_reasons", quiet)

    def messages():  # Ray's processes: the load past the limit on two processors
        load[0] = 9.0
        return sim.default_profile().messages, {"spread": {"step": (), "message": ()}}

    monkeypatch.setattr(ray_messages, "measure_messages", messages)
    kw = {**_quick_kw(), "ray": True}
    prof = sim.calibrate(tmp_path / "m.json", **kw)
    assert prof.info["conditions"]["busy"] == []
    assert prof.info["conditions"]["load_1min_start_end"] == [0.5, 0.5]
    load[0] = 3.5  # busy before Ray's phase began: refused
    with pytest.raises(calibrate_module.BusyHostError, match="load average 3.50"):
        sim.calibrate(tmp_path / "m.json", **kw)


def test_a_full_calibration_is_stored_as_this_hosts(cache, monkeypatch, small_fit):
    """Every registered index measured: the profile becomes this host's (the kernel timings
    are stubbed to one cheap index, so the test stays fast)."""
    real = calibrate_module._calibration_runs
    monkeypatch.setattr(calibrate_module, "busy_reasons", lambda *a: [])
    monkeypatch.setattr(
        calibrate_module,
        "_calibration_runs",
        lambda index, quick, seed: real(index, quick, seed) if index == "hash" else iter(()),
    )
    prof = sim.calibrate(quick=True, ray=False, idle_gap_s=None, name="fitted-here", jobs=1)
    assert prof.source == f"this host's cache {sim.cached_profile_path()}"
    assert sim.profile_for_this_host().name == "fitted-here"
    assert prof.info["conditions"]["busy"] == [] and prof.info["conditions"]["seconds"] > 0


def test_cli_calibrate_refuses_a_busy_fit(cache, tmp_path, monkeypatch, capsys, small_fit):
    monkeypatch.setattr(calibrate_module, "busy_reasons", lambda *a: ["load average 9.00"])
    out = tmp_path / "m.json"
    args = ["calibrate", "--index", "hash", "--quick", "--no-ray", "--idle-gap-ms", "0"]
    args += ["--no-window-growth"]
    assert cli.main([*args, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "machine was busy" in err and "load average 9.00" in err and "--force" in err
    assert not out.exists()
    assert cli.main([*args, "-o", str(out), "--force"]) == 0
    printed = capsys.readouterr().out
    assert "stored anyway: --force" in printed and "not stored as this host's" in printed
    assert out.exists()


def test_worker_processes_time_the_indexes_at_once(monkeypatch):
    """With ``jobs=2`` each index's kernels are timed in a worker process of their own, and
    the fit numbers every workload once across them: each index's rows are fitted at its
    own probes' speed, as when they are timed one after another in this process."""
    monkeypatch.setattr(calibrate_module, "busy_reasons", lambda *a: [])
    seen = {}
    real = calibrate_module._at_probed_speed

    def spy(rows, by_run, reference):
        seen[id(rows)] = (rows, by_run)
        return real(rows, by_run, reference)

    monkeypatch.setattr(calibrate_module, "_at_probed_speed", spy)
    phases = []
    names = ["hash", "chained", "nested_loop"]
    prof = sim.calibrate(
        indexes=names,
        quick=True,
        ray=False,
        idle_gap_s=None,
        window_growth=False,
        jobs=2,
        progress=lambda phase, seconds: phases.append((phase, seconds)),
    )
    kernels = prof.info["fit"]["kernels"]
    assert kernels["jobs"] == 2 and list(kernels["seconds"]) == names
    assert set(prof.indexes) == {
        f"{i}{s}" for i in names for s in ("", ":panjoin", ":handshake", ":handshake_ll")
    } | {"shared:nested_loop"}
    by_run = next(iter(seen.values()))[1]
    counts = [int(p.split("(")[1].split()[0]) for p, _ in phases if " runs)" in p]
    # every workload once: the indexes', then the emitter's own
    assert sorted(by_run) == list(range(1, sum(counts) + 1))
    assert len(counts) == len(names) + 1 and counts[-1] == len(
        list(calibrate_module._route_runs(True, 0))
    )
    speed = prof.info["fit"]["speed"]["by_index"]
    start = 1
    for index, count in zip(names, counts[:-1], strict=True):
        assert {round(by_run[r]) for r in range(start, start + count)} == {speed[index]}
        start += count
    for rows, _ in seen.values():  # the rows of each workload of an index
        assert {r for _, _, r in rows} <= set(by_run)
    assert [p for p, _ in phases][-3:] == [
        "kernels (2 indexes at once)",
        f"the emitter's routes ({counts[-1]} runs)",
        "the fit",
    ]
    assert "kernels (2 indexes at once)" in prof.info["conditions"]["phases"]


def test_a_worker_process_that_fails_ends_the_calibration_naming_it(monkeypatch):
    monkeypatch.setattr(calibrate_module, "measure_cpu_share", lambda **kw: ((1.0, 1.0), {}))
    monkeypatch.setattr(calibrate_module.sys, "executable", "/bin/false")  # exits at once
    with pytest.raises(RuntimeError, match="timing the kernels of index '(hash|chained)'") as e:
        sim.calibrate(indexes=["hash", "chained"], quick=True, ray=False, idle_gap_s=None, jobs=2)
    assert "exit code 1" in str(e.value.__cause__)
    with pytest.raises(ValueError, match="jobs=0"):
        sim.calibrate(indexes=["hash"], quick=True, ray=False, jobs=0)


def test_cli_check_options_are_checked_first(capsys):
    assert cli.main(["calibrate", "--check-only", "--layout", "mesh(9)"]) == 2
    assert "not a check layout" in capsys.readouterr().err
    assert cli.main(["calibrate", "--machine", "x.json"]) == 2
    assert "--machine goes with --check-only or --replay" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        cli.main(["calibrate", "--check-only", "--tuples", "5"])
    assert refused.value.code == 2 and "--tuples: must be an integer >= 1000" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit) as refused:
        cli.main(["calibrate", "--check-only", "--repeat", "0"])
    assert refused.value.code == 2 and "--repeat: must be an integer >= 1" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        cli.main(["calibrate", "--help"])
    assert f"default: {fidelity.CHECK_TUPLES:,}," in " ".join(capsys.readouterr().out.split())


def test_check_table_counts_the_layouts_within_bounds():
    row = fidelity.CheckRow("single", 1000.0, 1100.0, 250.0, 2.0, 2.2, 5.0, 4.0, (1.0,), 0.5)
    off = fidelity.CheckRow("grid(2, 2)", 1000.0, 2000.0, 250.0, 2.0, 1.0, 5.0, 4.0, (1.0,), 0.5)
    text = fidelity.table([row, off])
    assert "1.10" in text and "2.00" in text
    assert "within 0.80-1.25 on throughput and p50: 1 of 2 layouts (single)" in text
    # the p99 counted apart: a tail within on one row, far short on the other
    short_tail = dataclasses.replace(off, sim_p99_ms=2.0)
    assert "; p99 within on 1 of 2 (0.40-0.80)" in fidelity.table([row, short_tail])
    # the mean latency counted apart: within on the first row, not on a row without one
    means = dataclasses.replace(row, ray_mean_ms=3.0, sim_mean_ms=2.7)
    text = fidelity.table([means, row, off])
    assert "on throughput and mean latency: 1 of 3" in text
    assert "3.00    2.70   0.90" in text
    assert "| 3.00 | 2.70 | 0.90 |" in fidelity.markdown([means], sim.default_profile(), 1.0)
    # Ray's own run-to-run spread over its repeats, when measured
    assert "Ray's own runs" not in text
    spread = [
        dataclasses.replace(row, ray_tp_spread=1.1, ray_p50_spread=1.3),
        dataclasses.replace(off, ray_tp_spread=1.05, ray_p50_spread=1.2),
    ]
    line = "Ray's own runs (max / min over 3 a layout): throughput 1.05-1.10, p50 1.20-1.30"
    assert line in fidelity.table(spread)
    assert line in fidelity.markdown(spread, sim.default_profile(), 1.0)
    each = "each layout, max / min (throughput, p50): single 1.10, 1.30; grid(2, 2) 1.05, 1.20"
    assert each in fidelity.markdown(spread, sim.default_profile(), 1.0)
    assert "each layout, max / min" not in fidelity.markdown([row], sim.default_profile(), 1.0)
    assert fidelity._spread([2.0, 3.0, 2.5]) == 1.5


def test_the_first_layout_again_is_how_far_a_layout_moves_from_itself():
    row = fidelity.CheckRow("single", 1000.0, 1100.0, 250.0, 2.0, 2.2, 5.0, 4.0, (1.0,), 0.5)
    off = fidelity.CheckRow("grid(2, 2)", 1000.0, 2000.0, 250.0, 2.0, 1.0, 5.0, 4.0, (1.0,), 0.5)
    again = dataclasses.replace(
        row, layout="single, again", ray_tuples_per_s=800.0, sim_p50_ms=1.8, again=True
    )
    text = fidelity.table([row, off, again])
    # printed as a row, but not counted as a layout of its own
    assert "single, again" in text
    assert "within 0.80-1.25 on throughput and p50: 1 of 2 layouts (single)" in text
    assert "throughput ratios 1.10-2.00" in text
    line = (
        "Again at the end, single: sim / Ray throughput 1.10 then 1.38, p50 1.10 then 0.90 "
        "(a layout against itself minutes later: off by 25%; Ray's throughput 0.80x the first)"
    )
    assert line in text
    assert line in fidelity.markdown([row, off, again], sim.default_profile(), 1.0)
    assert "Again" not in fidelity.table([row, off])


def test_a_check_is_replayed_on_another_profile_without_ray(tmp_path, capsys):
    """A check's rows saved beside its report simulate again on any profile (``--replay``):
    Ray's figures as recorded, the simulator's the same as a fresh simulation at the pace,
    share and host speed recorded, the speed re-referred to the new profile's probe."""
    rows = [
        fidelity.CheckRow(name, 1e6, 1e6, 20_000.0, 3.0, 3.0, 5.0, 5.0, (1.0, 0.9), 0.5)
        for name in ("single", "grid(2, 2)")
    ]
    rows = [dataclasses.replace(r, tuples=20_000, drift=1.2) for r in rows]
    prof = sim.default_profile()
    prof = dataclasses.replace(prof, info={**prof.info, "speed_probe_ns": 100.0})
    path = tmp_path / "check.json"
    fidelity.save_rows(path, rows, prof)
    loaded, meta = fidelity.load_rows(path)
    assert fidelity.table(loaded) == fidelity.table(rows)
    assert (meta["cpus"], meta["reference_ns"]) == (os.cpu_count(), 100.0)
    new = fidelity.replay(loaded, prof, reference_ns=100.0, cpus=2)
    make, inequality = fidelity.CHECK_LAYOUTS["grid(2, 2)"]
    query, data = fidelity.workload(20_000, 2**13, inequality)
    machine = prof.with_cpus(2, (1.0, 0.9)).scaled(cpu=1 / 1.2)
    chunk = 200  # 10 ms of input at the pace
    flood, paced = fidelity._simulated(
        query, data, data.slice(0, 40_000), make(), machine, 1024, chunk, 20_000.0
    )
    assert new[1].sim_tuples_per_s == flood["tuples_per_s"]
    assert new[1].sim_p50_ms == paced["p50_ms"] and new[1].ray_p50_ms == 3.0
    # what the simulator charged for the kernel's delivery: none on the shipped profile
    assert new[1].sim_kernel_s == flood["kernel_s"] == 0.0
    kernel = prof.with_messages(dataclasses.replace(prof.messages, kernel_ns=5_000.0))
    charged = fidelity.replay(loaded, kernel, reference_ns=100.0, cpus=2)
    assert charged[1].sim_kernel_s > 0
    # a profile whose probe ran 1.2 times as long: the host was as fast as it
    slower = dataclasses.replace(prof, info={**prof.info, "speed_probe_ns": 120.0})
    same = fidelity.replay(loaded, slower, reference_ns=100.0, cpus=2)
    assert same[1].drift == pytest.approx(1.0)
    unscaled = fidelity.replay(loaded, prof, reference_ns=None, cpus=2)  # no probe: no drift
    assert same[1].sim_tuples_per_s == pytest.approx(unscaled[1].sim_tuples_per_s, rel=1e-6)
    shared = fidelity.replay(loaded, prof.with_cpus(None, sharing="ps"), reference_ns=100, cpus=2)
    assert shared[1].sim_tuples_per_s != new[1].sim_tuples_per_s
    # the command: another profile, processor sharing, a report and its rows
    prof.save(tmp_path / "prof.json")
    out = tmp_path / "again.md"
    argv = ["calibrate", "--replay", str(path), "--machine", str(tmp_path / "prof.json")]
    assert cli.main([*argv, "--sharing", "ps", "--layout", "grid(2, 2)", "--report", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "processor sharing" in printed and "grid(2, 2)" in printed and "single " not in printed
    assert "Replayed: Ray's figures are those of the check of" in out.read_text()
    again, meta = fidelity.load_rows(tmp_path / "again.json")
    assert meta["sharing"] == "ps" and [r.layout for r in again] == ["grid(2, 2)"]
    (tmp_path / "bad.json").write_text('{"rows": [{"layout": "single"}]}')
    assert cli.main(["calibrate", "--replay", str(tmp_path / "bad.json")]) == 2
    assert "bad.json: not the rows of a check" in capsys.readouterr().err
    broken = json.loads(path.read_text())
    broken["rows"][0]["pace"] = -5
    (tmp_path / "bad.json").write_text(json.dumps(broken))
    assert cli.main(["calibrate", "--replay", str(tmp_path / "bad.json")]) == 2
    assert "pace must be a" in capsys.readouterr().err
    assert cli.main(["calibrate", "--replay", str(path), "--layout", "spo(2)"]) == 2
    assert "no row of --layout ['spo(2)']" in capsys.readouterr().err
    assert cli.main(["calibrate", "--replay", str(path), "--check-only"]) == 2
    assert "--replay runs nothing on Ray" in capsys.readouterr().err
    assert cli.main(["calibrate", "--sharing", "ps"]) == 2
    assert "--sharing goes with --check" in capsys.readouterr().err


def test_check_report_names_the_profile_and_the_host():
    row = fidelity.CheckRow("single", 1000.0, 1100.0, 250.0, 2.0, 2.2, 5.0, 4.0, (1.0,), 0.5)
    prof = sim.default_profile()
    text = fidelity.markdown([row], prof, 90.0)
    assert "| single | 1,000 | 1,100 | 1.10 |" in text
    assert f"profile {prof.name!r} (shipped; fitted" in text and "1.5 minutes" in text
    assert f"Unpaced: {fidelity.CHECK_TUPLES:,} tuples" in text
    shorter = fidelity.markdown([dataclasses.replace(row, tuples=300_000)], prof, 90.0)
    assert "Unpaced: 300,000 tuples" in shorter
    assert "the median of 3 runs" in text
    more = fidelity.markdown([dataclasses.replace(row, repeats=7)], prof, 90.0)
    assert "the median of 7 runs" in more
    once = fidelity.markdown([dataclasses.replace(row, repeats=1)], prof, 90.0)
    assert "Ray's figures from one run," in once
    assert host_profile.cpu_model() in text
    # the spread of steps and messages the simulator drew from, or that it had none
    assert "; no spread);" in text
    spread = sim.Variability(step=(0.5,) * 8 + (1.0,) * 9)
    with_spread = fidelity.markdown([row], prof.with_variability(spread), 90.0)
    assert "spread: step p10/p50/p90/p99 0.50/1.00/1.00/1.00 (seed 0)" in with_spread


def test_check_report_shows_where_each_actors_time_went():
    """Per actor of each layout: Ray's busy and CPU seconds beside the simulator's busy
    seconds, and how much of the processors' time each fills (what a layout that misses needs
    explained)."""
    actors = (
        fidelity.ActorFigures("core0", 0.2, 0.26, 0.1, 0.16, 0.08),
        fidelity.ActorFigures("emitter", 0.012, None, 0.02),
    )
    row = fidelity.CheckRow(
        "handshake(2)", 1000.0, 1100.0, 250.0, 2.0, 2.2, 5.0, 4.0, (1.0,), 0.5, actors, 0.4, 0.25
    )
    text = fidelity.markdown([row], sim.default_profile(), 90.0)
    core0 = "| handshake(2) | core0 | 0.200 | 0.260 | 0.100 | 0.50 | 0.50 | 0.40 |"
    # messaging: Ray's process CPU beyond the steps (0.26 - 0.16) against the simulator's
    # busy time beyond its steps' compute (0.1 - 0.08)
    assert f"{core0} 0.160 | 0.080 | 0.50 | 0.100 | 0.020 | 0.20 |" in text
    emitter = "| handshake(2) | emitter | 0.012 | – | 0.020 | 1.67 | 0.03 | 0.08 | – | – | – |"
    assert f"{emitter} – | – | – |" in text
    cpus = os.cpu_count() or 1
    ray_share, sim_share = 0.272 / (cpus * 0.4), 0.12 / (cpus * 0.25)
    assert f"| handshake(2) | {ray_share:.2f} | {sim_share:.2f} | nan | nan | nan |" in text
    # Ray's idle and softirq shares, and beside them the simulator's kernel charge
    shares = dataclasses.replace(row, ray_idle=0.061, ray_softirq=0.024, sim_kernel_s=0.01)
    text = fidelity.markdown([shares], sim.default_profile(), 90.0)
    kernel = 0.01 / (cpus * 0.25)
    assert (
        f"| handshake(2) | {ray_share:.2f} | {sim_share:.2f} | 0.06 | 0.02 | {kernel:.2f} |" in text
    )
    bare = dataclasses.replace(row, actors=())
    assert "Per actor" not in fidelity.markdown([bare], sim.default_profile(), 1.0)


def test_check_report_shows_where_each_actors_paced_latency_went():
    """Per actor of each layout: when its paced steps began and ended on Ray and on the
    simulator, and by how much the simulator is early or late; an actor one run did not
    report is nan, not a made-up figure."""
    ray = {
        "actors": {"emitter": 0, "core": 0, "collector": 0},
        "lags": {
            "emitter": {"start_p50": 0.0, "end_p50": 0.3, "cpu_p50": 0.3},
            # a step's own median, not the medians' difference (steps of two kinds)
            "core": {
                "start_p50": 0.9,
                "end_p50": 2.4,
                "step_p50": 1.35,
                "cpu_p50": 1.2,
                "wait_mean": 0.21,
            },
            "collector": {"start_p50": 3.1, "end_p50": 3.2, "step_p50": 0.1, "cpu_p50": 0.05},
        },
    }
    sim_run = {"lags": {"emitter": {"start_p50": 0.0, "end_p50": 0.4, "cpu_p50": 0.4}}}
    sim_run["lags"]["core"] = {"start_p50": 0.7, "end_p50": 2.0, "step_p50": 1.3, "cpu_p50": 1.3}
    figures = fidelity._paced_figures(ray, sim_run)
    assert [f.actor for f in figures] == ["emitter", "core", "collector"]
    assert math.isnan(figures[2].sim_start_ms) and figures[2].ray_start_ms == 3.1
    row = fidelity.CheckRow(
        "single", 1000.0, 1100.0, 250.0, 2.0, 2.2, 5.0, 4.0, (1.0,), 0.5, paced_actors=figures
    )
    text = fidelity.markdown([row], sim.default_profile(), 90.0)
    core = (
        "| single | core | 0.90 | 0.70 | -0.20 | 2.40 | 2.00 | -0.40 | 1.35 | 1.20 | 0.21 | 1.30 |"
    )
    assert core in text
    assert "| single | collector | 3.10 | – | – | 3.20 | – | – | 0.10 | 0.05 | – | – |" in text
    bare = dataclasses.replace(row, paced_actors=())
    assert "Per actor, paced" not in fidelity.markdown([bare], sim.default_profile(), 1.0)


def test_each_topologys_first_workload_runs_untimed_before_an_index_is_timed(monkeypatch):
    """A process's first runs of a topology load its kernels (and a shared core's threads):
    the calibration runs each topology's first workload ``WARM_RUNS`` times untimed, and
    records every workload once, after."""
    calls = []
    monkeypatch.setattr(calibrate_module, "busy_reasons", lambda *a: [])
    monkeypatch.setattr(calibrate_module, "speed_probe", lambda repeats: 1e6)
    monkeypatch.setattr(
        calibrate_module,
        "_recorded_run",
        lambda recorder, q, d, topo, b, c: calls.append((topo.name, b, len(d), recorder.run)),
    )
    workloads = list(calibrate_module._calibration_runs("hash", True, 0))
    sim.calibrate(indexes=["hash"], quick=True, ray=False, idle_gap_s=None, cache=False)
    names = list(dict.fromkeys(topo.name for _, _, topo, _, _ in workloads))
    first = {}
    for _, d, topo, b, _ in workloads:
        first.setdefault(topo.name, (b, len(d)))
    warm = [(n, *first[n], 0) for n in names for _ in range(calibrate_module.WARM_RUNS)]
    assert calls[: len(warm)] == warm  # untimed: before any workload is numbered
    timed = [(topo.name, b, len(d)) for _, d, topo, b, _ in workloads]
    assert [c[:3] for c in calls[len(warm) : len(warm) + len(timed)]] == timed
    assert [c[3] for c in calls[len(warm) : len(warm) + len(timed)]] == list(
        range(1, len(timed) + 1)
    )
    # then the emitter's own workloads, warmed and numbered the same way
    routes = list(calibrate_module._route_runs(True, 0))
    rest = calls[len(warm) + len(timed) :]
    assert [c[:3] for c in rest[-len(routes) :]] == [
        (topo.name, b, len(d)) for _, d, topo, b, _ in routes
    ]
    assert [c[3] for c in rest[-len(routes) :]] == list(range(1, len(routes) + 1))


def test_the_emitter_is_fitted_on_every_route_at_a_runs_chunk_sizes():
    """The index workloads' chunks hold at most 64 tuples; the emitter's own workloads give
    it chunks of a run's batch (1,024) and a paced stream's (4,096), one batch each and cut
    into four, on each route a topology gives it; only its rows are kept."""
    runs = list(calibrate_module._route_runs(False, 0))
    routes = {type(topo.graph.nodes["emitter"]["config"].route).__name__ for *_, topo, _, _ in runs}
    assert routes == {"SingleRoute", "SplitRoute", "GridRoute", "HandshakeRoute", "BroadcastRoute"}
    shapes = {(chunk, b) for *_, b, chunk in runs}
    assert {(c, c) for c in calibrate_module.ROUTE_CHUNKS} | {(4096, 1024)} == shapes
    for _, data, _, _, chunk in runs:
        assert len(data) // chunk >= 40  # steps enough for a median
    rows, speed, count, seconds = calibrate_module.route_rows(True, 0, 1)
    assert count == len(list(calibrate_module._route_runs(True, 0))) and speed > 0
    assert {group for group, _ in rows} == {"emitter"}
    ((_, emitter),) = rows.items()
    features = np.array([f for f, _, _ in emitter])
    assert features[:, 1].max() >= 1024  # tuples in a step


def test_the_speed_probe_times_join_steps():
    ns = calibrate_module.speed_probe(repeats=1)
    assert 1e5 < ns < 1e10  # (about 10 ms here)


def test_a_calibration_fits_each_workload_at_the_probes_median_speed(monkeypatch):
    """Each index's workloads are fitted as if timed at the median over the indexes of the
    mean of the speed probes before and after them: a host twice as slow while one index ran
    does not double its row. (The first probe only loads the probe's kernels.)"""
    monkeypatch.setattr(calibrate_module, "busy_reasons", lambda *a: [])
    probes = iter([99.0, 1e6, 1e6, 1e6, 3e6, 3e6, 5e6, 2e6, 2e6])  # (the emitter's last)
    monkeypatch.setattr(calibrate_module, "speed_probe", lambda repeats: next(probes))
    seen = []
    real = calibrate_module._at_probed_speed

    def spy(rows, by_run, reference):
        out = real(rows, by_run, reference)
        seen.append((rows, by_run, out))
        return out

    monkeypatch.setattr(calibrate_module, "_at_probed_speed", spy)
    prof = sim.calibrate(
        indexes=["hash", "chained", "nested_loop"],
        quick=True,
        ray=False,
        idle_gap_s=None,
        window_growth=False,
        jobs=1,
    )
    assert prof.info["speed_probe_ns"] == 2e6  # the median
    by_index = prof.info["fit"]["speed"]["by_index"]
    assert by_index == {"hash": 1e6, "chained": 2e6, "nested_loop": 4e6}
    scales = set()
    for rows, by_run, out in seen:
        for (f, ns, run), (f2, ns2, run2) in zip(rows, out, strict=True):
            assert f2 == f and run2 == run and ns2 == pytest.approx(ns * 2e6 / by_run[run])
            scales.add(2e6 / by_run[run])
    assert scales == {2.0, 1.0, 0.5}


def test_the_check_scales_the_simulator_by_the_median_of_three_probes(monkeypatch):
    """The speed probe runs before, between and after a layout's Ray runs; the simulator's
    compute is scaled by the median of the three over the fit's, and the row keeps the lowest
    and the highest. (Ray's runs are stubbed: what is checked is the scaling.)"""
    profile = sim.default_profile()
    profile = dataclasses.replace(profile, info={**profile.info, "speed_probe_ns": 1e6})
    probes = iter([1.0e6, 2.0e6, 1.2e6])
    monkeypatch.setattr(fidelity, "speed_probe", lambda: next(probes))
    monkeypatch.setattr(fidelity, "measure_cpu_share", lambda *a, **k: ((1.0, 1.0), {}))
    machines = []
    real = fidelity._one

    def one(query, data, topo, backend, **kw):
        if backend == "sim":
            machines.append(kw["machine"])
            return real(query, data, topo, backend, **kw)
        now = time.monotonic_ns()
        return {
            "window_ns": (now, now + 1),
            "tuples_per_s": 50_000.0,
            "p50_ms": 1.0,
            "p99_ms": 2.0,
            "mean_ms": 1.0,
            "elapsed_s": 0.1,
            "actors": {},
            "lags": {},
        }

    monkeypatch.setattr(fidelity, "_one", one)
    (row,) = fidelity.check(profile, layouts=["single"], tuples=3_000, repeat=1)
    assert row.drift == pytest.approx(1.2) and row.drift_range == pytest.approx((1.0, 2.0))
    assert len(machines) == 2  # unpaced and paced, both on the scaled profile
    for m in machines:
        assert m.indexes["bplus_tree"] == pytest.approx(
            {f: c * 1.2 for f, c in profile.indexes["bplus_tree"].items()}  # a slower host
        )
    text = fidelity.markdown([row], profile, 1.0)
    assert "| 1.20 (1.00–2.00) |" in text


def test_the_check_shows_the_hosts_drift_since_the_fit():
    row = fidelity.CheckRow("single", 1000.0, 1100.0, 250.0, 2.0, 2.2, 5.0, 4.0, (1.0,), 0.5)
    drifted = dataclasses.replace(row, drift=1.23)
    assert "  1.23   0.5" in fidelity.table([drifted])
    text = fidelity.markdown([drifted], sim.default_profile(), 1.0)
    assert "| 1.00 | 1.23 | 0.5 |" in text and "`drift`" in text
    # how far the host's speed moved over the check: the lowest probe to the highest
    rows = [
        dataclasses.replace(drifted, drift_range=(1.1, 1.4)),
        dataclasses.replace(row, layout="split(2)", drift=0.96, drift_range=(0.9, 1.0)),
    ]
    line = "The host's speed over the check (the speed probe over the fit's): 0.90-1.40, a "
    line += "move of 56%"
    assert line in fidelity.table(rows) and line in fidelity.markdown(
        rows, sim.default_profile(), 1
    )
    assert "The host's speed" not in fidelity.table([row])  # no probe, no line
    assert "| 1.00 | nan | 0.5 |" in fidelity.markdown([row], sim.default_profile(), 1.0)


def test_proc_stat_cuts_a_window_out_of_its_samples():
    """Counters interpolated between samples, each kind's share of what all spent."""
    stat = fidelity.ProcStat()
    zero = np.zeros(8)
    stat.samples = [(0, zero), (100, np.array([10.0, 0, 10, 60, 0, 0, 20, 0]))]
    shares = stat.shares(50, 100)  # half of every counter's growth
    assert shares == pytest.approx(
        {
            "user": 0.1,
            "nice": 0,
            "system": 0.1,
            "idle": 0.6,
            "iowait": 0,
            "irq": 0,
            "softirq": 0.2,
            "steal": 0,
        }
    )
    assert stat.shares(50, 150) is None and stat.shares(-1, 50) is None
    if fidelity.ProcStat.read() is None:
        pytest.skip("no /proc/stat here")
    with fidelity.ProcStat(every=0.005) as live:
        t0 = time.monotonic_ns()
        while time.monotonic_ns() - t0 < 200_000_000:  # one processor busy for 0.2 s
            pass
        t1 = time.monotonic_ns()
    got = live.shares(t0, t1)  # (a window that ends as the block does: a last sample)
    assert got is not None and sum(got.values()) == pytest.approx(1.0)
    assert got["user"] + got["nice"] + got["system"] >= 0.3


def test_a_runs_window_is_on_its_clock():
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(50))
    data = sj.sources.synthetic(2_000, low=0, high=500, seed=3)
    before = time.monotonic_ns()
    m = sj.run(q, data, sj.topologies.single(), backend="local", batch_size=64).metrics
    lo, hi = m["window_ns"]
    assert before <= lo < hi <= time.monotonic_ns()
    assert (hi - lo) / 1e9 == pytest.approx(m["elapsed_s"])
    m = sj.run(q, data, sj.topologies.single(), backend="sim", batch_size=64).metrics
    assert (m["window_ns"][1] - m["window_ns"][0]) / 1e9 == pytest.approx(m["elapsed_s"])


def _stub_ray(monkeypatch, flood: dict, paced: dict, calls: list) -> None:
    """Ray's runs stubbed: a layout's n-th unpaced run reads ``flood[name][n]`` thousand
    tuples/s, its n-th paced run ``paced[name][n]`` ms of p50 (twice that of p99); every run
    is recorded in ``calls`` as (layout, pace)."""

    def one(query, data, topo, backend, *, batch, chunk, pace, machine=None):
        if backend == "sim":
            return real(
                query, data, topo, backend, batch=batch, chunk=chunk, pace=pace, machine=machine
            )
        name = "split(2)" if topo.name == "split(2)" else "single"
        n = sum(1 for c in calls if c[0] == name and (c[1] is None) == (pace is None))
        calls.append((name, pace))
        now = time.monotonic_ns()
        if pace is None:
            rate, p50 = flood[name][n] * 1000, 99.0
        else:
            rate, p50 = 1.0, paced[name][n]
        return {
            "window_ns": (now, now + 1),
            "tuples_per_s": rate,
            "p50_ms": p50,
            "p99_ms": 2 * p50,
            "mean_ms": p50,
            "elapsed_s": 0.1,
            "actors": {},
            "lags": {},
            "kernel_s": 0.0,
        }

    real = fidelity._one
    monkeypatch.setattr(fidelity, "_one", one)
    monkeypatch.setattr(fidelity, "measure_cpu_share", lambda *a, **k: ((1.0, 1.0), {}))


def test_the_checks_ray_runs_go_in_rounds_over_the_layouts(monkeypatch):
    """Every layout once a round, unpaced rounds then paced ones, the first layout again
    after them, its runs back to back; each layout's figure is the median of its runs, and
    the simulator's compute is scaled by the median of the probes before the first round and
    after each."""
    calls = []
    flood = {"single": [100.0, 90.0, 50.0, 60.0], "split(2)": [80.0, 70.0]}
    paced = {"single": [2.0, 2.2, 3.0, 3.2], "split(2)": [1.0, 1.2]}
    _stub_ray(monkeypatch, flood, paced, calls)
    probes = iter([1.0e6, 1.1e6, 1.3e6, 1.2e6, 1.0e6] + [2.0e6] * 5)
    monkeypatch.setattr(fidelity, "speed_probe", lambda: next(probes))
    profile = sim.default_profile()
    profile = dataclasses.replace(profile, info={**profile.info, "speed_probe_ns": 1e6})
    steps = []
    rows = fidelity.check(
        profile, layouts=["single", "split(2)"], tuples=3_000, repeat=2, progress=steps.append
    )
    assert [c[0] for c in calls] == ["single", "split(2)"] * 4 + ["single"] * 4
    assert [c[1] is None for c in calls] == [True] * 4 + [False] * 4 + [True] * 2 + [False] * 2
    assert steps == [
        "unpaced round 1 of 2",
        "unpaced round 2 of 2",
        "paced round 1 of 2",
        "paced round 2 of 2",
    ]
    single, split, again = rows
    assert (single.layout, split.layout, again.layout) == ("single", "split(2)", "single, again")
    assert single.ray_tuples_per_s == 95_000.0 and split.ray_tuples_per_s == 75_000.0
    assert single.ray_p50_ms == 2.1 and split.ray_p50_ms == 1.1
    assert (single.pace, split.pace) == (23_800.0, 18_800.0)  # a quarter of its median rate
    assert single.drift == split.drift == 1.1 and single.drift_range == (1.0, 1.3)
    assert again.ray_tuples_per_s == 55_000.0 and again.drift == 2.0
    with pytest.raises(ValueError, match="repeat"):
        fidelity.check(profile, layouts=["single"], repeat=0)


def test_ray_against_itself_runs_the_checks_ray_runs_in_two_passes(monkeypatch):
    """Ray's runs stubbed: the check's rounds over every layout in a first pass, then in a
    second at the first's pace; each pass's figure is the median of its runs, and ``noise``
    counts the layouts within the check's band of the first pass as a check counts the
    simulator's."""
    calls = []
    flood = {"single": [100.0, 90.0, 110.0, 130.0, 120.0, 125.0], "split(2)": [80.0] * 3}
    flood["split(2)"] += [60.0, 90.0, 70.0]
    paced = {"single": [2.0, 2.2, 1.8, 1.0, 1.1, 3.0], "split(2)": [1.0] * 3 + [1.1] * 3}
    _stub_ray(monkeypatch, flood, paced, calls)
    probes = iter([1.0] * 7 + [1.5, 1.5, 2.0, 1.0, 1.5, 1.5, 1.5])
    monkeypatch.setattr(fidelity, "speed_probe", lambda: next(probes))
    seen = []
    rows = fidelity.ray_against_itself(
        layouts=["single", "split(2)"], tuples=20_000, repeat=3, progress=seen.append
    )
    assert seen[0] == "pass 1: unpaced round 1 of 3" and seen[-1] == "pass 2: paced round 3 of 3"
    assert len(seen) == 12 and [c[0] for c in calls] == ["single", "split(2)"] * 12
    single, split = rows
    assert single.tuples_per_s == (100_000.0, 125_000.0) and single.throughput_ratio == 1.25
    assert single.p50_ms == (2.0, 1.1) and single.p50_ratio == pytest.approx(0.55)
    assert single.p99_ratio == pytest.approx(0.55) and single.repeats == 3
    assert single.probe_ns == (1.0, 1.5) and single.probe_ratio == 1.5
    # both passes at the first pass's pace: a quarter of its median rate
    assert single.pace == 25_000.0
    assert {c[1] for c in calls if c[0] == "single" and c[1] is not None} == {25_000.0}
    assert split.throughput_ratio == pytest.approx(70 / 80) and split.p50_ratio == 1.1
    f = fidelity.noise(rows)
    assert (f["throughput_within"], f["p50_within"], f["both_within"]) == (2, 1, 1)
    assert f["mean_within"] == 1 and f["layouts"] == 2
    # midway between the passes, a ratio within the band squared meets both: 1.4 does, a p50
    # of 0.55 (under 0.64) does not
    assert f["both_within_midway"] == 1
    faster = dataclasses.replace(single, tuples_per_s=(100_000.0, 140_000.0), p50_ms=(2.0, 1.4))
    assert fidelity.noise([faster, split])["both_within_midway"] == 2
    assert fidelity.noise([faster, split])["both_within"] == 1
    assert f["apart"] == pytest.approx(1.25 / 0.875 - 1)
    # the drift taken out: each throughput ratio times the probe ratio, 1.5
    assert f["drift_free_throughput_ratios"] == pytest.approx((0.875 * 1.5, 1.875))
    text = fidelity.self_markdown(rows, 60.0)
    assert "| single | 25,000 | 100,000 | 125,000 | 1.25 | 2.00 | 1.10 | 0.55 |" in text
    assert "on 1 of 2 layouts (throughput 2, p50 1; throughput and mean 1; a model midway " in text
    with pytest.raises(ValueError, match="unknown layout"):
        fidelity.ray_against_itself(layouts=["mesh(9)"])
    with pytest.raises(ValueError, match="no rows"):
        fidelity.noise([])
