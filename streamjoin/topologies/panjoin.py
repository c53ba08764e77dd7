"""``panjoin``: a manager above a set of workers holding round-robin-placed subwindows."""

from __future__ import annotations

import networkx as nx

from streamjoin.actors.collector import CollectorConfig
from streamjoin.actors.emitter import EmitterConfig
from streamjoin.actors.panjoin import ManagerConfig, WorkerConfig
from streamjoin.checks import number, positive_int
from streamjoin.topologies.base import Topology, add_actor, check_actors, index_options_of

#: The most subwindows per window: each is an index of its own, which the manager lists and
#: every probe visits; PanJoin's experiments use 4 to 64, and 65,536 subwindows of one tuple
#: each already probe slower than one index.
MAX_SUBWINDOWS = 2**16


def panjoin(
    workers: int,
    subwindows: int = 4,
    index: str | None = None,
    subwindow_size: int | None = None,
    *,
    index_options: dict | None = None,
    **options,
) -> Topology:
    """PanJoin (Pan & Jacobsen §III-A): each window is a chain of subwindows placed round robin
    on ``workers``; the manager sends create / probe / insert / expire commands, the oldest
    subwindow expires whole.

    Parameters
    ----------
    workers : int
        With the emitter, manager and collector at most
        :data:`~streamjoin.topologies.base.MAX_ACTORS` actors.
    subwindows : int
        Subwindows per window (count windows: ``ceil(w / subwindows)`` tuples each), at most
        :data:`MAX_SUBWINDOWS`.
    index : str, optional
        Window index inside every subwindow (default chosen from the predicate).
    subwindow_size : int, optional
        Tuples per PanJoin subwindow, instead of ``subwindows`` (time windows: default 4096).
    index_options : dict, optional
        Passed to each subwindow's index, ``**options`` added to them. An index with
        subwindows of its own (``bisort``, ``rap_table``, ``wib_tree``) takes its own
        ``subwindow_size`` here: ``index_options={"subwindow_size": 1024}``.
    """
    positive_int("workers", workers)
    check_actors(f"panjoin({workers}, {subwindows})", workers + 3)
    number("subwindows", subwindows, integer=True, low=1, high=MAX_SUBWINDOWS)
    if subwindow_size is not None:
        positive_int("subwindow_size", subwindow_size)
    opts = index_options_of(index, index_options, options)
    g = nx.MultiDiGraph(self_join=True)
    mid = (workers - 1) / 2
    manager = ManagerConfig(workers, subwindows, subwindow_size, index)
    add_actor(g, "emitter", EmitterConfig(), pos=(mid - 1.2, 1), label="emitter")
    add_actor(g, "manager", manager, pos=(mid, 1), label="manager")
    add_actor(g, "collector", CollectorConfig(), pos=(mid + 1.2, -0.8), label="collector")
    g.add_edge("emitter", "manager", src_port="out", dst_port="in", label="R+S")
    g.add_edge("manager", "collector", src_port="out", dst_port="in", label="pairs")
    worker = WorkerConfig(index, opts, subwindows=subwindows, subwindow_size=subwindow_size)
    for w in range(workers):
        name = f"worker{w}"
        add_actor(g, name, worker, pos=(w, 0), label=f"worker {w}\n{index or 'auto'}")
        g.add_edge("manager", name, src_port=f"w{w}", dst_port="in", label="commands")
        g.add_edge(name, "collector", src_port="out", dst_port="in", label="pairs")
    return Topology(f"panjoin({workers} workers, {subwindows} subwindows)", g)
