"""Turning topology nodes into actor logic objects (the same for every executor)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from streamjoin.query import Query
from streamjoin.topologies.base import Topology


@dataclass(frozen=True)
class Settings:
    """Run settings shared by all actors of a run."""

    batch_size: int = 1024
    max_delay_ns: int | None = None
    collect: str = "pairs"
    ordered: bool = False
    #: local executor only: deliver in a random per-edge-FIFO order (tests of interleavings)
    delivery_seed: int | None = None


def build_actor(role: str, config, query: Query, settings: Settings, clock: Callable):
    """The logic object for one node (``config.build``), warmed: kernels are compiled or
    loaded from the disk cache before the run, not in its timed part."""
    return config.build(query, settings, clock)


def check_topology(topology: Topology, query: Query) -> None:
    """Raise ValueError before any work if ``topology`` cannot run ``query``."""
    if not isinstance(topology, Topology):
        raise ValueError(
            f"topology must be built by streamjoin.topologies, got {type(topology).__name__}"
        )
    topology.validate()
    topology.check_query(query)
