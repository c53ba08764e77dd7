"""A topology is data: a networkx multigraph of actor specs, with ports on the edges.

Node attributes: ``role`` (``emitter``, ``join_core``, ``collector``, …), ``config`` (a dict
passed to the actor's constructor), ``pos`` (x, y for drawing), ``label``. Edge attributes:
``src_port``, ``dst_port`` and ``label`` (what flows: ``R``, ``S``, ``R+S``, ``pairs``); two nodes
may be joined by several edges with different ports. Graph attributes: ``self_join`` (whether the
layout can run self-joins) and ``cyclic`` (actors that talk back and forth). The same graph
drives every executor.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import networkx as nx

from streamjoin import viz


@dataclass
class Topology:
    """A named actor graph."""

    name: str
    graph: nx.MultiDiGraph

    def nodes(self, role: str | None = None) -> list[str]:
        """Node names, in insertion order, optionally only those of ``role``."""
        return [n for n, d in self.graph.nodes(data=True) if role is None or d["role"] == role]

    def routes(self) -> dict[tuple[str, str], list[tuple[str, str]]]:
        """``(node, out_port) -> [(dest_node, in_port), …]``."""
        out: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for u, v, d in self.graph.edges(data=True):
            out.setdefault((u, d["src_port"]), []).append((v, d["dst_port"]))
        return out

    def validate(self) -> None:
        """Raise ValueError if the graph is not a runnable topology."""
        roles = [d.get("role") for _, d in self.graph.nodes(data=True)]
        for role in ("emitter", "collector"):
            if roles.count(role) != 1:
                raise ValueError(f"topology {self.name!r} needs exactly one {role}")
        if not set(roles) - {"emitter", "collector"}:
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
        (emitter,) = self.nodes("emitter")
        (collector,) = self.nodes("collector")
        middle = [n for n in self.graph if n not in (emitter, collector)]
        return [emitter, *middle, collector]

    def check_query(self, query) -> None:
        """Raise ValueError if this layout cannot run ``query``."""
        if query.self_join and not self.graph.graph.get("self_join", True):
            raise ValueError(f"topology {self.name!r} runs two-way joins only, not self-joins")

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
