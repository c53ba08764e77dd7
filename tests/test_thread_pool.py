"""The shared-index core's thread pool (:mod:`streamjoin.actors.shared_index.thread_pool`): each step
reaches every thread whether it waits spinning or asleep, a thread's error is raised in the
caller and the pool goes on, and ``close`` stops every thread."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from numba import njit

from streamjoin.actors.shared_index.thread_pool import ThreadPool, publish


@njit(nogil=True)
def _count(sync, thread, runs):
    if thread == 0:
        publish(sync)
    runs[thread] += 1
    return thread


def _step(pool: ThreadPool, runs: np.ndarray, fail: int = -1):
    def fn(k: int):
        if k == fail:
            raise RuntimeError(f"thread {k} failed")
        return _count(pool.sync, k, runs)

    return pool.run(fn)


@pytest.mark.timeout(120, method="thread")
@pytest.mark.parametrize("workers", [1, 3])
def test_every_step_reaches_every_thread_spinning_or_asleep(workers):
    pool = ThreadPool(workers)
    runs = np.zeros(workers + 1, dtype=np.int64)
    gaps = [0.0, 0.0, 0.03, 0.0, 0.03, 0.03, 0.0, 0.0, 0.03, 0.0] * 3
    try:
        for step, gap in enumerate(gaps, 1):
            time.sleep(gap)
            assert _step(pool, runs) == list(range(workers + 1))
            assert (runs == step).all(), "a thread ran a step twice or missed it"
        assert pool.sleeps >= workers, "no worker went to sleep between the spaced steps"
    finally:
        pool.close()


@pytest.mark.timeout(120, method="thread")
@pytest.mark.parametrize("fail", [0, 1, 2])
def test_an_error_is_raised_in_the_caller_and_the_pool_goes_on(fail):
    pool = ThreadPool(2)
    runs = np.zeros(3, dtype=np.int64)
    try:
        assert _step(pool, runs) == [0, 1, 2]
        with pytest.raises(RuntimeError, match=f"thread {fail} failed"):
            _step(pool, runs, fail=fail)
        expected = np.array([2, 2, 2])
        expected[fail] = 1
        assert (runs == expected).all()
        time.sleep(0.03)  # asleep now
        assert _step(pool, runs) == [0, 1, 2]
        assert _step(pool, runs) == [0, 1, 2]
    finally:
        pool.close()


@pytest.mark.timeout(120, method="thread")
@pytest.mark.parametrize("gap", [0.0, 0.03])
def test_close_stops_every_thread_spinning_or_asleep(gap):
    pool = ThreadPool(2)
    runs = np.zeros(3, dtype=np.int64)
    _step(pool, runs)
    time.sleep(gap)
    pool.close()
    pool.close()  # twice is harmless
    for t in pool.threads:
        t.join(timeout=5)
        assert not t.is_alive()


@pytest.mark.timeout(120, method="thread")
def test_a_wake_up_for_a_step_already_run_is_ignored():
    """A worker can see a step both ways (its wake-up was queued while it had not yet started
    to spin); the wake-up it finds later must not run that step again."""
    pool = ThreadPool(1)
    runs = np.zeros(2, dtype=np.int64)
    try:
        _step(pool, runs)
        pool.wakes[0].put(pool.step)  # as if queued for the step it ran spinning
        time.sleep(0.03)  # it falls asleep, finds the stale wake-up, sleeps again
        assert (runs == 1).all()
        _step(pool, runs)
        assert (runs == 2).all()
    finally:
        pool.close()


@pytest.mark.timeout(120, method="thread")
def test_a_claimed_worker_waits_for_a_late_publish():
    """A worker the caller claimed while it spun gets no wake-up: it must keep spinning past
    its budget (~0.15 ms) when the caller's kernel publishes late, not fall asleep for good.
    A quick step first ends with the workers spinning, so the late step after it claims them
    (unless the caller lost its processor for longer than the budget)."""
    pool = ThreadPool(2)
    runs = np.zeros(3, dtype=np.int64)

    def late(k: int):
        if k == 0:
            time.sleep(0.01)  # well past the spin budget, before the kernel publishes
        return _count(pool.sync, k, runs)

    def steps():
        for _ in range(10):
            _step(pool, runs)
            pool.run(late)

    driver = threading.Thread(target=steps, daemon=True)
    try:
        driver.start()
        driver.join(timeout=20)
        assert not driver.is_alive(), "a claimed worker fell asleep and nothing woke it"
        assert (runs == 20).all()
    finally:
        if not driver.is_alive():
            pool.close()


@pytest.mark.timeout(120, method="thread")
def test_a_step_after_close_is_refused():
    """Closed, the threads are gone: a step would wait for them forever (or, run before they
    saw the close, revive them)."""
    pool = ThreadPool(2)
    runs = np.zeros(3, dtype=np.int64)
    _step(pool, runs)
    pool.close()
    for t in pool.threads:
        t.join(timeout=5)
    outcome = []

    def step():
        try:
            _step(pool, runs)
            outcome.append("ran")
        except RuntimeError as e:
            outcome.append(str(e))

    driver = threading.Thread(target=step, daemon=True)
    driver.start()
    driver.join(timeout=10)
    assert not driver.is_alive(), "a step after close waited for the stopped threads"
    assert outcome == ["the thread pool is closed"]
    assert (runs == 1).all()


@pytest.mark.timeout(120, method="thread")
def test_errors_of_several_threads_in_one_step_are_all_reported():
    pool = ThreadPool(2)
    runs = np.zeros(3, dtype=np.int64)

    def fn(k: int):
        if k > 0:
            raise ValueError(f"thread {k} failed")
        return _count(pool.sync, k, runs)

    try:
        with pytest.raises(ValueError, match="thread 1 failed") as info:
            pool.run(fn)
        assert any("thread 2 failed" in note for note in info.value.__notes__)
        assert _step(pool, runs) == [0, 1, 2]
    finally:
        pool.close()


def test_a_worker_that_dies_outside_its_task_ends_the_step_with_its_error():
    """A pool thread that fails outside the step's function (a kernel that failed to load
    did so) ends the caller's wait with an error naming it, and the pool refuses later
    steps; the caller never hangs, sharing the step's work or not."""
    for share in (True, False):
        pool = ThreadPool(2)
        time.sleep(0.05)  # both workers asleep on their queues by now

        class Broken:
            def __enter__(self):
                raise OSError("worker bookkeeping broke")

            def __exit__(self, *exc):
                return False

        pool._left_lock = Broken()  # a worker fails after its task, before it reports it
        outcome = []

        def step(pool=pool, share=share, outcome=outcome):
            pool.start(lambda k: k, publish=True)
            try:
                outcome.append(pool.finish(share=share))
            except RuntimeError as e:
                outcome.append(e)

        caller = threading.Thread(target=step, daemon=True)
        caller.start()
        caller.join(timeout=60)
        assert not caller.is_alive(), "the caller hung"
        assert isinstance(outcome[0], RuntimeError)
        assert "worker bookkeeping broke" in str(outcome[0])
        with pytest.raises(RuntimeError, match="pool failed"):
            pool.start(lambda k: k)
