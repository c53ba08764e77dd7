"""``panjoin``: a manager above a set of workers holding round-robin-placed subwindows."""

from __future__ import annotations

import networkx as nx

from streamjoin import indexes
from streamjoin.checks import positive_int
from streamjoin.topologies.base import Topology


def panjoin(
    workers: int,
    subwindows: int = 4,
    index: str | None = None,
    subwindow_size: int | None = None,
    **index_options,
) -> Topology:
    """PanJoin (Pan & Jacobsen §III-A): each window is a chain of subwindows placed round robin
    on ``workers``; the manager sends create / probe / insert / expire commands, the oldest
    subwindow expires whole.

    Parameters
    ----------
    workers : int
    subwindows : int
        Subwindows per window (count windows: ``ceil(w / subwindows)`` tuples each).
    index : str, optional
        Window index inside every subwindow (default chosen from the predicate).
    subwindow_size : int, optional
        Tuples per subwindow, instead of ``subwindows`` (time windows: default 4096).
    **index_options
        Passed to each subwindow's index.
    """
    workers = positive_int("workers", workers)
    subwindows = positive_int("subwindows", subwindows)
    if subwindow_size is not None:
        subwindow_size = positive_int("subwindow_size", subwindow_size)
    if index is not None:
        indexes.get(index)
    g = nx.MultiDiGraph(self_join=True)
    mid = (workers - 1) / 2
    g.add_node("emitter", role="emitter", config={}, pos=(mid - 1.2, 1), label="emitter")
    g.add_node(
        "manager",
        role="manager",
        pos=(mid, 1),
        label="manager",
        config={
            "workers": workers,
            "subwindows": subwindows,
            "subwindow_size": subwindow_size,
            "index": index,
        },
    )
    g.add_node("collector", role="collector", config={}, pos=(mid + 1.2, -0.8), label="collector")
    g.add_edge("emitter", "manager", src_port="out", dst_port="in", label="R+S")
    g.add_edge("manager", "collector", src_port="out", dst_port="in", label="pairs")
    for w in range(workers):
        name = f"worker{w}"
        g.add_node(
            name,
            role="worker",
            pos=(w, 0),
            label=f"worker {w}\n{index or 'auto'}",
            config={"index": index, "index_options": index_options},
        )
        g.add_edge("manager", name, src_port=f"w{w}", dst_port="in", label="commands")
        g.add_edge(name, "collector", src_port="out", dst_port="in", label="pairs")
    return Topology(f"panjoin({workers} workers, {subwindows} subwindows)", g)
