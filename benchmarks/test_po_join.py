"""``po_join`` against the nested loop and the tree indexes with a residual filter, side by side
(pytest-benchmark).

Run: ``python -m pytest benchmarks/test_po_join.py --benchmark-enable -o addopts=""
-p no:cacheprovider -s`` (``-s`` prints the tables).

Workload (the issue's speed target): ``r.a < s.a AND r.b > s.b`` with ``a`` uniform and
``b = a`` plus gaussian noise whose width gives about 2 matches per probe (each condition alone
matches about half the window; :func:`~streamjoin.sources.inequality_workload`), count window
``W = 2**16`` per stream, ``N = 4 W = 262,144`` input tuples, batches of 1024, one join core.

- ``test_join_core``: a join core per index, its windows filled by inserting the first ``2 W``
  tuples (no probes: the tree indexes would spend an hour probing while filling), then the
  next batches joined round by round, the indexes taking turns (A B C … A B C …: the shared
  machine's speed drifts), CPU time per round; medians and the ratios to ``po_join`` per round.
- ``test_run``: the whole ``sj.run`` (emitter, core, collector) over all ``N`` tuples for
  ``po_join`` and ``nested_loop``, alternating, CPU and wall time.
- ``test_index_alone``: ``po_join`` alone at ``W`` items: probe ns per probing tuple (a batch's
  512 keys of one stream), insert + merge + expire ns per inserted tuple.

The 1-minute load average is recorded before and after each; the machine is shared.
"""

import os
import time

import numpy as np
import pytest

import streamjoin as sj
from streamjoin import indexes
from streamjoin.actors.emitter import Emitter
from streamjoin.actors.join_core import JoinCore
from streamjoin.validation import validate

W = 2**16
N = 4 * W
BATCH = 1024
QUERY = sj.Query(sj.less("a") & sj.greater("b"), window=sj.CountWindow(W))
#: the tree indexes serve r.a < s.a and filter r.b > s.b on half the window per probe
CONFIGS = {
    "po_join": ("po_join", {}),
    "nested_loop": ("nested_loop", {}),
    "bisort": ("bisort", {}),
    "pim_tree": ("pim_tree", {"window": W}),
    "bplus_tree": ("bplus_tree", {}),
}
ROUNDS, PER_ROUND = 5, 6  # batches joined per index and round (after the fill)
RESULTS: dict[str, dict] = {}


@pytest.fixture(scope="module")
def batches():
    data = sj.sources.inequality_workload(N, W, seed=1)
    emitter = Emitter(QUERY, batch_size=BATCH)
    out = [b for _, b in emitter.on_chunk(validate(data, QUERY)) + emitter.on_eof()]
    return data, out


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def test_join_core(benchmark, batches):
    RESULTS["join_core"] = _join_cores(benchmark, batches, CONFIGS)


#: δ candidates for DEFAULT_MERGE_EVERY, on the same workload
DELTAS = {
    f"po_join δ={d}": ("po_join", {"merge_every": d}) for d in (1024, 2048, 4096, 8192, 16384)
}


def test_merge_every(benchmark, batches):
    """The join core at steady state for each δ, taking turns: DEFAULT_MERGE_EVERY's choice."""
    RESULTS["merge_every"] = _join_cores(benchmark, batches, DELTAS)


def _join_cores(benchmark, batches, configs: dict) -> dict:
    _, stream = batches
    fill = 2 * W // BATCH
    cores = {}
    for name, (index, options) in configs.items():
        core = JoinCore(QUERY, index, options)
        core.warm()
        for batch in stream[:fill]:  # fill the windows: store and index, no probes
            spec = core.spec
            batch = batch.freeze()
            for y in spec.streams:
                ys, keys, order = spec.in_key_order(batch, y)
                core.parts[y].insert(batch, ys, keys=keys, order=order)
                core.parts[y].expire(int(batch.horizon[y]))
        cores[name] = core
    per_round = {name: [] for name in configs}
    pairs = dict.fromkeys(configs, 0)
    load = [_load()]

    def rounds():
        for r in range(ROUNDS):
            segment = stream[fill + r * PER_ROUND : fill + (r + 1) * PER_ROUND]
            for name, core in cores.items():
                c0 = time.process_time()
                for batch in segment:
                    for _, p in core.on_batch("in", batch):
                        pairs[name] += len(p)
                per_round[name].append((time.process_time() - c0) / (len(segment) * BATCH))

    benchmark.pedantic(rounds, rounds=1, iterations=1)
    load.append(_load())
    base = np.array(next(iter(per_round.values())))
    table = {}
    for name, times in per_round.items():
        t = np.array(times)
        table[name] = {
            "cpu_ns_per_tuple": float(np.median(t) * 1e9),
            "tuples_per_cpu_s": float(1 / np.median(t)),
            "cpu_ratio_to_first": float(np.median(t / base)),
            "pairs_per_tuple": pairs[name] / (ROUNDS * PER_ROUND * BATCH),
        }
    benchmark.extra_info.update({"join_core": table, "load_1min": load})
    assert len({round(v["pairs_per_tuple"], 6) for v in table.values()}) == 1  # same answer
    return {"table": table, "load": load}


def test_run(benchmark, batches):
    data, _ = batches
    names = ("po_join", "nested_loop")
    topos = {n: sj.topologies.single(n) for n in names}
    for topo in topos.values():  # kernels loaded before the timed runs
        sj.run(QUERY, data.slice(0, 5000), topo, batch_size=BATCH, collect="count")
    cpu = {n: [] for n in names}
    wall = {n: [] for n in names}
    load = [_load()]

    def runs():
        for _ in range(2):
            for n in names:
                c0, w0 = time.process_time(), time.perf_counter()
                res = sj.run(QUERY, data, topos[n], batch_size=BATCH, collect="count")
                cpu[n].append(time.process_time() - c0)
                wall[n].append(time.perf_counter() - w0)
                assert 1.3 < res.count / N < 2.1

    benchmark.pedantic(runs, rounds=1, iterations=1)
    load.append(_load())
    table = {
        n: {
            "tuples_per_cpu_s": N / float(np.median(cpu[n])),
            "tuples_per_wall_s": N / float(np.median(wall[n])),
        }
        for n in names
    }
    ratio = float(np.median(np.array(cpu["nested_loop"]) / np.array(cpu["po_join"])))
    benchmark.extra_info.update({"run": table, "cpu_ratio": ratio, "load_1min": load})
    RESULTS["run"] = {"table": table, "cpu_ratio": ratio, "load": load}


def test_index_alone(benchmark):
    rng = np.random.default_rng(1)
    sigma = 2 * np.sqrt(np.pi) / W

    def keys(n):
        a = rng.uniform(0, 1, n)
        return np.stack([a, a + rng.normal(0, sigma, n)])

    index = indexes.get("po_join")(2)
    ref = 0
    for _ in range(W // 512):
        index.insert(keys(512), np.arange(ref, ref + 512))
        ref += 512
    lo, hi = np.array([5e-324, -np.inf]), np.array([np.inf, -5e-324])
    index.probe(keys(512), lo, hi)
    probe_ns, insert_ns = [], []
    load = [_load()]

    def steps():
        nonlocal ref
        for _ in range(128):
            k = keys(512)
            c0 = time.process_time()
            index.probe(k, lo, hi)
            c1 = time.process_time()
            index.insert(keys(512), np.arange(ref, ref + 512))
            ref += 512
            index.expire(ref - W)
            c2 = time.process_time()
            probe_ns.append((c1 - c0) / 512 * 1e9)
            insert_ns.append((c2 - c1) / 512 * 1e9)

    benchmark.pedantic(steps, rounds=1, iterations=1)
    load.append(_load())
    info = {
        "probe_ns_per_tuple": float(np.median(probe_ns)),
        "insert_merge_expire_ns_per_tuple": float(np.median(insert_ns)),
        "structures": index.n_structures,
        "bytes_per_item": index.nbytes / len(index),
        "load_1min": load,
    }
    benchmark.extra_info.update(info)
    RESULTS["alone"] = info


def test_summary():
    for key in ("join_core", "merge_every"):
        if key not in RESULTS:
            continue
        r = RESULTS[key]
        first = next(iter(r["table"]))
        print(f"\njoin core, steady state at W = 2^16, load {r['load']}")
        print(f"{'index':<20}{'ns/tuple':>12}{'tuples/cpu-s':>15}{'x ' + first:>22}")
        for name, v in r["table"].items():
            print(
                f"{name:<20}{v['cpu_ns_per_tuple']:>12,.0f}{v['tuples_per_cpu_s']:>15,.0f}"
                f"{v['cpu_ratio_to_first']:>22.2f}"
            )
    if "run" in RESULTS:
        r = RESULTS["run"]
        print(f"\nsj.run over {N:,} tuples, load {r['load']}")
        for name, v in r["table"].items():
            print(
                f"{name:<14}{v['tuples_per_cpu_s']:>12,.0f} tuples/cpu-s"
                f"{v['tuples_per_wall_s']:>12,.0f} tuples/s wall"
            )
        print(f"nested_loop / po_join CPU time: {r['cpu_ratio']:.1f}")
    if "alone" in RESULTS:
        print(f"\npo_join alone: {RESULTS['alone']}")
