"""A topology is data: a networkx multigraph of actor configs, with ports on the edges.

Node attributes: ``config`` (the node's typed :class:`~streamjoin.actors.base.ActorConfig`,
whose ``build()`` makes its logic), ``role`` (the config's role: ``emitter``, ``join_core``,
``collector``, …), ``pos`` (x, y for drawing), ``label``. Edge attributes:
``src_port``, ``dst_port`` and ``label`` (what flows: ``R``, ``S``, ``R+S``, ``pairs``); two nodes
may be joined by several edges with different ports. Graph attributes: ``self_join`` (whether the
layout can run self-joins) and ``cyclic`` (actors that talk back and forth). The same graph
drives every executor.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import networkx as nx

from streamjoin import indexes, viz
from streamjoin.actors.base import ActorConfig
from streamjoin.actors.collector import CollectorConfig
from streamjoin.actors.emitter import EmitterConfig

#: The most actors a topology may have. Ray's release tests launch 10,000 actors on a cluster
#: (its "many actors" benchmark), and on one machine each Ray actor is a process of its own;
#: the local and simulated backends hold every actor's windows in this process. A larger
#: layout is a typo (``grid(2, 10**6)``) that would build for minutes and then never finish.
MAX_ACTORS = 10_000


def check_actors(topology: str, actors: int) -> None:
    """A ``ValueError`` naming the layout and its actor count when it has more than
    :data:`MAX_ACTORS`, before any of its graph is built."""
    if actors > MAX_ACTORS:
        raise ValueError(
            f"{topology} would have {actors:,} actors; a topology has at most {MAX_ACTORS:,} "
            "(streamjoin.topologies.MAX_ACTORS, the scale Ray is tested at)"
        )


def add_actor(graph: nx.MultiDiGraph, name: str, config: ActorConfig, **attrs) -> None:
    """Add node ``name`` running ``config`` (its role recorded beside it for drawings)."""
    graph.add_node(name, config=config, role=config.role, **attrs)


@dataclass
class Topology:
    """A named actor graph."""

    name: str
    graph: nx.MultiDiGraph

    def nodes(self, role: str | None = None) -> list[str]:
        """Node names, in insertion order, optionally only those of ``role``."""
        return [n for n, d in self.graph.nodes(data=True) if role is None or d["role"] == role]

    def config(self, node: str) -> ActorConfig:
        """The typed config of ``node``."""
        return self.graph.nodes[node]["config"]

    @property
    def emitter(self) -> str:
        """The node that takes the input (the one with an :class:`EmitterConfig`)."""
        return self._only(EmitterConfig)

    @property
    def collector(self) -> str:
        """The node that receives the result pairs (the one with a :class:`CollectorConfig`)."""
        return self._only(CollectorConfig)

    def _only(self, kind: type[ActorConfig]) -> str:
        found = [n for n, d in self.graph.nodes(data=True) if isinstance(d["config"], kind)]
        if len(found) != 1:
            raise ValueError(f"topology {self.name!r} needs exactly one {kind.role}")
        return found[0]

    def routes(self) -> dict[tuple[str, str], list[tuple[str, str]]]:
        """``(node, out_port) -> [(dest_node, in_port), …]``."""
        out: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for u, v, d in self.graph.edges(data=True):
            out.setdefault((u, d["src_port"]), []).append((v, d["dst_port"]))
        return out

    def marker_routes(self) -> dict[str, list[tuple[str, str]]]:
        """``node -> [(successor, in_port), …]``: where a node's progress markers go
        (:class:`~streamjoin.batch.Marker`, sent on the port
        :data:`~streamjoin.batch.MARKER_PORT`): to each successor once, on a port its edge
        feeds; to a successor that passes markers itself (``passes_markers``) on every port
        its edges feed, since its logic tells the streams' markers apart by port."""
        out: dict[str, dict[tuple[str, str], None]] = {n: {} for n in self.graph.nodes}
        for u, v, d in self.graph.edges(data=True):
            port = d["dst_port"]
            if self.config(v).passes_markers or not any(w == v for w, _ in out[u]):
                out[u].setdefault((v, port))
        return {n: list(dests) for n, dests in out.items()}

    def validate(self) -> None:
        """Raise ValueError if the graph is not a runnable topology."""
        for node, d in self.graph.nodes(data=True):
            if not isinstance(d.get("config"), ActorConfig):
                raise ValueError(f"node {node!r} of topology {self.name!r} has no actor config")
        ends = {self.emitter, self.collector}
        if not set(self.graph) - ends:
            raise ValueError(f"topology {self.name!r} has no join actor")
        if not self.cyclic and not nx.is_directed_acyclic_graph(self.graph):
            raise ValueError(f"topology {self.name!r} has a cycle")

    @property
    def cyclic(self) -> bool:
        """Whether actors talk back and forth (handshake neighbours): executors then must not
        block a sender on its receiver, and detect the end by quiescence."""
        return bool(self.graph.graph.get("cyclic", False))

    def eof_order(self) -> list[str]:
        """Nodes in the order end of stream reaches them: topological, or for a cyclic graph
        emitter first, collector last."""
        if not self.cyclic:
            return list(nx.topological_sort(self.graph))
        emitter, collector = self.emitter, self.collector
        middle = [n for n in self.graph if n not in (emitter, collector)]
        return [emitter, *middle, collector]

    def check(self, query) -> None:
        """Raise ValueError before any work if this graph is not runnable or this layout,
        or one of its nodes, cannot run ``query``."""
        self.validate()
        if query.self_join and not self.graph.graph.get("self_join", True):
            raise ValueError(f"topology {self.name!r} runs two-way joins only, not self-joins")
        for node in self.graph:
            self.config(node).check(query)

    def for_query(self, query) -> Topology:
        """The graph that runs ``query``: this one, or a copy with the edges from the emitter
        to the collector that it needs: ``unmatched`` for an outer join (``query.how``: the
        rows of the kept sides, which the collector returns if no pair holds them when the
        input ends) and ``columns`` for residual functions (``sj.where``: the columns they
        read, which the collector evaluates them on). So no join actor needs to know whether
        a tuple met a partner, or to call a user's function, on any layout
        (:class:`~streamjoin.actors.collector.Collector`)."""
        ports = (["unmatched"] if query.how != "inner" else []) + (
            ["columns"] if query.predicate.residuals else []
        )
        if not ports:
            return self
        graph = self.graph.copy()
        for port in ports:
            graph.add_edge(self.emitter, self.collector, src_port=port, dst_port=port, label=port)
        return Topology(self.name, graph)

    def marks_progress(self, query) -> bool:
        """Whether a run of ``query`` sends progress markers (:class:`~streamjoin.batch.
        Marker`): for an outer join, so that its rows without a partner leave once no later
        tuple can reach them, and for residual functions (``sj.where``), so that the collector
        forgets the columns they read once no later pair can hold their rows; on a graph
        without cycles (:mod:`streamjoin.runtime.markers`), or one whose join actors pass
        markers on themselves (``passes_markers``: a handshake chain)."""
        needs = query.how != "inner" or bool(query.predicate.residuals)
        ends = (self.emitter, self.collector)
        return needs and (
            not self.cyclic
            or all(self.config(n).passes_markers for n in self.graph if n not in ends)
        )

    def to_dot(self) -> str:
        """Graphviz DOT text of the graph."""
        lines = [f'digraph "{self.name}" {{', "  rankdir=LR;"]
        for n, d in self.graph.nodes(data=True):
            lines.append(f'  "{n}" [label="{d.get("label", n)}", shape=box];')
        for u, v, d in self.graph.edges(data=True):
            lines.append(f'  "{u}" -> "{v}" [label="{d.get("label", "")}"];')
        lines.append("}")
        return "\n".join(lines)

    def draw(self, path: str | os.PathLike) -> None:
        """Render the graph to an image (PNG, SVG or PDF by extension) at the nodes' positions."""
        viz.draw_graph(self.graph, self.name, path)


def index_options_of(
    index: str | None, index_options: dict | None, more: dict, *, check: bool = True
) -> dict:
    """The options of a topology's window index: ``index_options`` and the builder's extra
    keyword arguments together (a name in both is an error); an unknown index name, and with
    ``check`` an option the named index does not take, fail here, before any run."""
    if index is not None:
        indexes.get(index)
    if index_options is not None and not isinstance(index_options, dict):
        raise ValueError(f"index_options must be a dict, got {type(index_options).__name__}")
    both = set(index_options or {}) & set(more)
    if both:
        raise ValueError(
            f"index option(s) {sorted(both)} given twice: in index_options and as keyword arguments"
        )
    options = {**(index_options or {}), **more}
    if check and index is not None and options:
        indexes.check_options(index, options)
    return options
