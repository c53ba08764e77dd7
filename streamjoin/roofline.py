"""This machine's memory roofline: what one thread can stream, and what one dependent miss
costs, measured in the process that measures an index beside it.

A window index at W = 2^20 is bound by memory, not by instructions: either by the bytes it
must move per tuple (merges, copies, leaves fetched whole) or by the misses it must wait for
one after another (a descent whose next node depends on the last). Two numbers bound both:

- **copy bandwidth** (:func:`copy_bandwidth`): bytes read plus bytes written per second by one
  thread copying a buffer far larger than the caches (STREAM's *copy* convention);
- **dependent-load latency** (:func:`dependent_load_ns`): ns per load when each address comes
  from the load before it (a pointer chase through a random single cycle of cache lines over
  a buffer far larger than the caches, so every load misses every cache and the TLB often).

A result is then reported as a fraction of its bound (:meth:`Roofline.fraction`): tuples/s
against ``min(bandwidth / bytes_per_tuple, 1 / (misses_per_tuple · latency))``, with the bytes
and the dependent misses per tuple written down per index from its code. A fraction near 1
says the index moves what it must as fast as the machine lets it; far below, that it does
something else (instructions, branch misses, lock traffic, Python).

Both measurements are single-threaded and wall-clock: on a shared machine take them in the
same run as the figure they bound, as the benchmarks do.

A parallel join is bounded by a third number: **the machine's two-thread speed-up**
(:func:`two_thread_speedup`), what two threads doing independent work at once deliver
against one thread alone. On a dedicated 2-core machine it is 2; on a VM whose virtual cores
share a physical core or a busy host it is less, and it varies from minute to minute (on the
2-core Xeon VM of 2026-11-27, 0.9–2.0 for dependent misses and 1.6–2.1 for arithmetic, with up
to 14% of its time stolen by the host). Report a parallel join's speed-up beside it, measured in the same run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit

#: Buffer size of both measurements: far beyond any last-level cache here (the VM reports
#: 16-32 MiB shared).
DEFAULT_BYTES = 256 * 2**20
_LINE = 64


@njit(cache=True, nogil=True)
def _copy(src, dst):
    for i in range(src.shape[0]):
        dst[i] = src[i]


@njit(cache=True, nogil=True)
def _chase(next_line, start, loads):
    """Follow ``next_line`` (int64, one slot used per cache line) ``loads`` times."""
    at = start
    for _ in range(loads):
        at = next_line[at]
    return at


@njit(cache=True, nogil=True)
def _arith(rounds):
    """Two independent chains of multiply-adds: instructions only, no memory."""
    x, y = 1.0, 0.5
    for _ in range(rounds):
        x = x * 1.0000001 + 1e-9
        y = y * 0.9999999 + 1e-9
    return x + y


def random_cycle(n: int, seed: int = 0) -> np.ndarray:
    """A random cyclic permutation of ``range(n)`` (Sattolo's algorithm): following it from
    any element visits all ``n`` before it returns. int64 ``(n,)``."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)  # visit order; close it into one cycle
    cycle = np.empty(n, dtype=np.int64)
    cycle[order[:-1]] = order[1:]
    cycle[order[-1]] = order[0]
    return cycle


def copy_bandwidth(nbytes: int = DEFAULT_BYTES, repeats: int = 5) -> float:
    """One thread's copy bandwidth in GB/s (10^9 bytes; read plus written), best of
    ``repeats`` copies of an ``nbytes`` buffer (the pages touched before the first)."""
    n = max(1, nbytes // 8)
    src = np.ones(n)
    dst = np.zeros(n)
    _copy(src[:8], dst[:8])  # compile outside the timed copies
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        _copy(src, dst)
        best = min(best, time.perf_counter() - t0)
    return 2 * n * 8 / best / 1e9


def dependent_load_ns(nbytes: int = DEFAULT_BYTES, loads: int = 2_000_000, seed: int = 0) -> float:
    """ns per load of a pointer chase through a random single cycle of the cache lines of an
    ``nbytes`` buffer: each address depends on the last load, so no two overlap."""
    lines = max(2, nbytes // _LINE)
    per_line = _LINE // 8
    cycle = random_cycle(lines, seed)
    # slot 0 of line i holds the slot-0 index of the next line
    next_line = np.zeros(lines * per_line, dtype=np.int64)
    next_line[::per_line] = cycle * per_line
    _chase(next_line, 0, 16)  # compile outside the timed chase
    warm = min(loads, lines)
    at = _chase(next_line, 0, warm)
    t0 = time.perf_counter()
    _chase(next_line, at, loads)
    return (time.perf_counter() - t0) / loads * 1e9


def _at_once(fn, args: list) -> float:
    """Seconds until ``fn(*a)`` has run for every ``a`` in ``args``, each on its own thread,
    all started together (``fn`` is a ``nogil`` kernel, so they do run at once)."""
    threads = [threading.Thread(target=fn, args=a) for a in args]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def two_thread_speedup(
    kind: str = "chase", nbytes: int = DEFAULT_BYTES // 2, repeats: int = 3, work: int = 2_000_000
) -> float:
    """Throughput of two threads running the same kernel at once, each on its own data,
    against one thread alone: ``2 · t_one / t_two``, the median of ``repeats`` alternating
    pairs. ``kind``: ``"chase"``, dependent misses over an ``nbytes`` buffer per thread (what
    an index's descents wait for), or ``"arith"``, multiply-adds in registers. 2.0 on two
    free cores; what a parallel join's speed-up on two threads can reach here at most.
    ``work``: loads per thread (``"arith"``: 50 rounds each)."""
    fn: Callable[..., object]
    one: list[tuple]
    two: list[tuple]
    if kind == "chase":
        lines = max(2, nbytes // _LINE)
        per_line = _LINE // 8
        bufs = []
        for seed in (1, 2):
            next_line = np.zeros(lines * per_line, dtype=np.int64)
            next_line[::per_line] = random_cycle(lines, seed) * per_line
            _chase(next_line, 0, min(lines, 1_000_000))  # compiled, pages touched
            bufs.append(next_line)
        fn, one, two = _chase, [(bufs[0], 0, work)], [(b, 0, work) for b in bufs]
    elif kind == "arith":
        _arith(8)
        fn, one, two = _arith, [(50 * work,)], [(50 * work,)] * 2
    else:
        raise ValueError(f"kind must be 'chase' or 'arith', got {kind!r}")
    ratios = []
    for _ in range(repeats):
        t_one = _at_once(fn, one)
        t_two = _at_once(fn, two)
        ratios.append(2 * t_one / t_two)
    return float(np.median(ratios))


#: The kinds of processor time ``/proc/stat`` counts, in its order.
TICK_KINDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def processor_ticks() -> np.ndarray | None:
    """This machine's processor time so far by kind (:data:`TICK_KINDS`), in clock ticks
    (``USER_HZ``, commonly 100 a second) summed over its processors: ``/proc/stat``'s first
    line (None where there is none). A difference over a phase is good to a tick."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 1 + len(TICK_KINDS):
        return None
    return np.array([int(x) for x in fields[1 : 1 + len(TICK_KINDS)]], dtype=np.float64)


def cpu_times() -> tuple[int, int] | None:
    """``(stolen, total)`` processor time of this machine so far, in clock ticks summed over
    its processors (``/proc/stat``; None where there is none). Stolen time is what the host of
    a virtual machine ran elsewhere while this one had work: take the difference over a timed
    phase (:func:`steal_share`) to tell a slow figure from a slow moment."""
    ticks = processor_ticks()
    if ticks is None:
        return None
    return int(ticks[TICK_KINDS.index("steal")]), int(ticks.sum())


def steal_share(start: tuple[int, int] | None, end: tuple[int, int] | None) -> float:
    """The share of processor time stolen by the host between two :func:`cpu_times` (NaN
    where they are unknown)."""
    if start is None or end is None or end[1] <= start[1]:
        return float("nan")
    return (end[0] - start[0]) / (end[1] - start[1])


@dataclass(frozen=True)
class Roofline:
    """A machine's memory bounds. ``bandwidth_gbs``: one thread's copy bandwidth (GB/s, read
    plus written); ``latency_ns``: one dependent miss."""

    bandwidth_gbs: float
    latency_ns: float

    @classmethod
    def measure(cls, nbytes: int = DEFAULT_BYTES) -> Roofline:
        """Both measurements on ``nbytes`` buffers (about 2 s with the default 256 MiB)."""
        return cls(copy_bandwidth(nbytes), dependent_load_ns(nbytes))

    def bound(self, bytes_per_tuple: float = 0.0, misses_per_tuple: float = 0.0) -> float:
        """The tuples/s this machine allows a thread that must stream ``bytes_per_tuple``
        (read plus written) and wait for ``misses_per_tuple`` dependent misses per tuple:
        the lower of the two bounds (a term of 0 bounds nothing)."""
        if bytes_per_tuple < 0 or misses_per_tuple < 0:
            raise ValueError("bytes and misses per tuple must be >= 0")
        limits = []
        if bytes_per_tuple > 0:
            limits.append(self.bandwidth_gbs * 1e9 / bytes_per_tuple)
        if misses_per_tuple > 0:
            limits.append(1e9 / (misses_per_tuple * self.latency_ns))
        if not limits:
            raise ValueError("give bytes_per_tuple or misses_per_tuple")
        return min(limits)

    def fraction(
        self, tuples_per_s: float, bytes_per_tuple: float = 0.0, misses_per_tuple: float = 0.0
    ) -> float:
        """``tuples_per_s`` as a fraction of :meth:`bound`."""
        return tuples_per_s / self.bound(bytes_per_tuple, misses_per_tuple)

    def __str__(self) -> str:
        return f"copy {self.bandwidth_gbs:.1f} GB/s, dependent miss {self.latency_ns:.0f} ns"


if __name__ == "__main__":  # python -m streamjoin.roofline
    print(Roofline.measure())
    chase, arith = two_thread_speedup("chase"), two_thread_speedup("arith")
    print(f"two threads at once: {chase:.2f}x one (dependent misses), {arith:.2f}x (arithmetic)")
