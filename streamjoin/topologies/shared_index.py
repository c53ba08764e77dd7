"""``shared_index``: one join core whose window indexes several threads share (PIM-Tree §4)."""

from __future__ import annotations

import networkx as nx

from streamjoin import indexes
from streamjoin.actors.collector import CollectorConfig
from streamjoin.actors.emitter import EmitterConfig
from streamjoin.actors.shared_index.core import STEP_TUPLES, TASK_SIZE, SharedIndexConfig
from streamjoin.checks import MAX_THREADS, number
from streamjoin.indexes.base import option_names
from streamjoin.indexes.pim.shared import SHAREABLE
from streamjoin.modes import Merge
from streamjoin.topologies.base import Topology, add_actor, index_options_of

#: The largest task, in tuples: a task larger than a batch is the whole batch, and the core
#: sizes its scratch arrays by the task (2**24 tuples: a few hundred MB of them).
MAX_TASK_SIZE = 2**24
#: The most tuples a step may gather (its arrays are made for that many when it opens).
MAX_STEP_TUPLES = 2**24


def shared_index(
    threads: int = 2,
    index: str = "pim_tree",
    *,
    task_size: int | None = TASK_SIZE,
    merge: Merge = "nonblocking",
    pipelined: bool | None = None,
    step_tuples: int = STEP_TUPLES,
    index_options: dict | None = None,
    **options,
) -> Topology:
    """One join core, ``threads`` threads over its shared window indexes (PIM-Tree §4):
    tuples of both streams in one work queue in arrival order, tasks of ``task_size`` tuples,
    edge tuples, results propagated in arrival order, merges blocking or nonblocking
    (:mod:`streamjoin.actors.shared_index.core`).

    Parameters
    ----------
    threads : int
        Worker threads of the core (the Ray backend gives its actor this many CPUs), at most
        :data:`~streamjoin.checks.MAX_THREADS`.
    index : {"pim_tree", "im_tree", "bplus_tree", "nested_loop"}
        The shared window index (``bplus_tree`` under one coarse lock, ``nested_loop`` none:
        probes scan the window). Any other index serves ``threads=1`` only. A query whose
        conditions it cannot serve (only ``!=``, a self-join's cross-attribute ones, an OR
        whose terms share none) is scanned, exactly, with an ``IndexFallbackWarning``.
    task_size : int, optional
        Tuples per task, at most :data:`MAX_TASK_SIZE`; by default one task per thread a
        batch (``ceil(batch / threads)``),
        which measured fastest here. Larger tasks are probed and inserted as longer sorted
        runs and cost less scheduling and fewer lock acquisitions; smaller ones balance the
        threads more finely (§5, Fig. 10c-d).
    merge : {"nonblocking", "blocking"}
        How T_I is merged into T_S (§4.2; ``pim_tree`` and ``im_tree``).
    pipelined : bool, optional
        Tasks run while the executor does its work between batches: ``threads`` pool threads
        run every task while the core's own thread only feeds and drains them (PIM-Tree
        §4.1): it hands a batch's tasks to the pool and returns at once, sending the pairs
        propagated so far and taking the next batch while they run; the rest leave with a
        later batch, or as soon as no batch waits (``on_idle``). With ``threads=1`` nothing
        is pipelined. False: the core's thread is one of the ``threads``, the others
        ``threads - 1`` pool threads. None (default): on a
        host (on Ray, the one its actor runs on) or simulated machine with at least
        ``threads + 3`` processors, one for each worker, the core's thread, the emitter and
        the collector (with fewer, the pool takes processors from them and the core runs
        slower than one step a batch).
    step_tuples : int
        The most tuples a step gathers across batches, at most :data:`MAX_STEP_TUPLES`: the
        threads meet only when a step ends (it is full, T_I reaches its merge size or a
        nonblocking merge changes phase, or the input ends), and tuples that left the window
        are dropped then. 0: one batch a step, its threads meeting at every batch.
    index_options : dict, optional
        Passed to the index (e.g. ``layout="compact"`` for ``pim_tree`` and ``im_tree``: T_S
        in 8-byte items, whose candidates the core refines); ``**options`` are added to them.

    Notes
    -----
    An ``ordered`` run gets its pairs in order as they come: each task sorts its pairs and
    tasks are propagated in arrival order.
    """
    number("threads", threads, integer=True, low=1, high=MAX_THREADS)
    if task_size is not None:
        number("task_size", task_size, integer=True, low=1, high=MAX_TASK_SIZE)
    number("step_tuples", step_tuples, integer=True, low=0, high=MAX_STEP_TUPLES)
    opts = index_options_of(index, index_options, options, check=False)
    # the names against the shared form's (in the config), the values by the one-thread
    # index's checks, which the shared form applies too (pim_tree.check_options, node sizes)
    core = SharedIndexConfig(
        index,
        opts,
        threads=threads,
        task_size=task_size,
        merge=merge,
        pipelined=pipelined,
        step_tuples=step_tuples,
    )
    taken = option_names(index) if index in SHAREABLE else None
    indexes.check_options(index, {k: v for k, v in opts.items() if taken is None or k in taken})
    g = nx.MultiDiGraph(self_join=True)
    add_actor(g, "emitter", EmitterConfig(), pos=(0, 0), label="emitter")
    add_actor(
        g,
        "core",
        core,
        pos=(1, 0),
        label=f"shared-index core\n{index}, {merge} merge\n\n",
        parts=[f"T{k}" for k in range(threads)]
        if threads <= 8
        else ["T0", "T1", "…", f"T{threads - 1}"],
    )
    add_actor(g, "collector", CollectorConfig(in_order=True), pos=(2, 0), label="collector")
    g.add_edge("emitter", "core", src_port="out", dst_port="in", label="R+S")
    g.add_edge("core", "collector", src_port="out", dst_port="in", label="pairs")
    return Topology(f"shared_index({threads}, {index})", g)
