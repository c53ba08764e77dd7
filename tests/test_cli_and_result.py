"""The CLI, Result metrics, summaries and plots (real files, looked at by shape)."""

import json
import math
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import streamjoin as sj
from streamjoin.cli import main
from streamjoin.runtime.trace import run_queue_reader


def test_result_metrics_summary_and_plot(tmp_path):
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(50))
    data = sj.sources.synthetic(2000, low=0, high=500, seed=1)
    res = sj.run(q, data, batch_size=128)
    m = res.metrics
    assert res.count == len(res.pairs) == m["output_pairs"] > 0
    assert m["input_tuples"] == 2000
    assert m["input_tuples_per_s"] > 0
    lat = res.pairs.column("latency_ns").to_numpy()
    assert np.all(lat >= 0)
    assert m["latency_ms"]["p50"] == pytest.approx(np.percentile(lat, 50) / 1e6)
    assert set(m["actors"]) == {"emitter", "core", "collector"}
    assert m["actors"]["core"]["tuples_in"] == 2000
    assert m["actors"]["collector"]["tuples_in"] == res.count
    # local delivers each chunk's messages before the next chunk: one waits at a time for the
    # core (its batch) and for the collector; nothing is ever sent to the emitter
    assert [m["actors"][a]["peak_queue"] for a in ("emitter", "core", "collector")] == [0, 1, 1]
    text = res.summary()
    assert "tuples/s" in text and "p99" in text and "join_core" in text and "peak queue" in text
    res.plot_latency(tmp_path / "lat.png")
    assert (tmp_path / "lat.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_count_mode_keeps_no_pairs_but_counts_and_percentiles():
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(50))
    data = sj.sources.synthetic(2000, low=0, high=500, seed=1)
    full = sj.run(q, data)
    counted = sj.run(q, data, collect="count")
    assert counted.pairs is None and counted.count == full.count
    assert counted.metrics["latency_ms"]["p50"] > 0
    with pytest.raises(ValueError, match="kept no pairs"):
        counted.same_pairs(full)


def test_latency_histogram_percentiles_are_close():
    from streamjoin.actors.collector import LatencyHistogram

    rng = np.random.default_rng(0)
    values = rng.lognormal(13, 1.5, size=100_000).astype(np.int64)
    h = LatencyHistogram()
    h.add(values[:50_000])
    h.add(values[50_000:])
    for q in (50, 95, 99):
        assert h.percentile(q) == pytest.approx(np.percentile(values, q), rel=0.03)
    assert h.mean() == pytest.approx(values.mean(), rel=1e-12)
    assert math.isnan(LatencyHistogram().mean())


def test_the_mean_latency_of_a_counted_run_is_the_kept_pairs_mean():
    """On the simulator latencies are virtual, so a run that counts and one that keeps its
    pairs see the same ones: the histogram's mean is the pairs' mean."""
    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(50))
    data = sj.sources.synthetic(3000, low=0, high=500, seed=2)
    kw = {"backend": "sim", "pace": 20_000.0, "batch_size": 64}
    full = sj.run(q, data, sj.topologies.split(2), **kw)
    counted = sj.run(q, data, sj.topologies.split(2), collect="count", **kw)
    lat = full.latency_ns()
    assert lat is not None and len(np.unique(lat)) > 10
    assert full.metrics["latency_ms"]["mean"] == pytest.approx(lat.mean() / 1e6, rel=1e-12)
    assert counted.metrics["latency_ms"]["mean"] == pytest.approx(lat.mean() / 1e6, rel=1e-9)
    assert "mean" in counted.summary()


def test_latency_histogram_counts_each_latency_in_its_bucket():
    """The buckets it remembers by value give each latency the bucket of its own log: few
    values in turns (a reordered run's), many distinct ones, negatives and zero."""
    from streamjoin.actors.collector import LatencyHistogram

    rng = np.random.default_rng(1)
    few = rng.choice(rng.integers(-5, 10**9, 7), 50_000)
    many = rng.integers(-(2**62), 2**62, 50_000)
    for values in (few, many, np.zeros(3, np.int64)):
        h = LatencyHistogram()
        h.add(values)
        expected = np.zeros_like(h.counts)
        for v in values.tolist():
            b = math.floor(math.log2(max(v, 1)) * h.PER_OCTAVE)
            expected[min(b, len(expected) - 1)] += 1
        assert np.array_equal(h.counts, expected)
        assert h.max == values.max()


def test_cli_run_writes_outputs_and_checks_oracle(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(
        [
            "run",
            "-n",
            "3000",
            "--window",
            "200",
            "--check",
            "-o",
            str(out),
            "--backend",
            "local",
            "--no-progress",
        ]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    assert "oracle: same pairs" in text
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["input_tuples"] == 3000
    for png in ("latency.png", "graph.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert not [p for p in os.listdir(out) if p.startswith(".tmp")]


@pytest.mark.parametrize("topology", ["single", "grid:1x2"])
def test_cli_index_options_reach_the_index(topology, tmp_path, capsys, monkeypatch):
    """``--index-option`` reaches every join actor's index (a compact PIM-Tree's join, checked
    against the oracle)."""
    from streamjoin.indexes.pim.pim_tree import PIMTreeIndex

    built = []
    real = PIMTreeIndex.__init__

    def spy(self, *args, **kwargs):
        built.append(kwargs)
        real(self, *args, **kwargs)

    monkeypatch.setattr(PIMTreeIndex, "__init__", spy)
    argv = ["run", "-n", "3000", "--window", "200", "--check", "--backend", "local"]
    argv += ["--topology", topology, "--index", "pim_tree", "--no-progress", "-o", str(tmp_path)]
    code = main([*argv, "--index-option", "layout=compact", "--index-option", "merge_ratio=0.25"])
    text = capsys.readouterr().out
    assert code == 0 and "oracle: same pairs" in text, text
    assert built and all(k == {"layout": "compact", "merge_ratio": 0.25} for k in built)


def test_cli_shared_topology_with_the_automatic_index_runs(tmp_path, capsys):
    """``--topology shared:2`` with ``--index auto`` (the default) takes the shared core's own
    index: the automatic pick for a band (BI-Sort) cannot be shared by threads."""
    argv = ["run", "-n", "2000", "--window", "100", "--check"]  # the default backend: local
    code = main([*argv, "--topology", "shared:2", "--no-progress", "-o", str(tmp_path)])
    text = capsys.readouterr().out
    assert code == 0 and "oracle: same pairs" in text and "pim_tree" in text, text
    assert json.loads((tmp_path / "metrics.json").read_text())["backend"] == "local"


def test_cli_help_names_every_topology_parse_reads(capsys):
    """One table (``topologies.SPECS``) makes the help and what ``parse`` reads: every spec
    listed parses (N, M, W, S as 2) and ``run --help`` names it."""
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for spec, _ in sj.topologies.SPECS:
        assert spec in help_text, spec
        for letter in "NMWS":
            spec = spec.replace(letter, "2")
        assert isinstance(sj.topologies.parse(spec), sj.topologies.Topology)


def test_shared_index_refuses_options_its_shared_form_does_not_take():
    with pytest.raises(ValueError, match="shared bplus_tree takes no option 'layout'.*fanout"):
        sj.topologies.shared_index(2, "bplus_tree", layout="compact")
    with pytest.raises(ValueError, match="shared nested_loop takes no option 'layout'"):
        sj.topologies.shared_index(1, "nested_loop", layout="compact")


def test_spo_warns_when_po_join_serves_no_condition():
    """A self-join's cross-attribute conditions need two keys per tuple: ``spo``'s stages
    scan their windows then, and say so as ``single("po_join")`` does."""
    q = sj.Query(
        sj.less_equal("start", "end") & sj.greater_equal("end", "start"),
        window=sj.CountWindow(50),
        self_join=True,
    )
    data = {"start": np.arange(200.0), "end": np.arange(200.0) + 3}
    with pytest.warns(sj.indexes.IndexFallbackWarning, match="po_join"):
        res = sj.run(q, data, sj.topologies.spo(2, merge_every=20), backend="local")
    assert res.same_pairs(sj.oracle.join(q, data))


def test_compile_notice_says_once_that_numba_compiles(capsys):
    from numba import njit

    from streamjoin.runtime.pipeline import Progress, compile_notice

    @njit
    def double(x):
        return 2 * x

    with compile_notice():
        double(1)
        double(1.5)  # a second signature, a second compile: still one line
    assert capsys.readouterr().err == "compiling numba kernels (first run only)…\n"
    with compile_notice():
        double(2)  # compiled already
    assert capsys.readouterr().err == ""
    with compile_notice(), compile_notice():  # the CLI's around a run's progress bar's
        double(True)
    assert capsys.readouterr().err == "compiling numba kernels (first run only)…\n"
    bar = Progress(10, enabled=True)  # a run that shows a bar says it too
    double(np.int8(3))
    bar.close()
    double(np.int16(3))  # after the run: nothing
    assert capsys.readouterr().err.count("compiling numba kernels") == 1


@pytest.mark.slow
def test_cli_first_run_says_it_compiles_and_the_second_does_not(tmp_path):
    """With an empty numba cache the run says once that it compiles; the next run, loading
    every kernel from the cache, says nothing of it."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    args = [sys.executable, "-m", "streamjoin", "run", "-n", "3000", "--backend", "local"]
    args += ["--no-progress", "-o", str(tmp_path / "out")]
    first, second = (subprocess.run(args, env=env, capture_output=True, text=True) for _ in "12")
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert first.stderr.count("compiling numba kernels (first run only)") == 1
    assert "compiling" not in second.stderr


def test_cli_bad_settings_leave_nothing_behind(tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit):
        main(["run", "--window", "0", "-o", str(out)])
    assert capsys.readouterr().err == (
        "streamjoin: error: argument --window: must be an integer >= 1, got 0 "
        "(see: streamjoin run -h)\n"
    )
    code = main(["run", "-n", "5000", "--topology", "grid:0x2", "-o", str(out), "--no-progress"])
    assert code == 2
    assert "m must be a positive integer, got 0" in capsys.readouterr().err
    assert not out.exists() or not os.listdir(out)


def test_cli_help_and_indexes(capsys):
    assert main([]) == 0
    assert "streamjoin run" in capsys.readouterr().out
    assert main(["indexes"]) == 0
    assert "nested_loop" in capsys.readouterr().out


def test_topology_draw_and_dot(tmp_path):
    topo = sj.topologies.single("nested_loop")
    topo.draw(tmp_path / "g.png")
    assert (tmp_path / "g.png").stat().st_size > 1000
    dot = topo.to_dot()
    assert '"emitter" -> "core"' in dot and '"core" -> "collector"' in dot


def test_cli_topology_draw_and_compare(tmp_path, capsys):
    code = main(
        [
            "run",
            "-n",
            "3000",
            "--window",
            "100",
            "--topology",
            "grid:2x2",
            "--backend",
            "ray",
            "--check",
            "-o",
            str(tmp_path / "g"),
            "--no-progress",
        ]
    )
    assert code == 0 and "oracle: same pairs" in capsys.readouterr().out
    metrics = json.loads((tmp_path / "g" / "metrics.json").read_text())
    assert metrics["backend"] == "ray"
    assert main(["draw", "split:3", "-o", str(tmp_path / "s.png"), "--dot"]) == 0
    assert '"emitter" -> "core2"' in capsys.readouterr().out
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"
    code = main(
        [
            "compare",
            "-n",
            "3000",
            "--window",
            "100",
            "--layouts",
            "single,1x2,2x1",
            "-o",
            str(tmp_path / "c"),
            "--no-progress",
        ]
    )
    assert code == 0
    lines = (tmp_path / "c" / "compare.csv").read_text().splitlines()
    assert lines[0].startswith("layout,") and [ln.split(",")[0] for ln in lines[1:]] == [
        "single",
        "1x2",
        "2x1",
    ]
    assert (tmp_path / "c" / "compare.png").stat().st_size > 1000
    assert main(["draw", "mesh:3"]) == 2
    assert "cannot read topology 'mesh:3'" in capsys.readouterr().err


def test_paced_run_takes_the_input_time():
    import time

    q = sj.Query(sj.band("x", 2), window=sj.CountWindow(100))
    data = sj.sources.synthetic(4000, low=0, high=4000, seed=1)
    t0 = time.perf_counter()
    res = sj.run(q, data, pace=8000, batch_size=32, max_delay=0.002)
    assert time.perf_counter() - t0 >= 0.45  # 4000 tuples at 8000/s
    assert res.metrics["input_tuples_per_s"] == pytest.approx(8000, rel=0.2)
    assert res.same_pairs(sj.oracle.join(q, data))


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or run_queue_reader() is None,
    reason="Linux's per-thread scheduler statistics",
)
def test_the_run_queue_reader_counts_a_threads_wait_for_a_busy_processor():
    """This thread and a spinning process on one processor: the thread waits for it, runnable,
    about as long as it runs (half the time); without it, less (another test's process may
    share the processor)."""
    waited = run_queue_reader()
    assert waited is not None
    before = os.sched_getaffinity(0)
    cpu = min(before)
    spin = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"
    os.sched_setaffinity(0, {cpu})
    try:
        alone = _spin_wait(waited, 0.2)
        child = subprocess.Popen([sys.executable, "-c", spin])
        try:
            time.sleep(0.2)  # (its start-up)
            shared = _spin_wait(waited, 0.3)
        finally:
            child.kill()
            child.wait()
    finally:
        os.sched_setaffinity(0, before)
    assert shared > 0.05e9 and alone < shared


def test_the_run_queue_reader_opens_one_file_a_thread():
    """Runs ask for a reader each (an actor's thread, the driver's for its emitter): a
    thread's readers share one open file, and a thread's file closes when the thread ends."""
    if run_queue_reader() is None:
        pytest.skip("Linux's per-thread scheduler statistics")

    def open_files() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_files()
    readers = [run_queue_reader() for _ in range(50)]
    assert open_files() == before and all(r() >= 0 for r in readers)
    threads = [threading.Thread(target=run_queue_reader) for _ in range(20)]
    for t in threads:
        t.start()
        t.join()
    assert open_files() == before


def _spin_wait(waited, seconds: float) -> int:
    """Spin for ``seconds`` of wall time; the run-queue wait meanwhile (ns)."""
    w0, end = waited(), time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return waited() - w0
