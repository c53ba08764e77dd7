"""``single``: one join core between the emitter and the collector."""

from __future__ import annotations

import networkx as nx

from streamjoin import indexes
from streamjoin.topologies.base import Topology


def single(index: str | None = None, **index_options) -> Topology:
    """One join core holding both windows (Kang's IBWJ on one core).

    Parameters
    ----------
    index : str, optional
        Registry name of the window index; by default chosen from the predicate at run time
        (:func:`~streamjoin.indexes.default_for`: ``hash`` for an equi-join, ``bisort`` for a
        band, ``nested_loop`` for an inequality).
    **index_options
        Passed to the index constructor.
    """
    if index is not None:
        indexes.get(index)  # unknown names fail here, before any run
    g = nx.MultiDiGraph(self_join=True)
    g.add_node("emitter", role="emitter", config={}, pos=(0, 0), label="emitter")
    label = f"join core\n{index or 'auto'}"
    g.add_node(
        "core",
        role="join_core",
        config={"index": index, "index_options": index_options},
        pos=(1, 0),
        label=label,
    )
    g.add_node("collector", role="collector", config={}, pos=(2, 0), label="collector")
    g.add_edge("emitter", "core", src_port="out", dst_port="in", label="R+S")
    g.add_edge("core", "collector", src_port="out", dst_port="in", label="pairs")
    return Topology(f"single({index or 'auto'})", g)
