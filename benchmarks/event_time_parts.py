"""Where out-of-order input's time goes in the default job: the join core, the emitter (and of
it the reorder buffer's push and the stamping of released rows) and the collector, in
milliseconds over one run, beside the same input in order.

    python benchmarks/event_time_parts.py [ROUNDS]

Three configurations of ``benchmarks/event_time_cost.py`` (its :func:`workload`: in order
without lateness, in order with ``lateness`` 1 s, every row up to 1 s late with ``lateness``
1 s), run in turn in one process; each method below is wrapped with a timer (about a microsecond a call, a few hundred
calls a run). Prints the median over the rounds of each part's total and of the run's wall
time. Use it to see which part a change to the reorder path moved; compare whole runs with
``event_time_cost.py``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections import defaultdict

import streamjoin as sj
from streamjoin.actors import collector, emitter, join_core
from streamjoin.event_time import ReorderBuffer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from event_time_cost import workload  # noqa: E402  (a script beside this one)

PARTS = {
    "join core": (join_core.JoinCore, "on_batch"),
    "emitter": (emitter.Emitter, "on_chunk"),
    "  reorder push": (ReorderBuffer, "push"),
    "  released rows, stamped": (emitter.Emitter, "_pend_released"),
    "collector": (collector.Collector, "on_batch"),
    "  latency histogram": (collector.LatencyHistogram, "add"),
}


def _timed(spent: dict, part: str, fn):
    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[part] += time.perf_counter() - t

    return timed


def main(rounds: int = 5) -> None:
    configs = workload(1000)
    del configs["lateness 0"]
    spent: dict[str, float] = defaultdict(float)
    for part, (cls, name) in PARTS.items():
        setattr(cls, name, _timed(spent, part, getattr(cls, name)))
    for query, data in configs.values():  # every kernel warm first, untimed
        sj.run(query, data.slice(0, 20_000), sj.topologies.single(), progress=False)
    got: dict[str, dict[str, list[float]]] = {k: defaultdict(list) for k in configs}
    for _ in range(rounds):
        for k, (query, data) in configs.items():
            spent.clear()
            t = time.perf_counter()
            sj.run(query, data, sj.topologies.single(), collect="count", progress=False)
            got[k]["run"].append(time.perf_counter() - t)
            for part in PARTS:
                got[k][part].append(spent[part])
    print(f"{'ms, median of ' + str(rounds):<34}" + "".join(f"{k:>17}" for k in configs))
    for part in [*PARTS, "run"]:
        cells = "".join(f"{statistics.median(got[k][part]) * 1e3:>17.2f}" for k in configs)
        print(f"{part:<34}{cells}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
