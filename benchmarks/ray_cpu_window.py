"""Where a Ray run's processor time goes while it joins: every process's CPU inside the run's
elapsed window (first ingest to last pair), by group (the actors' hosts, the driver, Ray's own
processes), against the processors' time the window offers.

    python benchmarks/ray_cpu_window.py [LAYOUT ...]

LAYOUT: names of ``streamjoin.runtime.sim.fidelity.CHECK_LAYOUTS`` (default: single,
handshake(2), grid(2, 2)), each run once unpaced on the check's workload at twice its size
(600,000 tuples, band join at match rate 2, count window 8,192, batches of 1,024), after a
small warm-up run. A thread samples ``/proc/*/stat`` every 10 ms; the samples nearest the
window's ends bound it (the kernel counts in ticks of ``1 / SC_CLK_TCK`` s: a few percent on
a window of a few hundred ms). The sampling thread runs in the driver's process and reads
every process's file each time, which costs about as much CPU as the driver's own work: its
CPU (its thread's, taken with each sample) is left out of the driver's. Linux only.

What the simulator's check (``streamjoin calibrate --check``) compares per actor is each
actor's steps; this shows the CPU a layout needs beside them (the actors' reader threads and
runtime, the driver, Ray's processes) and whether the host was saturated.
"""

from __future__ import annotations

import collections
import glob
import os
import sys
import threading
import time

import streamjoin as sj
from streamjoin.runtime import result
from streamjoin.runtime.sim import fidelity

HZ = os.sysconf("SC_CLK_TCK")


def processes() -> dict[int, tuple[str, int]]:
    """Every process's name and CPU ticks (user + system) now."""
    out = {}
    for path in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(path) as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rindex(")") + 2 :].split()
        out[int(path.split("/")[2])] = (
            s[s.index("(") + 1 : s.rindex(")")],
            int(fields[11]) + int(fields[12]),
        )
    return out


def group(pid: int, name: str) -> str:
    if name.startswith("ray::"):
        return "actors' hosts"
    if pid == os.getpid():
        return "driver"
    if name in ("raylet", "gcs_server") or "ray" in name.lower() or "dashboard" in name:
        return "Ray's processes"
    return "other"


def main(names: list[str]) -> None:
    samples: list[tuple[int, dict]] = []
    done = threading.Event()

    def sample() -> None:  # each sample with this thread's CPU (ns) so far
        while not done.is_set():
            samples.append((time.monotonic_ns(), processes(), time.thread_time_ns()))
            time.sleep(0.01)

    window: dict[str, int] = {}
    from_trace = result.Result.from_trace.__func__

    def keep_start(cls, trace, *args, **kwargs):  # the window's start, in monotonic ns
        window["start"] = trace.start_ns
        return from_trace(cls, trace, *args, **kwargs)

    result.Result.from_trace = classmethod(keep_start)
    threading.Thread(target=sample, daemon=True).start()
    query, data = fidelity.workload(600_000, 2**13, False)
    sj.run(query, data.slice(0, 10_000), sj.topologies.single(), backend="ray", progress=False)
    cpus = os.cpu_count() or 1
    print(f"load average {os.getloadavg()[0]:.2f}, {cpus} processors")
    for name in names:
        make, inequality = fidelity.CHECK_LAYOUTS[name]
        q, d = (query, data) if not inequality else fidelity.workload(600_000, 2**13, True)
        m = sj.run(
            q,
            d,
            make(),
            backend="ray",
            batch_size=1024,
            chunk_rows=1024,
            collect="count",
            progress=False,
        ).metrics
        time.sleep(0.05)
        start = window["start"]
        end = start + int(m["elapsed_s"] * 1e9)
        s0 = min(samples, key=lambda s: abs(s[0] - start))
        s1 = min(samples, key=lambda s: abs(s[0] - end))
        span = (s1[0] - s0[0]) / 1e9
        used: collections.Counter = collections.Counter()
        for pid, (proc, ticks) in s1[1].items():
            used[group(pid, proc)] += (ticks - s0[1].get(pid, (proc, 0))[1]) / HZ
        used["driver"] -= (s1[2] - s0[2]) / 1e9  # the sampling thread's own
        total = sum(used.values())
        print(
            f"{name}: {m['input_tuples_per_s']:,.0f} tuples/s, elapsed {m['elapsed_s']:.3f} s "
            f"(sampled {span:.3f} s): {total:.2f} CPU-s, {total / (cpus * span):.2f} of the processors"
        )
        for g, v in used.most_common():
            if v > 0:
                print(f"    {g:18} {v:.3f} CPU-s")
    done.set()


if __name__ == "__main__":
    main(sys.argv[1:] or ["single", "handshake(2)", "grid(2, 2)"])
