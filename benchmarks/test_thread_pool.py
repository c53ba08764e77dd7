"""What handing a step to the shared-index core's threads costs (pytest-benchmark).

Run: ``python -m pytest benchmarks/test_thread_pool.py --benchmark-enable -o addopts=""
-p no:cacheprovider``.

One step of :class:`~streamjoin.actors.shared_index.thread_pool.ThreadPool` with one worker whose kernel
does nothing but publish and count: the hand-over and the wait, nothing else.

- *spinning*: steps back to back, so the worker is still spinning when the next comes (a
  step's serial part is ~90 µs at batches of 1,024, under the 150 µs budget);
- *asleep*: 1 ms between steps, so the worker has gone to sleep on its queue and each step
  wakes it (the gap is not timed);
- *queue*: one ``queue.SimpleQueue`` put and get each way between two Python threads, back to
  back (both stay awake: the pool it replaced paid a wake-up from sleep, as *asleep* does).
"""

import queue
import threading
import time

import numpy as np
import pytest
from numba import njit

from streamjoin.actors.shared_index.thread_pool import ThreadPool, publish


@njit(nogil=True, cache=True)
def _noop(sync, thread, runs):
    if thread == 0:
        publish(sync)
    runs[thread] += 1
    return thread


@pytest.fixture
def pool():
    p = ThreadPool(1)
    yield p
    p.close()


def test_step_worker_spinning(benchmark, pool):
    runs = np.zeros(2, dtype=np.int64)

    def step():
        pool.run(lambda k: _noop(pool.sync, k, runs))

    step()
    benchmark.pedantic(step, rounds=2000, iterations=1, warmup_rounds=50)
    assert runs[0] == runs[1]


def test_step_worker_asleep(benchmark, pool):
    runs = np.zeros(2, dtype=np.int64)

    def step():
        pool.run(lambda k: _noop(pool.sync, k, runs))

    step()
    benchmark.pedantic(step, setup=lambda: time.sleep(0.001), rounds=300, warmup_rounds=5)
    assert runs[0] == runs[1]
    assert pool.sleeps >= 250, "the worker did not sleep between the spaced steps"


def test_step_through_queues(benchmark):
    jobs, done = queue.SimpleQueue(), queue.SimpleQueue()

    def serve():
        while (job := jobs.get()) is not None:
            done.put(job)

    worker = threading.Thread(target=serve, daemon=True)
    worker.start()

    def step():
        jobs.put(1)
        done.get()

    benchmark.pedantic(step, rounds=2000, iterations=1, warmup_rounds=50)
    jobs.put(None)
    worker.join()
