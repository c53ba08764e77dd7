"""Single join core throughput with the tree-family indexes of PIM-Tree (pytest-benchmark).

Run: ``python -m pytest benchmarks/test_tree_indexes.py --benchmark-enable -o addopts=""
-p no:cacheprovider`` (add ``-s`` for the summary table).

Workload (PIM-Tree §5 at this machine's scale): band join ``|r.x - s.x| <= eps`` of two
uniform integer streams, count window ``W = 2**20`` per stream, ``eps`` for a match rate of 2
(:func:`~streamjoin.sources.band_for_match_rate`), batches of 1024, one join core,
``collect="count"``. ``N = 6 · W`` input tuples, the first ``2 · W`` fill the windows.

Indexes: ``bplus_tree`` (the baseline, §2.2.1), ``chained`` with L = 2 in both designs of §5.1
(B-chain and IB-chain), ``im_tree`` and ``pim_tree`` (m = 1/8, the paper's single-threaded
optimum). For each, ``test_join`` runs the whole join (``extra_info``: input tuples/s and the
join core's busy time) and ``test_index_alone`` replays the index's share of it at steady state
(one stream's index at W items: per batch, probe 512 keys, insert 512, expire 512;
``extra_info``: ns per tuple for probe and insert + expire, bytes per item). The difference
between the two is the join core's own work (candidate filtering, the in-batch join, the
tuple store). ``pim_compact`` is PIM-Tree with T_S in 8-byte items (``layout="compact"``);
``css_tree`` is the CSS-tree alone, rebuilt at every insert (``css_compact``: 8-byte items).
Every index alone is also reported against this machine's memory roofline, measured in the
same process (:class:`streamjoin.roofline.Roofline`), with the bytes and cold lines per tuple
of its model in :mod:`streamjoin.indexes.traffic`: as a fraction of the
copy-bandwidth bound, and as a multiple of the bound a fully dependent walk of the cold lines
would have (above 1: the misses overlap). ``test_summary`` prints both tables with the ratios
to ``bplus_tree``.
"""

import time

import numpy as np
import pytest

import streamjoin as sj
from streamjoin import indexes
from streamjoin.indexes.traffic import memory_traffic
from streamjoin.roofline import Roofline

W = 2**20
N = 6 * W
BATCH = 1024
CONFIGS = {
    "bplus_tree": ("bplus_tree", {}),
    "b_chain": ("chained", {"chain_length": 2, "window": W, "archive": "bplus"}),
    "ib_chain": ("chained", {"chain_length": 2, "window": W, "archive": "css"}),
    "im_tree": ("im_tree", {"merge_ratio": 1 / 8, "window": W}),
    "pim_tree": ("pim_tree", {"merge_ratio": 1 / 8, "window": W, "insertion_depth": 1}),
    "pim_compact": (
        "pim_tree",
        {"merge_ratio": 1 / 8, "window": W, "insertion_depth": 1, "layout": "compact"},
    ),
    "css_tree": ("css_tree", {}),
    "css_compact": ("css_tree", {"layout": "compact"}),
}
JOIN: dict[str, dict] = {}
ALONE: dict[str, dict] = {}


@pytest.fixture(scope="module")
def workload():
    data = sj.sources.synthetic(N, seed=1)
    x, s = data.column("x").to_numpy(), data.column("stream").to_numpy()
    eps = sj.sources.band_for_match_rate(x[s == 0], x[s == 1], window=W, match_rate=2)
    return sj.Query(sj.band("x", eps), window=sj.CountWindow(W)), data, eps


@pytest.mark.parametrize("config", CONFIGS)
def test_join(benchmark, workload, config):
    query, data, _ = workload
    name, options = CONFIGS[config]
    topo = sj.topologies.single(name, **options)
    sj.run(query, data.slice(0, 20_000), topo, batch_size=BATCH, collect="count")  # compile
    result = benchmark.pedantic(
        sj.run,
        args=(query, data, topo),
        kwargs={"batch_size": BATCH, "collect": "count"},
        rounds=1,
        iterations=1,
    )
    core = result.metrics["actors"]["core"]
    info = {
        "input_tuples_per_s": N / benchmark.stats.stats.mean,
        "core_busy_s": core["busy_s"],
        "core_busy_share": core["busy_share"],
        "output_pairs_per_input": result.count / N,
        "machine": result.metrics["machine"],
    }
    benchmark.extra_info.update(info)
    JOIN[config] = info
    assert 1.5 < result.count / N < 2.5  # about 2 matches per probe once the windows are full


@pytest.fixture(scope="module")
def roofline():
    """This machine's memory bounds, measured once beside the index runs (about 2 s)."""
    return Roofline.measure()


@pytest.mark.parametrize("config", CONFIGS)
def test_index_alone(benchmark, workload, roofline, config):
    _, _, eps = workload
    name, options = CONFIGS[config]
    rng = np.random.default_rng(2)
    half = BATCH // 2
    steps = 2 * W // half  # steady-state batches timed (after W // half to fill)
    keys = rng.integers(0, 2**31 - 1, size=(W // half + steps, 1, half)).astype(np.float64)
    lo, hi = np.array([-eps]), np.array([eps])

    def replay(n_batches):
        index = indexes.get(name)(1, **options)
        times = np.zeros(2)
        for b in range(n_batches):
            refs = np.arange(b * half, (b + 1) * half)
            t0 = time.perf_counter()
            index.probe(keys[b], lo, hi)
            t1 = time.perf_counter()
            index.insert(keys[b], refs)
            index.expire(refs[-1] + 1 - W)
            t2 = time.perf_counter()
            if b >= W // half:
                times += (t1 - t0, t2 - t1)
        return index, times

    replay(4)  # compile
    index, (probe_s, update_s) = benchmark.pedantic(
        replay, args=(len(keys),), rounds=1, iterations=1
    )
    info = {
        "probe_ns_per_tuple": probe_s / (steps * half) * 1e9,
        "insert_expire_ns_per_tuple": update_s / (steps * half) * 1e9,
        "bytes_per_item": index.nbytes / W,
    }
    traffic = memory_traffic(name, W, insert_batch=half, **options)
    per_s = 1e9 / (info["probe_ns_per_tuple"] + info["insert_expire_ns_per_tuple"])
    info["roofline"] = str(roofline)
    info["bytes_per_tuple"] = traffic["total_bytes"]
    info["cold_lines_per_tuple"] = traffic["cold_lines"]
    info["bandwidth_fraction"] = roofline.fraction(per_s, traffic["total_bytes"])
    info["dependent_multiple"] = roofline.fraction(per_s, misses_per_tuple=traffic["cold_lines"])
    benchmark.extra_info.update(info)
    ALONE[config] = info


def test_summary():
    if "bplus_tree" not in JOIN or "bplus_tree" not in ALONE:
        pytest.skip("run with --benchmark-enable (and the bplus_tree baseline)")
    base, base_alone = JOIN["bplus_tree"], ALONE["bplus_tree"]
    print(f"\njoin, W = 2**20 per stream, batch {BATCH}, match rate 2; {base['machine']}")
    head = (
        "index",
        "M tuples/s",
        "x bplus",
        "core busy",
        "probe ns",
        "ins+exp ns",
        "index ns",
        "B/item",
        "x bplus",
        "B/tuple",
        "x copy",
        "x dep.",
    )
    print(f"{head[0]:12s}" + "".join(f"{h:>11s}" for h in head[1:]))
    for config in (c for c in CONFIGS if c in JOIN and c in ALONE):
        j, a = JOIN[config], ALONE[config]
        index_ns = a["probe_ns_per_tuple"] + a["insert_expire_ns_per_tuple"]
        cells = (
            f"{j['input_tuples_per_s'] / 1e6:.3f}",
            f"{j['input_tuples_per_s'] / base['input_tuples_per_s']:.2f}",
            f"{j['core_busy_share']:.0%}",
            f"{a['probe_ns_per_tuple']:.0f}",
            f"{a['insert_expire_ns_per_tuple']:.0f}",
            f"{index_ns:.0f}",
            f"{a['bytes_per_item']:.1f}",
            f"{a['bytes_per_item'] / base_alone['bytes_per_item']:.2f}",
            f"{a['bytes_per_tuple']:.0f}",
            f"{a['bandwidth_fraction']:.2f}",
            f"{a['dependent_multiple']:.1f}",
        )
        print(f"{config:12s}" + "".join(f"{c:>11s}" for c in cells))
    roof = next((a["roofline"] for a in ALONE.values()), None)
    if roof:
        print(
            f"roofline: {roof}; x copy: the index alone as a fraction of the copy-bandwidth "
            "bound for the bytes its model moves per tuple (B/tuple, indexes.traffic); "
            "x dep.: as a multiple of a fully dependent walk of its cold lines"
        )
