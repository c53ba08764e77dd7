"""The ``sim`` executor: the real actor logic on simulated cores under a virtual clock.

Every topology node becomes a simulated core with a FIFO mailbox, driven by events on a SimPy
clock. A core takes the next message, receives it (the model's per-message receive cost: a
``ray`` actor reads and decodes a frame before its logic runs, so the logic reads the clock
after it; a core that had rested with nothing to do pays the profile's wake-up more, the more
the longer it rested, as a host's process woken from its wait on its sockets does:
:meth:`MessageCosts.wake_cost <streamjoin.runtime.sim.profile.MessageCosts.wake_cost>`), runs
the *same* logic object as ``local`` (built by
:meth:`ActorConfig.build <streamjoin.actors.base.ActorConfig.build>`, so results stay exact),
and is then busy for the virtual time the :class:`~streamjoin.runtime.sim.costs.CostModel`
charges for what the step did, and more if the core had not run right before it (the
profile's ``after_idle``: a step that follows idle time, or a wait for a shared processor,
starts with caches that other work has used; the longer the gap, the more, up to the
calibrated cost; nothing when the message waited for the core). Its output messages leave
one after another (each costs the sender CPU, and more where its destination rests with
nothing on its way to it, as the sender's step starts: the write wakes that core, the longer
it rested the more, :meth:`MessageCosts.rouse_cost <streamjoin.runtime.sim.profile.
MessageCosts.rouse_cost>`, paid after the message left, since the receiver wakes while the
sender is still in the write; on shared processors only for as many resting destinations as
processors were idle), travel a modelled hop latency, and join the destinations' mailboxes in
FIFO order per link. The emitter that rested before a chunk pays the driver's wake-up on it,
after stamping it (the driver stamps a chunk as its pacing sleep ends, then works).
What a core passes on unchanged along a chain (:func:`~streamjoin.actors.passes_on`; DP-Join,
§III-C) leaves right after it is received, before the core's own work, as every executor
sends it.

As the ``ray`` executor's actors do (:mod:`streamjoin.runtime.coalesce`), a core that finds
messages of one sender for one port waiting right behind the one it takes runs the logic once
on their concatenation where :func:`~streamjoin.runtime.coalesce.mergeable` allows (at most
``INBOX`` messages, as an executor host reads no further once that many wait): one step over
the merged batch, each message's receive charged and the merge's copy
(``MessageCosts.merge_cost``). Under light load every batch is stepped on
alone, under heavy load batches grow. A link that lies on no cycle is bounded as the
executor's edges are: it holds ``INBOX`` messages and what the two kernel buffers of an edge
take (``EDGE_BUFFER_BYTES`` each) of messages that size; a sender whose message finds it full
finishes its step (the send's CPU charged), but takes its next message only once every one it
sent has left, each as the receiver takes the oldest on that link. So a flooded run's backlog
waits at the source, as the executor's does, and a layout does the work it does on Ray (with
every mailbox unbounded a flooded handshake chain's streams skewed, and each tuple met more
tuples than when the chain keeps up). The links between a chain's neighbours lie on cycles and
stay unbounded, as the executor's reader threads read them on.

By default every core has a processor of its own. A profile with ``cpus`` set
(:meth:`MachineProfile.with_cpus <streamjoin.runtime.sim.profile.MachineProfile.with_cpus>`)
makes the cores share that many: a step waits for a free processor, first come first served,
and holds it until it ends (actors of a small host, e.g. Ray actors on this 2-CPU machine);
a step that waited for one starts colder, by the length of its wait, as after idle time.
Under the profile's processor sharing (``sharing="ps"``) no step waits: every step that can
run does, at ``cpus / runnable`` of its speed while more steps than processors run, as a
host's scheduler time-slices; a step is staged as on a processor of its own, each of its
messages leaves as its work reaches the instant staged for it (:meth:`_Simulation._shared`),
and the time it lacked a processor costs it at its end what a wait would have at its start. A
shared-index core's step also takes as many more free processors as its threads can use, and
its tasks are charged as run on those it holds (on one, when no other is free).
A pipelined shared-index core runs a batch's tasks on ``threads`` pool processors while its
own thread (one more processor) does its work between batches (sending the last pairs,
receiving the next batch); its pairs leave with its next step, or in a flush as soon as
nothing waits for it (:meth:`_Simulation._pipelined`). On shared processors its step holds
one, and its pool takes as many as are free when the step is staged (none waited for), until
its tasks end; with none free the core's thread runs them itself.
Where other work shares the host, the profile's ``cpu_share`` stretches the compute of a step
that starts while k steps hold processors (itself included) by
:meth:`MachineProfile.slowdown(k) <streamjoin.runtime.sim.profile.MachineProfile.slowdown>`,
fixed when the step starts.

Where the profile has a spread (``variability``: :mod:`~streamjoin.runtime.sim.variability`),
each step's compute is multiplied by a factor drawn for it (the after-idle cost included; a
threaded core's serial part and its tasks by the same one), and each message's time in flight
grows or shrinks by its own factor less one times its way (send, hop, receive and a wake
after the longest rest measured: the way the spread was measured over), never below zero
and never past a message sent before it on the link. Each core draws from a generator of its
own, seeded by the profile and its name.

The virtual clock (int ns) is what the emitter stamps as ingest time (the chunk's arrival) and
what the collector reads, so every latency, throughput and busy time in the result is virtual
and deterministic: it depends on the input, the topology, the arrival process and the machine
profile (its spread's draws seeded), not on this host's load.

Input chunks arrive by an :class:`~streamjoin.runtime.sim.arrival.Arrival` process. End of
stream follows the data through every link, so a core ends after all its inputs have. Per
actor the trace (:class:`~streamjoin.runtime.sim.trace.SimTrace`) records virtual busy time,
messages and tuples in and out, peak and time-averaged mailbox length, and the mailbox (in
tuples) sampled over time.

Why one file of ~610 lines: :class:`_Simulation` is one SimPy event loop whose processes
(arrivals, cores, links, the collector) share its state; the pieces that do not need that
state live in the package's other modules (costs, arrival, capacity, calibration).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from time import perf_counter_ns
from typing import TYPE_CHECKING, ClassVar

import networkx as nx
import numpy as np
import simpy

from streamjoin.actors import passes_on
from streamjoin.actors.base import RunSettings
from streamjoin.actors.shared_index.core import pipelines_on
from streamjoin.batch import MARKER_PORT, Marker
from streamjoin.checks import positive_int, positive_number
from streamjoin.query import Query
from streamjoin.runtime.coalesce import EDGE_BUFFER_BYTES, INBOX, MERGE_TUPLES, merge, mergeable
from streamjoin.runtime.executor import Defaults
from streamjoin.runtime.markers import MarkerGate, marker_step
from streamjoin.runtime.pipeline import Progress, default_chunk_rows
from streamjoin.runtime.sim.arrival import Arrival
from streamjoin.runtime.sim.costs import CostModel, finish_at, schedule
from streamjoin.runtime.sim.host_profile import as_profile
from streamjoin.runtime.sim.profile import MachineProfile, message_nbytes
from streamjoin.runtime.sim.trace import SimStats, SimTrace
from streamjoin.runtime.sim.variability import Draws
from streamjoin.runtime.trace import RunTrace, newest_ingest
from streamjoin.topologies.base import Topology
from streamjoin.validation import Columns

# mailbox item kinds
_CHUNK, _BATCH, _TICK, _EOF = "chunk", "batch", "tick", "eof"
#: a pipelined core's flush when nothing waits for it (``ActorLogic.on_idle``)
_IDLE = "idle"


class _Env(simpy.Environment):
    """SimPy's environment, its clock in whole virtual ns: every delay the simulation
    schedules is an int (costs are rounded to ns), so ``now`` stays an int."""

    if TYPE_CHECKING:

        @property
        def now(self) -> int: ...


class _Core:
    """One simulated core: its logic object, FIFO mailbox, outgoing links and accounting."""

    __slots__ = (
        "name",
        "role",
        "logic",
        "stats",
        "box",
        "idle",
        "rest_ns",
        "waiting_since",
        "free_at",
        "kind",
        "ended",
        "n_inputs",
        "routes",
        "eof_links",
        "q",
        "qt",
        "q_since",
        "q_area",
        "charge",
        "idle_ns",
        "threads",
        "held",
        "split",
        "inflight",
        "pending",
        "ready",
        "open_steps",
        "pool_only",
        "pool_free",
        "closed_seen",
        "gate",
        "marker_routes",
        "blocked",
        "stalled",
        "due_ns",
        "woke_ns",
        "draws",
    )

    def __init__(self, name: str, role: str, logic, n_inputs: int, model: CostModel) -> None:
        self.name, self.role, self.logic, self.n_inputs = name, role, logic, n_inputs
        self.charge = model.bind(logic)  # the step's cost, from its counters
        self.idle_ns = model.after_idle_ns(logic)  # more when the step follows idle time
        # processors a step can use (a shared-index core's threads), and those it holds
        threaded = getattr(logic, "threads", 1) > 1 and hasattr(logic, "last_tasks")
        self.threads = logic.threads if threaded else 1
        self.held = 0
        # a pipelined core (set by the simulation): its step's charge split into the serial
        # part and its tasks, when the tasks in flight end, and the pairs they hold
        self.split: Callable[..., tuple[float, list[float]]] | None = None
        self.inflight: int | None = None
        self.pending: list = []
        # a core whose steps stay open across batches (``step_tuples``): when each pending
        # message's tasks end, whether only the pool runs tasks (pipelined), when each pool
        # processor is free, and the steps it had ended when last seen
        self.ready: list[int] = []
        self.open_steps = False
        self.pool_only = False
        self.pool_free: list[float] = []
        self.closed_seen = 0
        self.stats = SimStats(role=role)
        self.box: deque = deque()  # items waiting: (kind, port, message, sender, receive ns)
        self.idle = True  # no step due: the next message starts one (at ``free_at`` or later)
        # virtual ns the core was idle or waited for a processor since its last step (the
        # next step starts that much colder); before the first step: long ago
        self.rest_ns = math.inf
        self.waiting_since = 0  # when it began waiting for a processor
        self.free_at = 0  # virtual time the last step ends
        self.kind: str | None = None  # kind of the item being served
        self.ended = 0  # end-of-stream markers received
        self.routes: dict[str, list] = {}  # out port -> [(core, in port, link)]
        self.marker_routes: list = []  # [(core, in port, link)] per successor
        self.gate: MarkerGate | None = None
        self.eof_links: list = []  # (core, link) per successor
        # mailbox accounting: messages, tuples, time of last change, integral over time
        self.q = self.qt = self.q_since = self.q_area = 0
        # its messages waiting for room on a bounded link, and whether it waits for them to
        # leave before its next step (a sender blocked on a full receiver)
        self.blocked = 0
        self.stalled = False
        # the latest arrival scheduled for it (none in flight once that has passed), and the
        # wake-up its next step pays after the logic read the clock (an emitter's: its chunk
        # is stamped on arrival, as the driver stamps it before working)
        self.due_ns = 0
        self.woke_ns = 0
        # its steps' and messages' factors (the profile's ``variability``; None: none)
        self.draws: Draws | None = None

    def count(self, now: int, dq: int, dt: int) -> None:
        self.q_area += self.q * (now - self.q_since)
        self.q_since = now
        self.q += dq
        self.qt += dt
        st = self.stats
        if self.q > st.peak_queue:
            st.peak_queue = self.q
        if self.qt > st.peak_queue_tuples:
            st.peak_queue_tuples = self.qt


#: how close (ns of work) a running step must be to an instant to have reached it (rounding)
_REACHED = 1e-3


class _Job:
    """A step running under processor sharing: the instants staged for it (ns of its work
    from its start, each with what happens then: a message leaves, or None: a stamp), the
    work done, the processors' worth it runs on, when it started, its stamps' times and
    what runs at its end (:meth:`_Simulation._shared`)."""

    __slots__ = (
        "core",
        "kind",
        "marks",
        "done",
        "weight",
        "t0",
        "at",
        "then",
        "work",
        "rest",
        "cold",
    )

    def __init__(
        self, core: _Core, kind, marks: deque, weight: int, t0: int, then, rest: float
    ) -> None:
        self.core, self.kind, self.marks, self.weight, self.t0 = core, kind, marks, weight, t0
        self.then = then
        self.work = marks[-1][0]  # its staged work, ns
        self.rest = rest  # the core's rest before it (its after-idle cost was charged for it)
        self.cold = False  # charged for the time it ran slower than alone
        self.done = 0.0
        self.at: list[int] = []


class _Simulation:
    """One run: the cores, their mailboxes and the links between them.

    A core is driven by event callbacks rather than by a SimPy process reading a
    ``simpy.Store``: a message costs one event (its delivery), and a step costs one more (its
    end) only if messages are waiting for it; a core that goes idle is woken by the next
    arrival instead, at the end of its last step if that is still to come. A process and a
    Store took four events per message, and that bookkeeping dominated the simulator's own
    host time (``benchmarks/test_sim_overhead.py``). Simultaneous events still resolve in
    scheduling order, so a run is deterministic.
    """

    def __init__(
        self,
        query,
        topology: Topology,
        settings: RunSettings,
        model: CostModel,
        arrival: Arrival,
        progress,
        sample_every_ns: int,
        max_samples: int,
    ) -> None:
        self.env = env = _Env()
        graph = topology.graph
        self.settings, self.model, self.arrival = settings, model, arrival
        self.max_delay = settings.max_delay_ns
        self.merge_tuples = max(settings.batch_size, MERGE_TUPLES)  # as the executor's
        self.progress = progress or Progress(None, enabled=False)

        # a step's logic runs once its message is received: it reads the clock that far ahead
        self.lead = 0

        def clock() -> int:
            return env.now + self.lead

        # end of stream: along every link in a DAG; in a cyclic graph (handshake neighbours)
        # from a closer that hands it to one node at a time once everything is quiet
        self.cyclic = topology.cyclic
        emitter = topology.emitter
        collector = topology.collector
        self.cores = {
            n: _Core(
                n,
                d["role"],
                _simulated(d["config"]).build(query, settings, clock),
                1 if self.cyclic or n == emitter else len(set(graph.predecessors(n))),
                model,
            )
            for n, d in graph.nodes(data=True)
        }
        self.emitter, self.collector = self.cores[emitter], self.cores[collector]
        variability = model.profile.variability
        if variability:  # each core draws its own factors, seeded by its name
            for name, core in self.cores.items():
                core.draws = variability.draws(name)
        self.eof_order = [self.cores[n] for n in topology.eof_order()]
        # one FIFO link per (sender, receiver), shared by all ports between them: a cell
        # holding the arrival time of its last message, its messages sent and not yet taken,
        # and, on a link that lies on no cycle (bounded, as the executor's edges are), the
        # messages waiting for room; one beyond the cycles' (unbounded) has None there
        links: dict[tuple, list] = {}

        def link(src: str, dst: str) -> list:
            if (src, dst) not in links:
                bounded = not nx.has_path(graph, dst, src)
                links[src, dst] = [0, 0, deque() if bounded else None]
            return links[src, dst]

        for (src, port), dests in topology.routes().items():
            self.cores[src].routes[port] = [
                (self.cores[dst], dst_port, link(src, dst)) for dst, dst_port in dests
            ]
        for n, dests in topology.marker_routes().items():
            self.cores[n].marker_routes = [(self.cores[d], port, link(n, d)) for d, port in dests]
            if not topology.config(n).passes_markers:  # (else its logic takes them)
                self.cores[n].gate = MarkerGate(dict.fromkeys(graph.predecessors(n)))
        for n, core in self.cores.items():
            core.eof_links = [
                (self.cores[d], link(n, d)) for d in dict.fromkeys(graph.successors(n))
            ]
        self.links = {(self.cores[a], self.cores[b]): cell for (a, b), cell in links.items()}
        # processors: one per core (None), or a shared pool steps queue for in FIFO order
        self.cpus = model.profile.cpus
        self.cpus_free = self.cpus or 0  # read only with cpus
        for core in self.cores.values():  # pipelined shared-index cores
            pipelined = getattr(core.logic, "pipelined", False)
            if pipelined is None:  # by default: as a host of this many processors would
                pipelined = pipelines_on(core.logic.threads, self.cpus or math.inf)
            if pipelined:
                core.split = model.bind_tasks(core.logic)
            # steps open across batches: modelled on processors of their own (with shared
            # processors each call stays a step of its own, as charged without them)
            if (
                self.cpus is None
                and getattr(core.logic, "step_tuples", 0) > 0
                and (pipelined or core.threads > 1)
            ):
                core.split = model.bind_tasks(core.logic)
                core.open_steps, core.pool_only = True, bool(pipelined)
                pool = core.logic.threads if pipelined else core.logic.threads - 1
                core.pool_free = [0.0] * pool
        self.cpu_wait: deque = deque()
        # processor sharing (``MachineProfile.sharing``): the steps running, the processors
        # pipelined pools hold, the speed each step runs at since ``shared_since``, the
        # instants a step being staged sends at (None: not staging a shared step), and the
        # generation of the event due at the next instant a running step reaches
        self.sharing = self.cpus is not None and model.profile.sharing == "ps"
        self.jobs: list[_Job] = []
        self.reserved = 0
        self.rate = 1.0
        self.shared_since = 0
        self.marks: list | None = None
        self.staged_rest = 0.0
        self.generation = 0
        self.in_tick = False
        if self.cpus is None:
            self._start = self._step
        else:
            self._start = self._start_shared if self.sharing else self._start_on_cpu
        # compute stretch by the number of steps holding processors (cpu_share)
        self.slowdown: list[float] | None = [
            model.profile.slowdown(k) for k in range(1 + (self.cpus or 0))
        ]
        self.after_idle = model.profile.after_idle
        if not any(f != 1.0 for f in self.slowdown):
            self.slowdown = None
        # a step's end is an event only when something depends on it (see _step)
        self.end_events = self.cyclic or self.cpus is not None
        self.active = 0  # messages scheduled or being served (ticks aside)
        self.quiet = None  # event the closer waits on until active == 0
        # (send, hop, receive) ns of a message, computed once per message sent
        self.message_ns = model.message_ns
        # what a core that slept pays more for the message that woke it, by how long it slept
        self.wake_cost = model.profile.messages.wake_cost
        self.wakes = bool(model.profile.messages.wake_ns or model.profile.messages.wake_after)
        # a receiver's wake after the longest rest measured: part of a message's way where
        # the spread of messages was measured (``Variability``)
        wake_after = model.profile.messages.wake_after
        self.asleep_ns = round(self.wake_cost(wake_after[-1][0] if wake_after else 1.0))
        self.driver_wake_cost = model.profile.messages.driver_wake_cost
        self.driver_wakes = self.wakes or bool(model.profile.messages.driver_wake_after)
        # what a sender pays more for a message to a core that slept, by how long it slept
        self.rouse_cost = model.profile.messages.rouse_cost
        self.merge_cost = model.profile.messages.merge_cost
        # the kernel's delivery of a message, charged in its send: counted apart too
        messages = model.profile.messages
        self.kernel_cost = (
            messages.kernel_cost if messages.kernel_ns or messages.kernel_per_byte_ns else None
        )
        self.rouses = bool(model.profile.messages.rouse_after)
        # on shared processors a write rouses only as many resting receivers as processors
        # are idle; the rest queue on busy ones (``_idle_to_rouse``): (sender, instant, left)
        self.rousing: tuple[_Core | None, int, int] = (None, -1, 0)
        # a cyclic graph's hosts hand each frame from a reader thread to the stepping one
        self.cyclic_recv_ns = round(model.profile.messages.cyclic_recv_ns) if self.cyclic else 0
        self.samples: list[tuple[int, list[int]]] = []
        self.sample_every = sample_every_ns
        self.next_sample = sample_every_ns
        self.core_list = list(self.cores.values())
        self.max_samples = max_samples
        # emitter batching timer (max_delay): chunks the emitter took, as (end row, ingest)
        self.tick_armed = False
        self.start_ns: int | None = None
        self.n_in = 0
        self.last_arrival = 0
        self.done = env.event()
        self.steps = self.messages = 0

    # -- mailboxes -------------------------------------------------------------------------

    def _deliver_at(self, t: int, core: _Core, item) -> None:
        # always through the event queue, even at delay 0: equal times keep scheduling order
        if item[0] is not _TICK:  # a timer left after end of input is no work in flight
            self.active += 1
        core.due_ns = max(core.due_ns, t)
        self.env.timeout(t - self.env.now, (core, item)).callbacks.append(self._arrive)

    def _arrive(self, event) -> None:
        core, item = event.value
        now = self.env.now
        if now >= self.next_sample:
            self._sample(now)
        if item[0] is _BATCH or item[0] is _CHUNK:
            core.count(now, 1, len(item[2]))
        if not core.idle:
            core.box.append(item)
        elif now >= core.free_at:
            core.idle = False
            if now > core.free_at:
                core.rest_ns += now - core.free_at
                if item[0] is _BATCH and self.wakes:  # its process slept: waking costs it
                    wake = round(self.wake_cost(now - core.free_at))
                    item = (*item[:4], item[4] + wake)
                elif item[0] is _CHUNK and self.driver_wakes:  # the source's thread slept too
                    core.woke_ns = round(self.driver_wake_cost(now - core.free_at))
            self._start(core, item)
        else:  # the core's last step is still running: wake it when that ends
            core.idle = False
            core.box.append(item)
            self.env.timeout(core.free_at - now, core).callbacks.append(self._wake)

    def _wake(self, event) -> None:
        self._next(event.value)

    def _served(self) -> None:
        self.active -= 1
        if self.active == 0 and self.quiet is not None:
            event, self.quiet = self.quiet, None
            event.succeed()

    def _send(self, core: _Core, out_port: str, msg, t: int) -> int:
        """Send ``msg`` on ``out_port`` starting at ``t``; returns when the sender is done.
        Under processor sharing each copy joins its link when the step's work reaches the
        instant it leaves (:meth:`_shared`), else at once, at ``t``."""
        st = core.stats
        st.batches_out += 1
        st.tuples_out += len(msg)
        dests = core.marker_routes if out_port == MARKER_PORT else core.routes.get(out_port)
        if dests:
            env, marks = self.env, self.marks
            send, hop, recv = self.message_ns(msg)
            recv += self.cyclic_recv_ns
            if self.kernel_cost is not None:
                st.kernel_ns += round(self.kernel_cost(message_nbytes(msg))) * len(dests)
            hop_ns = hop
            room = 0  # messages a bounded link holds, for this message's size (0: not yet known)
            # a spread's factor lengthens or shortens its hop by the factor less one times
            # the message's way (as measured: to a receiver that slept)
            way = send + hop + recv + self.asleep_ns
            draws = core.draws
            for dst, dst_port, link in dests:
                t += send
                if draws is not None:
                    hop = max(0, round(hop_ns + (draws.message() - 1.0) * way))
                rouse = 0
                if self.rouses and dst.idle and dst.due_ns <= env.now and self._idle_to_rouse(core):
                    # it sleeps, and nothing is on its way to it: this write wakes it. The
                    # sender pays for that after the message left: the kernel wakes the
                    # receiver as the write queues the data, and it wakes while the sender
                    # is still in the write
                    rouse = round(self.rouse_cost(max(t, link[0]) - dst.free_at))
                if link[2] is not None and not room:
                    room = INBOX + max(1, 2 * EDGE_BUFFER_BYTES // max(1, message_nbytes(msg)))
                item = (_BATCH, dst_port, msg, core, recv)
                if marks is None:
                    self._place(core, dst, item, link, hop, room, t)
                else:
                    marks.append((t, self._place, (core, dst, item, link, hop, room)))
                t += rouse
            self.messages += len(dests)
            self.active += len(dests)
        return t

    def _place(self, core: _Core, dst: _Core, item, link: list, hop: int, room: int, t: int):
        """``core``'s message ``item`` leaves at ``t`` on ``link`` to ``dst``: it arrives a
        ``hop`` later, after every earlier message on the link; on a bounded link that holds
        ``room`` messages already, it waits for room and its sender stalls (see _took)."""
        waiting = link[2]
        if waiting is not None and (waiting or link[1] >= room):
            waiting.append((hop, dst, item))  # full: it leaves when the receiver takes one
            core.blocked += 1
            return
        arrive = max(t + hop, link[0])
        link[0] = arrive
        link[1] += 1
        dst.due_ns = max(dst.due_ns, arrive)
        self.env.timeout(arrive - self.env.now, (dst, item)).callbacks.append(self._arrive)

    def _idle_to_rouse(self, sender: _Core) -> bool:
        """Whether a resting receiver that ``sender`` writes to now has an idle processor to
        be woken on, which the sender pays to rouse (``MessageCosts.rouse_after``: measured
        as a write that wakes a host asleep while a processor idles). With a processor per
        core, always; on shared processors, for as many receivers as processors were idle as
        the sender's step began: the kernel queues the rest on busy processors, which costs
        the sender no wake-up of an idle one (docs/simulator.md)."""
        if self.cpus is None:
            return True
        who, now, left = self.rousing
        if who is not sender or now != self.env.now:
            left = self.cpus_free
        self.rousing = (sender, self.env.now, left - 1)
        return left > 0

    def _took(self, src: _Core, core: _Core) -> None:
        """``core`` took a message of ``src``'s: on a bounded link the oldest message waiting
        for room leaves now, and a sender whose last waiting message that was goes on."""
        link = self.links[src, core]
        link[1] -= 1
        waiting = link[2]
        if not waiting:
            return
        hop, dst, item = waiting.popleft()
        now = self.env.now
        arrive = max(now + hop, link[0])
        link[0] = arrive
        link[1] += 1
        dst.due_ns = max(dst.due_ns, arrive)
        self.env.timeout(arrive - now, (dst, item)).callbacks.append(self._arrive)
        src.blocked -= 1
        if src.blocked == 0 and src.stalled:
            src.stalled = False
            if src.free_at > now:
                self.env.timeout(src.free_at - now, src).callbacks.append(self._wake)
            else:
                self._next(src)

    def _coalesce(self, core: _Core, port: str, msg, src: _Core, recv: int) -> tuple:
        """``(message, receive ns)`` of the step that takes ``msg``: with the messages of the
        same sender for the same port waiting right behind it, merged as the ``ray``
        executor merges its inbox (:func:`coalesce.mergeable`, at most ``INBOX`` messages,
        as a host reads no further once that many wait), each frame's receive charged, and
        the merge (``MessageCosts.merge_cost`` of the merged message)."""
        box, group = core.box, [msg]
        while (
            box
            and len(group) < INBOX
            and box[0][3] is src
            and box[0][1] == port
            and mergeable(core.logic.merges_batches, group, box[0][2], self.merge_tuples)
        ):
            item = box.popleft()
            self._took(src, core)
            group.append(item[2])
            recv += item[4]
        self.active -= len(group) - 1  # served as one; this step's own item stays counted
        core.count(self.env.now, -len(group), -sum([len(m) for m in group]))
        if len(group) == 1:
            return msg, recv
        merged = merge(group)
        return merged, recv + round(self.merge_cost(message_nbytes(merged)))

    # -- processes and steps -------------------------------------------------------------

    def source(self, chunks: Iterable[Columns]):
        env = self.env
        schedule = self.arrival.start()
        for cols in chunks:
            t = schedule.chunk_ns(cols)
            if t > env.now:
                yield env.timeout(t - env.now)
            if self.start_ns is None:
                self.start_ns = env.now
            self._deliver_at(env.now, self.emitter, (_CHUNK, env.now, cols, None, 0))
            self.n_in += len(cols)
            self.progress.update(len(cols))
        if self.start_ns is None:
            self.start_ns = env.now
        self.last_arrival = env.now
        self._deliver_at(env.now, self.emitter, (_EOF, None, None, None, 0))
        if self.cyclic:
            env.process(self.closer())

    def closer(self):
        """End of stream for a cyclic graph, as ``local`` does it: each node in
        ``eof_order`` after the emitter gets it once no message is left anywhere."""
        for core in self.eof_order[1:]:
            if self.active:
                self.quiet = self.env.event()
                yield self.quiet
            self._deliver_at(self.env.now, core, (_EOF, None, None, None, 0))

    def _step(self, core: _Core, item) -> None:
        """Serve one mailbox item: run the logic, charge it, send its output, and stay busy
        for the virtual time that costs."""
        kind, port, msg, src, recv = item  # recv: the receive's ns (a batch's, else 0)
        t0 = self.env.now
        if t0 >= self.next_sample:
            self._sample(t0)
        logic, st = core.logic, core.stats
        ahead: Sequence[tuple[str, object]] = ()
        args: tuple
        if kind is _BATCH:
            self._took(src, core)
        if kind is _BATCH and isinstance(msg, Marker) and core.gate is not None:
            self._marker(core, msg, src, recv, t0)
            return
        if kind is _BATCH:
            if core.box and core.box[0][3] is src:
                msg, recv = self._coalesce(core, port, msg, src, recv)
            else:
                core.count(t0, -1, -len(msg))
            st.batches_in += 1
            st.tuples_in += len(msg)
            ahead = passes_on(logic, port, msg)  # sent on before the step, as the executors do
            call, args = logic.on_batch, (port, msg)
        elif kind is _CHUNK:
            core.count(t0, -1, -len(msg))
            st.tuples_in += len(msg)
            call, args = logic.on_chunk, (msg, port)  # port slot: the chunk's arrival
        elif kind is _TICK:
            self.tick_armed = False
            call, args = logic.on_tick, ()
        elif kind is _IDLE:
            self._flush(core, t0)
            return
        else:
            core.ended += 1
            if core.ended < core.n_inputs:
                self._served()
                if self.cpus is not None:
                    self._release(core)
                self._next(core)
                return
            call, args = logic.on_eof, ()
        snap = logic.counters()  # what the charge takes the step's work from
        self.steps += 1
        self.lead = recv
        w0 = perf_counter_ns()
        out = call(*args)
        wall = perf_counter_ns() - w0
        self.lead = 0
        st.compute_wall_ns += wall
        # the message is received (deserialised) first; what the core passes on along a
        # chain then leaves before its own work, as DP-Join passes the pointer on first
        t = t0 + recv
        for p, m in ahead:
            t = self._send(core, p, m, t)
        start = t  # its logic begins (a shared-index core's step ends as its thread's part does)
        if core.open_steps:
            t = end = self._open_step(core, kind, msg, snap, wall, out, t)
        elif core.split is not None:
            t = end = self._pipelined(core, kind, msg, snap, wall, out, t)
        else:
            t += self._compute(core, kind, msg, snap, wall)
            end = t
            for p, m in out:
                t = self._send(core, p, m, t)
        if self.marks is not None:  # processor sharing: it ends when its work is done
            if core is self.emitter and kind is not _EOF and self.max_delay is not None:
                self._arm_tick(logic)

            def then(at: list[int], now: int) -> None:  # its start and end, now its end
                self._lag(core, kind, msg, port, at[0], at[1], end - start)
                if kind is _EOF:
                    self._eof_out(core, now)

            self._shared(core, kind, t0, t, (start, end), then)
            return
        self._lag(core, kind, msg, port, start, end, end - start)
        if core is self.emitter and kind is not _EOF and self.max_delay is not None:
            self._arm_tick(logic)
        if kind is _EOF:
            self._eof_out(core, t)
        st.busy_ns += t - t0
        core.free_at = t
        if core.box or kind is _EOF or self.end_events or core.inflight is not None:
            core.kind = kind
            self.env.timeout(t - t0, core).callbacks.append(self._step_done)
        else:  # nothing queued: no event until a message comes (see _arrive)
            if kind is not _TICK:
                self._served()  # early, but only a cyclic graph's closer reads it
            if core.blocked:  # its messages wait for room: it goes on once they have left
                core.stalled = True
            else:
                core.idle = True

    @staticmethod
    def _lag(core: _Core, kind, msg, port, start: int, end: int, cpu: int) -> None:
        """Record how far behind its input the step's logic ran, from ``start`` to ``end``,
        its work ``cpu`` ns."""
        if kind is _BATCH:
            core.stats.lag(newest_ingest(msg), start, end, cpu)
        elif kind is _CHUNK:
            core.stats.lag(port, start, end, cpu)  # (the port slot: the chunk's arrival)

    def _eof_out(self, core: _Core, t: int) -> None:
        """End of stream leaves ``core`` at ``t`` along every link of a DAG, after all data."""
        if self.cyclic:
            return
        for dst, link in core.eof_links:
            arrive = max(t, link[0])
            link[0] = arrive
            self._deliver_at(arrive, dst, (_EOF, None, None, None, 0))

    def _marker(self, core: _Core, marker: Marker, src: _Core, recv: int, t0: int) -> None:
        """Serve a progress marker (:mod:`~streamjoin.runtime.markers`): received as any
        message; if the node's gate passes one, a pipelined core's step in flight ends and its
        pairs leave first, then the logic's own output (charged from its counters, as a
        step: the collector's rows without a partner), then the marker to each successor."""
        core.count(t0, -1, 0)
        t = t0 + recv
        assert core.gate is not None  # (every core that gates markers has one)
        passed = core.gate.take(src.name, marker)
        if passed is not None:
            if core.split is not None:
                t = self._send_ready(core, self._join_tasks(core, t))
            logic = core.logic
            snap = logic.counters()
            self.lead = t - t0
            w0 = perf_counter_ns()
            out = marker_step(logic, passed)
            wall = perf_counter_ns() - w0
            self.lead = 0
            if logic.counters() != snap:
                t += self._compute(core, _BATCH, marker, snap, wall)
            for p, m in out:
                t = self._send(core, p, m, t)
        if self.marks is not None:
            self._shared(core, _BATCH, t0, t)
            return
        core.stats.busy_ns += t - t0
        core.free_at = t
        if core.box or self.end_events or core.inflight is not None:
            core.kind = _BATCH
            self.env.timeout(t - t0, core).callbacks.append(self._step_done)
        else:
            self._served()
            core.idle = True

    def _compute(self, core: _Core, kind, msg, snap, wall) -> int:
        """The step's compute in virtual ns: its charge, and the after-idle cost if the core
        had been idle or had waited for a processor before it (the share of it that gap's
        length calls for, ``IdleCosts.ramp``), stretched by the processors' share
        (``cpu_share``)."""
        if self.cpus is not None and core.threads > 1:  # its tasks on the processors it holds
            ns = core.charge(kind, msg, snap, core.logic.counters(), wall, threads=core.held)
        else:
            ns = core.charge(kind, msg, snap, core.logic.counters(), wall)
        if self.slowdown is None:
            stretch = 1.0
        else:
            assert self.cpus is not None  # (only shared processors slow a step)
            stretch = self.slowdown[self.cpus - self.cpus_free]
        if core.draws is not None:
            stretch *= core.draws.step()
        charged = round((ns + self._idle_cost(core)) * stretch)
        self._count_step(core, charged)
        return charged

    def _split(self, core: _Core, kind, msg, snap, wall) -> tuple[int, list[float]]:
        """A threaded core's step: its serial part (the after-idle cost included) and its
        tasks, each times the step's factor where the profile has a spread."""
        assert core.split is not None  # (only threaded cores come here)
        serial, tasks = core.split(kind, msg, snap, core.logic.counters(), wall)
        serial += self._idle_cost(core)
        if core.draws is not None:
            f = core.draws.step()
            serial, tasks = serial * f, [x * f for x in tasks]
        return round(serial), tasks

    @staticmethod
    def _count_step(core: _Core, ns: float) -> None:
        """Count ``ns`` of compute charged to the core's own thread (``step_cpu_ns``)."""
        core.stats.step_cpu_ns += round(ns)

    def _idle_cost(self, core: _Core) -> float:
        """What the step costs more after the core's rest (``IdleCosts.ramp``), once, and an
        emitter's wake-up (``MessageCosts.driver_wake_cost``) for the chunk that woke it."""
        ns, core.woke_ns = float(core.woke_ns), 0
        if core.rest_ns:
            if core.idle_ns:
                ns += core.idle_ns * self.after_idle.share(core.rest_ns)
                core.stats.after_idle_steps += 1
            core.rest_ns = 0
        return ns

    # -- a pipelined shared-index core -------------------------------------------------------

    def _pipelined(self, core: _Core, kind, msg, snap, wall, out, t: int) -> int:
        """A pipelined core's step from ``t`` (its message received), as the core runs it
        (:class:`~streamjoin.actors.shared_index.core.SharedIndexCore`): it waits for the end
        of the step in flight, whose tasks the pool's ``threads`` processors have run since
        it began; then the serial part (gathering that step, staging this one); then this
        step's tasks go to the pool while the held pairs leave. This step's pairs are held
        in turn, until the next step or the core's idle flush. (The host computed the step
        at once: the simulator decides when its pairs leave.)"""
        assert core.split is not None  # (only a pipelined core comes here)
        t = self._join_tasks(core, t)
        held, core.pending = core.pending, []
        serial, tasks = self._split(core, kind, msg, snap, wall)
        self._count_step(core, serial)
        t += serial
        pool = self._pool_for(core) if tasks else 0
        if pool:  # they start now, on the pool's processors, while the held pairs are sent
            end = math.ceil(finish_at(tasks, [float(t)] * pool))
            core.inflight = end
            if self.cpus is not None:  # the pool's processors are free again at its end
                self.env.timeout(end - self.env.now, pool).callbacks.append(self._pool_done)
        elif tasks:  # no processor free for the pool: the core's thread runs them itself
            own = math.ceil(finish_at(tasks, [0.0]))
            self._count_step(core, own)
            t += own
        for p, m in held:
            t = self._send(core, p, m, t)
        if pool:
            core.pending = list(out)
        else:
            for p, m in out:
                t = self._send(core, p, m, t)
        return t

    def _open_step(self, core: _Core, kind, msg, snap, wall, out, t: int) -> int:
        """A call of a core whose steps stay open across batches (``step_tuples``), as the
        core runs it (:class:`~streamjoin.actors.shared_index.core.SharedIndexCore`): if a
        step ended during the call, its threads met first (the core's thread waits for every
        task in flight); then the serial part (staging the batch); then its tasks go, in
        order, to the thread free first: the pool's processors, each free when its last task
        ends, and (not pipelined) the core's thread, whose call lasts until the last task it
        took ends. The call's pairs leave once its tasks and every earlier call's have ended:
        with a later call that finds them done, or in the core's idle flush. (The host ran
        the tasks at once: the simulator decides when they run and when their pairs leave.)"""
        assert core.split is not None  # (set with open_steps)
        logic = core.logic
        now = self.env.now
        pool_end = math.ceil(max(core.pool_free, default=0.0))
        if pool_end > core.free_at:  # the pool worked while the core's thread was away
            core.stats.busy_ns += max(0, min(pool_end, now) - core.free_at)
            core.free_at = now
        closed = logic.steps_closed != core.closed_seen
        core.closed_seen = logic.steps_closed
        if closed:  # a step ended: the core's thread waits for every task in flight
            t = self._send_ready(core, self._join_tasks(core, t))
        serial, tasks = self._split(core, kind, msg, snap, wall)
        self._count_step(core, serial)
        t += serial
        ready = t
        if tasks:
            free = [max(float(t), f) for f in core.pool_free]
            if not core.pool_only:
                free.insert(0, float(t))  # the core's thread takes tasks too
            free = schedule(tasks, free)
            ready = math.ceil(max(free))  # propagated in order: after every task before
            if core.pool_only:
                core.pool_free = free
            else:
                self._count_step(core, math.ceil(free[0]) - t)  # the tasks it took, back to back
                t = math.ceil(free[0])
                core.pool_free = free[1:]
        if core.ready:  # pairs leave in order: after every earlier call's
            ready = max(ready, core.ready[-1])
        for p, m in out:
            core.pending.append((p, m))
            core.ready.append(ready)
        # until every task has ended, the core holds batches (``on_idle`` waits for them)
        end = math.ceil(max([float(ready), *core.pool_free]))
        core.inflight = end if end > t else None
        return self._send_ready(core, t)

    def _send_ready(self, core: _Core, t: int) -> int:
        """Send the held messages whose tasks have ended by ``t``, in order; all of them for
        a core that holds no times (a pipelined one: its pairs are ready when it joins)."""
        if not core.open_steps:
            held, core.pending = core.pending, []
            for p, m in held:
                t = self._send(core, p, m, t)
            return t
        n = 0
        while n < len(core.ready) and core.ready[n] <= t:
            n += 1
        held, core.pending = core.pending[:n], core.pending[n:]
        core.ready = core.ready[n:]
        for p, m in held:
            t = self._send(core, p, m, t)
        return t

    def _pool_for(self, core: _Core) -> int:
        """Processors a pipelined core's pool gets for a step's tasks: its ``threads`` on
        processors of their own; on shared ones as many of them as are free (none waited
        for: the pool's threads share the busy ones, as the host's do)."""
        if self.cpus is None:
            return core.logic.threads
        pool = min(core.logic.threads, self.cpus_free)
        self.cpus_free -= pool
        if self.sharing:
            self.reserved += pool
        return pool

    def _tasks_done(self, event) -> None:
        core = event.value
        self._start(core, core.box.popleft() if core.box else (_IDLE, None, None, None, 0))

    def _pool_done(self, event) -> None:
        """A pipelined core's pool ended its tasks: its processors are given back."""
        self._give(event.value)

    def _join_tasks(self, core: _Core, t: int) -> int:
        """When the core's thread, wanting it at ``t``, has the step in flight's end: its
        tasks on the pool's ``threads`` processors since the step began. The core's busy
        time gains what its pool ran while its thread was away (from the end of its last
        step to the start of this one): a core is busy while any of its threads is."""
        end = core.inflight
        if end is None:
            return t
        core.inflight = None
        core.stats.busy_ns += max(0, min(end, self.env.now) - core.free_at)
        return max(t, end)

    def _flush(self, core: _Core, t0: int) -> None:
        """Nothing waited for a pipelined core when its pool ended the step in flight: that
        step's pairs leave (``on_idle``)."""
        t = self._send_ready(core, self._join_tasks(core, t0))
        if self.marks is not None:
            self._shared(core, _IDLE, t0, t)
            return
        core.stats.busy_ns += t - t0
        core.free_at = t
        core.kind = _IDLE
        self.env.timeout(t - t0, core).callbacks.append(self._step_done)

    def _step_done(self, event) -> None:
        self._done(event.value)

    def _done(self, core: _Core) -> None:
        """``core``'s step ended: it takes its next message."""
        if self.cpus is not None:
            self._release(core)
        if core.kind is not _TICK and core.kind is not _IDLE:
            self._served()
        if core.kind is _EOF:
            if core is self.collector:
                self.done.succeed()
            return
        self._next(core)

    def _next(self, core: _Core) -> None:
        if core.blocked:  # a sender blocked on a full receiver (see _took)
            core.stalled = True
            return
        if core.box:
            self._start(core, core.box.popleft())
        elif core.inflight is not None:  # its thread sleeps (holding no processor) until
            # its pool is done, then lets the pairs go, unless a message came meanwhile
            delay = max(0, core.inflight - self.env.now)
            self.env.timeout(delay, core).callbacks.append(self._tasks_done)
        else:
            core.idle = True

    # -- shared processors (MachineProfile.cpus) -------------------------------------------

    def _start_on_cpu(self, core: _Core, item) -> None:
        """Start the step on a free processor, or wait in line for one."""
        if self.cpus_free:
            self.cpus_free -= 1
            self._run_on_cpu(core, item)
        else:  # its process waits while others run: it starts colder
            core.waiting_since = self.env.now
            self.cpu_wait.append((core, item))

    def _run_on_cpu(self, core: _Core, item) -> None:
        """Run the step on the processor it got, and on as many more free ones as its
        threads can use (a shared-index core: its tasks go to the processors it holds; it
        waits for none beyond the first, as its pool's threads do not wait for idle
        processors but share the busy ones)."""
        # (a pipelined core's step holds its own thread's processor: its pool takes its own)
        extra = 0 if core.split is not None else min(core.threads - 1, self.cpus_free)
        self.cpus_free -= extra
        core.held = 1 + extra
        self._step(core, item)

    def _release(self, core: _Core) -> None:
        """``core``'s step ended: each processor it held goes to the step that has waited
        longest (under processor sharing its step's end gave them back, :meth:`_shared`)."""
        held, core.held = core.held, 0
        if not self.sharing:
            self._give(held)

    def _give(self, n: int) -> None:
        """``n`` processors are free: each goes to the step that has waited longest (under
        processor sharing: a pool's, and the steps running share them from now on)."""
        if self.sharing:
            self._advance()
            self.reserved -= n
            self._reschedule()
            return
        for _ in range(n):
            if self.cpu_wait:
                waiter, item = self.cpu_wait.popleft()
                waiter.rest_ns += self.env.now - waiter.waiting_since
                self._run_on_cpu(waiter, item)
            else:
                self.cpus_free += 1

    # -- processor sharing (MachineProfile.sharing == "ps") -----------------------------------

    def _start_shared(self, core: _Core, item) -> None:
        """Start the step now, sharing the processors with the steps running: it is staged
        as on a processor of its own (:meth:`_step`, its sends collected in ``marks``), then
        runs as a :class:`_Job` (:meth:`_shared`). A threaded core's step runs on as many
        processors as its threads can use, a pipelined core's on one (its pool takes its own,
        :meth:`_pool_for`)."""
        self._advance()
        assert self.cpus is not None  # (sharing needs shared processors)
        room = self.cpus - self.reserved
        core.held = 1 if core.split is not None else min(core.threads, max(1, room))
        # a step staged while another is (a sender its receive let go on) stages on its own
        outer = self.marks, self.cpus_free, self.staged_rest
        # the processors idle beside it (its charge's stretch, the writes that wake a core)
        self.cpus_free = max(0, room - sum(j.weight for j in self.jobs) - core.held)
        self.staged_rest = core.rest_ns  # (its step's after-idle charge resets it)
        self.marks = []
        try:
            self._step(core, item)
        finally:
            self.marks, self.cpus_free, self.staged_rest = outer

    def _shared(self, core: _Core, kind, t0: int, t: int, at=(), then=None) -> None:
        """``core``'s step, staged from ``t0`` to ``t`` as if on processors of its own, runs
        from now on under processor sharing: each message it sends leaves when its work
        reaches the instant staged for it, the instants ``at`` are stamped as reached, and
        at its end ``then(stamps, now)`` runs and the core takes its next message."""
        assert self.marks is not None  # (staged by _start_shared)
        marks = [(x - t0, f, a) for x, f, a in self.marks]
        marks += [(x - t0, None, ()) for x in at]
        marks.sort(key=lambda m: m[0])  # (stable: sends in the order staged)
        marks.append((t - t0, None, ()))
        self._advance()
        self.jobs.append(_Job(core, kind, deque(marks), core.held, t0, then, self.staged_rest))
        self._reschedule()

    def _advance(self) -> None:
        """Bring every running step's work up to now, at the speed they ran at since."""
        now = self.env.now
        if now != self.shared_since:
            work = (now - self.shared_since) * self.rate
            for job in self.jobs:
                job.done += work
            self.shared_since = now

    def _reschedule(self) -> None:
        """The speed the running steps share from now on, and an event at the next instant
        one of them reaches (an earlier one is void): with ``W`` processors' worth of steps
        running on ``cpus`` less those pools hold, each runs at ``min(1, room / W)`` of its
        speed."""
        if self.in_tick:  # the tick reschedules once it is through
            return
        assert self.cpus is not None  # (sharing needs shared processors)
        room = max(0, self.cpus - self.reserved)
        width = sum(j.weight for j in self.jobs)
        self.rate = 1.0 if width <= room else room / width
        self.cpus_free = max(0, room - width)
        self.generation += 1
        if not self.jobs:
            return
        due = min(j.marks[0][0] - j.done for j in self.jobs)
        if due <= _REACHED:
            delay = 0
        elif self.rate > 0:
            delay = math.ceil(due / self.rate)
        else:  # every processor held by pools: the steps wait for one to end
            return
        self.env.timeout(delay, self.generation).callbacks.append(self._tick)

    def _tick(self, event) -> None:
        """A running step reached an instant: what was staged for it happens now (a message
        leaves, a stamp), and a step whose work is done ends."""
        if event.value != self.generation:
            return
        self._advance()
        now = self.env.now
        self.in_tick = True
        try:
            while True:
                job = next((j for j in self.jobs if j.marks[0][0] - j.done <= _REACHED), None)
                if job is None:
                    break
                _, action, args = job.marks.popleft()
                if action is None:
                    job.at.append(now)
                else:
                    action(*args, now)
                if not job.marks:
                    self._job_done(job)
        finally:
            self.in_tick = False
        self._reschedule()

    def _job_done(self, job: _Job) -> None:
        """``job``'s work is done: its step ends now, or, the first time, after what the
        time it ran slower than alone costs more (:meth:`_slowed_cost`)."""
        core, now = job.core, self.env.now
        if not job.cold:
            job.cold = True
            extra = self._slowed_cost(job, now)
            if extra:
                self._count_step(core, extra)
                job.work += extra
                job.marks.append((job.work, None, ()))
                return
        self.jobs.remove(job)
        core.stats.busy_ns += now - job.t0
        core.free_at = now
        core.held = 0
        if job.then is not None:
            job.then(job.at, now)
        core.kind = job.kind
        self._done(core)

    def _slowed_cost(self, job: _Job, now: int) -> int:
        """What a step that ran slower than alone for lack of a processor costs more, at its
        end: the time it lacked one counts as a wait does first come, first served (the
        after-idle cost of the rest before it and that time, less what the rest alone
        cost): a time slice's caches are another's when it comes back."""
        core = job.core
        lacked = now - job.t0 - job.work
        if lacked <= 0 or not core.idle_ns:
            return 0
        share = self.after_idle.share
        more = share(job.rest + lacked) - (share(job.rest) if job.rest else 0.0)
        return round(core.idle_ns * more)

    def _arm_tick(self, emitter) -> None:
        """Wake the emitter when its oldest open tuple has waited ``max_delay``."""
        delay = self.max_delay
        assert delay is not None  # (armed only with a max_delay)
        oldest = emitter.oldest_open_ns  # its arrival in virtual time (the chunk's port slot)
        if self.tick_armed or oldest is None:
            return
        due = max(oldest + delay, self.env.now)
        self.tick_armed = True
        self._deliver_at(due, self.emitter, (_TICK, None, None, None, 0))

    def _sample(self, now: int) -> None:
        """Mailbox lengths (tuples) at every sampling instant up to ``now``, taken before the
        event at ``now`` changes any: they have not changed since the last event. Every
        ``sample_every`` ns; when ``max_samples`` are kept, every other one is dropped and the
        interval doubles, so memory stays bounded. (Sampling as events happen rather than by
        a process of its own costs no events.)"""
        lengths = [c.qt for c in self.core_list]
        while self.next_sample <= now:
            self.samples.append((self.next_sample, lengths))
            if len(self.samples) >= self.max_samples:
                self.samples = self.samples[1::2]
                self.sample_every *= 2
            self.next_sample += self.sample_every

    # -- the run -------------------------------------------------------------------------------

    def run(self, chunks: Iterable[Columns]) -> SimTrace:
        env = self.env
        w0 = time.perf_counter()
        env.process(self.source(chunks))
        try:
            env.run(until=self.done)
        except Exception as e:
            # SimPy raises a copy of a process's exception, caused by the original: raise the
            # original, so errors (an InputError, a source's error) read as on other backends
            if type(e.__cause__) is type(e):
                raise e.__cause__ from e.__cause__.__cause__
            raise
        end = env.now
        self._sample(end)
        for c in self.cores.values():
            c.count(end, 0, 0)  # close the time integral
            c.stats.mean_queue = c.q_area / max(1, end - (self.start_ns or 0))
        t = np.array([s[0] for s in self.samples], dtype=np.int64)
        lengths = [s[1] for s in self.samples]
        series = np.array(lengths, dtype=np.int64).reshape(len(t), len(self.cores))
        return SimTrace(
            input_tuples=self.n_in,
            start_ns=self.start_ns or 0,
            end_ns=end,
            actors={n: c.stats for n, c in self.cores.items()},
            collector=self.collector.logic,
            profile=self.model.profile,
            arrival=self.arrival,
            last_arrival_ns=self.last_arrival,
            queue_t_ns=t,
            queue_tuples={n: series[:, k] for k, n in enumerate(self.cores)},
            steps=self.steps,
            messages=self.messages,
            wall_s=time.perf_counter() - w0,
            fallbacks=dict(self.model.fallbacks),
        )


@dataclass(frozen=True)
class Sim:
    """The ``sim`` backend: the topology's actors on simulated cores (see the module docstring).

    Parameters
    ----------
    machine : MachineProfile, path to its JSON, dict, CostModel or None
        Cost coefficients (default: :func:`~streamjoin.runtime.sim.profile.default_profile`).
        A path or dict is read into a :class:`MachineProfile` here; a :class:`CostModel` is
        used as it is (calibration passes one that records every step).
    arrival : Arrival, optional
        When chunks arrive in virtual time (default: :meth:`Arrival.constant` at the run's
        ``pace`` with one, else :meth:`Arrival.replay` of the input's ``ts``).
    sample_every_ns : int
        First interval of the mailbox sampling (it doubles to keep ``max_samples``).
    max_samples : int
        Most mailbox samples kept per core.

    Notes
    -----
    ``sj.run(..., backend="sim", machine=..., arrival=...)`` builds one from its options. What
    it adds to :attr:`Result.metrics`: ``machine_profile`` and ``sim``
    (:meth:`SimTrace.metrics`).
    """

    machine: MachineProfile | CostModel | str | os.PathLike | dict | None = None
    arrival: Arrival | None = None
    sample_every_ns: int = 100_000
    max_samples: int = 1024

    name: ClassVar[str] = "sim"

    def __post_init__(self) -> None:
        if not isinstance(self.machine, CostModel):
            object.__setattr__(self, "machine", as_profile(self.machine))
        if self.arrival is not None and not isinstance(self.arrival, Arrival):
            raise ValueError(f"arrival must be a sim.Arrival, got {type(self.arrival).__name__}")
        for name in ("sample_every_ns", "max_samples"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))

    def defaults(self, *, pace: float | None, batch_size: int, cols: Columns | None) -> Defaults:
        """``pace`` (tuples/s) is a constant arrival rate in virtual time, not applied in wall
        time; without it or an ``arrival`` the input replays its own ``ts``. ``chunk_rows``
        defaults to one millisecond of input at the arrival rate (for a replay, the rate the
        in-memory input's ``ts`` span implies), so the source's own chunking adds about a
        millisecond to latency as ``run(pace=)`` does on ``local``."""
        arrival = self.arrival
        if arrival is None:
            arrival = (
                Arrival.replay()
                if pace is None
                else Arrival.constant(positive_number("pace", pace, "finite rate in tuples/s"))
            )
        rows = default_chunk_rows(arrival.rate_of(cols), batch_size)
        return Defaults(dataclasses.replace(self, arrival=arrival), rows, wall_pace=None)

    def run(
        self,
        query: Query,
        topology: Topology,
        chunks: Iterable[Columns],
        settings: RunSettings,
        progress,
    ) -> SimTrace:
        """Drive ``chunks`` through ``topology`` on simulated cores.

        Returns
        -------
        SimTrace
            A :class:`RunTrace` in virtual time, with the profile, arrival process and mailbox
            samples.
        """
        machine = self.machine
        if not isinstance(machine, CostModel):
            assert isinstance(machine, MachineProfile)  # (as __post_init__ left it)
            machine = CostModel(machine)
        model = machine
        sim = _Simulation(
            query,
            topology,
            settings,
            model,
            self.arrival or Arrival.replay(),
            progress,
            self.sample_every_ns,
            self.max_samples,
        )
        return sim.run(chunks)

    def metrics(self, trace: RunTrace) -> dict:
        assert isinstance(trace, SimTrace)  # the one run() returned
        return trace.metrics()


def _simulated(config):
    """What the simulator builds for a node: ``config.simulated()`` if it has one (a config
    whose real execution would depend on the host's thread timing), else ``config``."""
    simulated = getattr(config, "simulated", None)
    return config if simulated is None else simulated()
