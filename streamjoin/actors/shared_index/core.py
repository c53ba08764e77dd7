"""The shared-index join core: one core whose window indexes ``threads`` threads share
(PIM-Tree §4, the paper's parallel join).

Design
------
§4.1 has no steps: threads take tasks from one queue for as long as there is input, and
results leave in arrival order as tasks complete. The core comes close to that. Its threads
(the calling thread and ``threads - 1`` pool threads; pipelined: below) each run one
``nogil`` numba kernel (:func:`~streamjoin.actors.shared_index.kernels.run_tasks`) over the
tasks of a *step*, and a step is open to many batches: each batch the core receives is cut
into tasks and published to the step's queue while the threads work on the tasks before it,
and the pairs propagated so far leave with every call. The threads meet (a barrier) only when
a step ends: when it holds ``step_tuples`` tuples, when T_I reaches its merge size or a
nonblocking merge changes phase (§4.2 blocks task assignment at each of its stages too), when
a task's pairs did not fit the buffers, and at the end of input. ``step_tuples=0`` makes each
batch a step of its own. A pool thread that finds no task spins for a while (``pause``, then
yields), then blocks until the core's thread publishes more
(:mod:`~streamjoin.actors.shared_index.thread_pool`), so that a descheduled or idle thread
costs the others nothing.

- **Work queue and tasks.** The step's tuples of both streams, in arrival order, are cut
  into tasks of ``task_size`` tuples batch by batch (by default one task per thread a batch).
  Tasks are claimed in order with one compare-and-swap on a shared counter below the count
  published (the paper protects its queue with a mutex; numba has no mutex, and an atomic is
  the cheapest claim: an intrinsic over LLVM's ``cmpxchg``,
  :mod:`~streamjoin.indexes.blocks.atomics`). Before it publishes a batch's tasks, the core
  appends the batch to its tuple stores (with room reserved when the step opened, so nothing
  moves under the threads), so every tuple has its ref and every thread can read every tuple.
- **Edge tuple.** Per stream, the count of the step's leading tuples that are indexed. A
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
  to the step's output in task order (§4.1 result propagation). Each call of the core
  returns what was propagated since the last, in arrival order of the later tuple;
  ``ordered`` adds the sort inside each task. :meth:`SharedIndexCore.on_idle` waits for every
  task published.
- **What is locked.** T_S never (immutable while a step is open), T_I per subindex, a shared
  ``bplus_tree`` as a whole, ``nested_loop`` nothing (its probes scan the store);
  :mod:`~streamjoin.indexes.pim.shared`.
- **Merges.** Between steps: blocking, or the two phases of §4.2's nonblocking merge on a
  merging thread of the index's own, which runs across steps; a step ends when T_I reaches
  its merge size, and when the merging thread ends a phase.
- **Expiry** after each batch, by its horizons, as at a :class:`JoinCore`: the stores' first
  live row moves on and PIM-Tree flags the items before it (both read only when a step
  opens; rows move only then); a shared ``bplus_tree`` deletes its expired items when the
  step ends. Meanwhile the tasks skip expired tuples by each tuple's window bound (§4.1's
  t_e).

With ``threads=1`` the same kernel runs on the calling thread alone (the paper's parallel
join "with concurrency control" on one thread, Fig. 12a).

Pipelined steps
---------------
With ``pipelined``, the pool has ``threads`` threads of its own, which run every task, and
the core's thread only feeds and drains them: it stages a batch, publishes its tasks and
returns, so that its thread sends the pairs propagated and receives the next batch while
they run (work that a core's thread must otherwise do between its own tasks). With
``threads=1`` a core pipelines only when asked (one worker and the core's thread); by default
it is the one-thread join of Fig. 12a. Everything that changes the indexes outside the tasks
(T_I's step boundary, expiry, merge starts) still happens between steps, on this thread,
while no task runs; what stays serial per batch is staging it (the stores' appends, the
index's announcement) and draining its pairs.

The core's thread then needs a processor of its own beside the ``threads`` workers, and so do
the emitter and the collector: by default (``pipelined=None``) a core pipelines only where
every thread of the layout has one (:func:`pipelines_on`); with fewer its pool takes them
from the others, and it runs slower than one step a batch (``experiments/shared_pipelined.py``
measures both on Ray; ``experiments/pim_tree_parallel.py`` simulates both).
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace

import numpy as np

from streamjoin import compile_ahead
from streamjoin.actors.base import WARMED, ActorConfig, Clock, Logic, RunSettings, options_key
from streamjoin.actors.join_core import IndexChoice, JoinCore, warm_batch
from streamjoin.actors.join_kernels import EITHER, R_PROBES, S_PROBES
from streamjoin.actors.join_spec import JOIN_COUNTERS, JoinSpec, JoinWork
from streamjoin.actors.shared_index.kernels import (
    C_DELAY,
    C_IDLE_TICKS,
    C_INDEXED,
    C_ORDERED,
    C_SEED,
    C_SELF_JOIN,
    C_TASK_SIZE,
    CFG,
    CLOSED,
    DONE,
    FAILED,
    HEAD,
    NEXT,
    OUT_N,
    PUBLISHED,
    STALLED,
    W_CANDIDATES,
    W_INSERTED,
    W_PROBES,
    W_SCANNED,
    W_WAITS,
    WORK,
    Probing,
    Step,
    Window,
    callee_jobs,
    close_step,
    drain_pairs,
    gather_pairs,
    mark_failed,
    new_step,
    publish_batch,
    run_tasks,
    stage_batch,
    wait_propagated,
)
from streamjoin.actors.shared_index.thread_pool import ThreadPool, idle_ticks
from streamjoin.actors.store import TupleStore
from streamjoin.batch import Batch, PairBatch
from streamjoin.checks import number, positive_int
from streamjoin.indexes import IndexFallbackWarning, plan
from streamjoin.indexes.blocks.atomics import PAD
from streamjoin.indexes.pim import shared
from streamjoin.modes import MERGES, Merge
from streamjoin.query import Query

#: Prefix of the shared core's cost key (:attr:`SharedIndexCore.cost_key`).
SHARED_COST_PREFIX = "shared:"

#: Default tuples per task: ``None``, one task per thread a batch (``ceil(batch / threads)``
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

#: Default most tuples a step gathers across batches (:class:`SharedIndexCore`): its threads
#: meet (a barrier) only when a step ends, at a merge's phase change or when its buffers fill.
#: 0: one batch a step.
STEP_TUPLES = 65536


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
    a batch, :func:`task_size_of`), ``merge`` (``"nonblocking"`` or
    ``"blocking"``, PIM-Tree §4.2; for ``pim_tree`` and ``im_tree``), ``pipelined`` (the
    pool's threads run every task while the core's thread stages batches and sends pairs:
    module docstring), ``step_tuples``
    (the most tuples a step gathers across batches; 0: one batch a step). ``delay_spins`` and
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
    step_tuples: int = STEP_TUPLES

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
        number("step_tuples", self.step_tuples, integer=True, low=0)
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
                step_tuples=self.step_tuples,
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


#: The task kernel's callees that a first run compiles ahead (:func:`task_kernel_jobs`).
TASK_KERNEL_JOBS = f"{__name__}:task_kernel_jobs"


def task_kernel_jobs() -> list:
    """The task kernel's largest callees (:func:`~streamjoin.actors.shared_index.kernels.
    callee_jobs`) for a PIM-Tree core's steps, for a second process
    (:mod:`streamjoin.compile_ahead`): :func:`run_tasks` then loads them from the disk
    cache."""
    from streamjoin.query import CountWindow, band

    core = SharedIndexCore(Query(band("x", 1.0), window=CountWindow(64)), "pim_tree", threads=1)
    core._open(8)  # a step's arrays; nothing staged
    assert core._flight is not None
    _, _, step, window, _, probing, _, _ = core._flight.args
    core.close()  # (the arrays stay: only their types matter)
    return callee_jobs(step, window, probing)


class _Flight:
    """A step open to the threads (:meth:`SharedIndexCore._open`): what the core's thread
    knows of it between calls."""

    def __init__(
        self,
        step: Step,
        work: Callable[[int], list],
        args: tuple,
        cap: int,
        max_tasks: int,
        task_size: int,
        sizes: dict,
        room: np.ndarray,
    ) -> None:
        self.step, self.work, self.args = step, work, args
        self.cap, self.max_tasks, self.task_size, self.sizes = cap, max_tasks, task_size, sizes
        #: per stream, the most tuples its index takes in this step (T_I's room before its
        #: merge is due: :meth:`~streamjoin.indexes.pim.shared.SharedPIMTree.open_step`)
        self.room = room
        self.n_y = np.zeros(2, dtype=np.int64)  # tuples per stream staged
        self.n_tasks = 0  # tasks published
        self.tuples = 0
        #: per stream, the first live ref an index that deletes (``bplus_tree``) expires to
        #: when the step ends
        self.expire_to: dict[int, int] = {}
        self.ends: deque[int] = deque()  # per batch whose pairs have not all left: its end task
        self.drained = 0  # pairs that left
        self.accounted = 0  # tasks counted in the core's counters
        self.spills: list[np.ndarray] = []  # the core's thread's own spills (not pipelined)

    def fits(self, b: int, ones: int) -> bool:
        """Room for a batch of ``b`` tuples, ``ones`` of them of stream 1 (none once the step
        is :attr:`full`: its threads were told that no more tasks come)."""
        tasks = -(-b // self.task_size)
        n_y, room = self.n_y, self.room
        return (
            not self.full
            and self.tuples + b <= self.cap
            and self.n_tasks + tasks <= self.max_tasks
            and n_y[0] + b - ones <= room[0]
            and n_y[1] + ones <= room[1]
        )

    @property
    def full(self) -> bool:
        """No more batches: the step's tuples, or an index's room, are used up."""
        n_y, room = self.n_y, self.room
        return self.tuples >= self.cap or n_y[0] >= room[0] or n_y[1] >= room[1]


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
        Tuples per task; by default one task per thread a batch (:func:`task_size_of`).
    merge : {"nonblocking", "blocking"}
    ordered : bool
        Sort each task's pairs by (later, earlier) tuple: the step's output is then in the
        order tuple-at-a-time processing emits.
    delay_spins, delay_seed : int
        The interleaving test hook (:class:`SharedIndexConfig`).
    host_threads : int, optional
        Threads to start, if fewer than ``threads`` (:meth:`SharedIndexConfig.simulated`).
    step_tuples : int
        The most tuples a step gathers across batches before its threads meet; 0: one batch a
        step (module docstring).
    pipelined : bool, optional
        Return from :meth:`on_batch` while the pool's threads run the batch's tasks; their
        pairs leave with a later call (module docstring). Not with ``host_threads``: the simulator
        models it from this flag. None: with two threads or more on a host with at least
        ``threads + 3`` processors (:func:`pipelines_on`).

    Counters: :class:`~streamjoin.actors.join_spec.JoinWork` (``part_calls``: a probe and
    an insert per stream the step holds tuples of, as at a :class:`JoinCore`, since the tasks
    run inside one kernel call; ``scan`` the rows the tasks scanned one by one: the tail past
    the edge tuple, or for ``nested_loop`` the window). What the simulator needs to model the
    threads is :attr:`last_tasks`; :meth:`stats` adds the rows scanned (``scanned``, as
    ``scan``), lock waits and merges.
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
        step_tuples: int = STEP_TUPLES,
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
        self.step_tuples = step_tuples
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
        self._merges_seen = 0  # the indexes' merges counted in ``work.merges``
        #: per task of the last step: int64 (tasks, WORK) (:mod:`~streamjoin.actors.
        #: shared_kernels` W_* columns), for the simulator's model of the threads
        self.last_tasks = self._no_tasks = np.zeros((0, WORK), dtype=np.int64)
        self._pairs_per_tuple = 4.0
        self._buf = np.empty((self.threads, 3, 0), dtype=np.int64)
        self._out = np.empty((3, 0), dtype=np.int64)
        run = self.threads if host_threads is None else min(self.threads, host_threads)
        self._running = run
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
        self._flight: _Flight | None = None
        #: steps ended so far (the simulator's model of the threads meeting)
        self.steps_closed = 0
        self._failed = False  # a step's thread failed: its indexes lack what it announced
        # the simulator's host runs the tasks on one thread, and its virtual time must not
        # depend on the host's timing: a merge in flight ends the step at the next batch,
        # which waits for the merging thread to end both its phases (as a threaded core's
        # steps do when its merging thread is faster than a batch)
        self._settles_phases = host_threads is not None
        self._called: list[np.ndarray] = []  # task rows counted during a call
        # pool threads that found no task block here until the core's thread publishes more
        self._more = threading.Condition()
        self._sleepers = 0
        self.cfg[C_IDLE_TICKS] = idle_ticks() if self._pool is not None else 0
        if self._pool is not None:
            weakref.finalize(self, self._pool.close)
        self._dummy = shared.SharedBPlusTree(3, 3).state  # the probed state a stream lacks
        self._no_sync = np.zeros(0, dtype=np.int64)

    # -- steps ---------------------------------------------------------------------------------

    def on_batch(self, port: str, batch: Batch) -> list[tuple[str, PairBatch]]:
        """Join one batch on the threads; returns ``[("out", PairBatch)]`` with the pairs whose
        tasks have ended, in arrival order of the later tuple: this batch's as far as its
        tasks ran during the call, earlier batches' still held (``held_batches``) as far as
        theirs have since. The rest leave with a later call, :meth:`on_idle` or :meth:`on_eof`."""
        if port != "in":
            raise ValueError(f"shared-index core has no input port {port!r}; ports: ['in']")
        batch = batch.freeze()
        self.last_tasks = self._no_tasks
        self._called = []
        out: list[np.ndarray] = []
        self.work.tuples += len(batch)
        b, spec = len(batch), self.spec
        if not b:  # nothing to join: expire
            self._expire(batch.horizon)
            if self._flight is not None:
                out.append(self._drain())
            return self._emit(out)
        version = spec.version
        spec.observe(batch.attrs)  # integers beyond 2**52: exact conditions, wider boxes
        if spec.version != version:  # (a step's threads keep the conditions it began with)
            out.append(self._close())
            self.boxes, self.n_boxes = _boxes(spec)
            for store in self.stores.values():
                store.keep_residuals()  # the kernels read them from now on
        flight = self._flight
        ones = int(np.count_nonzero(batch.stream))
        if flight is not None and (not flight.fits(b, ones) or self._boundary_due(flight)):
            out.append(self._close())
        if self._flight is None:
            self._open(b)
        self._append(batch)
        flight = self._flight
        assert flight is not None  # (opened above)
        full = flight.full
        if full:  # no more tasks, the threads end with the last
            close_step(flight.step.ctl)
        if not self._overlap and full:  # end it while this thread is here
            self._help()
            out.append(self._close())
        elif not self._overlap and self._pool is not None:  # a task for each pool thread
            self._help(keep=self._pool.n)  # is left to it meanwhile
        elif not self._overlap:
            self._help()
        self._expire(batch.horizon)
        if self._flight is not None:
            out.append(self._drain())
        return self._emit(out)

    @property
    def held_batches(self) -> int:
        """Batches whose pairs have not all left: those whose tasks had not ended by the
        call's end. Executors call :meth:`on_idle` when no message waits."""
        return 0 if self._flight is None else len(self._flight.ends)

    def on_idle(self) -> list[tuple[str, PairBatch]]:
        """No message waits: wait for the tasks of every batch held, and return their pairs
        (the step stays open to the next batch)."""
        self.last_tasks = self._no_tasks
        self._called = []
        flight = self._flight
        if flight is None:
            return []
        if not self._overlap:
            self._help()
        step = flight.step
        if wait_propagated(step.ctl, step.status, step.task_meta, self._buf, self._out):
            return self._emit([self._close()])
        return self._emit([self._drain()])

    def _count_merges(self) -> None:
        """Count the merges the indexes ended since the last call (their phases switch on
        this thread: :attr:`JoinWork.merges`)."""
        merges = sum(i.merges for i in self.indexes.values() if i is not None)
        self.work.merges += merges - self._merges_seen
        self._merges_seen = merges

    def _emit(self, parts: list[np.ndarray]) -> list[tuple[str, PairBatch]]:
        self._count_merges()
        if self._called:
            self.last_tasks = np.concatenate(self._called)
        parts = [p for p in parts if p.shape[1]]
        if not parts:
            return []
        res = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        self.work.pairs += res.shape[1]
        return [("out", PairBatch(res[0], res[1], res[2]))]

    def _expire(self, horizon: np.ndarray) -> None:
        """Expire by a batch's horizons, as a JoinCore does after it: at once where nothing
        the threads read moves (the stores, PIM-Tree's flag), else when the step ends."""
        flight = self._flight
        for y in self.spec.streams:
            store = self.stores[y]
            before = len(store)
            first_live = store.expire(int(horizon[y]))
            index = self.indexes[y]
            if index is not None and flight is not None and not index.expires_in_place:
                flight.expire_to[y] = first_live
            elif index is not None:
                index.expire(first_live)
            self.work.expired += before - len(store)

    def _boundary_due(self, flight: _Flight) -> bool:
        """The open step must end before the next batch: a merge phase waits to switch, or
        propagation stalled (a task's pairs did not fit the buffers)."""
        if flight.step.ctl[STALLED * PAD] or flight.step.ctl[FAILED * PAD]:
            return True
        indexes = [i for i in self.indexes.values() if i is not None]
        if self._settles_phases:
            return any(i.phase_in_flight for i in indexes)
        return any(i.boundary_due() for i in indexes)

    def _open(self, b: int) -> None:
        """Open a step for a first batch of ``b`` tuples and up to ``step_tuples`` in all (as
        the indexes allow: :meth:`~streamjoin.indexes.pim.shared.SharedPIMTree.open_step`),
        with room in the stores and the buffers so that nothing moves while it runs, and
        hand it to the pool's threads."""
        spec, threads = self.spec, self.threads
        cap = max(self.step_tuples, b)
        task_size = task_size_of(self.task_size, b, threads)
        states = [self._dummy, self._dummy]
        sizes = {}
        room = np.full(2, cap, dtype=np.int64)  # per stream: the step ends when one is used up
        for y in spec.streams:
            store, index = self.stores[y], self.indexes[y]
            sizes[y] = len(index) if index is not None else len(store)
            if index is not None:
                states[y], room[y] = index.open_step(cap, b, switch=not self._settles_phases)
        if spec.query.self_join:  # one stream, one index
            room[1] = room[0]
            cap = min(cap, int(room[0]))
        else:
            cap = min(cap, int(room[0] + room[1]))
        for y in spec.streams:
            self.stores[y].reserve(cap)
        if spec.query.self_join:
            states[1] = states[0]
        max_tasks = cap // task_size + cap // b + 2
        first_ref = np.array([s.base + s.tail for s in self._store_of], dtype=np.int64)
        step = new_step(cap, max_tasks, len(spec.query.attrs) * 2, first_ref, threads)
        self.cfg[C_TASK_SIZE] = task_size
        want = int(1.5 * self._pairs_per_tuple * cap) + 256
        # a thread's share of the pairs: at most twice an even share of the threads running
        share = min(1.0, 2 / self._running)
        per_thread = int(1.5 * self._pairs_per_tuple * cap * share) + 256
        if self._out.shape[1] < want or self._buf.shape[2] < per_thread:
            self._buf = np.empty((threads, 3, per_thread), dtype=np.int64)
            self._out = np.empty((3, want), dtype=np.int64)
        windows = [  # a self-join's one store and index twice
            Window(store.rows, store.attrs, store.base, store.head, state)
            for store, state in zip(self._store_of, states, strict=True)
        ]
        probing = Probing(
            spec.conds, self.key_rows, self.boxes, self.n_boxes, self._symmetric, spec.n_served > 0
        )
        sync = self._no_sync if self._pool is None else self._pool.sync
        args = (sync, self.cfg, step, windows[0], windows[1], probing, self._buf, self._out)
        first = 1 if self._overlap else 0  # the pool's k-th thread runs as thread k - first
        stay = int(self.cfg[C_IDLE_TICKS])

        def work(k: int) -> list[np.ndarray]:
            """A pool thread's share of the step: tasks while there are, blocking between. A
            thread that fails marks the step failed: the other threads stop, and the core's
            thread, which may wait for the task it held, ends the step and raises its error."""
            spills = []
            try:
                while True:
                    status, spill, _ = run_tasks(k - first, stay if k else 0, 0, *args)
                    spills.append(spill)
                    if status == DONE:
                        return spills
                    self._wait_for_tasks(step)
            except BaseException:
                mark_failed(step.ctl)
                raise

        self._flight = _Flight(step, work, args, cap, max_tasks, task_size, sizes, room)
        if self._pool is not None:
            self._pool.start(work)

    def _wait_for_tasks(self, step: Step) -> None:
        """A pool thread with no task to claim: block until one is published or the step ends."""
        ctl = step.ctl
        with self._more:
            self._sleepers += 1
            while ctl[NEXT * PAD] >= ctl[PUBLISHED * PAD] and not ctl[CLOSED * PAD]:
                self._more.wait()
            self._sleepers -= 1

    def _wake(self) -> None:
        if self._pool is not None:
            with self._more:
                if self._sleepers:
                    self._more.notify_all()

    def _append(self, batch: Batch) -> None:
        """Stage ``batch`` into the open step, store its tuples, announce them to the indexes
        and publish its tasks."""
        flight, spec = self._flight, self.spec
        assert flight is not None  # (_open made it)
        step = flight.step
        n_y, n_tasks = stage_batch(
            step,
            batch.stream,
            batch.seq,
            batch.idx,
            batch.lo_idx,
            batch.ingest_ns,
            batch.attrs,
            self.key_rows,
            spec.query.self_join,
            flight.n_tasks,
            flight.task_size,
        )
        streams = 0
        for y in spec.streams:
            old, new = int(flight.n_y[y]), int(n_y[y])
            if new == old:
                continue
            streams += 1
            refs = self.stores[y].append(batch, step.ypos[y, old:new] - flight.tuples)
            if self.indexes[y] is not None:
                self.indexes[y].add_to_step(step.keys[y, old:new], refs)
        publish_batch(step.ctl, step.n_y, n_y, n_tasks)
        self._wake()
        flight.n_y, flight.n_tasks = n_y, int(n_tasks)
        flight.tuples += len(batch)
        flight.ends.append(flight.n_tasks)
        self.work.part_calls += 2 * streams  # as a JoinCore: a probe and an insert per stream

    def _help(self, keep: int = 0) -> None:
        """The core's thread (when it is one of the ``threads``) runs the tasks published and
        not yet claimed, and returns when no more than ``keep`` are left."""
        flight = self._flight
        assert flight is not None
        try:
            _, spill, _ = run_tasks(0, 0, keep, *flight.args)
        except BaseException:  # the pool's threads must not wait for its task: end the step
            mark_failed(flight.step.ctl)
            self._failed = True
            self.close()
            raise
        flight.spills.append(spill)

    def _drain(self) -> np.ndarray:
        """The pairs propagated since the last call: int64 ``(3, n)``."""
        flight = self._flight
        assert flight is not None
        res, head = drain_pairs(flight.step.ctl, self._out, flight.drained)
        flight.drained += res.shape[1]
        while flight.ends and flight.ends[0] <= head:
            flight.ends.popleft()
        self._account(flight, int(head))
        return res

    def _close(self) -> np.ndarray:
        """End the open step, if any: no more tasks; run this thread's share of those left
        (none when pipelined), wait for the threads, gather the pairs not yet left in arrival
        order, end the indexes' step and expire what waited for it."""
        flight = self._flight
        if flight is None:
            return np.empty((3, 0), dtype=np.int64)
        self._flight = None
        self.steps_closed += 1
        step = flight.step
        close_step(step.ctl)
        self._wake()
        if self._pool is None:
            spills = [flight.spills + flight.work(0)]
        else:
            try:
                got = self._pool.finish(share=not self._overlap)
            except BaseException:  # a thread failed: the step is lost, the run ends
                self._failed = True
                raise
            spills = got[1:] if self._overlap else [flight.spills + got[0], *got[1:]]
        ctl = step.ctl
        n_tasks = flight.n_tasks
        if ctl[HEAD * PAD] == n_tasks:  # everything propagated during the step
            res = self._out[:, flight.drained : ctl[OUT_N * PAD]].copy()
        else:
            per_thread = [np.concatenate(s, axis=1) if len(s) > 1 else s[0] for s in spills]
            sizes = [p.shape[1] for p in per_thread]
            spill_base = np.cumsum([0] + sizes[:-1]).astype(np.int64)
            spill = np.concatenate(per_thread, axis=1)
            res = gather_pairs(
                ctl, step.task_meta, self._buf, spill, spill_base, self._out, flight.drained
            )
        for y in self.spec.streams:
            index = self.indexes[y]
            if index is not None and self._settles_phases:
                index.settle()
            if index is not None:
                index.end_step()
        self._account(flight, n_tasks)
        for y, first_live in flight.expire_to.items():
            self.indexes[y].expire(first_live)
        pairs = flight.drained + res.shape[1]
        self._pairs_per_tuple = 0.5 * self._pairs_per_tuple + 0.5 * pairs / flight.tuples
        return res

    def _account(self, flight: _Flight, upto: int) -> None:
        """Count the work of the step's tasks before ``upto`` not counted yet."""
        if upto <= flight.accounted:
            return
        task_work = flight.step.task_work[flight.accounted : upto]
        flight.accounted = upto
        total = task_work.sum(axis=0).tolist()
        work = self.work
        work.probes += total[W_PROBES]
        # the rows the tasks scanned one by one: past the edge tuple (an index's tail), or
        # the window (nested_loop): what the index's descents leave to the core
        work.scan += float(total[W_SCANNED])
        work.candidates += total[W_CANDIDATES]
        work.inserted += total[W_INSERTED]
        self.scanned += total[W_SCANNED]
        self.lock_waits += total[W_WAITS]
        self.tasks += len(task_work)
        self._called.append(task_work)

    # -- the rest of the contract --------------------------------------------------------------

    def on_eof(self) -> list:
        """End of stream: end the open step, finish background merges, stop the threads."""
        self.last_tasks = self._no_tasks
        self._called = []
        out = self._emit([self._close()])
        self.close()
        self._count_merges()  # (those it settled)
        return out

    def close(self) -> None:
        flight, self._flight = self._flight, None
        if flight is not None:  # its threads read the indexes: let them finish
            close_step(flight.step.ctl)
            self._wake()
            if self._pool is not None:
                with contextlib.suppress(Exception):
                    self._pool.finish(share=not self._overlap)
        for index in self.indexes.values():
            if index is not None:
                index.close(settle=not self._failed)
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def end_step(self) -> list[tuple[str, PairBatch]]:
        """End the open step now (its threads meet) and return the pairs it still held: for
        checks and tests, which look at the indexes between steps."""
        self.last_tasks = self._no_tasks
        self._called = []
        return self._emit([self._close()])

    def counters(self) -> tuple:
        return self.work.as_tuple()

    @property
    def cost_key(self) -> str:
        """``shared:<index>``: the shared core's per-unit costs are its own (the task
        machinery, edge tuples and locks cost a one-thread step 30% more than a plain core's
        on PIM-Tree), calibrated on ``shared_index(1, index)``
        (:func:`~streamjoin.runtime.sim.calibrate.calibrate`)."""
        return SHARED_COST_PREFIX + self.index_name

    def held_items(self) -> int:
        """Tuples its windows hold, both streams (what its steps' working set grows with, as
        a :class:`~streamjoin.actors.join_core.JoinCore`'s)."""
        return sum(len(store) for store in self.stores.values())

    def stats(self) -> dict:
        """Besides the counters: rows scanned past the edge tuple (``scan``'s), times a lock was
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
    def merge_wait_ns(self) -> int:
        """ns this core's thread has waited for its indexes' merging threads (the merges'
        own work, on threads of their own: the simulator's calibration leaves it out of the
        core's steps)."""
        return sum(i.merge_wait_ns for i in self.indexes.values() if i is not None)

    @property
    def nbytes(self) -> int:
        held = sum(s.nbytes for s in self.stores.values())
        return held + sum(i.nbytes for i in self.indexes.values() if i is not None)

    def check(self) -> None:
        """Assert every index's invariants (between steps: with none open, so after
        :meth:`end_step`; settles merges in flight)."""
        if self._flight is not None:
            raise RuntimeError("a step is open: call end_step() before check()")
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
        indexes = [i for i in self.indexes.values() if hasattr(i, "compile_ahead")]
        late = {i.compile_ahead() for i in indexes} - {None}
        if late and compile_ahead.start(TASK_KERNEL_JOBS) is not None:
            # an empty cache: the task kernel's largest callees compile in a second process
            # while this one compiles the index's late kernels (T_I's insert, the merge's),
            # and the warm-up's first step finds them in the disk cache
            for target in late:
                compile_ahead.compile_now(target)
        for target in late:  # (else the late kernels, meanwhile, in a second process)
            compile_ahead.start(target)
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
            spare.end_step()  # a batch need not fill its step: settle merges between steps
            for index in spare.indexes.values():
                if index is not None:
                    index.settle()
        spare.close()
