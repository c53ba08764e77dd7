"""The experiment gallery: one command runs it, every entry has its script (or is marked as being
built), the index names every script, and a quick run writes results that say where they came
from."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
EXPERIMENTS = ROOT / "experiments"
#: Modules of experiments/ that are not experiments themselves.
HELPERS = {"all.py", "report.py"}


def gallery():
    sys.path.insert(0, str(ROOT))
    try:
        from experiments.all import GALLERY
    finally:
        sys.path.remove(str(ROOT))
    return GALLERY


def test_every_script_is_in_the_gallery_and_the_index():
    entries = {e.script: e for e in gallery()}
    scripts = {p.name for p in EXPERIMENTS.glob("*.py")} - HELPERS
    assert scripts <= set(entries), f"not in the gallery: {scripts - set(entries)}"
    index = (EXPERIMENTS / "README.md").read_text()
    for script, entry in entries.items():
        assert script in index, f"experiments/README.md does not name {script}"
        if not entry.ready:
            assert "being built" in index


def test_readme_links_the_gallery_which_shows_two_pictures():
    """The README links the gallery and shows pictures that exist; the gallery shows at least
    two of the experiments' results."""
    text = (ROOT / "README.md").read_text()
    assert "experiments/README.md" in text
    for page, folder, least in (
        (ROOT / "README.md", "", 1),
        (EXPERIMENTS / "README.md", "results/", 2),
    ):
        lines = page.read_text().splitlines()
        pictures = [line for line in lines if "![" in line and f"]({folder}" in line]
        assert len(pictures) >= least, page
        for line in pictures:
            path = line.split("](", 1)[1].split(")", 1)[0]
            assert (page.parent / path).exists(), path


def experiment(name: str):
    """The module ``experiments/<name>.py``, imported as the scripts import one another."""
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(EXPERIMENTS))


def test_every_simulated_section_is_in_the_gallerys_simulated_run():
    """``--simulated`` runs each experiment that simulates (``backend="sim"`` or a machine
    profile in its runs) with the arguments that choose its simulated sections, sections the
    script has; ``--quick`` adds its quick arguments."""
    sys.path.insert(0, str(ROOT))
    try:
        from experiments import all as gallery_run
    finally:
        sys.path.remove(str(ROOT))
    for e in gallery():
        text = Path(e.path).read_text()
        simulates = 'backend="sim"' in text or "machine=prof" in text
        assert (e.simulated_args is not None) == simulates, e.name
        if e.simulated_args is None:
            continue
        cmd = gallery_run.command(e, False, None, simulated=True)
        assert cmd == [sys.executable, e.path, *e.simulated_args]
        if e.quick_args is not None:
            quick = gallery_run.command(e, True, None, simulated=True)
            assert quick == [*cmd, *e.quick_args]
        if "--only" in e.simulated_args:
            sections = e.simulated_args[e.simulated_args.index("--only") + 1]
            for section in sections.split(","):
                assert f'"{section}"' in text, (e.name, section)
        assert e.simulated_minutes > 0


def test_the_gallerys_simulated_machines_are_built_on_this_hosts_profile(tmp_path, monkeypatch):
    """The DP-Join and PanJoin experiments build their machines on this host's profile (the
    one ``STREAMJOIN_MACHINE_PROFILE`` names here), not the shipped one, and name it."""
    from streamjoin.runtime import sim
    from streamjoin.runtime.sim.host_profile import PROFILE_ENV

    shipped = sim.default_profile()
    d = shipped.to_dict()
    d["name"] = "probe host"
    d["info"] = {"date": "2026-01-02"}
    d["indexes"]["nested_loop"]["scan"] = 3 * shipped.indexes["nested_loop"]["scan"]
    # a fitted profile's own costs for a chain's cores and PanJoin's workers
    d["indexes"]["nested_loop:handshake"] = {**d["indexes"]["nested_loop"]}
    d["indexes"]["bisort:panjoin"] = {**d["indexes"]["bisort"]}
    path = tmp_path / "probe.json"
    sim.MachineProfile.from_dict(d).save(path)
    monkeypatch.setenv(PROFILE_ENV, str(path))
    report, layouts = experiment("report"), experiment("dpjoin_layouts")
    system, panjoin = experiment("dpjoin_system"), experiment("panjoin_system")
    named = report.profile_of(report.host_profile())
    assert named.startswith("probe host (probe.json") and named.endswith("fitted 2026-01-02)")
    scan = 3 * shipped.indexes["nested_loop"]["scan"]
    python = layouts.machines(50.0)["python"]
    assert python.name.startswith("probe host") and python.indexes["nested_loop"]["scan"] == (
        pytest.approx(50 * scan)
    )
    calibrated = system.calibrated_machine(10.0)
    for key in ("nested_loop", "nested_loop:handshake"):  # every core's scan scaled
        assert calibrated.indexes[key]["scan"] == pytest.approx(10 * scan)
        assert report.scaled_scan(calibrated, 2.0).indexes[key]["scan"] == pytest.approx(20 * scan)
    machines = panjoin.machines()
    assert machines["calibrated"].name == "probe host"
    assert machines["cluster"].indexes["nested_loop"]["scan"] == pytest.approx(scan)
    empty = panjoin.empty_workers(machines["cluster"], "bisort")
    assert not any(any(empty.indexes[k].values()) for k in ("bisort", "bisort:panjoin"))


@pytest.mark.slow  # about 30 s
def test_the_simulated_gallery_runs_on_this_hosts_profile_and_says_which(tmp_path):
    """``--simulated --quick``: the simulated sections' smoke run, which says the profile it
    simulates on and that it was not fitted today, and whose result names it."""
    from streamjoin.runtime import sim

    d = sim.default_profile().to_dict()
    d["name"], d["info"] = "probe host", {"date": "2026-01-02"}
    path = tmp_path / "probe.json"
    sim.MachineProfile.from_dict(d).save(path)
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.all", "--simulated", "--quick"]
        + ["--only", "pim_tree_parallel", "--out", str(tmp_path / "out")],
        cwd=ROOT,
        env={**os.environ, "STREAMJOIN_MACHINE_PROFILE": str(path)},
        capture_output=True,
        text=True,
    )
    log = tmp_path / "out" / "logs" / "pim_tree_parallel_simulated_quick.log"
    assert proc.returncode == 0, log.read_text()
    assert "simulating on the profile 'probe host'" in proc.stdout
    assert "fitted 2026-01-02); not fitted today" in proc.stdout
    md = (tmp_path / "out" / "pim_tree_parallel_fig12_quick.md").read_text()
    assert "probe host" in md


def run_quick(name: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "experiments.all", "--quick", "--only", name, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


@pytest.mark.slow  # about 20 s; the default run keeps the parallel join experiment's quick run
def test_quick_run_of_one_experiment(tmp_path):
    proc = run_quick("chained_index", tmp_path)
    assert proc.returncode == 0, (tmp_path / "logs" / "chained_index_quick.log").read_text()
    for ext in ("csv", "md", "png"):
        assert (tmp_path / f"chained_index_quick.{ext}").exists()
    md = (tmp_path / "chained_index_quick.md").read_text()
    assert "commit `" in md and "load average" in md and "CPUs" in md


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dpjoin_system", "panjoin_system"])
def test_quick_run_of_a_system_experiment(tmp_path, name):
    proc = run_quick(name, tmp_path)
    assert proc.returncode == 0, (tmp_path / "logs" / f"{name}_quick.log").read_text()
    md = (tmp_path / f"{name}_quick.md").read_text()
    assert "simulated" in md.lower() and "commit `" in md
    assert (tmp_path / f"{name}_quick.png").exists()


def run_parallel_quick(part: str, tmp_path) -> None:
    """``pim_tree_parallel.py --quick --only PART --rounds 1`` into ``tmp_path``, which must
    succeed."""
    proc = subprocess.run(
        [sys.executable, "pim_tree_parallel.py", "--quick", "--only", part, "--rounds", "1"],
        cwd=EXPERIMENTS,
        env={**os.environ, "STREAMJOIN_RESULTS": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def test_quick_run_of_the_parallel_join_experiment(tmp_path):
    """``pim_tree_parallel.py --quick --only fig14``: both merge modes of ``shared_index(2)``
    find the same pairs (at match rate 2), merges are counted and timed, and the markdown says
    where the figures came from."""
    run_parallel_quick("fig14", tmp_path)
    with open(tmp_path / "pim_tree_parallel_fig14_quick.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    by_window: dict = {}
    for r in rows:
        by_window.setdefault(r["window"], {})[r["config"]] = r
    assert len(by_window) == 2
    for pair in by_window.values():
        assert set(pair) == {"shared(2) blocking", "shared(2) nonblocking"}
        found = {r["pairs_per_tuple"] for r in pair.values()}
        assert len(found) == 1, found  # the same exact join, whatever the merge
        assert 1.5 < float(found.pop()) < 2.5
        for r in pair.values():
            assert int(r["merges"]) > 0 and float(r["merge_seconds"]) > 0
    md = (tmp_path / "pim_tree_parallel_fig14_quick.md").read_text()
    assert "commit `" in md and "load average" in md and "## Fig. 14" in md
    assert (tmp_path / "pim_tree_parallel_fig14_quick.png").exists()


@pytest.mark.slow  # about 20 s
def test_quick_fig12_simulates_the_batches_received_free(tmp_path):
    """``pim_tree_parallel.py --quick --only fig12``: beside each batch size's pipelined rows,
    the same configurations with the batches received free, the same join (the same pairs a
    tuple: a cost changes no result), and an Amdahl line for each."""
    run_parallel_quick("fig12", tmp_path)
    with open(tmp_path / "pim_tree_parallel_fig12_quick.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    by = {(r["join"], r["mode"], r["config"]): r for r in rows}
    md = (tmp_path / "pim_tree_parallel_fig12_quick.md").read_text()
    for mode in ("simulated", "simulated, batches of 8,192"):
        for join in ("two-way", "self-join"):
            mine = {c for j, m, c in by if (j, m) == (join, mode)}
            free = {c for j, m, c in by if (j, m) == (join, mode + ", receiving free")}
            assert mine and free == mine
            for config in mine:
                pairs = {
                    by[(join, m, config)]["pairs_per_tuple"]
                    for m in (mode, mode + ", receiving free")
                }
                assert len(pairs) == 1, (join, mode, config, pairs)
            assert f"- {mode.capitalize()}, receiving free, {join}: " in md


def test_steady_state_of_a_split_join_smaller_than_its_batches():
    """``panjoin_system``'s steady throughput of ``split(16)`` with nested loops at a window of
    2^10 tuples and batches of 512 (each worker holds a stored batch at most now and then):
    runs of 3 W and 4 W tuples ended at the same simulated time there, and the difference of
    their ends measured nothing; the runs now go past the workers' rotation, and the figure
    is the modelled scan rate's."""
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        import panjoin_system as ps
    finally:
        sys.path.remove(str(EXPERIMENTS))
    assert ps.run_lengths("panjoin", 2**18, 16, 2**15) == (3 * 2**18, 4 * 2**18)
    first, second = ps.run_lengths("split", 2**10, 16, 512)
    assert first >= 2 * 2**10 + 2 * 16 * 512 and (second - first) % (16 * 512) == 0
    prof = ps.report.scaled_scan(ps.machines()["cluster"], 2**13)
    out = ps.steady_throughput(prof, ("split", "nested_loop", 16, 1), 2**23, 15, 512, 2**10)
    model = ps.nested_model(prof, "split", 2**10, 16, 512)
    assert 0.95 < out["tuples_per_s"] / model < 1.05


def test_panjoin_paper_draws_nothing_for_sections_without_panels(tmp_path):
    """``panjoin_paper.py --only batch`` ran its section, then failed drawing a figure of no
    panels; now it draws none (its table is the result), and a section with panels still
    draws."""
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        import panjoin_paper as pp
    finally:
        sys.path.remove(str(EXPERIMENTS))
    sc = pp.SCALES["quick"]
    batch_rows = [{"section": "batch", "store": "bisort", "n_bat": 4096}]
    pp.plot(batch_rows, ["batch"], sc, str(tmp_path / "none.png"))
    assert not (tmp_path / "none.png").exists()
    targets = [
        {
            "section": "targets",
            "store": "bisort",
            "n_bat": 1024,
            "tuples_per_s": 1e6,
            "probe_tuples_per_s": 2e6,
            "target": 2.5e6,
        }
    ]
    pp.plot(targets, ["targets"], sc, str(tmp_path / "one.png"))
    assert (tmp_path / "one.png").read_bytes()[:4] == b"\x89PNG"


def test_step_charges_scale_the_charge_by_the_drift_and_set_ray_beside(monkeypatch, tmp_path):
    """``step_charges.py`` charges the same steps at the host's speed (the simulator's charge
    is deterministic: a host twice as slow as at the fit doubles it exactly, whatever the host
    times read), names every actor, and sets a check's Ray / sim ratio beside its row."""
    import dataclasses

    from streamjoin.runtime import sim

    script = experiment("step_charges")
    shipped = sim.default_profile()
    fitted = dataclasses.replace(shipped, info={**shipped.info, "speed_probe_ns": 1000.0})
    charged = {}
    for probe in (1000.0, 2000.0):
        monkeypatch.setattr(script, "speed_probe", lambda probe=probe: probe)
        got = script.measure(fitted, "single", 3000, repeat=1)
        assert got["drifts"] == [probe / 1000.0]
        assert set(got["actors"]) == {"emitter", "core", "collector"}
        assert all(a["host_s"] > 0 for a in got["actors"].values())
        charged[probe] = {a: v["charged_s"] for a, v in got["actors"].items()}
    for actor, seconds in charged[1000.0].items():
        assert seconds > 0 and charged[2000.0][actor] == pytest.approx(2 * seconds)
    rows = EXPERIMENTS / "results" / "check_rows" / "2026-12-01-1705.json"
    (single,) = [r for r in json.loads(rows.read_text())["rows"] if r["layout"] == "single"]
    lines = script.table([got], script.ray_ratios(str(rows)))
    for a in single["actors"]:
        line = next(line for line in lines if f"| {a['actor']} |" in line)
        assert line.endswith(f"| {a['ray_step_cpu_s'] / a['sim_step_s']:.2f} |")
    bad = tmp_path / "rows.json"
    bad.write_text(json.dumps({"rows": [{"layout": "single"}]}))
    with pytest.raises(ValueError, match="not the rows of a check"):
        script.ray_ratios(str(bad))
