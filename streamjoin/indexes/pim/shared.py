"""Window indexes that the threads of one join core share (PIM-Tree §3.3.3, §4), by name.

A shared index is driven in *steps*: between steps no thread runs, and the index may switch
merge phases, reserve node room and expire; during a step the threads search and insert with
the kernels of :mod:`~streamjoin.indexes.pim.pim_tree_shared` on :attr:`state`, the arrays of
the step. Per step the join core calls :meth:`begin_step` with the items its threads will
insert, runs them, then :meth:`end_step` and :meth:`expire`.

Which indexes can be shared (:func:`make_shared`):

- ``pim_tree`` and ``im_tree`` (:class:`SharedPIMTree`): T_S lock-free, T_I's subindexes under
  their own locks (IM-Tree has one: its T_I is one B+-tree), merges blocking or nonblocking;
- ``bplus_tree`` (:class:`SharedBPlusTree`): one tree under one lock, expired items deleted
  between steps;
- ``nested_loop``: nothing to share, every probe scans the tuple store (``None``).

Every other index keeps state that concurrent updates would corrupt (subwindows created and
dropped, rebuilt arrays) and is refused for more than one thread.
"""

from __future__ import annotations

import copy
import inspect
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable

import numpy as np

from streamjoin.indexes.blocks.atomics import PAD
from streamjoin.indexes.blocks.coded_level import CodedLevel
from streamjoin.indexes.blocks.item_layout import item_layout
from streamjoin.indexes.blocks.key_order import stable_order
from streamjoin.indexes.pim.bplus_tree import (
    HEIGHT,
    INNER_HWM,
    LEAF_HWM,
    ROOT,
    BPlusArrays,
    chain_items,
    check_forest,
    delete_items,
    new_forest,
    new_path,
    new_tree,
    reserve,
)
from streamjoin.indexes.pim.css_tree import build_css_tree, descend_css_tree
from streamjoin.indexes.pim.pim_tree import check_options, partitions
from streamjoin.indexes.pim.pim_tree_shared import (
    APPLYING,
    BUILDING,
    CHUNK,
    COMPACT,
    CSS_FANOUT,
    CSS_LEAF,
    DEPTH,
    META_SIZE,
    MIN_REF,
    N_PARTS,
    PHASE,
    REF_BASE,
    STEADY,
    STRIDE,
    SharedArrays,
    apply_pending,
    insert_shared,
)
from streamjoin.indexes.pim.tree_shape import DEFAULT_SHAPE, TreeShape
from streamjoin.modes import MERGES, Layout, Merge

_NO_REF = np.iinfo(np.int64).min
#: Pending items the merging thread inserts under one acquisition of a subindex's lock
#: (§4.2 phase 2): a whole partition's run (thousands of items at W = 2^20) held the lock for
#: milliseconds, and every probe of that partition waited for it.
APPLY_CHUNK = 256
#: Index names that threads can share, and the ones they cannot (docs/design.md §3).
SHAREABLE = ("bplus_tree", "im_tree", "nested_loop", "pim_tree")


def _empty(dtype=np.float64) -> np.ndarray:
    return np.empty(0, dtype=dtype)


def _meta() -> np.ndarray:
    meta = np.zeros(META_SIZE, dtype=np.int64)
    meta[N_PARTS] = meta[STRIDE] = 1
    meta[MIN_REF] = _NO_REF
    return meta


_NO_ITEMS = np.empty(0, dtype=np.uint64)
_NO_GRID = CodedLevel().grid


def _empty_parts() -> dict:
    """The parts of a :class:`SharedArrays` an index leaves empty, made once per index (no
    kernel writes them; a step builds its state twice, and fresh arrays each time cost more
    than the rest of it)."""
    none_f, none_i = _empty(), _empty(np.int64)
    return {
        "ts_keys": none_f,
        "ts_refs": none_i,
        "inner": none_f,
        "offsets": np.zeros(1, dtype=np.int64),
        "upper": np.full(1, np.inf),
        "ts_items": _NO_ITEMS,
        "inner_items": _NO_ITEMS,
        "upper_items": _NO_ITEMS,
        "grid": _NO_GRID,
        "side_keys": none_f,
        "side_refs": none_i,
        "pend_keys": none_f,
        "pend_refs": none_i,
        "pend_start": np.zeros(2, dtype=np.int64),
        "applied": np.zeros(1, dtype=np.int64),
    }


def _state(
    meta, t, tops, locks, inserts, frozen, frozen_tops, empty: dict, **parts
) -> SharedArrays:
    """A :class:`SharedArrays` over T_I ``(t, tops)`` and F; the parts not in ``parts`` from
    ``empty`` (:func:`_empty_parts`)."""
    fields = {**empty, **parts}
    return SharedArrays(
        meta=meta,
        t=t,
        tops=tops,
        locks=locks,
        inserts=inserts,
        frozen=frozen,
        frozen_tops=frozen_tops,
        **fields,
    )


class _MergingThread:
    """The merging thread of one shared PIM-Tree (§4.2): started at the first merge and kept,
    so that a merge costs no thread start (one per phase cost ~0.3 ms a step at W = 2^12,
    where a merge is always in flight). Runs one phase at a time; an error in a phase is
    raised by :meth:`wait` in the thread that waits for it."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._done.set()
        self._error: BaseException | None = None
        #: ns the threads that waited for a phase to end spent waiting (the simulator's
        #: calibration leaves them out of a step's time: the merging thread's own work)
        self.waited_ns = 0

    def start(self, target, *args) -> None:
        """Run ``target(*args)`` on the merging thread (no phase may be in flight)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, daemon=True, name="pim-merge")
            self._thread.start()
        self._done.clear()
        self._jobs.put((target, args))

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job[0](*job[1])
            except BaseException as e:  # noqa: BLE001 (raised by wait() in the core's thread)
                self._error = e
            finally:
                job = None  # hold no reference to the index between phases
                self._done.set()

    @property
    def busy(self) -> bool:
        return not self._done.is_set()

    @property
    def failed(self) -> bool:
        return self._error is not None

    def wait(self) -> None:
        """Wait for the phase in flight; raise its error (again at every later wait: the
        index it left half merged is not used again)."""
        if not self._done.is_set():
            t0 = time.perf_counter_ns()
            self._done.wait()
            self.waited_ns += time.perf_counter_ns() - t0
        if self._error is not None:
            raise RuntimeError("the merging thread of a shared PIM-Tree failed") from self._error

    def stop(self) -> None:
        """Let the thread end once the phase in flight is done (no wait)."""
        if self._thread is not None:
            self._jobs.put(None)

    def close(self) -> None:
        self.stop()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


class SharedPIMTree:
    """PIM-Tree (§3.3) shared by threads: T_S searched lock-free, T_I's subindexes locked,
    T_I merged into T_S blocking or nonblocking (module docstring of
    :mod:`~streamjoin.indexes.pim.pim_tree_shared`).

    Complexity as ``pim_tree`` (its docstring) for every thread's operations. With
    ``merge="nonblocking"`` a merge costs the same O(w) on the merging thread, plus O(p) at
    the step that installs the new T_S for the p items that arrived while it was built (they
    are cut out of T_I' as a sorted run), and the threads search one more component (F, then
    the pending run) while it is in flight. Memory: as ``pim_tree``, plus T_I' and F at once
    during a build (the paper's merge buffer, Fig. 11a).

    Parameters
    ----------
    name : {"pim_tree", "im_tree"}
        ``im_tree`` is insertion depth 0: T_I is one B+-tree under one lock.
    merge : {"nonblocking", "blocking"}
    merge_ratio, insertion_depth, window, fanout, leaf_size, css_fanout, css_leaf_size
        As for ``pim_tree``.
    layout : {"wide", "compact"}
        As for ``pim_tree``: T_S's items 16 bytes, or 8 (a grid code and a ref offset; probes
        of T_S return a superset that the join core refines, and the merging thread re-grids
        the old items, :class:`~streamjoin.indexes.blocks.coded_level.CodedLevel`). T_I holds whole
        keys either way.

    Attributes
    ----------
    merges : int
        Merges finished (a nonblocking one once its pending updates are applied).
    merged : int
        Items written into new T_S levels by those merges.
    merge_seconds : float
        Thread time of the builds.
    lock_waits : int
        Times the merging thread found a lock held while applying pending updates.
    """

    #: :meth:`expire` only flags (read when a step opens): safe while a step's threads run
    expires_in_place = True

    def __init__(
        self,
        name: str = "pim_tree",
        merge: Merge = "nonblocking",
        merge_ratio: float = 0.125,
        insertion_depth: int = 1,
        window: int | None = None,
        fanout: int = DEFAULT_SHAPE.fanout,
        leaf_size: int = DEFAULT_SHAPE.leaf_size,
        css_fanout: int = DEFAULT_SHAPE.css_fanout,
        css_leaf_size: int = DEFAULT_SHAPE.css_leaf_size,
        layout: Layout = "wide",
    ) -> None:
        self._items = item_layout(name, layout)
        if merge not in MERGES:
            raise ValueError(f"merge must be 'nonblocking' or 'blocking', got {merge!r}")
        shape = TreeShape(fanout, leaf_size, css_fanout, css_leaf_size)
        shape = check_options(name, merge_ratio, insertion_depth, window, shape)
        self.name = name
        self.merge = merge
        self.layout = layout
        self.exact = self._items.exact
        self.merge_ratio = float(merge_ratio)
        self.insertion_depth = 0 if name == "im_tree" else int(insertion_depth)
        self.window = window
        self.fanout, self.leaf_size = shape.fanout, shape.leaf_size
        self.css_fanout, self.css_leaf_size = shape.css_fanout, shape.css_leaf_size
        self.merges = self.merged = self.lock_waits = 0
        self.merge_seconds = 0.0
        self._meta = _meta()
        self._empties = _empty_parts()
        self._meta[CSS_FANOUT], self._meta[CSS_LEAF] = self.css_fanout, self.css_leaf_size
        self._meta[CHUNK] = APPLY_CHUNK
        self._meta[COMPACT] = self._items.packed
        self._before = _NO_REF
        self._first_ref: int | None = None
        self._last_ref: int | None = None
        # compact: T_S's grid, the ref its items count from, its side run (replaced, not
        # changed, by a merge: the merging thread builds the next one from a copy)
        self._coded = CodedLevel()
        self._ts_buf = self._spare = self._items.empty_level(0)
        self._spare_forest: BPlusArrays | None = None  # node arrays for the next T_I to reuse
        self._frozen, self._frozen_tops = new_forest(1, 3, 3)
        self._n_frozen = 0
        self._no_pending()
        self._phase = STEADY
        self._merger = _MergingThread()
        weakref.finalize(self, self._merger.stop)  # an index dropped unclosed ends its thread
        # what the build phase made, for the next step to install: _install's arguments, and
        # the buffers of the old T_S
        self._built: tuple[tuple, tuple[np.ndarray, np.ndarray]] | None = None
        self._room = 0  # items T_I may take before node room must be reserved again
        keys, refs = self._ts_buf
        inner, offsets = build_css_tree(keys, self.css_fanout, self.css_leaf_size)
        depth, stride, upper = self._partitions(keys, offsets)
        self._install(keys, refs, inner, offsets, depth, stride, upper, self._coded)

    # -- T_S and T_I -----------------------------------------------------------------------

    def _partitions(self, keys, offsets):
        return partitions(keys, offsets, self.css_fanout, self.css_leaf_size, self.insertion_depth)

    def _install(self, keys, refs, inner, offsets, depth, stride, upper, coded) -> None:
        """Make ``keys``/``refs`` T_S (a compact T_S: ``keys`` its items on ``coded``'s grid,
        ``refs`` unused) with a fresh, empty T_I over its partitions (the node arrays of the
        forest not in use, ``_spare_forest``, are reused)."""
        self._ts_keys, self._ts_refs, self._inner, self._offsets = keys, refs, inner, offsets
        self._coded = coded
        self._upper = upper
        n_parts = len(upper)
        self._meta[N_PARTS], self._meta[STRIDE], self._meta[DEPTH] = n_parts, stride, depth
        self._forest, self._tops = new_forest(
            n_parts, self.fanout, self.leaf_size, self._spare_forest
        )
        self._spare_forest = None
        self._locks = np.zeros(n_parts * PAD, dtype=np.int64)
        self._inserts = np.zeros(n_parts, dtype=np.int64)
        self._n_ti = 0

    def _no_pending(self) -> None:
        self._pend_keys, self._pend_refs = _empty(), _empty(np.int64)
        self._pend_start = np.zeros(2, dtype=np.int64)
        self._applied = np.zeros(1, dtype=np.int64)

    def _build(self, ts_keys, ts_refs, frozen, n_frozen, before, buf, coded) -> None:
        """Merge T_S and the frozen T_I into a new T_S (§3.2; §4.2 phase 1), dropping expired
        items; a compact T_S through ``coded``, a copy of its :class:`CodedLevel` that becomes
        the new T_S's. Reads only its arguments: it runs on the merging thread while workers
        join."""
        t0 = time.thread_time()
        ti_keys, ti_refs = chain_items(frozen, 0, n_frozen)
        need = len(ts_keys) + len(coded.side_keys) + n_frozen
        keys, refs = buf
        if len(keys) < need:  # room for a window a quarter larger before the next allocation
            keys, refs = self._items.empty_level(need + need // 4)
        n = self._items.merge_level(coded, ts_keys, ts_refs, ti_keys, ti_refs, before, (keys, refs))
        inner, offsets = build_css_tree(keys[:n], self.css_fanout, self.css_leaf_size)
        parts = self._partitions(keys[:n], offsets)
        built = (keys[:n], refs[:n], inner, offsets, *parts, coded)  # compact: refs are empty
        self._built = (built, (keys, refs))
        self.merged += n
        self.merge_seconds += time.thread_time() - t0

    def _merge_size(self) -> int:
        """m · w, with w the ``window`` option or the ref span of the live items (none before
        the first insert: a step of the other stream's tuples only)."""
        if not self.window and self._last_ref is None:
            return 1
        w = self.window
        if not w:
            assert self._first_ref is not None and self._last_ref is not None  # (set together)
            w = self._last_ref + 1 - max(self._before, self._first_ref)
        return max(1, int(np.ceil(self.merge_ratio * w)))

    def compile_ahead(self) -> str | None:
        """Kernels a first run reaches late (:func:`late_kernel_jobs`), for the default
        PIM-Tree (whose state's types those jobs build), else None."""
        default = (self.name, self.layout) == ("pim_tree", "wide")
        return f"{__name__}:late_kernel_jobs" if default else None

    # -- steps -----------------------------------------------------------------------------

    @property
    def state(self) -> SharedArrays:
        """The arrays the threads of the next step share."""
        self._meta[PHASE] = self._phase
        self._meta[MIN_REF] = self._before
        coded = self._coded
        self._meta[REF_BASE] = coded.ref_base
        if self._items.packed:  # the kernels take compact items under their own names
            level = {
                "ts_items": self._ts_keys,
                "inner_items": self._inner,
                "upper_items": self._upper,
                "grid": coded.grid,
                "side_keys": coded.side_keys,
                "side_refs": coded.side_refs,
            }
        else:
            level = {
                "ts_keys": self._ts_keys,
                "ts_refs": self._ts_refs,
                "inner": self._inner,
                "upper": self._upper,
            }
        return _state(
            self._meta,
            self._forest,
            self._tops,
            self._locks,
            self._inserts,
            self._frozen,
            self._frozen_tops,
            self._empties,
            offsets=self._offsets,
            pend_keys=self._pend_keys,
            pend_refs=self._pend_refs,
            pend_start=self._pend_start,
            applied=self._applied,
            **level,
        )

    def open_step(self, cap: int, need: int, switch: bool = True) -> tuple[SharedArrays, int]:
        """Prepare a step whose threads will insert up to ``cap`` items, at least ``need``:
        switch merge phases that are due (with ``switch``), reserve node room (nothing moves
        while the step runs). Returns the step's state and the items it may take: fewer than ``cap`` when T_I
        reaches ``m · w`` sooner (the step ends there, so that the merge starts on time) or
        while pending updates are applied into the room reserved for them; never fewer than
        ``need``."""
        if switch:
            self._switch_phase()
        if self._phase == APPLYING and self._room < need:  # the applier must not see arrays move
            self._finish_worker()
        if self._phase == APPLYING:
            return self.state, max(need, min(cap, self._room))
        room = cap
        if self._phase == STEADY:
            room = min(cap, max(need, self._merge_size() - self._n_ti))
        self._forest = reserve(self._forest, self._n_ti + room, room, len(self._upper))
        return self.state, room

    def add_to_step(self, keys: np.ndarray, refs: np.ndarray) -> None:
        """Announce inserts of the open step: ``refs`` (keys ``keys``, both in ref order),
        before the threads may insert them."""
        n = len(refs)
        if not n:
            return
        self._items.check_ref_span(self._coded, self.name, refs, self._first_ref, self._before)
        if self._first_ref is None:
            self._first_ref = int(refs[0])
        self._last_ref = int(refs[-1])
        if self._phase == APPLYING:
            self._room -= n
        self._n_ti += n

    def begin_step(self, keys: np.ndarray, refs: np.ndarray) -> SharedArrays:
        """A step of exactly these inserts (:meth:`open_step`, then :meth:`add_to_step`)."""
        state, _ = self.open_step(len(refs), len(refs))
        self.add_to_step(keys, refs)
        return state

    def boundary_due(self) -> bool:
        """A merge phase ended on the merging thread: the next one starts between steps."""
        return self._phase != STEADY and not self._merger.busy

    @property
    def phase_in_flight(self) -> bool:
        """A nonblocking merge is in one of its phases."""
        return self._phase != STEADY

    def end_step(self) -> None:
        """After a step: start a merge if T_I holds ``m · w`` items (blocking: merge now)."""
        self._switch_phase()
        if self._phase != STEADY or self._n_ti < self._merge_size():
            return
        coded = copy.copy(self._coded)  # the merge replaces its arrays, never writes them
        if self.merge == "blocking":
            args = (self._ts_keys, self._ts_refs, self._forest, self._n_ti, self._before)
            self._build(*args, self._spare, coded)
            assert self._built is not None  # (_build made it)
            (built, buf), self._built = self._built, None
            self._spare, self._ts_buf = self._ts_buf, buf
            self._spare_forest = self._forest
            self._install(*built)
            self.merges += 1
            return
        # §4.2 phase 1: T_I freezes, T_I' takes the inserts, the merging thread builds
        self._frozen, self._frozen_tops, self._n_frozen = self._forest, self._tops, self._n_ti
        n_parts = len(self._upper)
        self._forest, self._tops = new_forest(
            n_parts, self.fanout, self.leaf_size, self._spare_forest
        )
        self._spare_forest = None
        self._locks = np.zeros(n_parts * PAD, dtype=np.int64)
        self._inserts = np.zeros(n_parts, dtype=np.int64)
        self._n_ti = 0
        self._phase = BUILDING
        args = (self._ts_keys, self._ts_refs, self._frozen, self._n_frozen, self._before)
        self._start_worker(self._build, *args, self._spare, coded)

    def _start_worker(self, target, *args) -> None:
        self._merger.start(target, *args)

    def _finish_worker(self) -> None:
        """Wait for the merging thread's phase to end, then switch."""
        self._merger.wait()
        self._switch_phase()

    def _switch_phase(self) -> None:
        """Between steps: install a built T_S (phase 2 starts) or end phase 2."""
        if self._phase == STEADY or self._merger.busy:  # (STEADY: no phase in flight)
            return
        self._merger.wait()  # done: raises its error, if it had one
        if self._phase == BUILDING:
            self._install_built()
        elif self._phase == APPLYING:
            self._no_pending()
            self._phase = STEADY
            self.merges += 1

    def _install_built(self) -> None:
        """§4.2 phase 2: the new T_S replaces the old; T_I' becomes the pending run, cut by
        the new partitions; a new T_I (F's arrays) takes the inserts and the merging thread
        applies the pending run to it."""
        assert self._built is not None  # (the build phase made it)
        (built, buf), self._built = self._built, None
        side, n_side = self._forest, self._n_ti
        pend_keys, pend_refs = chain_items(side, 0, n_side)
        self._spare, self._ts_buf = self._ts_buf, buf
        self._spare_forest = self._frozen  # merged away: its arrays make the new T_I
        self._frozen, self._frozen_tops = new_forest(1, 3, 3)
        self._n_frozen = 0
        self._install(*built)
        self._spare_forest = side
        self._pend_keys, self._pend_refs = pend_keys, pend_refs
        upper = self._upper
        # partition q takes the keys whose routes (on a compact T_S: their lowest item
        # bounds on the new grid) are at most upper[q]
        routes = self._items.routes(pend_keys, self._coded)
        self._pend_start = np.zeros(len(upper) + 1, dtype=np.int64)
        self._pend_start[1:] = np.searchsorted(routes, upper, side="right")
        self._applied = np.zeros(len(upper), dtype=np.int64)
        # the applier inserts while threads do: reserve node room for both now, and for
        # the steps to come until it is done
        self._room = 2 * self._merge_size() + 4096
        n = n_side + self._room
        self._forest = reserve(self._forest, n, n, len(upper))
        self._n_ti = n_side
        self._phase = APPLYING
        self._start_worker(self._apply, self.state)

    def _apply(self, state: SharedArrays) -> None:
        self.lock_waits += apply_pending(state)

    def settle(self) -> None:
        """Wait for a merge in flight to finish all its phases (end of stream, checks): between
        steps, or at a step's end once its threads are done, never while they may run (a
        phase's switch replaces arrays the step's state holds)."""
        while self._phase != STEADY:
            self._finish_worker()

    # -- window ----------------------------------------------------------------------------

    @property
    def merge_wait_ns(self) -> int:
        """ns the core's thread has waited for the merging thread to end a phase."""
        return self._merger.waited_ns

    def expire(self, before_ref: int) -> None:
        """Flag items with ``ref < before_ref`` expired (between steps). O(1)."""
        self._before = max(self._before, int(before_ref))

    def __len__(self) -> int:
        return len(self._ts_keys) + len(self._coded.side_keys) + self._n_ti + self._n_frozen

    @property
    def partition_inserts(self) -> np.ndarray:
        """Inserts per T_I subindex since the last merge, a copy (as ``pim_tree``'s)."""
        return self._inserts.copy()

    @property
    def nbytes(self) -> int:
        arrays = [*self._ts_buf, *self._spare, self._inner, self._offsets, self._upper]
        arrays += [self._tops, self._locks, self._inserts, self._pend_keys, self._pend_refs]
        arrays += [self._coded.side_keys, self._coded.side_refs]
        for forest in (self._forest, self._spare_forest, self._frozen):
            if forest is not None:
                arrays += list(forest)
        return sum(a.nbytes for a in arrays)

    def check(self) -> None:
        """Assert the invariants (settles a merge in flight first; between steps only)."""
        self.settle()
        keys, refs = self._ts_keys, self._ts_refs
        refs = self._items.check_level(self._coded, keys, refs)  # T_S's, a side run's included
        inner, offsets = build_css_tree(keys, self.css_fanout, self.css_leaf_size)
        assert np.array_equal(inner, self._inner) and np.array_equal(offsets, self._offsets)
        depth, stride, upper = self._partitions(keys, offsets)
        assert (depth, stride) == (self._meta[DEPTH], self._meta[STRIDE])
        assert np.array_equal(upper, self._upper)
        assert not self._locks.any(), "every lock released"
        held = check_forest(self._forest, self._tops)
        assert len(held) == len(upper), "one subindex per node at the insertion depth"
        assert np.array_equal(self._inserts, [len(items) for items in held]), "insert counts"
        ti_refs = []
        for p, items in enumerate(held):
            for key, ref in items:
                route = self._items.routes(np.array([key]), self._coded)[0]
                part = descend_css_tree(inner, offsets, self.css_fanout, route, depth)
                assert part == p, f"item {(key, ref)} in subindex {p}, belongs to {part}"
                ti_refs.append(ref)
        assert len(ti_refs) == self._n_ti, "T_I item count"
        all_refs = np.concatenate([refs, np.array(ti_refs, dtype=np.int64)])
        assert len(np.unique(all_refs)) == len(all_refs), "every item held once"

    def close(self, settle: bool = True) -> None:
        """Stop background work (end of stream): finish the merge in flight (unless the merging
        thread failed: its error was raised by the step that waited; or not ``settle``: a
        step of the join failed, and T_I lacks items it announced), end the thread."""
        if settle and not self._merger.failed:
            self.settle()
        self._merger.close()


class SharedBPlusTree:
    """A B+-tree shared under one coarse lock: the baseline PIM-Tree's partitioned locks
    improve on. Threads insert and search under the lock; items expire between steps (deleted
    one by one, in key order, from a log of the inserts).

    Complexity as ``bplus_tree``; every operation of every thread is serialised by the lock.

    Parameters
    ----------
    fanout, leaf_size : int
        As for ``bplus_tree``.
    """

    name = "bplus_tree"
    lock_waits = merges = merged = merge_wait_ns = 0
    merge_seconds = 0.0
    #: :meth:`expire` deletes items: only between steps
    expires_in_place = False

    def __init__(
        self, fanout: int = DEFAULT_SHAPE.fanout, leaf_size: int = DEFAULT_SHAPE.leaf_size
    ) -> None:
        shape = TreeShape(fanout, leaf_size).checked(self.name)
        self._tree = new_tree(shape.fanout, shape.leaf_size, 16, 16)
        # the tree's (root, height) live in its meta: the one "subindex" of the shared kernels
        self._tops = self._tree.meta[ROOT : HEIGHT + 1].reshape(1, 2)
        self._meta = _meta()
        self._empties = _empty_parts()
        self._locks = np.zeros(PAD, dtype=np.int64)
        self._inserts = np.zeros(1, dtype=np.int64)
        self._log: deque = deque()  # (keys, refs) of each step, in ref order
        self._n = 0
        self._empty_forest, self._empty_tops = new_forest(1, 3, 3)

    @property
    def state(self) -> SharedArrays:
        return _state(
            self._meta,
            self._tree,
            self._tops,
            self._locks,
            self._inserts,
            self._empty_forest,
            self._empty_tops,
            self._empties,
        )

    def open_step(self, cap: int, need: int, switch: bool = True) -> tuple[SharedArrays, int]:
        """As :meth:`SharedPIMTree.open_step`: node room for ``cap`` inserts."""
        self._tree = reserve(self._tree, self._n + cap, cap)
        return self.state, max(cap, need)

    def add_to_step(self, keys: np.ndarray, refs: np.ndarray) -> None:
        if len(refs):
            self._log.append((keys.copy(), refs.copy()))
            self._n += len(refs)

    def boundary_due(self) -> bool:
        return False

    phase_in_flight = False

    def begin_step(self, keys: np.ndarray, refs: np.ndarray) -> SharedArrays:
        """A step of exactly these inserts (:meth:`open_step`, then :meth:`add_to_step`)."""
        state, _ = self.open_step(len(refs), len(refs))
        self.add_to_step(keys, refs)
        return state

    def end_step(self) -> None:
        pass

    def expire(self, before_ref: int) -> None:
        """Delete the items with ``ref < before_ref`` (between steps). O(e log e + e · height ·
        fanout) for e items."""
        self._meta[MIN_REF] = max(self._meta[MIN_REF], int(before_ref))
        gone_k, gone_r = [], []
        while self._log and self._log[0][1][0] < before_ref:
            keys, refs = self._log.popleft()
            cut = int(np.searchsorted(refs, before_ref))
            gone_k.append(keys[:cut])
            gone_r.append(refs[:cut])
            if cut < len(refs):
                self._log.appendleft((keys[cut:], refs[cut:]))
        if gone_r:
            keys, refs = np.concatenate(gone_k), np.concatenate(gone_r)
            order = stable_order(keys)  # refs ascend: a stable sort gives (key, ref) order
            delete_items(self._tree, keys[order], refs[order])
            self._n -= len(refs)

    def settle(self) -> None:
        pass

    def close(self, settle: bool = True) -> None:
        pass

    def __len__(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._tree) + sum(k.nbytes + r.nbytes for k, r in self._log)

    def check(self) -> None:
        t = self._tree
        (held,) = check_forest(t, t.meta[None, ROOT : HEIGHT + 1])
        logged = [(k, r) for keys, refs in self._log for k, r in zip(keys, refs, strict=True)]
        assert held == sorted(logged), "the tree holds exactly the logged items"
        assert not self._locks.any(), "the lock is free"
        assert int(t.meta[LEAF_HWM]) <= len(t.leaf_count)
        assert int(t.meta[INNER_HWM]) <= len(t.inner_count)


def check_shared_options(name: str, options: dict) -> None:
    """A ``ValueError`` naming the options the shared form of index ``name`` does not take,
    and those it does, before a run builds it (the single-thread index may take more: a
    ``bplus_tree`` shared by threads has no compact layout)."""
    init: Callable[..., None] | None
    if name in ("pim_tree", "im_tree"):
        init = SharedPIMTree.__init__
    elif name == "bplus_tree":
        init = SharedBPlusTree.__init__
    else:
        init = None
    takes = [] if init is None else list(inspect.signature(init).parameters)[1:]
    takes = [p for p in takes if p not in ("name", "merge")]  # set by the core, not options
    unknown = sorted(set(options) - set(takes))
    if unknown:
        offered = ", ".join(takes) if takes else "none"
        raise ValueError(
            f"the shared {name} takes no option {', '.join(map(repr, unknown))}; "
            f"its options: {offered}"
        )


def late_kernel_jobs() -> list:
    """The kernels a shared-index core's first run compiles late, for a second process
    (:mod:`streamjoin.compile_ahead`): T_I's insert, which the task kernel reaches after its
    probes and joins, and the merge's application of pending updates, reached only at the
    first merge (figures: docs/performance.md, compiling)."""
    state = SharedPIMTree().state
    keys, refs = np.empty(0), np.empty(0, dtype=np.int64)
    return [(insert_shared, (state, keys, refs, new_path())), (apply_pending, (state,))]


def make_shared(name: str, options: dict, merge: Merge = "nonblocking"):
    """The shared form of index ``name`` with its ``options``: a :class:`SharedPIMTree`, a
    :class:`SharedBPlusTree`, or None for ``nested_loop`` (probes scan the store).

    Raises
    ------
    ValueError
        For an index that threads cannot share.
    """
    if name not in SHAREABLE:
        raise ValueError(
            f"index {name!r} cannot be shared by several threads; use one of "
            f"{', '.join(SHAREABLE)} (or threads=1)"
        )
    if name in ("pim_tree", "im_tree"):
        return SharedPIMTree(name, merge, **options)
    if name == "bplus_tree":
        return SharedBPlusTree(**options)
    if options:
        raise TypeError(f"nested_loop takes no options, got {sorted(options)}")
    return None
