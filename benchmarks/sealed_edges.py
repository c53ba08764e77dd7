"""What sealing the ``ray`` executor's frames costs: one edge, and a whole Ray run.

    python benchmarks/sealed_edges.py [ROUNDS] [TUPLES]

- *one edge*: a sender (this process) and a receiver (a process of its own, as two actors
  are) on a loopback edge; the sender writes 200 frames of a 16K-tuple batch (one join
  attribute) and the end frame, the receiver reads each back into a ``Batch``; frames per
  second and bytes per second (of the plain frames) from the receiver's first frame to its
  end frame, sealed against plain;
- *Ray run*: ``grid(2, 2)`` on Ray, band join at match rate 2, count window 2^16 per stream,
  batches of 16K, TUPLES input tuples (default 1,000,000), ``encrypt_edges`` on against off;
  the run's input tuples per second (first ingest to last pair).

Sealed and plain runs alternate (A B A B ..., so a drifting host moves them alike), after one
untimed run of each. Prints the medians and the ratio sealed / plain of each round (median,
min, max) with the load average before and after.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import sys
import time

import numpy as np

import streamjoin as sj
from streamjoin.batch import Batch
from streamjoin.runtime.ray import channels

SECRET = bytes(range(32))
FRAMES = 200
BATCH = 16_384


def _batch(n: int) -> Batch:
    rng = np.random.default_rng(0)
    z = np.arange(n, dtype=np.int64)
    return Batch(z, (z % 2).astype(np.int8), z, z, z, z, rng.normal(size=(1, n)))


def _receive(server, sealed: bool, report) -> None:
    channel = channels.accept_edges(server, SECRET, ["sender"], sealed=sealed)["sender"]
    channel.recv()
    t0 = time.perf_counter()
    n = 1
    while channel.recv() is not channels.END:
        n += 1
    report.send((n, time.perf_counter() - t0))
    channel.close()


def one_edge(sealed: bool) -> tuple[float, float]:
    """``(frames/s, bytes/s)`` of one loopback edge between two processes."""
    server = channels.listen("127.0.0.1")
    mine, theirs = mp.Pipe()
    receiver = mp.get_context("fork").Process(target=_receive, args=(server, sealed, theirs))
    receiver.start()
    frame = channels.frame("row", channels.payload(_batch(BATCH)))
    size = sum(memoryview(p).nbytes for p in frame)
    channel = channels.connect(server.getsockname()[:2], "sender", SECRET, sealed=sealed)
    for _ in range(FRAMES):
        channel.send([frame])
    channel.send([channels.end_frame()])
    n, seconds = mine.recv()
    receiver.join()
    channel.close()
    server.close()
    return (n - 1) / seconds, (n - 1) * size / seconds


def ray_run(query, data, encrypt: bool) -> float:
    topology = sj.topologies.grid(2, 2)
    result = sj.run(
        query,
        data,
        topology,
        backend="ray",
        batch_size=BATCH,
        collect="count",
        progress=False,
        encrypt_edges=encrypt,
    )
    return result.metrics["input_tuples_per_s"]


def _report(name: str, unit: str, runs: dict[bool, list[float]]) -> None:
    ratios = [a / b for a, b in zip(runs[True], runs[False], strict=True)]
    print(
        f"{name:<22} sealed {statistics.median(runs[True]):>14,.0f} {unit}   plain "
        f"{statistics.median(runs[False]):>14,.0f} {unit}   sealed / plain: median "
        f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})"
    )


def main(rounds: int = 5, tuples: int = 1_000_000) -> None:
    load = os.getloadavg()[0]
    frames: dict[bool, list[float]] = {True: [], False: []}
    rates: dict[bool, list[float]] = {True: [], False: []}
    one_edge(True), one_edge(False)  # untimed
    for _ in range(rounds):
        for sealed in (True, False):
            f, b = one_edge(sealed)
            frames[sealed].append(f)
            rates[sealed].append(b)
    print(f"one edge: {FRAMES} frames of {BATCH:,} tuples, {rounds} rounds")
    _report("  frames", "frames/s", frames)
    _report("  bytes", "B/s", rates)

    data = sj.sources.synthetic(tuples, low=0, high=10 * tuples, seed=1)
    x, s = data.column("x").to_numpy(), data.column("stream").to_numpy()
    eps = sj.sources.band_for_match_rate(x[s == 0], x[s == 1], window=2**16, match_rate=2)
    query = sj.Query(sj.band("x", eps), window=sj.CountWindow(2**16))
    ray_run(query, data, True), ray_run(query, data, False)  # untimed: Ray starts, kernels load
    runs: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(rounds):
        for encrypt in (True, False):
            runs[encrypt].append(ray_run(query, data, encrypt))
    print(f"Ray grid(2, 2): {tuples:,} tuples, W = 2^16, batches of {BATCH:,}, {rounds} rounds")
    _report("  input", "tuples/s", runs)
    print(f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
