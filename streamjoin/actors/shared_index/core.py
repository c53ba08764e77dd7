"""The shared-index join core: one core whose window indexes ``threads`` threads share
(PIM-Tree §4, the paper's parallel join).

Design
------
Each batch the core receives is one *step*. Inside a step, PIM-Tree §4.1's algorithm runs on
``threads`` threads: the calling thread and ``threads - 1`` pool threads (pipelined: below),
each in one ``nogil`` numba kernel (:func:`~streamjoin.actors.shared_index.kernels.run_tasks`)
for the whole step, so Python runs only once per step and thread, not per task. Between close
steps the pool's threads wait spinning on shared counters rather than asleep
(:mod:`~streamjoin.actors.shared_index.thread_pool`): a sleeping thread's wake-up cost about
23 µs here, twice a step.

- **Work queue and tasks.** The batch's tuples of both streams, in arrival order, are cut into
  tasks of ``task_size`` tuples (by default one task per thread). Tasks are claimed in order
  with one atomic add on a shared counter (the paper protects its queue with a mutex; numba
  has no mutex, and an atomic add is the cheapest claim: an intrinsic over LLVM's
  ``atomicrmw``, :mod:`~streamjoin.indexes.blocks.atomics`). Before the threads start, the core appends the batch
  to its tuple stores, so every tuple has its ref and every thread can read every tuple.
- **Edge tuple.** Per stream, the count of the batch's leading tuples that are indexed. A
  task reads it once (§4.1: an old value only lengthens the tail) as the ref bound ``e``; it
  probes the shared index and keeps the candidates with ref ``< e``, and joins the tuples
  from ``e`` to each tuple's predecessors (Fig. 6) as sorted runs: every task publishes its
  tuples sorted by key before it starts joining, and each tuple binary-searches the runs of
  the unindexed tasks up to its own, so no pair is missed or found twice whatever the
  threads' timing, and the tail costs about the same at any task size. After inserting its tuples a thread flags them indexed and moves the
  edge on under a test-and-set mutex; if another thread holds it, it goes on (§4.1).
- **Results in order.** A task sorts its pairs by (later, earlier) tuple when the run is
  ``ordered``, stores them in its thread's buffer and marks the task completed; then the
  thread, under the test-and-set propagation mutex, moves completed tasks at the queue head
  to the step's output in task order (§4.1 result propagation). The step returns the output
  in arrival order of the later tuple; ``ordered`` adds the sort inside each task.
- **What is locked.** T_S never (immutable during a step), T_I per subindex, a shared
  ``bplus_tree`` as a whole, ``nested_loop`` nothing (its probes scan the store);
  :mod:`~streamjoin.indexes.pim.shared`.
- **Merges.** Between steps (no thread runs): blocking, or the two phases of §4.2's
  nonblocking merge on a merging thread of the index's own, which runs across steps.
- **Expiry** between steps, by the batch's horizons, as at a :class:`JoinCore`.

With ``threads=1`` the same kernel runs on the calling thread alone (the paper's parallel
join "with concurrency control" on one thread, Fig. 12a).

Pipelined steps
---------------
§4.1 has no steps: the actor's thread only feeds the work queue and drains ordered results
while the workers run. A batch-at-a-time executor calls the core once a batch, so
``pipelined`` comes as close as that contract allows: the pool
then has ``threads`` threads of its own, which run every task, and the core's thread only
feeds and drains them. It stages the batch's step, hands its tasks to the pool, which starts
at once, and returns, so that its thread sends the previous step's pairs and receives the
next batch while they run (work that a one-step-a-batch core's threads wait for, its caller
being one of them). The next call (a batch, :meth:`SharedIndexCore.on_idle`, which
executors call as soon as no message waits, or :meth:`SharedIndexCore.on_eof`) first waits
for the step's end (asleep, after the last worker wakes it), then ends it: its pairs leave
then, in order. With ``threads=1`` a core pipelines only when asked (one worker and the
core's thread); by default it is the one-thread join of Fig. 12a.
Everything that changes the stores or the indexes outside the tasks (appends, T_I's step
boundary, expiry, merge starts) still happens between steps, on this thread, while no task
runs. What this leaves serial: staging and ending a step, about 15–25% of a step's time at
batches of 1,024 (``benchmarks/shared_index_speedup.py``).

The core's thread then needs a processor of its own beside the ``threads`` workers, and so do
the emitter and the collector: by default (``pipelined=None``) a core pipelines only where
every thread of the layout has one (:func:`pipelines_on`); with fewer its pool takes them
from the others, and it runs slower than one step a batch (``experiments/shared_pipelined.py``
measures both on Ray; ``experiments/pim_tree_parallel.py`` simulates both).
"""

from __future__ import annotations

import contextlib
import os
import warnings
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from streamjoin import compile_ahead
from streamjoin.actors.base import WARMED, ActorConfig, Clock, Logic, RunSettings, options_key
from streamjoin.actors.join_core import IndexChoice, JoinCore, warm_batch
from streamjoin.actors.join_kernels import EITHER, R_PROBES, S_PROBES
from streamjoin.actors.join_spec import JOIN_COUNTERS, JoinSpec, JoinWork
from streamjoin.actors.shared_index.kernels import (
    C_DELAY,
    C_INDEXED,
    C_N_TASKS,
    C_ORDERED,
    C_SEED,
    C_SELF_JOIN,
    C_TASK_SIZE,
    CFG,
    HEAD,
    OUT_N,
    W_CANDIDATES,
    W_INSERTED,
    W_PROBES,
    W_SCANNED,
    W_WAITS,
    WORK,
    Probing,
    Step,
    Window,
    gather_pairs,
    run_tasks,
    stage_step,
)
from streamjoin.actors.shared_index.thread_pool import ThreadPool
from streamjoin.actors.store import TupleStore
from streamjoin.batch import Batch, PairBatch
from streamjoin.checks import positive_int
from streamjoin.indexes import IndexFallbackWarning, plan
from streamjoin.indexes.blocks.atomics import PAD
from streamjoin.indexes.pim import shared
from streamjoin.modes import MERGES, Merge
from streamjoin.query import Query

#: Prefix of the shared core's cost key (:attr:`SharedIndexCore.cost_key`).
SHARED_COST_PREFIX = "shared:"

#: Default tuples per task: ``None``, one task per thread a step (``ceil(batch / threads)``
#: tuples, :func:`task_size_of`). A task's keys are probed as one sorted run, so T_S's
#: descents share nodes, its leaves are fetched ahead and T_I's subindexes take runs of
#: inserts, and the tail past the edge tuple costs about the same at any task size
#: (:func:`~streamjoin.actors.shared_index.kernels._join_tail`): longer tasks kept paying off once
#: the pool's threads waited spinning. W = 2^20, match rate 2, three alternating rounds on a
#: quiet machine (``benchmarks/shared_index_speedup.py sharedN 20 BATCH 1048576 TASK``),
#: batches of 1,024: one thread 1.16–1.18 M tuples/s at 128, 1.25–1.30 M at 512, 1.30–1.33 M
#: at 1,024; two threads 1.83–1.89 M at 128, 1.97–2.00 M at 256, 2.04–2.08 M at 512;
#: ``single()`` 1.57–1.63 M. Batches of 4,096 (two rounds): one thread 1.22–1.25 M at 128,
#: 1.48–1.50 M at 4,096; two threads 2.16–2.17 M at 128, 2.38–2.42 M at 512, 2.44–2.52 M at
#: 2,048; ``single()`` 1.94–1.98 M. (Earlier, while the pool's threads slept between steps,
#: 128 was best for two threads: an idle thread's wake-up left large tasks unbalanced.)
TASK_SIZE = None


def task_size_of(task_size: int | None, batch: int, threads: int) -> int:
    """Tuples per task of a step of ``batch`` tuples: ``task_size``, or by default
    (``None``) one task per thread, ``ceil(batch / threads)`` (at least 1)."""
    if task_size is not None:
        return task_size
    return max(1, -(-batch // threads))


@dataclass(frozen=True)
class SharedIndexConfig(IndexChoice, ActorConfig):
    """A shared-index join core node (:class:`SharedIndexCore`).

    ``threads`` worker threads, ``task_size`` tuples per task (``None``: one task per thread
    a step, :func:`task_size_of`), ``merge`` (``"nonblocking"`` or
    ``"blocking"``, PIM-Tree §4.2; for ``pim_tree`` and ``im_tree``), ``pipelined`` (a step
    runs on the pool's threads while the executor does its work between batches; its pairs
    leave with the next batch or when the core is idle: module docstring). ``delay_spins`` and
    ``delay_seed``: a test hook that makes each thread wait a random number of spins (up to
    ``delay_spins``) between the steps of every task, forcing interleavings.
    """

    role = "join_core"
    checks_options_itself = True  # shared.check_shared_options, in __post_init__
    threads: int = 2
    task_size: int | None = TASK_SIZE
    merge: Merge = "nonblocking"
    delay_spins: int = 0
    delay_seed: int = 0
    pipelined: bool | None = None

    def simulated(self) -> SharedIndexConfig:
        """The config the simulator builds: the tasks run on one host thread, so the core's
        work (which index candidates a task sees depends on when it reads the edge tuple) is
        the same every run; the simulator charges them as ``threads`` processors, and decides
        ``pipelined=None`` by the processors of the machine it simulates."""
        return replace(self, host_threads=1)

    #: Threads actually started (default ``threads``); fewer only in the simulator.
    host_threads: int | None = None

    def __post_init__(self) -> None:
        positive_int("threads", self.threads)
        if self.task_size is not None:
            positive_int("task_size", self.task_size)
        if self.merge not in MERGES:
            raise ValueError(f"merge must be 'nonblocking' or 'blocking', got {self.merge!r}")
        name = self.index or "pim_tree"
        if self.threads > 1 and name not in shared.SHAREABLE:
            raise ValueError(
                f"index {name!r} cannot be shared by {self.threads} threads; use one of "
                f"{', '.join(shared.SHAREABLE)}, or threads=1"
            )
        if name in shared.SHAREABLE:  # the shared form is built, whatever the thread count
            shared.check_shared_options(name, self.index_options)

    def check(self, query: Query) -> None:
        """As a join core's: a warning (:class:`~streamjoin.indexes.IndexFallbackWarning`)
        when the index serves another condition than the first, or none, so that the tasks
        scan the window (:func:`scan_note`); exact either way."""
        name = self.index or "pim_tree"
        note = scan_note(name, query)
        if note is not None:  # (stacklevel: the caller of sj.run, as a join core's warning)
            warnings.warn(note, IndexFallbackWarning, stacklevel=4)
        elif self.index is not None:
            IndexChoice.check(self, query)

    @property
    def cpus(self) -> int:
        return self.threads

    def build(
        self, query: Query, settings: RunSettings, clock: Clock | None
    ) -> JoinCore | SharedIndexCore:
        name = self.index or "pim_tree"
        core: JoinCore | SharedIndexCore
        if name not in shared.SHAREABLE:  # one thread, any index: a plain core
            core = JoinCore(query, name, self.index_options, ordered=settings.ordered)
        else:
            core = SharedIndexCore(
                query,
                name,
                self.index_options,
                threads=self.threads,
                task_size=self.task_size,
                merge=self.merge,
                ordered=settings.ordered,
                delay_spins=self.delay_spins,
                delay_seed=self.delay_seed,
                host_threads=self.host_threads,
                pipelined=self.pipelined,
            )
        core.warm()
        return core


def scan_note(index: str, query: Query) -> str | None:
    """Why the shared core's tasks scan the window for ``query`` (None if ``index`` serves
    one of its conditions). Its threads share one index of one condition (§4.1); a query
    whose conditions no index can search (all ``!=``, a self-join's cross-attribute ones)
    or an OR whose terms share none has none, and every task then scans the window in its
    store and tests the whole of θ on each row: exact, O(window) a tuple."""
    found = plan(index, query.predicate, query.self_join)
    if not found.fallback:
        return None
    if found.note is not None:
        return found.note
    return (
        f"shared_index({index!r}) shares one index among its threads, and no condition of "
        f"{query.predicate} is in every OR term: its tasks scan the window (nested_loop) and "
        "check every condition; single() gives each term an index of its own"
    )


def _boxes(spec: JoinSpec) -> tuple[np.ndarray, np.ndarray]:
    """Probe boxes of the primary condition per orientation: float64 ``(3, 2, 2)`` (orient,
    box, lo/hi) and their counts (docs/design.md §2: indexes return a superset, refined here)."""
    boxes = np.zeros((3, 2, 2))
    n_boxes = np.zeros(3, dtype=np.int64)
    for orient in (R_PROBES, S_PROBES, EITHER):
        found = spec.probe_boxes(orient)
        n_boxes[orient] = len(found)
        for k, (lo, hi) in enumerate(found):
            boxes[orient, k] = lo[0], hi[0]
    return boxes, n_boxes


def pipelines_on(threads: int, processors: float) -> bool:
    """Whether a ``threads``-thread core pipelines by default on a machine of ``processors``:
    with two threads or more, when every thread of the layout has one of its own (the
    workers, the core's own thread, the emitter's and the collector's: ``threads + 3``).
    With fewer, its pool takes processors from the others and the core runs slower than
    one step a batch (measured on Ray and simulated by processor count: docs/performance.md,
    the shared-index core)."""
    return threads > 1 and processors >= threads + 3


def pipelines_here(threads: int) -> bool:
    """:func:`pipelines_on` this host's processors."""
    return pipelines_on(threads, os.cpu_count() or 1)


class _InFlight(NamedTuple):
    """A step handed to the threads and not yet finished (:meth:`SharedIndexCore._finish`)."""

    step: Step
    work: Callable[[int], tuple]  # a thread's share: run_tasks(k, …)
    sizes: dict  # each stream's window size when the step began
    n_tasks: int
    streams: int  # streams the step holds tuples of
    horizon: np.ndarray  # its batch's horizons: expiry once it ends
    tuples: int


class SharedIndexCore(Logic):
    """Joins batches exactly as tuple-at-a-time processing would, on ``threads`` threads over
    shared window indexes (module docstring; PIM-Tree §4).

    Parameters
    ----------
    query : Query
    index : {"pim_tree", "im_tree", "bplus_tree", "nested_loop"}
    index_options : dict, optional
    threads : int
    task_size : int, optional
        Tuples per task; by default one task per thread a step (:func:`task_size_of`).
    merge : {"nonblocking", "blocking"}
    ordered : bool
        Sort each task's pairs by (later, earlier) tuple: the step's output is then in the
        order tuple-at-a-time processing emits.
    delay_spins, delay_seed : int
        The interleaving test hook (:class:`SharedIndexConfig`).
    host_threads : int, optional
        Threads to start, if fewer than ``threads`` (:meth:`SharedIndexConfig.simulated`).
    pipelined : bool, optional
        Return from :meth:`on_batch` while the pool's threads run the step; its pairs leave
        with the next call (module docstring). Not with ``host_threads``: the simulator
        models it from this flag. None: with two threads or more on a host with at least
        ``threads + 3`` processors (:func:`pipelines_on`).

    Counters: :class:`~streamjoin.actors.join_spec.JoinWork` (``part_calls``: a probe and
    an insert per stream the step holds tuples of, as at a :class:`JoinCore`, since the tasks
    run inside one kernel call; ``scan`` the probes' descents, or for ``nested_loop`` the rows scanned). What the
    simulator needs to model the threads is :attr:`last_tasks`; :meth:`stats` adds the
    tail's candidates past the edge tuple (``scanned``), lock waits and merges.
    """

    cost_group = "join"
    COUNTERS = JOIN_COUNTERS
    merges_batches = True

    def __init__(
        self,
        query: Query,
        index: str = "pim_tree",
        index_options: dict | None = None,
        *,
        threads: int = 2,
        task_size: int | None = TASK_SIZE,
        merge: Merge = "nonblocking",
        ordered: bool = False,
        delay_spins: int = 0,
        delay_seed: int = 0,
        host_threads: int | None = None,
        pipelined: bool | None = False,
    ) -> None:
        self.query = query
        spec = JoinSpec(query, index, index_options)
        if spec.plan.fallback:  # no condition for a shared index: the tasks scan (scan_note)
            spec = JoinSpec(query, "nested_loop")
        self.spec = spec
        # the served condition's attribute of each stream's tuples (one key row each)
        self.key_rows = np.array([spec.conds.r_row[0], spec.conds.s_row[0]], dtype=np.int64)
        self.index_name = spec.index_name
        self.threads = positive_int("threads", threads)
        self.task_size = None if task_size is None else positive_int("task_size", task_size)
        self.merge = merge
        self.ordered = ordered
        self.work = JoinWork()
        self.stores = {y: TupleStore(2 * len(query.attrs)) for y in spec.streams}
        #: the store each stream's probes read (a self-join's one store twice)
        self._store_of = [self.stores[y] for y in (0, 0 if query.self_join else 1)]
        self._symmetric = query.predicate.symmetric
        self.indexes = {
            y: shared.make_shared(spec.index_name, spec.index_options, merge) for y in spec.streams
        }
        self.indexed = self.indexes[0] is not None
        self.boxes, self.n_boxes = _boxes(spec)
        self.cfg = np.zeros(CFG, dtype=np.int64)
        self.cfg[C_SELF_JOIN] = query.self_join
        self.cfg[C_INDEXED] = self.indexed
        self.cfg[C_ORDERED] = ordered
        self.cfg[C_DELAY] = delay_spins
        self.cfg[C_SEED] = delay_seed
        self.scanned = self.lock_waits = self.tasks = 0
        #: per task of the last step: int64 (tasks, WORK) (:mod:`~streamjoin.actors.
        #: shared_kernels` W_* columns), for the simulator's model of the threads
        self.last_tasks = self._no_tasks = np.zeros((0, WORK), dtype=np.int64)
        self._pairs_per_tuple = 4.0
        self._buf = np.empty((self.threads, 3, 0), dtype=np.int64)
        self._out = np.empty((3, 0), dtype=np.int64)
        run = self.threads if host_threads is None else min(self.threads, host_threads)
        if pipelined is None and host_threads is None:
            pipelined = pipelines_here(self.threads)
        #: steps overlap with what the executor does between batches; None only in the
        #: simulator, whose machine decides (:func:`pipelines_on`), and which models it from
        #: this flag while its host runs every step at once (``_overlap`` False)
        self.pipelined = pipelined
        self._overlap = bool(pipelined) and host_threads is None
        # pipelined, the pool's threads run every task and this thread only feeds and drains
        # them; else this thread is one of the ``threads``
        workers = run if self._overlap else run - 1
        self._pool = ThreadPool(workers) if workers else None
        self._inflight: _InFlight | None = None
        if self._pool is not None:
            weakref.finalize(self, self._pool.close)
        self._dummy = shared.SharedBPlusTree(3, 3).state  # the probed state a stream lacks
        self._no_sync = np.zeros(0, dtype=np.int64)

    # -- one step ------------------------------------------------------------------------------

    def on_batch(self, port: str, batch: Batch) -> list[tuple[str, PairBatch]]:
        """Join one batch on the threads; returns ``[("out", PairBatch)]`` in arrival order of
        the later tuple when a step produced pairs: this batch's, or when the core is
        ``pipelined`` the previous batch's (this one's then leave with the next batch, at
        :meth:`on_idle` or at :meth:`on_eof`)."""
        if port != "in":
            raise ValueError(f"shared-index core has no input port {port!r}; ports: ['in']")
        batch = batch.freeze()
        self.last_tasks = self._no_tasks
        done = self._finish()  # the step in flight (pipelined): its pairs leave now
        self.work.tuples += len(batch)
        if len(batch):
            self._begin(batch)
            if not self._overlap:
                done = self._finish()
        else:  # nothing to join: expire at once, as after a step
            self._expire(batch.horizon)
        return self._emit(done)

    @property
    def held_batches(self) -> int:
        """Batches whose pairs have not left yet: 1 while a step runs on the pool's threads
        (``pipelined``), else 0. Executors call :meth:`on_idle` when no message waits."""
        return 0 if self._inflight is None else 1

    def on_idle(self) -> list[tuple[str, PairBatch]]:
        """No message waits: wait for the step in flight to end and return its pairs."""
        return self._emit(self._finish())

    def _emit(self, out: PairBatch | None) -> list[tuple[str, PairBatch]]:
        if out is None or len(out) == 0:
            return []
        self.work.pairs += len(out)
        return [("out", out)]

    def _expire(self, horizon: np.ndarray) -> None:
        """Expire by a batch's horizons, between steps, as a JoinCore does."""
        for y in self.spec.streams:
            store = self.stores[y]
            before = len(store)
            first_live = store.expire(int(horizon[y]))
            if self.indexed:
                self.indexes[y].expire(first_live)
            self.work.expired += before - len(store)

    def _begin(self, batch: Batch) -> None:
        """Stage the step of ``batch`` (its tuples appended to the stores and, for the index,
        announced to T_I) and hand its tasks to the pool's threads: pipelined, they start at
        once and run them all; else they start when this thread's share begins, in
        :meth:`_finish`, which ends the step."""
        spec, b, threads = self.spec, len(batch), self.threads
        version = spec.version
        spec.observe(batch.attrs)  # integers beyond 2**52: exact conditions, wider boxes
        if spec.version != version:
            self.boxes, self.n_boxes = _boxes(spec)
            for store in self.stores.values():
                store.keep_residuals()  # the kernels read them from now on
        task_size = task_size_of(self.task_size, b, threads)
        n_tasks = -(-b // task_size)
        first_ref = np.array([s.base + s.tail for s in self._store_of], dtype=np.int64)
        step = stage_step(
            batch.stream,
            batch.seq,
            batch.idx,
            batch.lo_idx,
            batch.ingest_ns,
            batch.attrs,
            self.key_rows,
            first_ref,
            spec.query.self_join,
            n_tasks,
            threads,
        )
        states = [self._dummy, self._dummy]
        sizes = {}
        for y in spec.streams:
            store, index = self.stores[y], self.indexes[y]
            n = int(step.n_y[y])
            sizes[y] = len(index) if index is not None else len(store)
            refs = store.append(batch, step.ypos[y, :n])
            if index is not None:
                states[y] = index.begin_step(step.keys[y, :n], refs)
        if spec.query.self_join:
            states[1] = states[0]
        self.cfg[C_TASK_SIZE] = task_size
        self.cfg[C_N_TASKS] = n_tasks
        cap = int(1.5 * self._pairs_per_tuple * b) + 256
        if self._buf.shape[2] < cap:
            self._buf = np.empty((threads, 3, cap), dtype=np.int64)
            self._out = np.empty((3, cap), dtype=np.int64)
        windows = [  # a self-join's one store and index twice
            Window(store.rows, store.attrs, store.base, store.head, state)
            for store, state in zip(self._store_of, states, strict=True)
        ]
        probing = Probing(
            spec.conds, self.key_rows, self.boxes, self.n_boxes, self._symmetric, spec.n_served > 0
        )
        args = (
            self._no_sync if self._pool is None else self._pool.sync,
            self.cfg,
            step,
            windows[0],
            windows[1],
            probing,
            self._buf,
            self._out,
        )

        first = 1 if self._overlap else 0  # the pool's k-th thread runs as thread k - first

        def work(k: int):
            return run_tasks(k - first, *args)

        if self._pool is not None:
            self._pool.start(work, publish=self._overlap)
        streams = int(np.count_nonzero(step.n_y))
        self._inflight = _InFlight(step, work, sizes, n_tasks, streams, batch.horizon.copy(), b)

    def _finish(self) -> PairBatch | None:
        """End the step in flight, if any: run this thread's share of its tasks (those the
        pool's threads have not taken; none when pipelined), wait for the threads, gather its
        pairs in arrival order, end the indexes' step and expire by its batch's horizons."""
        flight = self._inflight
        if flight is None:
            return None
        self._inflight = None
        step, n_tasks = flight.step, flight.n_tasks
        ctl = step.ctl
        if self._pool is None:
            results = [flight.work(0)]
        else:  # pipelined, this thread has no share (fn(0) is None): the pool ran every task
            results = self._pool.finish(share=not self._overlap)[1 if self._overlap else 0 :]
        if ctl[HEAD * PAD] == n_tasks:  # everything propagated during the step
            res = self._out[:, : ctl[OUT_N * PAD]].copy()
        else:
            spills = [s for s, _ in results]
            spill_base = np.cumsum([0] + [s.shape[1] for s in spills[:-1]]).astype(np.int64)
            spill = np.concatenate(spills, axis=1) if len(spills) > 1 else spills[0]
            res = gather_pairs(
                ctl, step.task_meta, self._buf, spill, spill_base, self._out, n_tasks
            )
        for y in self.spec.streams:
            if self.indexes[y] is not None:
                self.indexes[y].end_step()
        self._account(step.task_work, flight.sizes, n_tasks, flight.streams)
        self._pairs_per_tuple = 0.5 * self._pairs_per_tuple + 0.5 * res.shape[1] / flight.tuples
        self._expire(flight.horizon)
        return PairBatch(res[0], res[1], res[2])

    def _account(self, task_work: np.ndarray, sizes: dict, n_tasks: int, streams: int) -> None:
        total = task_work.sum(axis=0).tolist()
        work = self.work
        work.part_calls += 2 * streams  # as a JoinCore: a probe and an insert per stream
        work.probes += total[W_PROBES]
        size = max(sizes.values())
        if self.indexed:
            work.scan += total[W_PROBES] * self.spec.index_cls.probe_work(size)
        else:
            work.scan += float(total[W_SCANNED])
        work.candidates += total[W_CANDIDATES]
        work.inserted += total[W_INSERTED]
        self.scanned += total[W_SCANNED]
        self.lock_waits += total[W_WAITS]
        self.tasks += n_tasks
        self.last_tasks = task_work

    # -- the rest of the contract --------------------------------------------------------------

    def on_eof(self) -> list:
        """End of stream: finish background merges, stop the threads."""
        self.last_tasks = self._no_tasks
        out = self._emit(self._finish())
        self.close()
        return out

    def close(self) -> None:
        if self._inflight is not None:  # its threads read the indexes: let them finish
            self._inflight = None
            if self._pool is not None:
                with contextlib.suppress(Exception):
                    self._pool.finish(share=not self._overlap)
        for index in self.indexes.values():
            if index is not None:
                index.close()
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def counters(self) -> tuple:
        return self.work.as_tuple()

    @property
    def cost_key(self) -> str:
        """``shared:<index>``: the shared core's per-unit costs are its own (the task
        machinery, edge tuples and locks cost a one-thread step 30% more than a plain core's
        on PIM-Tree), calibrated on ``shared_index(1, index)``
        (:func:`~streamjoin.runtime.sim.calibrate.calibrate`)."""
        return SHARED_COST_PREFIX + self.index_name

    def stats(self) -> dict:
        """What the counters do not hold: rows scanned past the edge tuple, times a lock was
        found held (workers and merging thread), tasks, merges and their thread time."""
        idx = [i for i in self.indexes.values() if i is not None]
        return {
            "threads": self.threads,
            "task_size": self.task_size,
            "tasks": self.tasks,
            "scanned": self.scanned,
            "lock_waits": self.lock_waits + sum(i.lock_waits for i in idx),
            "merges": sum(i.merges for i in idx),
            "merged": sum(i.merged for i in idx),
            "merge_seconds": sum(i.merge_seconds for i in idx),
        }

    @property
    def nbytes(self) -> int:
        held = sum(s.nbytes for s in self.stores.values())
        return held + sum(i.nbytes for i in self.indexes.values() if i is not None)

    def check(self) -> None:
        """Assert every index's invariants (between steps: with none in flight, so after
        :meth:`on_idle` when ``pipelined``; settles merges in flight)."""
        if self._inflight is not None:
            raise RuntimeError("a step is in flight: call on_idle() before check()")
        for index in self.indexes.values():
            if index is not None:
                index.check()

    def warm(self) -> None:
        """Compile (or load) every kernel on a throwaway core, once per process for each index,
        its options and the query's shape: three batches fill, probe and expire its windows,
        with merges (both phases of a nonblocking one) along the way."""
        key: tuple[Hashable, ...] = (
            "shared",
            self.index_name,
            options_key(self.spec.index_options),
            self.merge,
        )
        q = self.query
        key += (q.self_join, self.spec.n_keys, q.predicate.symmetric)
        for index in self.indexes.values():  # the late kernels, meanwhile, in a second process
            if index is not None and hasattr(index, "compile_ahead"):
                compile_ahead.start(index.compile_ahead())
        WARMED.once(key, self._warm)

    def _warm(self) -> None:
        k, self_join = len(self.query.attrs), self.query.self_join
        spare = SharedIndexCore(
            self.query, self.index_name, self.spec.index_options, threads=1, merge=self.merge
        )
        n = 512
        per_stream = n if self_join else n // 2
        for b in range(4):
            expire = per_stream // 2 if b >= 2 else 0
            batch = warm_batch(k, self_join, n, first=b * per_stream, horizon=expire)
            spare.on_batch("in", batch)
            for index in spare.indexes.values():
                if index is not None:
                    index.settle()
        spare.close()
