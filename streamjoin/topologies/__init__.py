"""Topology builders: each returns a :class:`Topology` (an actor graph) that every executor runs."""

from streamjoin.topologies.base import Topology
from streamjoin.topologies.parallel import grid, split
from streamjoin.topologies.single import single

__all__ = ["Topology", "grid", "single", "split"]
