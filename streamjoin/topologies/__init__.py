"""Topology builders: each returns a :class:`Topology` (an actor graph) that every executor runs."""

from streamjoin.topologies.base import Topology
from streamjoin.topologies.single import single

__all__ = ["Topology", "single"]
