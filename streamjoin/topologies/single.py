"""``single``: one join core between the emitter and the collector."""

from __future__ import annotations

import networkx as nx

from streamjoin.actors.collector import CollectorConfig
from streamjoin.actors.emitter import EmitterConfig
from streamjoin.actors.join_core import JoinCoreConfig
from streamjoin.topologies.base import Topology, add_actor, index_options_of


def single(index: str | None = None, *, index_options: dict | None = None, **options) -> Topology:
    """One join core holding both windows (Kang's IBWJ on one core).

    Parameters
    ----------
    index : str, optional
        Registry name of the window index; by default chosen from the predicate at run time
        (:func:`~streamjoin.indexes.default_for`: ``hash`` for an equi-join, ``bisort`` for a
        band, ``nested_loop`` for an inequality).
    index_options : dict, optional
        Passed to the index constructor; ``**options`` are added to them.

    Notes
    -----
    An ``ordered`` run gets its pairs in order as they come: the core sorts each batch's.
    """
    options = index_options_of(index, index_options, options)
    core = JoinCoreConfig(index, options, in_order=True)
    g = nx.MultiDiGraph(self_join=True)
    add_actor(g, "emitter", EmitterConfig(), pos=(0, 0), label="emitter")
    add_actor(g, "core", core, pos=(1, 0), label=f"join core\n{index or 'auto'}")
    add_actor(g, "collector", CollectorConfig(in_order=True), pos=(2, 0), label="collector")
    g.add_edge("emitter", "core", src_port="out", dst_port="in", label="R+S")
    g.add_edge("core", "collector", src_port="out", dst_port="in", label="pairs")
    return Topology(f"single({index or 'auto'})", g)
