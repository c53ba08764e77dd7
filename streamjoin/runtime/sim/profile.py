"""A machine profile: what each kind of actor step and message costs on one machine.

The simulator charges a step from what it *did* (:mod:`streamjoin.runtime.sim.costs`): a short
feature vector per cost group (:data:`FEATURES`) dotted with the profile's coefficients, in ns
per unit. Messages cost the sender ``send_ns + send_per_byte_ns · bytes`` of CPU per
destination, and the kernel's delivery of it (``kernel_ns + kernel_per_byte_ns · bytes``: its
softirq work, which no process's CPU time counts) on the sender's processor too, travel ``hop_ns + hop_per_byte_ns · bytes`` of wire latency (no core is busy
meanwhile), and cost the receiver ``recv_ns + recv_per_byte_ns · bytes`` of CPU
(:class:`MessageCosts`). A receiver that had nothing to do when a message reached it (its
process asleep in a wait on its sockets) pays ``wake_ns`` of CPU more for that message, and
more the longer it had slept (``wake_after``): its thread is woken and runs the receiving code
again after other processes ran (measured as the receiving thread's own CPU on hosts that
sleep between messages against the same hosts fed back to back). Its sender pays more too, the
longer the receiver had slept (``rouse_after``): the write wakes the receiver's thread (the
kernel's wake-up and the loopback's delivery run on the sender's processor), measured as the
driver's CPU for a send to a host asleep against one to a host fed back to back.

A step that follows idle time (its core had waited for a message, as every step of a paced
stream does) costs a constant per cost group more than the same step run back to back
(``after_idle``, :class:`IdleCosts`): the process slept, other processes ran meanwhile, and it
wakes to cold caches. On processors shared by more actors (``cpus``) a step that had to wait
for one is charged the same: other processes ran on it meanwhile.

Where the actors share a few processors with other work (``cpus`` and ``cpu_share``), a step
that starts while k steps hold processors has its compute (charge and after-idle cost)
stretched by ``cpu_share[0] / cpu_share[k - 1]``: the share of a processor each of k busy
processes gets, against the one busy process that the compute costs were measured with.

Steps and messages of the same kind vary from one to the next on a real host; a profile's
``variability`` (:class:`~streamjoin.runtime.sim.variability.Variability`, measured with the
message costs) says by how much, and the simulator draws each step's and each message's
factor from it, seeded; without one, every step and message costs its expected time.

A profile is an editable JSON file (:meth:`MachineProfile.save`); ``streamjoin calibrate``
(:func:`streamjoin.runtime.sim.calibrate`) measures one for this host, and
:func:`default_profile` is the one shipped in ``default_profile.json``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from importlib import resources

from streamjoin.actors.collector import Collector
from streamjoin.actors.emitter import Emitter
from streamjoin.actors.join_core import JoinCore
from streamjoin.actors.panjoin import PanJoinManager, WorkerCommand
from streamjoin.actors.spo import MergedRun, SubtreePairs
from streamjoin.batch import Batch, PairBatch
from streamjoin.checks import positive_int, positive_number
from streamjoin.runtime.sim.variability import Variability

#: Feature names per cost group; a profile holds one coefficient (ns) per feature: a step's
#: call, then the counters the group's actor logic keeps (``COUNTERS``, :mod:`streamjoin.actors.
#: base`). Join cores, PanJoin workers and handshake cores share the ``join`` group.
FEATURES = {
    logic.cost_group: ("calls", *logic.COUNTERS)
    for logic in (Emitter, JoinCore, PanJoinManager, Collector)
}


#: Bytes per tuple of a :class:`Batch` besides its join attributes: ``seq``, ``idx``, ``ts``,
#: ``ingest_ns`` and ``lo_idx`` (int64) and ``stream`` (int8); its ``horizon`` adds 16 bytes.
_BATCH_ROW_BYTES = 5 * 8 + 1
#: Bytes per pair of a :class:`PairBatch`: ``r``, ``s`` and ``ingest_ns`` (int64).
_PAIR_BYTES = 3 * 8


def message_nbytes(msg) -> int:
    """Payload bytes of a message between actors (what a transport would copy).

    Computed from the tuple count and the number of attributes (``Batch.nbytes`` sums its
    arrays, and the simulator sizes every message it sends).
    """
    if isinstance(msg, Batch):
        return msg.attrs.nbytes + _BATCH_ROW_BYTES * len(msg.seq) + 16
    if isinstance(msg, PairBatch):
        return _PAIR_BYTES * len(msg.r)
    if isinstance(msg, WorkerCommand):
        return message_nbytes(msg.batch) + sum(pos.nbytes for _, pos in msg.insert)
    if isinstance(msg, SubtreePairs):
        return _PAIR_BYTES * len(msg.pairs) + 8
    if isinstance(msg, MergedRun):
        return message_nbytes(msg.rows) + msg.a_order.nbytes + msg.b_order.nbytes
    return 0


def _segments(points: list) -> list[tuple[float, float]]:
    """``(base, slope)`` of the line through each two consecutive ``(x, y)`` points (x
    ascending): ``y = base + slope · x`` between them."""
    out = []
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        slope = (y1 - y0) / (x1 - x0)
        out.append((y0 - slope * x0, slope))
    return out


def _on_lines(xs: list[float], lines: list, last: float, x: float) -> float:
    """``y`` at ``x`` on the lines of :func:`_segments` through points at ``xs`` (from ``(0,
    0)``), ``last`` beyond the last point (``x`` may be infinite)."""
    i = bisect_left(xs, x)
    if i == len(xs):
        return last
    base, slope = lines[i]
    return base + slope * x


def _gap_points(name: str, value) -> tuple:
    """``(points, gaps, lines)`` of ``(gap_ns, ns)`` points named ``name``: validated (gaps
    > 0 and ascending, costs >= 0) and as :func:`_segments` from ``(0, 0)``."""
    try:
        points = tuple((float(g), float(c)) for g, c in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be (gap_ns, ns) points, got {value!r}") from None
    gaps = [g for g, _ in points]
    if any(g <= 0 or c < 0 for g, c in points) or gaps != sorted(set(gaps)):
        raise ValueError(
            f"{name} must be (gap_ns > 0, ns >= 0) points, ascending in gap: got {value!r}"
        )
    return points, gaps, _segments([(0.0, 0.0), *points])


class _MessageLines:
    """What :class:`MessageCosts` derives from its fields in ``__post_init__``: attributes,
    not fields (a base that is no dataclass), so ``asdict`` and ``replace`` leave them out."""

    _sizes: list[float]
    _lines: list[tuple[float, float, float, float]]
    _wake_gaps: list[float]
    _wake_lines: list[tuple[float, float]]
    _rouse_gaps: list[float]
    _rouse_lines: list[tuple[float, float]]
    _driver_wake_gaps: list[float]
    _driver_wake_lines: list[tuple[float, float]]


@dataclass(frozen=True)
class MessageCosts(_MessageLines):
    """Per-message costs in ns (see the module docstring for where each is charged).

    ``measured`` holds ``(bytes, send_ns, recv_ns)`` points, ascending in bytes, where the
    send and receive were measured (``streamjoin calibrate`` keeps them). When there are any,
    a payload's send and receive are interpolated linearly between them instead of read off
    the lines ``send_ns + send_per_byte_ns · bytes`` and ``recv_ns + recv_per_byte_ns ·
    bytes``: measured, the costs do not grow linearly (a fixed cost dominates small messages,
    the copies large ones; a line fitted to all sizes undercharges the middle ones). Below
    the smallest point its costs hold; beyond the largest they grow by the lines' per-byte
    costs. The lines stay the profile's summary, and what applies when
    ``measured`` is empty. ``wake_ns`` is what a receiver that was asleep pays more, once per
    message that woke it, whatever its size, and ``wake_after`` holds ``(gap_ns, ns)``
    points, ascending in gap, of what it pays more again after sleeping ``gap_ns`` (linear
    between them from ``(0, 0)``, the last one's beyond: :meth:`wake_cost`); measured, a
    receiving thread that slept 8 ms uses several times its back-to-back CPU on a message.
    ``rouse_after`` holds the same kind of points for the sender of a message to a receiver
    that slept that long (:meth:`rouse_cost`): its write wakes the receiver.
    ``driver_wake_after`` holds them for the source (the driver's thread, woken by its timer
    after resting between the chunks of a paced stream, not by a frame: measured, its send
    after sleeping less after staying busy; :meth:`driver_wake_cost`); a profile without
    them charges the source a receiver's wake.
    ``cyclic_recv_ns`` is what every receive costs more in a cyclic graph (a handshake
    chain), whose hosts read in a thread of their own and hand each frame to the stepping
    thread. ``merge_ns + merge_per_byte_ns · bytes`` is what the receiver pays to merge
    messages that wait for it into one (``bytes``: the merged message's; :meth:`merge_cost`),
    as the ``ray`` executor's hosts concatenate them before the step.
    ``kernel_ns + kernel_per_byte_ns · bytes`` is the kernel's delivery of the message (its
    softirq work: on loopback the receiving side of the TCP stack runs on the writer's
    processor, inside its write), which no process's CPU time counts and which the measured
    send leaves out; it is charged to the sender with the send (:meth:`step_ns`,
    :meth:`send_recv`, :meth:`kernel_cost`).
    """

    send_ns: float = 0.0
    send_per_byte_ns: float = 0.0
    hop_ns: float = 0.0
    hop_per_byte_ns: float = 0.0
    recv_ns: float = 0.0
    recv_per_byte_ns: float = 0.0
    measured: tuple = ()
    wake_ns: float = 0.0
    cyclic_recv_ns: float = 0.0
    wake_after: tuple = ()
    rouse_after: tuple = ()
    driver_wake_after: tuple = ()
    merge_ns: float = 0.0
    merge_per_byte_ns: float = 0.0
    kernel_ns: float = 0.0
    kernel_per_byte_ns: float = 0.0

    def __post_init__(self) -> None:
        try:
            points = tuple((float(b), float(s), float(r)) for b, s, r in self.measured)
        except (TypeError, ValueError):
            raise ValueError(
                f"measured must be (bytes, send_ns, recv_ns) points, got {self.measured!r}"
            ) from None
        for name in ("wake", "rouse", "driver_wake"):
            after, gaps, lines = _gap_points(f"{name}_after", getattr(self, f"{name}_after"))
            object.__setattr__(self, f"{name}_after", after)
            object.__setattr__(self, f"_{name}_gaps", gaps)
            object.__setattr__(self, f"_{name}_lines", lines)
        sizes = [b for b, _, _ in points]
        if sizes != sorted(set(sizes)) or any(min(p) < 0 for p in points):
            raise ValueError(
                f"measured points must be ascending in bytes and >= 0, got {self.measured!r}"
            )
        object.__setattr__(self, "measured", points)
        # (send, send/B, receive, receive/B) per stretch of sizes: below the first point, between
        # each two (bisect_left over the points' sizes picks one), beyond the last
        s_pb, r_pb = self.send_per_byte_ns, self.recv_per_byte_ns
        lines = [(self.send_ns, s_pb, self.recv_ns, r_pb)]
        if points:
            (_, s0, r0), (bn, sn, rn) = points[0], points[-1]
            sends = _segments([(b, s) for b, s, _ in points])
            recvs = _segments([(b, r) for b, _, r in points])
            lines = [
                (s0, 0.0, r0, 0.0),
                *(a + b for a, b in zip(sends, recvs, strict=True)),
                (sn - s_pb * bn, s_pb, rn - r_pb * bn, r_pb),
            ]
        object.__setattr__(self, "_sizes", [b for b, _, _ in points])
        object.__setattr__(self, "_lines", lines)

    def step_ns(self, nbytes: float) -> tuple[int, int, int]:
        """``(send, hop, receive)`` of one message of ``nbytes`` to one destination, in whole
        ns: the sender's CPU time, the latency until the receiver can start on it, and the
        receiver's CPU time before its step. The send includes the kernel's delivery
        (:meth:`kernel_cost`)."""
        send, recv = self.send_recv(nbytes)
        hop = self.hop_ns + self.hop_per_byte_ns * nbytes
        return (int(round(send)), int(round(hop)), int(round(recv)))

    def kernel_cost(self, nbytes: float) -> float:
        """The kernel's delivery of a message of ``nbytes`` (on its sender's processor)."""
        return self.kernel_ns + self.kernel_per_byte_ns * nbytes

    def wake_cost(self, gap_ns: float) -> float:
        """What a receiver that slept ``gap_ns`` pays more for the message that woke it:
        ``wake_ns``, and ``wake_after`` at that gap."""
        if gap_ns <= 0:
            return 0.0
        if not self.wake_after:
            return self.wake_ns
        last = self.wake_after[-1][1]
        return self.wake_ns + _on_lines(self._wake_gaps, self._wake_lines, last, gap_ns)

    def driver_wake_cost(self, gap_ns: float) -> float:
        """What the source pays more for its first step after resting ``gap_ns``
        (``driver_wake_after`` at that gap; :meth:`wake_cost` without points)."""
        if not self.driver_wake_after:
            return self.wake_cost(gap_ns)
        if gap_ns <= 0:
            return 0.0
        last = self.driver_wake_after[-1][1]
        return _on_lines(self._driver_wake_gaps, self._driver_wake_lines, last, gap_ns)

    def rouse_cost(self, gap_ns: float) -> float:
        """What a sender pays more for a message to a receiver that slept ``gap_ns``
        (``rouse_after`` at that gap; nothing without points)."""
        if gap_ns <= 0 or not self.rouse_after:
            return 0.0
        last = self.rouse_after[-1][1]
        return _on_lines(self._rouse_gaps, self._rouse_lines, last, gap_ns)

    def merge_cost(self, nbytes: float) -> float:
        """What merging waiting messages into one of ``nbytes`` costs their receiver."""
        return self.merge_ns + self.merge_per_byte_ns * nbytes

    def send_recv(self, nbytes: float) -> tuple[float, float]:
        """``(send, receive)`` ns of a payload of ``nbytes``, the kernel's delivery with the
        send."""
        s, s_pb, r, r_pb = self._lines[bisect_left(self._sizes, nbytes)]
        return s + s_pb * nbytes + self.kernel_cost(nbytes), r + r_pb * nbytes

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["measured"] = [list(p) for p in self.measured]
        d["wake_after"] = [list(p) for p in self.wake_after]
        d["rouse_after"] = [list(p) for p in self.rouse_after]
        d["driver_wake_after"] = [list(p) for p in self.driver_wake_after]
        return d

    def scaled(self, factor: float) -> MessageCosts:
        """Every cost divided by ``factor`` (a transport ``factor`` times faster)."""
        points = ("measured", "wake_after", "rouse_after", "driver_wake_after")
        costs = {k: v / factor for k, v in dataclasses.asdict(self).items() if k not in points}
        measured = tuple((b, s / factor, r / factor) for b, s, r in self.measured)
        wake, rouse, driver = (
            tuple((g, c / factor) for g, c in getattr(self, k)) for k in points[1:]
        )
        return MessageCosts(
            **costs,
            measured=measured,
            wake_after=wake,
            rouse_after=rouse,
            driver_wake_after=driver,
        )


class _IdleLines:
    """What :class:`IdleCosts` derives from its fields in ``__post_init__`` (as
    :class:`_MessageLines`)."""

    _gaps: list[float]
    _lines: list[tuple[float, float]]


@dataclass(frozen=True)
class IdleCosts(_IdleLines):
    """What a step costs beyond its charge when it follows idle time, in ns per step of each
    cost group (see the module docstring; measured by
    :func:`~streamjoin.runtime.sim.calibrate.measure_after_idle`).

    A step whose core had no message to work on before it (or, on shared processors, had to
    wait for one) is charged up to this much more: the process slept, other processes ran,
    and its data (for a join core: its window) has to come back into the caches. A constant
    per group at the calibration's gap
    (:data:`~streamjoin.runtime.sim.calibrate.IDLE_GAP_S`): measured, it grows little with
    the step's size once the working set is back.

    A shorter gap costs less (less of the caches is lost): ``ramp`` holds measured points
    ``(gap_ns, share)``, the cost after a gap of ``gap_ns`` as a share of the costs here,
    ascending in gap; the charge after a gap is interpolated linearly between them (from
    ``(0, 0)``; the last share beyond the last point). Empty: the whole cost after any gap.
    """

    emitter_ns: float = 0.0
    join_ns: float = 0.0
    manager_ns: float = 0.0
    collector_ns: float = 0.0
    ramp: tuple = ()

    def __post_init__(self) -> None:
        ramp = tuple((float(g), float(f)) for g, f in self.ramp)
        gaps = [g for g, _ in ramp]
        if any(g <= 0 for g in gaps) or gaps != sorted(set(gaps)) or any(f < 0 for _, f in ramp):
            raise ValueError(
                f"ramp must be (gap_ns > 0, share >= 0) points, ascending in gap: got {self.ramp!r}"
            )
        object.__setattr__(self, "ramp", ramp)
        # share = base + slope · gap from (0, 0) up to each point in turn
        object.__setattr__(self, "_gaps", gaps)
        object.__setattr__(self, "_lines", _segments([(0.0, 0.0), *ramp]))

    def of(self, group: str) -> float:
        """The after-idle cost (ns) of a step of ``group`` (a key of :data:`FEATURES`)."""
        return getattr(self, f"{group}_ns")

    def share(self, gap_ns: float) -> float:
        """The share of :meth:`of` charged after a gap of ``gap_ns`` (see ``ramp``)."""
        if not self.ramp:
            return 1.0 if gap_ns > 0 else 0.0
        return _on_lines(self._gaps, self._lines, self.ramp[-1][1], gap_ns)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["ramp"] = [list(p) for p in self.ramp]
        return d

    def scaled(self, factor: float) -> IdleCosts:
        """Every cost divided by ``factor`` (a processor ``factor`` times faster); the ramp's
        gaps stay (they are idle time, not work)."""
        costs = {k: v / factor for k, v in dataclasses.asdict(self).items() if k != "ramp"}
        return IdleCosts(**costs, ramp=self.ramp)


#: Items a core held at most in the calibration's workloads (two streams' windows of 16,384):
#: the join costs were fitted there, and :class:`WindowCosts` says what they miss beyond.
FITTED_HELD = 2 * 16384

#: How steps share a profile's ``cpus`` (``MachineProfile.sharing``): first come, first served
#: or processor sharing.
SHARING = ("fcfs", "ps")


class _WindowHeld:
    """What :class:`WindowCosts` derives from its points in ``__post_init__`` (as
    :class:`_MessageLines`)."""

    _held: list[float]


@dataclass(frozen=True)
class WindowCosts(_WindowHeld):
    """What a join core's steps over one index cost more once its window outgrows the
    windows its costs were fitted on (:data:`FITTED_HELD` items), measured by
    :func:`~streamjoin.runtime.sim.window_growth.measure_window_growth`.

    ``points`` holds ``(held, probe_ns, store_ns)``, ascending in ``held`` (the items the
    core's window parts hold, both streams): at that size a probe costs ``probe_ns`` more,
    and a tuple stored ``store_ns`` more, half charged when it is inserted and half when it
    expires. Linear in ``log2(held)`` between points, nothing below the first, the last
    point's beyond it (past the last cache a miss costs what it costs; the probes' descent
    still grows with the fitted ``scan`` cost).
    """

    points: tuple = ()

    def __post_init__(self) -> None:
        try:
            points = tuple((float(h), float(p), float(s)) for h, p, s in self.points)
        except (TypeError, ValueError):
            raise ValueError(
                f"window costs must be (held, probe_ns, store_ns) points, got {self.points!r}"
            ) from None
        held = [h for h, _, _ in points]
        if any(h < 1 or p < 0 or s < 0 for h, p, s in points) or held != sorted(set(held)):
            raise ValueError(
                "window costs must be (held >= 1, probe_ns >= 0, store_ns >= 0) points, "
                f"ascending in held: got {self.points!r}"
            )
        object.__setattr__(self, "points", points)
        object.__setattr__(self, "_held", held)

    def at(self, held: float) -> tuple[float, float]:
        """``(probe_ns, store_ns)`` more at ``held`` items."""
        points = self.points
        if not points or held < points[0][0]:
            return 0.0, 0.0
        if held >= points[-1][0]:
            return points[-1][1:]
        i = bisect_right(self._held, held)
        (h0, p0, s0), (h1, p1, s1) = points[i - 1], points[i]
        f = (math.log2(held) - math.log2(h0)) / (math.log2(h1) - math.log2(h0))
        return p0 + f * (p1 - p0), s0 + f * (s1 - s0)

    def charge(self, held: float, probes: float, stored: float) -> float:
        """ns more for ``probes`` probes and ``stored`` inserts and expiries (a tuple stored
        counts one of each) at ``held`` items."""
        if not probes and not stored:
            return 0.0
        probe_ns, store_ns = self.at(held)
        return probe_ns * probes + store_ns / 2 * stored

    def to_list(self) -> list:
        return [list(p) for p in self.points]

    def scaled(self, factor: float) -> WindowCosts:
        """Every cost divided by ``factor``."""
        return WindowCosts(tuple((h, p / factor, s / factor) for h, p, s in self.points))


@dataclass(frozen=True, eq=False)
class MachineProfile:
    """Cost coefficients of one machine, in ns per feature unit (:data:`FEATURES`).

    Parameters
    ----------
    name : str
    roles : dict
        ``"emitter"``, ``"manager"``, ``"collector"`` -> ``{feature: ns}``.
    indexes : dict
        Window index name -> ``{feature: ns}`` for join-core and worker steps.
    messages : MessageCosts
    after_idle : IdleCosts
        Extra compute of a step that follows idle time.
    windows : dict
        Window index name -> :class:`WindowCosts`: what a join core's steps over it cost
        more once its window outgrows those the index's costs were fitted on (none: nothing
        more, and the simulator warns when a core holds more than :data:`FITTED_HELD` items).
    cpu_scale, net_scale : float
        Speed-ups applied by :meth:`scaled` since calibration (recorded, not re-applied).
    cpus : int, optional
        Processors the actors share (None: one per actor). With fewer processors than
        actors, a step waits for a free one (first come, first served) and holds it until it
        ends, as actors sharing a small host do (``MachineProfile.with_cpus``).
    cpu_share : tuple of float
        With ``cpus`` set: the share of a processor each busy process gets when k of them
        run at once (k = 1, 2, …; measured with the compute costs by
        :func:`~streamjoin.runtime.sim.calibrate.measure_cpu_share`), where other work
        shares the host. The compute costs were measured by one busy
        process, so a step that starts while k steps run (itself included) has its compute
        stretched by ``cpu_share[0] / cpu_share[k - 1]`` (the last share for larger k).
        Empty: no stretch.
    sharing : {"fcfs", "ps"}
        With ``cpus`` set, how the steps share the processors. ``"fcfs"`` (first come,
        first served): a step waits for a free processor and holds it until it ends.
        ``"ps"`` (processor sharing): every step that can run does, each at
        ``cpus / runnable`` of a processor's speed while more steps than processors run, as
        a host's scheduler time-slices its runnable processes; no step waits, and a step
        that ran slower than alone pays, at its end, the after-idle cost of the time it
        lacked a processor, as a step that waited for one does.
    variability : Variability
        How much steps and messages vary from one to the next (none: each costs its
        expected time, and a paced run's latencies have no spread).
    info : dict
        Where and how it was measured (machine, date, fit quality).
    source : str
        Where this object came from: ``shipped``, a file, this host's cache, or ``given``
        (built in code). Not read from JSON: it says where the JSON was.
    """

    name: str
    roles: dict
    indexes: dict
    messages: MessageCosts = field(default_factory=MessageCosts)
    after_idle: IdleCosts = field(default_factory=IdleCosts)
    windows: dict = field(default_factory=dict)
    cpu_scale: float = 1.0
    net_scale: float = 1.0
    cpus: int | None = None
    cpu_share: tuple = ()
    sharing: str = "fcfs"
    variability: Variability = field(default_factory=Variability)
    info: dict = field(default_factory=dict)
    source: str = "given"

    def __post_init__(self) -> None:
        if self.cpus is not None:
            object.__setattr__(self, "cpus", positive_int("cpus", self.cpus))
        share = tuple(self.cpu_share)
        if not all(isinstance(v, int | float) and 0 < v <= 1 for v in share):
            raise ValueError(f"cpu_share must hold shares of a processor in (0, 1], got {share!r}")
        object.__setattr__(self, "cpu_share", tuple(float(v) for v in share))
        if self.sharing not in SHARING:
            raise ValueError(f"sharing must be one of {SHARING}, got {self.sharing!r}")

    def slowdown(self, busy: int) -> float:
        """How much longer a step's compute takes while ``busy`` steps share the processors
        (itself included; see ``cpu_share``): 1.0 without ``cpus`` or ``cpu_share``."""
        share = self.cpu_share
        if self.cpus is None or not share or busy <= 1:
            return 1.0
        return share[0] / share[min(busy, len(share)) - 1]

    # -- JSON ----------------------------------------------------------------------------------

    def to_dict(self) -> dict:
        """The profile as plain data (a copy: editing it leaves the profile as it was)."""
        return copy.deepcopy(
            {
                "name": self.name,
                "cpu_scale": self.cpu_scale,
                "net_scale": self.net_scale,
                "cpus": self.cpus,
                "cpu_share": list(self.cpu_share),
                "sharing": self.sharing,
                "roles": self.roles,
                "indexes": self.indexes,
                "messages": self.messages.to_dict(),
                "after_idle": self.after_idle.to_dict(),
                "windows": {k: w.to_list() for k, w in self.windows.items()},
                "variability": self.variability.to_dict(),
                "info": self.info,
            }
        )

    @classmethod
    def from_dict(cls, d: dict) -> MachineProfile:
        """A profile from :meth:`to_dict` output; missing features cost 0, unknown ones fail."""
        roles = {
            r: _coefficients(r, d.get("roles", {}).get(r, {}))
            for r in ("emitter", "manager", "collector")
        }
        idx = {name: _coefficients("join", c) for name, c in d.get("indexes", {}).items()}
        try:
            messages = MessageCosts(**d.get("messages", {}))
        except (TypeError, ValueError) as e:
            raise ValueError(f"bad 'messages' in machine profile: {e}") from None
        try:
            after_idle = IdleCosts(**d.get("after_idle", {}))
        except (TypeError, ValueError) as e:
            raise ValueError(f"bad 'after_idle' in machine profile: {e}") from None
        try:
            windows = {k: WindowCosts(tuple(v)) for k, v in d.get("windows", {}).items()}
        except (TypeError, ValueError) as e:
            raise ValueError(f"bad 'windows' in machine profile: {e}") from None
        try:
            variability = Variability(**d.get("variability", {}))
        except (TypeError, ValueError) as e:
            raise ValueError(f"bad 'variability' in machine profile: {e}") from None
        return cls(
            name=str(d.get("name", "unnamed")),
            roles=roles,
            indexes=idx,
            messages=messages,
            after_idle=after_idle,
            windows=windows,
            cpu_scale=float(d.get("cpu_scale", 1.0)),
            net_scale=float(d.get("net_scale", 1.0)),
            cpus=d.get("cpus"),
            cpu_share=tuple(d.get("cpu_share", ())),
            sharing=str(d.get("sharing", "fcfs")),
            variability=variability,
            info=dict(d.get("info", {})),
        )

    def save(self, path: str | os.PathLike) -> None:
        """Write the profile as JSON (an editable text file)."""
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> MachineProfile:
        """The profile in the JSON file ``path``; a ``ValueError`` naming the file if it is
        not JSON."""
        with open(path) as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{os.fspath(path)}: not a machine profile: {e}") from None
        return dataclasses.replace(cls.from_dict(data), source=f"file {os.fspath(path)}")

    def summary(self) -> str:
        """A text table of the coefficients (µs per unit), the message and after-idle costs."""
        share = ", ".join(f"{v:.2f}" for v in self.cpu_share)
        lines = [
            f"machine profile {self.name!r} (cpu x{self.cpu_scale:g}, net x{self.net_scale:g}, "
            f"{self.cpus or 'a processor per actor'}{' processors' if self.cpus else ''}"
            f"{f', shares {share} by busy processes' if share else ''}"
            f"{', processor sharing' if self.cpus and self.sharing == 'ps' else ''})"
        ]
        for title, table in (("role", self.roles), ("index", self.indexes)):
            for key, coefs in sorted(table.items()):
                cells = "  ".join(f"{f} {c / 1e3:.4g}" for f, c in coefs.items() if c)
                lines.append(f"  {title} {key:<12} {cells or '(free)'}")
        m = self.messages
        lines.append(
            f"  messages: send {m.send_ns / 1e3:.4g} + {m.send_per_byte_ns:.3g} ns/B, "
            f"hop {m.hop_ns / 1e3:.4g} + {m.hop_per_byte_ns:.3g} ns/B, "
            f"receive {m.recv_ns / 1e3:.4g} + {m.recv_per_byte_ns:.3g} ns/B, "
            f"waking {m.wake_ns / 1e3:.4g}"
            + "".join(f", {c / 1e3:.4g} more after {g / 1e6:g} ms" for g, c in m.wake_after)
            + f", in a cycle {m.cyclic_recv_ns / 1e3:.4g} more, "
            f"the kernel's delivery {m.kernel_ns / 1e3:.4g} + {m.kernel_per_byte_ns:.3g} ns/B"
            "  (µs)"
            f"{f'; send and receive as measured at {len(m.measured)} sizes' if m.measured else ''}"
        )
        idle = self.after_idle
        cells = "  ".join(f"{g} {idle.of(g) / 1e3:.4g}" for g in FEATURES)
        ramp = ", ".join(f"{f:.2f} at {g / 1e6:g} ms" for g, f in idle.ramp)
        lines.append(
            f"  after idle (µs per step): {cells}{f'  (shorter gaps: {ramp})' if ramp else ''}"
        )
        for key, costs in sorted(self.windows.items()):
            cells = ", ".join(
                f"{p / 1e3:.3g} / {s / 1e3:.3g} at {h:,.0f}" for h, p, s in costs.points[1:]
            )
            lines.append(f"  past the fitted windows, {key}: per probe / stored (µs) {cells}")
        if self.variability:
            lines.append(self.variability.summary())
        return "\n".join(lines)

    # -- variants ------------------------------------------------------------------------------

    def scaled(self, cpu: float = 1.0, net: float = 1.0) -> MachineProfile:
        """The same machine with compute ``cpu`` times and messaging ``net`` times as fast.

        ``profile.scaled(cpu=2.0)`` halves every compute coefficient (the after-idle costs
        too); ``net`` divides the message costs.
        """
        cpu, net = positive_number("cpu", cpu, "factor"), positive_number("net", net, "factor")

        def div(table: dict) -> dict:
            return {k: {f: c / cpu for f, c in coefs.items()} for k, coefs in table.items()}

        return dataclasses.replace(
            self,
            roles=div(self.roles),
            indexes=div(self.indexes),
            messages=self.messages.scaled(net),
            after_idle=self.after_idle.scaled(cpu),
            windows={k: w.scaled(cpu) for k, w in self.windows.items()},
            cpu_scale=self.cpu_scale * cpu,
            net_scale=self.net_scale * net,
        )

    def with_messages(self, messages: MessageCosts) -> MachineProfile:
        """The same compute costs with another transport (e.g. shared-memory queues)."""
        return dataclasses.replace(self, messages=messages, net_scale=1.0)

    def with_after_idle(self, after_idle: IdleCosts) -> MachineProfile:
        """The same costs with another charge for steps after idle time (``IdleCosts()``:
        none)."""
        return dataclasses.replace(self, after_idle=after_idle)

    def with_variability(self, variability: Variability) -> MachineProfile:
        """The same costs with another spread of steps and messages (``Variability()``:
        none, every step and message costs its expected time)."""
        return dataclasses.replace(self, variability=variability)

    def with_cpus(
        self, cpus: int | None, cpu_share: tuple | None = None, sharing: str | None = None
    ) -> MachineProfile:
        """The same costs with ``cpus`` processors shared by all actors (None: one each), and
        ``cpu_share`` and ``sharing`` if given (see the class docstring; ``cpu_share=()``:
        whole processors)."""
        changes: dict = {"cpus": cpus}
        if cpu_share is not None:
            changes["cpu_share"] = tuple(cpu_share)
        if sharing is not None:
            changes["sharing"] = sharing
        return dataclasses.replace(self, **changes)


def _coefficients(group: str, coefs: dict) -> dict:
    unknown = set(coefs) - set(FEATURES[group])
    if unknown:
        raise ValueError(
            f"machine profile: unknown {group} cost feature(s) {sorted(unknown)}; "
            f"known: {list(FEATURES[group])}"
        )
    return {f: float(coefs.get(f, 0.0)) for f in FEATURES[group]}


def default_profile() -> MachineProfile:
    """The profile shipped with streamjoin, ``default_profile.json`` beside this module: the
    development machine (a shared 2-core VM) calibrated by ``streamjoin calibrate``, with a
    processor per actor (see ``experiments/results/machine_profile.md`` for how it was
    measured). Recalibrate for your machine with ``streamjoin calibrate``."""
    text = resources.files(__package__).joinpath("default_profile.json").read_text()
    profile = MachineProfile.from_dict(json.loads(text))
    return dataclasses.replace(profile, source="shipped")
