"""Worker threads for a step of ``nogil`` kernels, handed their steps without a sleep between
close steps.

A shared-index core (:mod:`~streamjoin.actors.shared_index.core`) runs each step on its calling
thread and ``n`` pool threads, each in one ``nogil`` kernel. Waking a thread that sleeps on a
lock or a queue costs a futex wake: on this project's 2-core VMs about 23 µs per hand-off,
twice a step (start and end), where a step of 1,024 tuples lasts about 600 µs on two threads.
So the pool's threads and the caller meet on shared counters instead (:mod:`~streamjoin.
indexes.atomics`), in ``nogil`` kernels:

- **Start.** A worker that finished a step spins (``pause``, then ``sched_yield``) on the
  published step number ``sync[GO]`` for :data:`IDLE_US` (150 µs), then goes to sleep on its
  queue. The caller's step first *claims* each worker that is still spinning
  (compare-and-swap ``SPINNING -> CLAIMED``: a claimed worker no longer gives up) and queues
  a wake-up only for those asleep; then its own kernel publishes the step (:func:`publish`)
  once it runs without the GIL, so that the worker, on seeing it, takes a free GIL to enter
  its kernel.
- **End.** A worker publishes the step it finished as it starts to wait again (slot
  ``WORKERS + 2k + 1``); the caller, back from its own kernel, spins (without the GIL) until
  every worker has (:func:`_wait_done`).

Nothing of this changes what a step computes: which thread runs which task is decided inside
the kernel. The spinning costs CPU only between close steps (a paced run with long gaps sleeps).
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections.abc import Callable

import numpy as np
from numba import njit

from streamjoin.indexes.blocks.atomics import (
    PAD,
    atomic_cas,
    back_off,
    cpu_relax,
    cycle_count,
    load_acquire,
    store_release,
    yield_cpu,
)

#: ``sync`` slots (each ``PAD`` apart): the published step, the step to publish, then per
#: worker its state and the last step it finished.
GO, TO_PUBLISH, WORKERS = 0, 1, 2
SPINNING, CLAIMED, SLEEPING = 0, 1, 2

#: A waiting worker spins ``pause`` rounds for a start, then yields its processor round after
#: round, and sleeps once it has waited :data:`IDLE_US` by the cycle counter (or, on a
#: processor without one, after :data:`IDLE_ROUNDS` rounds). 150 µs is longer than the ~90 µs
#: a shared-index step of 1,024 tuples spends outside its kernels; a time, not a count of
#: yields, because a yield takes ~0.3 µs when nothing else runs but a time slice when more
#: threads than processors do (with 3 workers on 2 cores a count of 512 yields kept them
#: spinning ~2 ms after every step).
IDLE_SPINS = 2048
IDLE_US = 150
IDLE_ROUNDS = IDLE_SPINS + 8192


def new_sync(workers: int) -> np.ndarray:
    """The int64 counters of a pool of ``workers`` threads, all asleep, no step published."""
    sync = np.zeros((WORKERS + 2 * workers) * PAD, dtype=np.int64)
    for k in range(workers):
        sync[(WORKERS + 2 * k) * PAD] = SLEEPING
    return sync


@njit(cache=True, nogil=True, inline="always")
def publish(sync):
    """Publish the step the caller prepared (``sync[TO_PUBLISH]``): called by the caller's
    kernel once it runs without the GIL. A no-op for a pool without workers."""
    if sync.shape[0] > 0 and sync[GO * PAD] < sync[TO_PUBLISH * PAD]:
        store_release(sync, GO * PAD, sync[TO_PUBLISH * PAD])


@njit(cache=True, nogil=True)
def _cycles():
    return cycle_count()


@functools.cache
def idle_ticks() -> int:
    """:data:`IDLE_US` in cycle-counter ticks, measured once per process against the clock
    (a processor without a counter: never, and :data:`IDLE_ROUNDS` decides)."""
    _cycles()  # compiled before the clock starts
    t0, c0 = time.perf_counter(), _cycles()
    time.sleep(0.002)
    per_us = (_cycles() - c0) / ((time.perf_counter() - t0) * 1e6)
    return int(IDLE_US * per_us) if per_us > 0 else 1 << 62


@njit(cache=True, nogil=True)
def _wait_go(sync, k, last, budget):
    """Worker ``k`` (0-based) finished step ``last``: say so, then wait for a later step, at
    most ``budget`` cycle-counter ticks unless claimed. Returns the step, or -1 after going to
    sleep (the step then comes through the queue)."""
    state, done = (WORKERS + 2 * k) * PAD, (WORKERS + 2 * k + 1) * PAD
    # SPINNING before done: the caller claims only after it has read done, so its claim can
    # never be overwritten (the other order loses a claim made between the two stores, and
    # the worker sleeps with no wake-up queued)
    store_release(sync, state, SPINNING)
    store_release(sync, done, last)
    start = cycle_count()
    rounds = 0
    while True:
        go = load_acquire(sync, GO * PAD)
        if go > last:
            return go
        rounds += 1
        if rounds < IDLE_SPINS:
            cpu_relax()
            continue
        yield_cpu()
        if (
            (cycle_count() - start >= budget or rounds >= IDLE_ROUNDS)
            and load_acquire(sync, state) == SPINNING
            and atomic_cas(sync, state, SPINNING, SLEEPING) == SPINNING
        ):
            return -1
        # else claimed meanwhile: the step is about to be published, keep waiting


@njit(cache=True, nogil=True)
def _claim(sync, k):
    """Claim spinning worker ``k`` for the next step; False if it is asleep."""
    state = (WORKERS + 2 * k) * PAD
    return atomic_cas(sync, state, SPINNING, CLAIMED) == SPINNING


@njit(cache=True, nogil=True)
def _wait_done(sync, workers, step):
    """Until every worker has finished ``step``."""
    for k in range(workers):
        done = (WORKERS + 2 * k + 1) * PAD
        spins = 0
        while load_acquire(sync, done) < step:
            spins = back_off(spins)


class ThreadPool:
    """``n`` threads that each run ``fn(k)`` for their ``k`` when :meth:`run` asks, while the
    calling thread runs ``fn(0)``. ``fn(0)`` must call :func:`publish` on :attr:`sync` once it
    runs without the GIL (else the workers start only when it returns)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.sync = new_sync(n)
        self.step = 0
        self.closed = False
        self.busy = False  # a step started and not finished
        # workers still in the step, and the event the last one sets (a caller that does
        # not share the step's work sleeps on it rather than spinning)
        self._left = 0
        self._left_lock = threading.Lock()
        self._all_done = threading.Event()
        self._sleeps = [0] * n  # per worker: each counts its own
        self.fn: Callable[[int], object] | None = None
        self.results: list = [None] * (n + 1)
        self.wakes: list[queue.SimpleQueue[int]] = [queue.SimpleQueue() for _ in range(n)]
        #: what ended a worker thread outside ``fn`` (the pool then refuses steps)
        self.failure: BaseException | None = None
        # the workers' kernels, loaded here before they start: numba loading one kernel from
        # its disk cache on two threads at once failed in one of them ("generator already
        # executing"), and the thread died
        idle_ticks()
        _wait_go(new_sync(1), 0, -1, 0)  # (step 0 is past -1: returns at once)
        self.threads = [
            threading.Thread(target=self._serve, args=(k,), daemon=True, name=f"join-{k + 1}")
            for k in range(n)
        ]
        for t in self.threads:
            t.start()

    @property
    def sleeps(self) -> int:
        """Times a worker went to sleep between steps (it then woke through its queue)."""
        return sum(self._sleeps)

    def _serve(self, k: int) -> None:
        try:
            self._work(k)
        except BaseException as e:  # noqa: BLE001 (not fn's: the thread itself failed)
            self.failure = e
            # a caller waiting for this worker's step stops waiting, and raises it
            self.sync[(WORKERS + 2 * k + 1) * PAD] = 1 << 62
            self._all_done.set()

    def _work(self, k: int) -> None:
        last, budget = 0, idle_ticks()
        while True:
            go = _wait_go(self.sync, k, last, budget)
            if go < 0:  # asleep: a wake-up names the step
                self._sleeps[k] += 1
                go = self.wakes[k].get()
                if go <= last:  # a wake-up for a step this thread already ran
                    continue
            last = go
            fn = self.fn
            if fn is None:
                return
            try:
                self.results[k + 1] = fn(k + 1)
            except BaseException as e:  # noqa: BLE001 (re-raised in the caller's thread)
                self.results[k + 1] = e
            with self._left_lock:
                self._left -= 1
                if self._left == 0:
                    self._all_done.set()

    def _start(self) -> None:
        self.step += 1
        self.sync[TO_PUBLISH * PAD] = self.step
        for k in range(self.n):
            if not _claim(self.sync, k):
                self.wakes[k].put(self.step)

    def run(self, fn) -> list:
        """``[fn(0), fn(1), …]``, ``fn(0)`` on this thread; re-raises a thread's exception."""
        self.start(fn, publish=False)
        return self.finish()

    def start(self, fn, publish: bool = True) -> None:
        """Hand ``fn(1)``, … to the workers and return, so that this thread can do other work
        until :meth:`finish`. With ``publish`` the workers start on it at once; else when
        ``fn(0)`` publishes the step (:func:`publish`, once it runs without the GIL, so that
        the workers do not contend with this thread for the GIL before)."""
        if self.closed:  # its threads stopped (or will: this step must not revive them)
            raise RuntimeError("the thread pool is closed")
        self._check()
        self.fn = fn
        self.results = [None] * (self.n + 1)
        self._left = self.n
        self._all_done.clear()
        self._start()
        if publish:
            self.sync[GO * PAD] = self.step
        self.busy = True

    def finish(self, share: bool = True) -> list:
        """With ``share``, run ``fn(0)`` on this thread (it shares the work the workers have
        not taken yet); wait for the workers; return ``[fn(0), fn(1), …]`` (``fn(0)``
        None without ``share``: this thread then sleeps until the last worker is done, as
        it has no work of the step to share). Re-raises a thread's exception."""
        fn = self.fn
        assert fn is not None and self.busy  # (a step was started)
        if share:
            try:
                self.results[0] = fn(0)
            except BaseException as e:  # noqa: BLE001 (re-raised below, once workers finished)
                self.results[0] = e
        else:
            self._all_done.wait()
        self.sync[GO * PAD] = self.step  # if fn(0) failed before it published
        _wait_done(self.sync, self.n, self.step)
        self.busy = False
        self._check()
        errors = [res for res in self.results if isinstance(res, BaseException)]
        for other in errors[1:]:
            errors[0].add_note(f"another thread failed in the same step: {other!r}")
        if errors:
            raise errors[0]
        return self.results

    def _check(self) -> None:
        if self.failure is not None:
            raise RuntimeError(
                f"a thread of the shared-index core's pool failed: {self.failure!r}"
            ) from self.failure

    def close(self) -> None:
        """Stop the threads (they exit at the next step they see)."""
        if self.closed:
            return
        self.closed = True
        self.fn = None
        self._start()
        self.sync[GO * PAD] = self.step
