"""Topology builders: each returns a :class:`Topology` (an actor graph) that every executor runs."""

import re

from streamjoin.modes import Forward
from streamjoin.topologies.base import MAX_ACTORS, Topology
from streamjoin.topologies.grid import grid
from streamjoin.topologies.handshake import handshake
from streamjoin.topologies.panjoin import panjoin
from streamjoin.topologies.shared_index import shared_index
from streamjoin.topologies.single import single
from streamjoin.topologies.split import split
from streamjoin.topologies.spo import spo

__all__ = [
    "MAX_ACTORS",
    "Topology",
    "grid",
    "handshake",
    "panjoin",
    "SPECS",
    "parse",
    "shared_index",
    "single",
    "spec_names",
    "split",
    "spo",
]


#: Every short spec :func:`parse` reads, with what it builds: the one list the CLI's help and
#: its error messages are made from.
SPECS = (
    ("single", "one join core"),
    ("split:N", "SplitJoin: every batch probed at N cores, stored at one"),
    ("grid:MxN", "a DP-Join grid of M x N cores, batches forwarded along rows and columns"),
    ("grid:MxN:direct", "the grid with every core fed by the emitter"),
    ("handshake:N", "the handshake join's chain of N cores"),
    ("handshake:N:ll", "its low-latency variant"),
    ("panjoin:WxS", "PanJoin: W workers, S subwindows per window"),
    ("shared:N", "one core, N threads over shared window indexes (PIM-Tree §4)"),
    ("spo:W", "SPO-Join: a mutable stage and W PO-Join workers"),
)


def spec_names() -> str:
    """The specs :func:`parse` reads, comma-separated (for help texts and errors)."""
    return ", ".join(name for name, _ in SPECS)


def parse(spec: str, index: str | None = None, index_options: dict | None = None) -> Topology:
    """A topology from a short spec: ``single``, ``split:4``, ``grid:2x2``, ``grid:2x2:direct``,
    a bare layout ``2x2`` (a chain-forwarding grid), ``handshake:4`` (the original handshake
    join), ``handshake:4:ll`` (its low-latency variant), ``panjoin:2x4`` (workers x
    subwindows per window), ``shared:4`` (a shared-index core with 4 threads; the index
    defaults to ``pim_tree``) or ``spo:2`` (SPO-Join with 2 PO-Join workers). ``index_options``
    go to every join actor's index."""
    text = spec.strip().lower()
    if re.fullmatch(r"\d+x\d+", text):
        text = f"grid:{text}"
    if text == "single":
        return single(index, index_options=index_options)
    if m := re.fullmatch(r"split:(\d+)", text):
        return split(int(m[1]), index, index_options=index_options)
    if m := re.fullmatch(r"grid:(\d+)x(\d+)(?::(chain|direct))?", text):
        forward: Forward = "direct" if m[3] == "direct" else "chain"
        return grid(int(m[1]), int(m[2]), index, forward=forward, index_options=index_options)
    if m := re.fullmatch(r"handshake:(\d+)(:ll)?", text):
        return handshake(int(m[1]), index, low_latency=bool(m[2]), index_options=index_options)
    if m := re.fullmatch(r"panjoin:(\d+)(?:x(\d+))?", text):
        return panjoin(int(m[1]), int(m[2] or 4), index, index_options=index_options)
    if m := re.fullmatch(r"shared:(\d+)", text):
        return shared_index(int(m[1]), index or "pim_tree", index_options=index_options)
    if m := re.fullmatch(r"spo(?::(\d+))?", text):
        return spo(int(m[1] or 2), index_options=index_options)
    raise ValueError(f"cannot read topology {spec!r}; use one of: {spec_names()}")
