"""Turning topology nodes into actor logic objects (the same for every executor)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from streamjoin.actors.collector import Collector
from streamjoin.actors.emitter import Emitter
from streamjoin.actors.handshake import HandshakeCore
from streamjoin.actors.handshake_ll import LowLatencyHandshakeCore
from streamjoin.actors.join_core import JoinCore
from streamjoin.actors.panjoin import PanJoinManager, PanJoinWorker
from streamjoin.actors.router import make_route
from streamjoin.query import Query
from streamjoin.topologies.base import Topology
from streamjoin.topologies.handshake import segment_capacity


@dataclass(frozen=True)
class Settings:
    """Run settings shared by all actors of a run."""

    batch_size: int = 1024
    max_delay_ns: int | None = None
    collect: str = "pairs"
    ordered: bool = False
    #: local executor only: deliver in a random per-edge-FIFO order (tests of interleavings)
    delivery_seed: int | None = None


def build_actor(role: str, config: dict, query: Query, settings: Settings, clock: Callable):
    """The logic object for one node; join cores and collectors are warmed (kernels compiled or
    loaded from the disk cache) before the run, not in its timed part."""
    match role:
        case "emitter":
            route = make_route(config.get("route"), query.self_join)
            emitter = Emitter(query, settings.batch_size, settings.max_delay_ns, clock, route)
            emitter.warm(make_route(config.get("route"), query.self_join))
            return emitter
        case "join_core":
            core = JoinCore(
                query,
                config.get("index"),
                config.get("index_options"),
                ports=config.get("ports"),
                forward=config.get("forward", False),
                paired=config.get("paired", False),
            )
            core.warm()
            return core
        case "collector":
            collector = Collector(settings.collect, clock)
            collector.warm()
            return collector
        case "manager":
            manager = PanJoinManager(
                query,
                config["workers"],
                config["subwindows"],
                config.get("subwindow_size"),
                config.get("index"),
            )
            manager.warm()
            return manager
        case "handshake_core":
            capacity = segment_capacity(query, config["n"], config.get("segment"))
            core = HandshakeCore(
                query,
                config["k"],
                config["n"],
                capacity,
                config.get("index"),
                config.get("index_options"),
            )
            JoinCore(query, config.get("index"), config.get("index_options")).warm()
            return core
        case "handshake_ll_core":
            core = LowLatencyHandshakeCore(
                query, config["k"], config["n"], config.get("index"), config.get("index_options")
            )
            JoinCore(query, config.get("index"), config.get("index_options")).warm()
            return core
        case "worker":
            worker = PanJoinWorker(query, config.get("index"), config.get("index_options"))
            JoinCore(query, config.get("index"), config.get("index_options")).warm()
            return worker
    raise ValueError(f"unknown actor role {role!r}")


def check_topology(topology: Topology, query: Query) -> None:
    """Raise ValueError before any work if ``topology`` cannot run ``query``."""
    from streamjoin import indexes

    if not isinstance(topology, Topology):
        raise ValueError(
            f"topology must be built by streamjoin.topologies, got {type(topology).__name__}"
        )
    topology.validate()
    topology.check_query(query)
    for node in [n for n, d in topology.graph.nodes(data=True) if "index" in d["config"]]:
        name = topology.graph.nodes[node]["config"].get("index")
        indexes.check_supports(name or indexes.default_for(query.predicate), query.predicate)
