"""Where the processors' time goes while a Ray run joins, from the kernel's scheduler: every
thread's time on a processor, the processors' idle time, and how long woken threads waited
for a processor, inside the run's elapsed window (first ingest to last pair).

    python benchmarks/ray_sched_trace.py [--paced] [LAYOUT ...]

LAYOUT: names of ``streamjoin.runtime.sim.fidelity.CHECK_LAYOUTS`` (default: grid(2, 2)), each
run once on Ray on the check's workload (band join at match rate 2, count window 8,192), after
a small warm-up run: unpaced, 1,200,000 tuples in batches of 1,024; with ``--paced``, two
seconds of input at a quarter of that run's rate, a batch per 10 ms (the check's paced mode;
an unpaced run first gives the rate). ``perf sched record -a -k monotonic`` traces the run
(so its clock is the driver's ``time.monotonic_ns``), ``perf sched timehist`` lists every
switch, and the window's share of each is summed by group: the actors' processes (their
hosts' threads, which read their edges, step and send, and Ray's threads in them; the most
used thread names are listed, but Ray renames a thread by the task it runs, so a name does
not tell which is which), the driver's main thread (the emitter: it reads the input, cuts
batches and sends them), the driver's other threads, everything else (kernel threads, Ray's
daemons, other jobs), and idle. Per group also the wake-ups and how long they waited for a
processor (the scheduler's delay), and how much of that wait the other processors were
idle. Paced runs add each group's time per batch.

Needs ``perf`` with the ``sched`` tracepoints (root, or ``kernel.perf_event_paranoid`` at
most 1). The trace adds some overhead of its own (a run here was about 5% slower under it).
The simulator's check (``streamjoin calibrate --check``) compares each actor's steps and
process CPU; this says what else a layout's run spends the processors on, and whether they
idle while work waits.
"""

from __future__ import annotations

import bisect
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import streamjoin as sj
from streamjoin.runtime.sim import fidelity

#: One line of ``perf sched timehist``: time, [cpu], task, wait, scheduler delay, run (ms).
_LINE = re.compile(r"^\s*([\d.]+)\s+\[(\d+)\]\s+(\S.*?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def ids(task: str) -> tuple[int, int]:
    """``(tid, pid)`` of a ``perf sched timehist`` task, ``name[tid/pid]`` or ``name[pid]``."""
    parts = task[task.rindex("[") + 1 : -1].split("/")
    return int(parts[0]), int(parts[-1])


def group(task: str, driver: int, actors: set[int]) -> str:
    """The group of a task: idle, the actors' processes (every thread of a process one of
    whose threads is named ``ray::Host...``: Ray renames threads by the task they run, so
    within a process names do not tell the host's threads from Ray's), the driver's main
    thread, its other threads, or other."""
    if task == "<idle>":
        return "idle"
    tid, pid = ids(task)
    if pid in actors:
        return "actors' processes"
    if pid == driver:
        return "driver (emitter)" if tid == driver else "driver's other threads"
    return "other"


def switches(path: str) -> list[tuple[float, int, str, float, float]]:
    """``(end s, cpu, task, scheduler delay s, run s)`` of every switch in the trace."""
    out = subprocess.run(
        ["perf", "sched", "timehist", "-i", path], capture_output=True, text=True, check=True
    ).stdout
    rows = []
    for line in out.splitlines():
        m = _LINE.match(line)
        if m:
            t, cpu, task, _, delay, run = m.groups()
            rows.append((float(t), int(cpu), task, float(delay) / 1e3, float(run) / 1e3))
    return rows


def report(rows, lo: float, hi: float, cpus: int, batches: int | None) -> None:
    """Sum each group's time on the processors, its wake-ups' waits and the idle time
    inside ``[lo, hi]`` (s, monotonic)."""
    driver = os.getpid()
    actors = {ids(task)[1] for _, _, task, _, _ in rows if task.startswith("ray::Host")}
    used: collections.Counter = collections.Counter()
    tasks: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    idle: dict[int, list[tuple[float, float]]] = collections.defaultdict(list)
    for t, cpu, task, _, run in rows:
        a, b = max(t - run, lo), min(t, hi)
        if b > a:
            g = group(task, driver, actors)
            used[g] += b - a
            tasks[g][re.sub(r"\[.*", "", task)] += b - a  # by thread name
            if g == "idle":
                idle[cpu].append((a, b))
    starts = {c: [a for a, _ in iv] for c, iv in idle.items()}

    def idle_elsewhere(cpu: int, a: float, b: float) -> float:
        total = 0.0
        for c, iv in idle.items():
            if c == cpu:
                continue
            i = max(0, bisect.bisect_right(starts[c], a) - 1)
            while i < len(iv) and iv[i][0] < b:
                total += max(0.0, min(b, iv[i][1]) - max(a, iv[i][0]))
                i += 1
        return total

    waits: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for t, cpu, task, delay, run in rows:
        start = t - run
        if delay > 0 and lo <= start <= hi:
            w = waits[group(task, driver, actors)]
            w[0] += 1
            w[1] += delay
            w[2] += idle_elsewhere(cpu, start - delay, start)
    span = cpus * (hi - lo)
    print(f"  window {hi - lo:.3f} s on {cpus} processors ({span:.3f} processor-s)")
    for g, v in used.most_common():
        per = f"  {v / batches * 1e3:6.3f} ms a batch" if batches else ""
        n, wait, wasted = waits.get(g, (0, 0.0, 0.0))
        woke = (
            f"  {n} wake-ups waited {wait * 1e3:.1f} ms ({wasted * 1e3:.1f} ms of it with a "
            "processor idle)"
            if n
            else ""
        )
        print(f"    {g:26} {v:7.3f} s  {v / span:5.3f}{per}{woke}")
        if g in ("other", "actors' processes"):
            top = ", ".join(f"{k} {x * 1e3:.0f} ms" for k, x in tasks[g].most_common(4))
            print(f"      the most: {top}")


def traced_run(query, data, topo, *, pace: float | None, chunk: int) -> tuple:
    """Run once under ``perf sched record``; returns the metrics, the window and the rows."""
    kw: dict = {"batch_size": chunk, "chunk_rows": chunk, "collect": "count", "progress": False}
    if pace is not None:
        kw |= {"pace": pace, "max_delay": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sched.data")
        perf = subprocess.Popen(
            ["perf", "sched", "record", "-a", "-k", "monotonic", "-o", path],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # perf is recording
        try:
            m = sj.run(query, data, topo, backend="ray", **kw).metrics
        finally:
            time.sleep(0.1)
            perf.send_signal(signal.SIGINT)
            perf.wait()
        rows = switches(path)
    lo, hi = (t / 1e9 for t in m["window_ns"])
    return m, (lo, hi), rows


def main(args: list[str]) -> None:
    if shutil.which("perf") is None:
        sys.exit("needs perf (linux-perf) with the sched tracepoints")
    paced = "--paced" in args
    names = [a for a in args if a != "--paced"] or ["grid(2, 2)"]
    cpus = os.cpu_count() or 1
    query, data = fidelity.workload(1_200_000, 2**13, False)
    sj.run(query, data.slice(0, 20_000), sj.topologies.single(), backend="ray", progress=False)
    print(f"load average {os.getloadavg()[0]:.2f}, {cpus} processors")
    for name in names:
        make, inequality = fidelity.CHECK_LAYOUTS[name]
        q, d = (query, data) if not inequality else fidelity.workload(1_200_000, 2**13, True)
        pace, chunk, batches = None, 1024, None
        if paced:  # the check's pace: a quarter of the unpaced rate, a batch per 10 ms
            flood = sj.run(q, d, make(), backend="ray", batch_size=1024, progress=False)
            pace = float(max(100.0, round(0.25 * flood.metrics["input_tuples_per_s"], -2)))
            chunk = max(1, int(pace * 0.010))
            d = d.slice(0, int(2 * pace))
            batches = -(-len(d) // chunk)
        m, (lo, hi), rows = traced_run(q, d, make(), pace=pace, chunk=chunk)
        lat = m["latency_ms"]
        mode = f"paced at {pace:,.0f} tuples/s, {batches} batches" if paced else "unpaced"
        print(
            f"{name}, {mode}: {m['input_tuples_per_s']:,.0f} tuples/s, latency p50 "
            f"{lat['p50']:.2f} ms, mean {lat['mean']:.2f} ms"
        )
        report(rows, lo, hi, cpus, batches)


if __name__ == "__main__":
    main(sys.argv[1:])
