"""The ``ray`` executor: one Ray actor per topology node, running the same logic objects.

- Each node's logic (:mod:`streamjoin.actors`) is built inside a :class:`Host` actor; kernels
  are warmed in its constructor (numba's disk cache makes that a load, not a compile). The
  emitter runs in the driver, next to the source. On a local cluster the driver first
  compiles every kernel the actors will run, once, while Ray starts, so that with an empty
  cache the actors do not each compile the same kernels at once (:func:`_compile_kinds`).
  Actors are named after their node (``<run>-core0_1`` in namespace ``"streamjoin"``), so
  Ray's tools show which is which.
- **Ray is the control plane, sockets the data plane.** Ray places the actors, starts,
  restarts and kills them and carries the few control calls of a run; the batches travel
  over one TCP connection per graph edge (:mod:`streamjoin.runtime.ray.channels`), as a Ray call
  costs about 1–2 ms of this machine's two cores and a frame tens of microseconds. (Ray's
  compiled graphs were measured instead: their channels wait in a ``sched_yield`` loop that
  keeps idle actors at half a core each on a 2-core machine.)
- **Trust.** The driver makes a secret per run and hands it to the actors through Ray (whose
  own channel is authenticated); both ends of every edge prove it before a frame is read, and
  a host takes exactly the edges the driver announced, then stops listening
  (:mod:`streamjoin.runtime.ray.channels`). Sockets bind to loopback when every Ray node is
  the driver's machine, to the node's IP on a cluster; a Ray this executor starts itself
  listens on loopback only (:func:`_ensure_ray`). Every frame of an edge that crosses a
  network is sealed under a key of the edge's own (:mod:`streamjoin.runtime.ray.sealing`):
  on a cluster by default, on loopback only with ``encrypt_edges=True`` (:class:`Ray`).
- **Protocol.** A frame that breaks its edge's protocol — one that does not open, comes out of
  its place, after the end of its edge, for a port its edge does not feed — ends the run with
  an error naming the edge. The driver audits the edges' frame counts too: a node that ends
  before the emitter ended its input, or that waits on an edge whose sender has sent more than
  arrived, ends the run (:meth:`_Run.audit`).
- In each host one thread reads the incoming connections and feeds the logic, so the logic
  is only ever called from one thread; each connection is FIFO, so every edge is. In a
  cyclic graph a second thread keeps reading while the first waits in a send.
- **Coalescing.** When several batches of one sender for one port wait in the inbox, the
  worker hands them to the logic as one where the answer cannot change (:func:`mergeable`):
  under light load every batch is joined on arrival, under heavy load batches grow.
- **Backpressure.** A host reads no further once ``INBOX`` messages wait; the socket buffers
  fill and the sender blocks, the emitter in the driver too, so memory stays bounded when
  the source is faster than the join. In a cyclic graph the reader stops reading only the
  edges that lie on no cycle: two handshake neighbours blocked on each other's full buffers
  would deadlock.
- **End of stream.** In an acyclic graph it travels in-band: a node that has seen every
  incoming edge end runs its end-of-stream step and ends its outgoing edges. In a cyclic
  graph the driver waits until no frame is in flight (counters of frames sent and handled),
  then ends the nodes one at a time in :meth:`Topology.eof_order`, waiting again after each.

Failure
-------
Nothing waits on a dead or failed actor for more than a moment. An actor whose logic raises
records the error and *closes* its connections (a shut-down socket whose receive buffer is
full never tells its sender; a closed one resets it), so its neighbours fail on their next
read or write, and so on. The driver never blocks blindly either: its sends wait on a socket
timeout of :data:`POLL_S`, and each wait — a full socket, the end of the run, a control call
— looks at a long-running ``watch`` call per actor, which Ray ends when the actor's logic
fails or its process dies. The first failure ends the run with :class:`ActorFailed` naming
the failing actor (its own error, not its neighbours' broken edges; :func:`_diagnose`); a run
given ``timeout=`` ends with :class:`RunTimeout` naming the actors still busy; Ctrl-C raises
``KeyboardInterrupt`` out of any wait (the signal may land on one of Ray's threads: the
driver's main thread sees it when its wait wakes, every :data:`POLL_S`, not in a blocking
``sendmsg`` that never returns). In every case all actors are killed before
:meth:`Ray.run` returns: never a hang, never a short result.

Recovery of a lost join core: :mod:`streamjoin.runtime.ray.recovery`.

Why one file of ~620 lines: what is here is the driver's side of one run, a single state
machine (:class:`_Run`: start, wire, drive, watch, recover, close) whose waits must all look at
the same actors; the actor side is :mod:`~streamjoin.runtime.ray.host` and the recovery's
bookkeeping, which needs no Ray, :mod:`~streamjoin.runtime.ray.recovery`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import secrets
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import networkx as nx
import ray

from streamjoin.actors.base import ActorConfig, RunSettings
from streamjoin.batch import MARKER_PORT
from streamjoin.modes import PLACEMENTS, Placement
from streamjoin.query import Query
from streamjoin.runtime.executor import RunTimeout, WallClock
from streamjoin.runtime.pipeline import Progress as ProgressBar
from streamjoin.runtime.ray import channels, wire
from streamjoin.runtime.ray.host import (
    Abandon,
    ActorFailed,
    Host,
    LostNeighbour,
    Node,
    Wiring,
    close_socket,
)
from streamjoin.runtime.ray.recovery import (
    PROGRESS_PORT,
    REPLAY,
    Delivered,
    Retention,
    feeds,
    recoverable_nodes,
)
from streamjoin.runtime.trace import RunTrace
from streamjoin.topologies.base import Topology
from streamjoin.validation import Columns

__all__ = ["ActorFailed", "Ray"]

_log = logging.getLogger(__name__)

#: seconds the driver gives the actors to report their errors once a run has failed
FAILURE_WAIT_S = 3.0
#: seconds between the driver's looks at its actors while it waits (a send into a full
#: socket, the end of the run, a control call): a failure ends any wait within about this
POLL_S = 0.1
#: seconds between the driver's audits of the edges' frame counts while it waits for the end
#: (:meth:`_Run.audit`): a lost end frame ends the run within about twice this
AUDIT_S = 0.5
#: seconds the driver waits for Ray to restart a lost core
RESTART_WAIT_S = 60.0
#: seconds between the driver's asks for the cores' delivered progress (what it must keep)
PROGRESS_POLL_S = 0.25
#: the Ray namespace of the actors (each named ``<run>-<node>``)
NAMESPACE = "streamjoin"
#: a test hook: called in the driver with ``{node: (host, port)}`` once every actor listens,
#: before any edge connects; it may put another address in for a node (the tests play an
#: intruder, and a machine on the path, with it); None in a normal run
on_listen: Callable[[dict[str, tuple[str, int]]], None] | None = None
#: a test hook: called in the driver with ``{node: Ray node id}`` where the actors run
on_placed: Callable[[dict[str, str]], None] | None = None


def one_machine() -> bool:
    """Whether every live Ray node is the driver's: then the edges stay on loopback."""
    if ray.util.client.ray.is_connected():  # a Ray client: the driver is elsewhere
        return False
    here = ray.get_runtime_context().get_node_id()
    return all(n["NodeID"] == here for n in ray.nodes() if n["Alive"])


#: The least CPU an actor asks Ray for: a hundred actors share a processor at most.
MIN_CPU_SHARE = 0.01


def _cpu_requests(graph, emitter: str) -> dict[str, float]:
    """Ray CPUs each actor asks for: a node whose config names ``cpus`` (a shared-index core's
    threads) gets that many, capped so that every actor still fits the cluster; the others
    half of a processor's share each. Logical CPUs: they place actors, the threads run anyway.
    A ``ValueError`` when the actors cannot all fit at :data:`MIN_CPU_SHARE` each."""
    total = float(ray.cluster_resources().get("CPU", os.cpu_count() or 1))
    share = max(MIN_CPU_SHARE, min(1.0, total / max(1, graph.number_of_nodes())) / 2)
    hosts = [(n, d["config"]) for n, d in graph.nodes(data=True) if n != emitter]
    if share * len(hosts) > total * (1 + 1e-9):  # Ray would leave some pending: a hang
        raise ValueError(
            f"{len(hosts):,} actors do not fit this Ray cluster's {total:g} CPUs: each asks "
            f"for at least {MIN_CPU_SHARE} CPU, so at most {int(total / MIN_CPU_SHARE):,} fit; "
            "use a smaller layout or a larger cluster"
        )
    wanting = [n for n, c in hosts if getattr(c, "cpus", None)]
    left = max(share, (total - share * (len(hosts) - len(wanting))) / max(1, len(wanting)))
    out = {n: share for n, _ in hosts}
    for n, c in hosts:
        if n in wanting:
            out[n] = max(share, min(float(c.cpus), left))
    return out


def _ensure_ray(address: str | None) -> None:
    """Connect to the cluster at ``address``, as its operator configured it; without one,
    start Ray on this machine listening on loopback only (:func:`_loopback_ray`)."""
    if ray.is_initialized():
        return
    quiet: dict[str, Any] = dict(
        include_dashboard=False, log_to_driver=False, configure_logging=False
    )
    if address:
        ray.init(address=address, **quiet)
        return
    with _loopback_ray():
        ray.init(num_cpus=os.cpu_count(), _node_ip_address=LOOPBACK, **quiet)
    if ray.util.get_node_ip_address() != LOOPBACK:
        _log.warning(
            "Ray started for this run listens on %s, not on loopback only: this Ray version "
            "no longer takes the loopback address as its node's",
            ray.util.get_node_ip_address(),
        )


LOOPBACK = "127.0.0.1"


@contextlib.contextmanager
def _loopback_ray():
    """Let ``ray.init`` take loopback for its node's address.

    Ray's servers and workers listen on loopback only when their node's address is exactly
    ``127.0.0.1``, and on every interface otherwise; but on Linux ``ray.init`` replaces a
    loopback ``_node_ip_address`` by the machine's own address unless Ray runs in its
    one-machine mode (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read into
    ``ray._private.ray_constants.ENABLE_RAY_CLUSTER`` at import). Set it for the call.
    """
    from ray._private import ray_constants

    before = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if before is not None:
            ray_constants.ENABLE_RAY_CLUSTER = before


def _unwrap(err: Exception) -> ActorFailed:
    """An :class:`ActorFailed` with the message the failing actor raised.

    Ray wraps it in a chain of task errors (a failed call) or only in the text of an
    ``ActorDiedError`` (a failed constructor); take the innermost message in either case.
    """
    cause: BaseException | None = err
    while cause is not None:
        if (
            isinstance(cause, ActorFailed)
            and type(cause) in (ActorFailed, LostNeighbour)
            and cause.args
        ):
            return type(cause)(str(cause.args[0]).splitlines()[0])
        cause = getattr(cause, "cause", None) or cause.__cause__
    found = re.findall(r"(LostNeighbour|ActorFailed): (actor '[^\n]*)", str(err))
    if found:
        kind, message = found[-1]
        return (LostNeighbour if kind == "LostNeighbour" else ActorFailed)(message)
    return ActorFailed(f"a Ray actor failed: {err}")


def _died(name: str, role: str, why: str) -> ActorFailed:
    return ActorFailed(f"actor {name!r} ({role}) died: {why}")


def _diagnose(
    hosts: dict, err: Exception, dead: Callable[[str, Exception], ActorFailed]
) -> ActorFailed:
    """The error that ended a run: the failing actor's own, not its neighbours' lost edges.

    A failing actor records its error before it closes its connections, so once anyone has
    noticed, the cause is on record; an actor that died outright is the cause itself (its
    error: ``dead(node, ray_error)``).
    """
    if isinstance(err, ActorFailed) and not isinstance(err, LostNeighbour):
        return ActorFailed(str(err))
    causes, lost = [], [str(err)] if isinstance(err, ActorFailed) else []
    refs = {name: h.failure.remote() for name, h in hosts.items()}
    deadline = time.monotonic() + FAILURE_WAIT_S
    for name, ref in refs.items():
        try:
            found = ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
        except ray.exceptions.GetTimeoutError:
            continue
        except ray.exceptions.RayActorError as e:
            causes.append(str(dead(name, e)))
            continue
        except ray.exceptions.RayError as e:
            causes.append(str(_unwrap(e)))
            continue
        if found is not None:
            (causes if found[0] == "cause" else lost).append(found[1])
    if causes:
        return ActorFailed(causes[0])
    if lost:
        return ActorFailed(lost[0])
    return (
        _unwrap(err)
        if isinstance(err, ray.exceptions.RayError)
        else ActorFailed(f"the run failed: {type(err).__name__}: {err}")
    )


@dataclass(frozen=True)
class Ray(WallClock):
    """The ``ray`` backend: one Ray actor per topology node (see the module docstring).

    Parameters
    ----------
    address : str, optional
        Ray cluster to connect to (``"auto"``, or ``"<head ip>:6379"``); default: the running
        Ray instance, or a local one started with this host's CPUs. An instance this run
        starts stays up for later runs.
    max_restarts : int
        Times Ray restarts the actor of a lost join core in one run (its windows are rebuilt
        from what the driver kept, module docstring); 0: a lost core ends the run.
    placement : {"default", "spread"}
        Where Ray puts the actors: its default (fill a node first), or ``"spread"`` over the
        cluster's nodes.
    encrypt_edges : bool, optional
        Encrypt and authenticate every frame between actors, numbered per edge
        (:mod:`~streamjoin.runtime.ray.sealing`), so that nobody on the network can read,
        alter, add, replay, reorder or drop one unnoticed. ``False`` sends frames in the
        clear, for a network the operator trusts (the handshake still proves the run's
        secret on every edge). Default: encrypt the edges of a run that crosses a network,
        not those of a run whose edges all stay on this machine's loopback, which no other
        machine can reach and only a local root could read or write into (who could read
        the actors' memory as well); there sealing would cost about a tenth of the
        throughput of a 2-core machine for nothing.
    """

    address: str | None = None
    max_restarts: int = 3
    placement: Placement = "default"
    encrypt_edges: bool | None = None

    name: ClassVar[str] = "ray"

    def __post_init__(self) -> None:
        if not (isinstance(self.max_restarts, int) and self.max_restarts >= 0):
            raise ValueError(f"max_restarts must be an int >= 0, got {self.max_restarts!r}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be 'default' or 'spread', got {self.placement!r}")
        if not (self.encrypt_edges is None or isinstance(self.encrypt_edges, bool)):
            raise ValueError(
                f"encrypt_edges must be True, False or None, got {self.encrypt_edges!r}"
            )

    def run(
        self,
        query: Query,
        topology: Topology,
        chunks: Iterable[Columns],
        settings: RunSettings,
        progress,
    ) -> RunTrace:
        """Run the topology with one Ray actor per node."""
        if 2 * len(query.attrs) > wire.MAX_ATTRS:  # a batch carries two rows per attribute
            raise ValueError(
                f"the query joins on {len(query.attrs)} attributes; a batch between Ray "
                f"actors carries at most {wire.MAX_ATTRS // 2} (streamjoin.runtime.ray.wire."
                "MAX_ATTRS / 2): use backend='local' or 'sim', or fewer attributes"
            )
        _residuals_by_value(query)
        with ThreadPoolExecutor(1, thread_name_prefix="warm") as pool:
            # on a local cluster, kernels are compiled (or loaded) here while Ray starts
            local = self.address is None
            compiled = pool.submit(_compile_kinds, topology, query, settings) if local else None
            _ensure_ray(self.address)
            if compiled is not None:
                compiled.result()
        run = _Run(self, query, topology, settings, progress)
        try:
            return run.drive(chunks)
        finally:
            run.close()


def _residuals_by_value(query: Query) -> None:
    """Have Ray pickle the query's :func:`~streamjoin.where` functions by value when they
    come from the user's own modules (a script's ``__main__`` is pickled so already): by
    reference, the collector's worker would have to import a module that may exist only
    beside the driver (``ModuleNotFoundError`` there). Installed packages are left alone."""
    import ray.cloudpickle

    for f in query.predicate.residuals:
        module = sys.modules.get(getattr(f.fn, "__module__", None) or "")
        path = getattr(module, "__file__", None) or ""
        if module is None or module.__name__ == "__main__" or "-packages" in path:
            continue
        with contextlib.suppress(Exception):
            ray.cloudpickle.register_pickle_by_value(module)


def _compile_kinds(topology: Topology, query: Query, settings: RunSettings) -> None:
    """Build the logic of one node of each kind (its config decides the kernels it runs) in
    the driver, so that every kernel is compiled here, once, and the actors started next load
    them from numba's disk cache, which they share with this process.

    With an empty cache each actor would otherwise compile in its constructor, all of them at
    once, those of one kind the same kernels, after Ray has started; here the compiling
    overlaps Ray's start, and no actor starts before the cache is full.
    """
    emitter = topology.emitter
    kinds = {repr(topology.config(n)): n for n in topology.graph if n != emitter}
    for n in kinds.values():
        Node(n, topology.config(n), query, settings)  # its errors name the node


class _Run:
    """One run on Ray: the actors, the driver's node (the emitter) and what watches them."""

    def __init__(self, ex: Ray, query: Query, topology: Topology, settings, progress) -> None:
        self.ex = ex
        self.query = query
        self.topology = topology
        self.progress = progress or ProgressBar(None, enabled=False)
        self.graph = topology.graph
        self.emitter = topology.emitter
        self.collector = topology.collector
        self.deadline = None if settings.timeout is None else time.monotonic() + settings.timeout
        self.timeout = settings.timeout
        self.settings = settings
        self.run_id = f"sj{secrets.token_hex(4)}"
        self.recoverable = recoverable_nodes(topology) if ex.max_restarts else frozenset()
        self.retention = Retention(feeds(topology), query.self_join) if self.recoverable else None
        self.secret = channels.new_secret()  # this run's: actors get it through Ray only
        self.loopback = ex.address is None and one_machine()
        self.sealed = not self.loopback if ex.encrypt_edges is None else ex.encrypt_edges
        self.input_ended = False  # the emitter has sent its last frame, its end frames too
        self.stalled: set = set()  # edges the last audit found waiting (audit)
        self.routes = topology.routes()
        self.marker_routes = topology.marker_routes()
        cpus = _cpu_requests(self.graph, self.emitter)
        strategy = "SPREAD" if ex.placement == "spread" else "DEFAULT"
        self.hosts = {
            n: Host.options(  # type: ignore[attr-defined]  # mypy ignores the ray.remote class decorator
                name=f"{self.run_id}-{n}",
                namespace=NAMESPACE,
                num_cpus=cpus[n],
                max_restarts=ex.max_restarts if n in self.recoverable else 0,
                scheduling_strategy=strategy,
            ).remote(n, d["config"], query, settings)
            for n, d in self.graph.nodes(data=True)
            if n != self.emitter
        }
        self.source: _DriverNode | None = None
        self.watches: dict = {}  # ref -> node
        self.finished: set[str] = set()
        self.lost: list[str] = []
        self.restarts: dict[str, int] = {}
        self.recoveries: list[float] = []
        self.progress_ref = None
        self.progress_at = 0.0
        self.node_of: dict[str, str] = {}

    # -- waiting ------------------------------------------------------------------------------

    def _watch(self, node: str) -> None:
        self.watches[self.hosts[node].watch.remote()] = node

    def check(self) -> None:
        """Look at the actors: raise the run's error if one failed or died for good (or the
        time is up); note a lost core for :meth:`_recover`. Cheap: one ``ray.wait`` poll."""
        if self.watches:
            done, _ = ray.wait(list(self.watches), num_returns=len(self.watches), timeout=0)
            for ref in done:
                node = self.watches.pop(ref)
                try:
                    ray.get(ref)
                    self._finished(node)
                except ray.exceptions.RayActorError as e:  # its process is gone
                    if node not in self.recoverable:
                        raise self._dead(node, e) from None
                    self._lost(node)  # Ray restarts it (or says it will not: _recover)
                except ray.exceptions.RayError as e:
                    raise _diagnose(self.hosts, _unwrap(e), self._dead) from None
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise self._timed_out()
        if self.retention is not None:
            self._poll_progress()

    def _finished(self, node: str) -> None:
        """``node`` has ended: in an acyclic graph only after the emitter began to end its
        edges; any sooner, an end frame its sender never sent reached it (a result short of
        the input's, which the run must not return)."""
        assert self.source is not None  # (made before the drive)
        if not self.source.ended_out:
            role = self.topology.config(node).role
            raise ActorFailed(
                f"actor {node!r} ({role}) ended before the emitter ended its input: an end "
                "frame that its sender never sent reached it (the edges are not sealed)"
                if not self.sealed
                else f"actor {node!r} ({role}) ended before the emitter ended its input"
            )
        self.finished.add(node)

    def audit(self, final: bool) -> None:
        """Compare the frames each edge's sender sent with those its receiver took (end
        frames included) and end the run on a difference that is no frame in flight:

        - a receiver that took more than a sender that has finished sent: frames were
          written into the edge on the way;
        - ``final`` (every node has ended, or nothing moves): any difference;
        - a receiver that waits with nothing to do, at two audits in a row with the same
          count, on an edge whose sender has finished sending more: frames were lost on
          the way (its end frame, say), and nothing else would end the wait.

        Sealed edges catch a frame added or lost in the middle at once; this catches what
        no later frame reveals. Actors that do not answer at once (lost, restarting) are
        left out.
        """
        assert self.source is not None  # (made before the drive)
        names = list(self.hosts)
        refs = [self.hosts[n].edge_counts.remote() for n in names]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=FAILURE_WAIT_S)
        idle, sent, taken = {}, {}, {}
        for n, ref in zip(names, refs, strict=True):
            if ref in ready and n not in self.lost:
                with contextlib.suppress(ray.exceptions.RayError):  # the watch reports it
                    idle[n], sent[n], taken[n] = ray.get(ref)
        sent[self.emitter] = {d: ch.frames for d, ch in self.source.out.items()}
        done = set(self.finished) | ({self.emitter} if self.input_ended else set())
        if self.topology.cyclic:
            done |= {n for n, i in idle.items() if i}
        stalled = set()
        for receiver, edges in taken.items():
            for sender, (got, ended) in edges.items():
                put = sent.get(sender, {}).get(receiver)
                if put is None or got == put:
                    continue
                edge = f"the edge from {sender!r} to {receiver!r}"
                if got > put and (final or sender in done):
                    raise ActorFailed(
                        f"{edge} delivered {got} frames, {got - put} more than {sender!r} sent:"
                        " frames were written into it on the way"
                    )
                if final:
                    raise ActorFailed(f"{edge} lost frames: {sender!r} sent {put}, {got} arrived")
                if got < put and sender in done and idle[receiver] and not ended:
                    stalled.add((sender, receiver, got, put))
        for sender, receiver, got, put in stalled & self.stalled:
            raise ActorFailed(
                f"the edge from {sender!r} to {receiver!r} lost frames on the way: {sender!r} "
                f"sent {put}, its end frame included, and {receiver!r} took {got} and waits"
            )
        self.stalled = stalled

    def _lost(self, node: str) -> None:
        if node not in self.lost:
            self.lost.append(node)

    def _dead(self, node: str, err: Exception) -> ActorFailed:
        role = self.topology.config(node).role
        if node in recoverable_nodes(self.topology):
            why = f"max_restarts={self.ex.max_restarts}"
        else:
            why = f"a {role} is not rebuilt (only the join cores of an acyclic topology are)"
        return _died(node, role, f"{why}; {str(err).splitlines()[0]}")

    def _timed_out(self) -> RunTimeout:
        refs = {n: h.status.remote() for n, h in self.hosts.items()}
        busy = []
        deadline = time.monotonic() + FAILURE_WAIT_S
        for n, ref in refs.items():
            try:
                status = ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
            except ray.exceptions.GetTimeoutError:
                status = "not answering"
            except ray.exceptions.RayError:
                status = "dead"
            if status is not None:
                busy.append(f"{n!r} ({self.topology.config(n).role}: {status})")
        return RunTimeout(
            f"the run did not end within timeout={self.timeout} s; still busy: "
            + (", ".join(busy) or "none (the driver)")
        )

    def wait(self, refs) -> list:
        """``ray.get(refs)``, looking at the actors meanwhile (a failure or the timeout ends
        the wait; so does Ctrl-C)."""
        single = not isinstance(refs, list)
        refs = [refs] if single else refs
        pending = list(refs)
        while pending:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
            if pending:
                self.check()
        try:
            out = ray.get(refs)
        except ray.exceptions.RayError as e:
            self.check()
            raise _diagnose(self.hosts, _unwrap(e), self._dead) from None
        return out[0] if single else out

    def idle(self, dest: str) -> None:
        """The driver's send to ``dest`` waits: give up if ``dest`` is being restarted."""
        self.check()
        if dest in self.lost:
            raise Abandon(f"{dest!r} is being restarted")

    def _poll_progress(self) -> None:
        ref = self.progress_ref
        if ref is None:
            if time.monotonic() - self.progress_at >= PROGRESS_POLL_S:
                self.progress_ref = self.hosts[self.collector].frontiers.remote()
            return
        done, _ = ray.wait([ref], timeout=0)
        if done:
            self.progress_ref = None
            self.progress_at = time.monotonic()
            with contextlib.suppress(ray.exceptions.RayError):  # the watch reports it
                self.retention.trim(ray.get(ref))

    # -- the run ------------------------------------------------------------------------------

    def _outgoing(self, node: str, addresses: dict) -> tuple[dict[str, list], dict]:
        out = {port: dests for (src, port), dests in self.routes.items() if src == node}
        if self.marker_routes.get(node):
            out[MARKER_PORT] = self.marker_routes[node]
        dests = {d for ds in out.values() for d, _ in ds}
        return out, {d: addresses[d] for d in dests}

    def _inputs(self, node: str) -> dict[str, frozenset]:
        """``sender -> ports`` of ``node`` that frames of each sender may be for."""
        ports: dict[str, set] = {}
        for (src, _), dests in self.routes.items():
            for dest, port in dests:
                if dest == node:
                    ports.setdefault(src, set()).add(port)
        if node == self.collector:
            for core in self.recoverable:
                ports.setdefault(core, set()).add(PROGRESS_PORT)
        if node in self.recoverable:
            fed = feeds(self.topology).values()
            ports[REPLAY] = {port for cores in fed for core, port in cores if core == node}
        return {sender: frozenset(p) for sender, p in ports.items()}

    def _wiring(self, node: str, addresses: dict, **more) -> Wiring:
        graph = self.graph
        routes, dest_addresses = self._outgoing(node, addresses)
        return Wiring(
            routes=routes,
            addresses=dest_addresses,
            senders=sorted(set(graph.predecessors(node))),
            bounded=[u for u in graph.predecessors(node) if not nx.has_path(graph, node, u)],
            cyclic=self.topology.cyclic,
            secret=self.secret,
            inputs=self._inputs(node),
            sealed=self.sealed,
            recoverable=self.recoverable,
            reports_to=self.collector if node in self.recoverable else None,
            **more,
        )

    def drive(self, chunks) -> RunTrace:
        hosts = self.hosts
        self.source = None
        try:
            listening = self.wait([h.listen.remote(self.loopback) for h in hosts.values()])
        except ActorFailed as e:  # a constructor failed: its error, as Ray gave it
            raise ActorFailed(str(e)) from None
        self.addresses = {n: tuple(a[:2]) for n, a in zip(hosts, listening, strict=True)}
        self.node_of = {n: a[2] for n, a in zip(hosts, listening, strict=True)}
        if on_listen is not None:
            on_listen(self.addresses)
        if on_placed is not None:
            on_placed(dict(self.node_of))
        self.source = _DriverNode(self, self.topology.config(self.emitter))
        try:
            return self._drive(chunks)
        except RunTimeout:
            raise
        except (OSError, LostNeighbour) as e:
            raise _diagnose(hosts, e, self._dead) from None

    def _drive(self, chunks) -> RunTrace:
        hosts, source = self.hosts, self.source
        assert source is not None  # (made before the drive)
        self.wait([h.start.remote(self._wiring(n, self.addresses)) for n, h in hosts.items()])
        for n in hosts:
            self._watch(n)
        routes, dests = self._outgoing(self.emitter, self.addresses)
        source.open(routes, dests, self.secret, self.recoverable, self.sealed)
        clock = time.monotonic_ns
        start_ns = None
        n_in = 0
        checked = time.monotonic()
        for cols in chunks:
            if start_ns is None:
                start_ns = clock()
            sent = source.on_chunk(cols)
            if self.retention is not None:
                for port, msg in sent:
                    self.retention.add(port, msg)
            n_in += len(cols)
            self.progress.update(len(cols))
            if time.monotonic() - checked >= POLL_S:
                self.check()
                checked = time.monotonic()
            if source.broken:  # a core it feeds is down: read nothing more until it is back
                self._await_recovery()
            self._recover_lost()
        if start_ns is None:
            start_ns = clock()
        cyclic = self.topology.cyclic
        sent = source.on_eof(end_edges=not cyclic)
        self.input_ended = True
        if self.retention is not None:
            for port, msg in sent:
                self.retention.add(port, msg)
        if not cyclic:
            audited = time.monotonic()
            while len(self.finished) < len(hosts):
                self._recover_lost()
                ray.wait(list(self.watches), num_returns=1, timeout=POLL_S)
                self.check()
                if time.monotonic() - audited >= AUDIT_S and not self.lost:
                    self.audit(final=False)
                    audited = time.monotonic()
        else:
            self._quiesce()
            for node in self.topology.eof_order():
                if node != self.emitter:
                    self.wait(hosts[node].end.remote())
                    self._quiesce()
        end_ns = clock()
        self.audit(final=True)
        reports = dict(
            zip(hosts, self.wait([h.report.remote() for h in hosts.values()]), strict=True)
        )
        actors = {self.emitter: source.stats, **{n: r[0] for n, r in reports.items()}}
        return RunTrace(
            input_tuples=n_in,
            start_ns=start_ns,
            end_ns=end_ns,
            actors=actors,
            collector=reports[self.collector][1],
        )

    def _quiesce(self) -> None:
        """Wait until no frame is in flight anywhere (actors that send to each other keep
        making work for one another): until every frame sent was handled and a whole round of
        counts changed nothing. Counters only grow and a frame is counted sent before it can
        be handled, so two equal rounds mean nothing moved in between."""
        previous, audited = None, time.monotonic()
        while True:
            counts = self.wait([h.settle.remote() for h in self.hosts.values()])
            assert self.source is not None  # (made before the drive)
            sent = self.source.frames_sent + sum(c[0] for c in counts)
            handled = sum(c[1] for c in counts)
            if sent == handled and (sent, handled) == previous:
                return
            if (sent, handled) != previous:
                audited = time.monotonic()
            elif time.monotonic() - audited >= AUDIT_S:  # nothing moves: a frame lost?
                self.audit(final=False)
                audited = time.monotonic()
            previous = (sent, handled)
            self.check()
            time.sleep(0.001)

    # -- recovery -----------------------------------------------------------------------------

    def _await_recovery(self) -> None:
        """A core the emitter feeds died, and what the emitter writes to it is dropped (the
        replay brings it): without this wait the source would be read at full speed, every
        batch kept for the replay, until the loss is noticed (a second or two, in which the
        driver could take in most of a large input). So the driver stops reading until Ray
        has restarted the core and it is rebuilt, or the run fails."""
        assert self.source is not None  # (made before the drive)
        while self.source.broken:
            ray.wait(list(self.watches), num_returns=1, timeout=POLL_S)
            self.check()
            self._recover_lost()

    def _recover_lost(self) -> None:
        while self.lost:
            node = self.lost[0]
            self._recover(node)
            self.lost.remove(node)

    def _recover(self, node: str) -> None:
        """Rebuild the restarted core ``node`` and put it back in the data plane (module
        docstring)."""
        t0 = time.monotonic()
        count = self.restarts[node] = self.restarts.get(node, 0) + 1
        if count > self.ex.max_restarts:
            raise _died(
                node, "join_core", f"lost more than max_restarts={self.ex.max_restarts} times"
            )
        host = self.hosts[node]
        listening = self._restarted(node)
        address = tuple(listening[:2])
        self.addresses[node] = address
        self.node_of[node] = listening[2]
        successors = sorted(set(self.graph.successors(node)))
        answers = self.wait([self.hosts[q].expect.remote(node, 30.0) for q in successors])
        addresses, delivered = dict(self.addresses), Delivered()
        taken = set()
        for q, answer in zip(successors, answers, strict=True):
            if answer is None:
                continue  # its edge to q had ended: q needs nothing more from it
            addresses[q] = tuple(answer[0])
            taken.add(q)
            if q == self.collector and answer[1] is not None:
                delivered = answer[1]
        wiring = self._wiring(node, addresses, resume=delivered)
        routes = {
            port: [(d, p) for d, p in dests if d in taken] for port, dests in wiring.routes.items()
        }
        wiring = dataclasses.replace(
            wiring,
            routes=routes,
            addresses={d: a for d, a in wiring.addresses.items() if d in taken},
            senders=[*wiring.senders, REPLAY],
        )
        self.wait(host.start.remote(wiring))
        predecessors = sorted(set(self.graph.predecessors(node)) - {self.emitter})
        refs = [self.hosts[p].reconnect_to.remote(node, address) for p in predecessors]
        if self.emitter in self.graph.predecessors(node):
            assert self.source is not None  # (made before the drive)
            self.source.reconnect(node, address, self.secret)
        replay = channels.connect(address, REPLAY, self.secret, sealed=self.sealed)
        replay.settimeout(POLL_S)
        try:
            self.wait(refs)
            assert self.retention is not None  # (kept when any node is recoverable)
            kept = self.retention.replay(node)
            frames = [channels.frame(port, channels.payload(b)) for port, b in kept]
            replay.send([*frames, channels.end_frame()], lambda: self.check())
        finally:
            close_socket(replay)
        self._watch(node)
        took = time.monotonic() - t0
        self.recoveries.append(took)
        _log.warning(
            "actor %r lost; restarted and rebuilt from %d kept tuples (progress %s) in %.1f s",
            node,
            sum(len(b) for _, b in kept),
            delivered.upto,
            took,
        )

    def _restarted(self, node: str) -> tuple:
        """``listen`` on ``node`` once Ray has restarted it (calls fail while it restarts)."""
        deadline = time.monotonic() + RESTART_WAIT_S
        while True:
            ref = self.hosts[node].listen.remote(self.loopback)
            while not ray.wait([ref], timeout=POLL_S)[0]:
                self.check()
            try:
                return ray.get(ref)
            except ray.exceptions.ActorUnavailableError as e:
                if time.monotonic() > deadline:
                    why = f"not restarted within {RESTART_WAIT_S} s; {e}"
                    raise _died(node, "join_core", why) from None
                time.sleep(POLL_S)
            except ray.exceptions.RayError as e:
                raise _died(node, "join_core", f"Ray did not restart it: {_unwrap(e)}") from None

    def close(self) -> None:
        """Kill every actor and close the driver's edges (whatever ended the run)."""
        if self.source is not None:
            self.source.shut()
        for h in self.hosts.values():
            with contextlib.suppress(Exception):
                ray.kill(h, no_restart=True)


class _DriverNode(Node):
    """The emitter's node, in the driver: its sends wait on a socket timeout and look at the
    actors meanwhile (:meth:`_Run.idle`)."""

    def __init__(self, run: _Run, config: ActorConfig) -> None:
        self.run = run
        super().__init__(run.emitter, config, run.query, run.settings)

    def _connect(self, address, secret) -> channels.Channel:
        sock = channels.connect(address, self.name, secret, sealed=self.sealed)
        sock.settimeout(POLL_S)
        return sock

    def _idle(self, dest: str) -> Callable[[], None]:
        return lambda: self.run.idle(dest)
