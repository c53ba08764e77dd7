"""What an actor step costs in virtual time: the ``sim`` backend's cost model and calibration.

The simulator (:mod:`streamjoin.runtime.sim`) runs the real actor logic and charges each step
from what the step *did*, read off the counters the logic already keeps and the messages it
sent — never from how long it took on this host. That keeps virtual time deterministic and lets
a profile describe another machine.

Each step is reduced to a short feature vector (the ``FEATURES`` of its role) and charged the
dot product with the machine profile's coefficients (ns per unit):

- emitter: one call, tuples stamped, batches sent, tuples sent, tuples copied to merge chunks
  into batches or cut them (``Emitter.copied``; a chunk that is one batch is sent as it is);
- join core, PanJoin worker and handshake cores (one coefficient set per window index, shared
  by these roles): one call, window-part calls (each probe/insert/expire kernel call,
  subwindow create/drop), tuples in the batch (and those a handshake core passes on), probing
  tuples, *scan units* (probing tuples × the part's size for a scanning index, × log2 of it
  for a tree, nothing for a hash table; PIM-Tree §2.2.3 Eq. 4 charges a probe ``H · λ`` for
  its descent), candidates the index returned (``WindowPart.candidates``), result pairs,
  tuples inserted, tuples expired (``JoinCore.stats``);
- PanJoin manager: one call, tuples planned, commands sent, pairs of the batch's self-join;
- collector: one call, pairs received.

Messages cost the sender ``send_ns + send_per_byte_ns · bytes`` of CPU per destination, travel
``hop_ns + hop_per_byte_ns · bytes`` of wire latency (no core is busy meanwhile), and cost the
receiver ``recv_ns + recv_per_byte_ns · bytes`` of CPU.

A step that follows idle time (its core had waited for a message, as every step of a paced
stream does) costs a constant per cost group more than the same step run back to back
(``after_idle``, :class:`IdleCosts`): the process slept, other processes ran meanwhile, and
it wakes to cold caches. The wake-up itself is in the hop latency. On processors shared by
more actors (``cpus``) a step that had to wait for one is charged the same: other processes
ran on it meanwhile.

Where the actors share a few processors with other work (``cpus`` and ``cpu_share``), a step
that starts while k steps hold processors has its compute (charge and after-idle cost)
stretched by ``cpu_share[0] / cpu_share[k - 1]``: the share of a processor each of k busy
processes gets, against the one busy process that the compute costs were measured with.

:func:`calibrate` measures this host: it measures the processors' share one and several busy
processes get (:func:`measure_cpu_share`), runs the join kernels through the simulator with a
recording model that times every step, fits the coefficients by non-negative least squares on
relative error, times the same kind of steps after an idle gap for the after-idle costs
(:func:`measure_after_idle`), times the ``ray`` executor's messages (framed batches over TCP
between actors, :mod:`streamjoin.runtime.ray_calibrate`) for the message costs, and writes a
profile JSON.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import operator
import os
import time
import warnings
from bisect import bisect_left
from dataclasses import dataclass, field

import numpy as np

from streamjoin.actors.panjoin import WorkerCommand
from streamjoin.batch import Batch, PairBatch

#: Feature names per cost group; a profile holds one coefficient (ns) per feature.
FEATURES = {
    "emitter": ("calls", "tuples_in", "msgs_out", "tuples_out", "copied"),
    "join": (
        "calls",
        "part_calls",
        "tuples",
        "probes",
        "scan",
        "candidates",
        "pairs",
        "inserted",
        "expired",
    ),
    "manager": ("calls", "tuples", "msgs_out", "pairs"),
    "collector": ("calls", "pairs"),
}

#: How a probe's work grows with the part it searches (default ``log``: a search tree).
SCAN_KINDS = {"nested_loop": "linear", "hash": "const"}

#: Index whose coefficients stand in for an index the profile has not measured, by scan kind.
_FALLBACK = {"linear": "nested_loop", "const": "hash", "log": "bplus_tree"}


def scan_units(index: str, size: int) -> float:
    """Work units of one probe into a window part of ``size`` items held by ``index``."""
    kind = SCAN_KINDS.get(index, "log")
    if kind == "linear":
        return float(size)
    if kind == "log":
        return math.log2(size + 1)
    return 0.0


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
    return 0


# ---------------------------------------------------------------------------------------------
# Machine profile
# ---------------------------------------------------------------------------------------------


def _segments(points: list) -> list[tuple[float, float]]:
    """``(base, slope)`` of the line through each two consecutive ``(x, y)`` points (x
    ascending): ``y = base + slope · x`` between them."""
    out = []
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        slope = (y1 - y0) / (x1 - x0)
        out.append((y0 - slope * x0, slope))
    return out


@dataclass(frozen=True)
class MessageCosts:
    """Per-message costs in ns (see the module docstring for where each is charged).

    ``measured`` holds ``(bytes, send_ns, recv_ns)`` points, ascending in bytes, where the
    send and receive were measured (``streamjoin calibrate`` keeps them). When there are any,
    a payload's send and receive are interpolated linearly between them instead of read off
    the lines ``send_ns + send_per_byte_ns · bytes`` and ``recv_ns + recv_per_byte_ns ·
    bytes``: measured, the costs do not grow linearly (a fixed cost dominates small messages,
    the copies large ones; a line fitted to all sizes undercharges the middle ones by a
    quarter here). Below the smallest point its costs hold; beyond the largest they grow by
    the lines' per-byte costs. The lines stay the profile's summary, and what applies when
    ``measured`` is empty.
    """

    send_ns: float = 0.0
    send_per_byte_ns: float = 0.0
    hop_ns: float = 0.0
    hop_per_byte_ns: float = 0.0
    recv_ns: float = 0.0
    recv_per_byte_ns: float = 0.0
    measured: tuple = ()

    def __post_init__(self) -> None:
        try:
            points = tuple((float(b), float(s), float(r)) for b, s, r in self.measured)
        except (TypeError, ValueError):
            raise ValueError(
                f"measured must be (bytes, send_ns, recv_ns) points, got {self.measured!r}"
            ) from None
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

    def send_recv(self, nbytes: float) -> tuple[float, float]:
        """``(send, receive)`` ns of a payload of ``nbytes``."""
        s, s_pb, r, r_pb = self._lines[bisect_left(self._sizes, nbytes)]
        return s + s_pb * nbytes, r + r_pb * nbytes

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["measured"] = [list(p) for p in self.measured]
        return d

    def scaled(self, factor: float) -> MessageCosts:
        """Every cost divided by ``factor`` (a transport ``factor`` times faster)."""
        costs = {k: v / factor for k, v in dataclasses.asdict(self).items() if k != "measured"}
        points = tuple((b, s / factor, r / factor) for b, s, r in self.measured)
        return MessageCosts(**costs, measured=points)


@dataclass(frozen=True)
class IdleCosts:
    """What a step costs beyond its charge when it follows idle time, in ns per step of each
    cost group (see the module docstring; measured by :func:`measure_after_idle`).

    A step whose core had no message to work on before it (or, on shared processors, had to
    wait for one) is charged up to this much more: the process slept, other processes ran,
    and its data (for a join core: its window) has to come back into the caches. A constant
    per group at the calibration's gap (:data:`IDLE_GAP_S`): measured, it grows little with
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
        i = bisect_left(self._gaps, gap_ns)
        if i == len(self._gaps):  # beyond the last point (a gap may be infinite)
            return self.ramp[-1][1]
        base, slope = self._lines[i]
        return base + slope * gap_ns

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["ramp"] = [list(p) for p in self.ramp]
        return d

    def scaled(self, factor: float) -> IdleCosts:
        """Every cost divided by ``factor`` (a processor ``factor`` times faster); the ramp's
        gaps stay (they are idle time, not work)."""
        costs = {k: v / factor for k, v in dataclasses.asdict(self).items() if k != "ramp"}
        return IdleCosts(**costs, ramp=self.ramp)


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
    cpu_scale, net_scale : float
        Speed-ups applied by :meth:`scaled` since calibration (recorded, not re-applied).
    cpus : int, optional
        Processors the actors share (None: one per actor). With fewer processors than
        actors, a step waits for a free one (first come, first served) and holds it until it
        ends, as actors sharing a small host do (``MachineProfile.with_cpus``).
    cpu_share : tuple of float
        With ``cpus`` set: the share of a processor each busy process gets when k of them
        run at once (k = 1, 2, …; :func:`measure_cpu_share`, taken with the compute costs),
        where other work shares the host. The compute costs were measured by one busy
        process, so a step that starts while k steps run (itself included) has its compute
        stretched by ``cpu_share[0] / cpu_share[k - 1]`` (the last share for larger k).
        Empty: no stretch.
    info : dict
        Where and how it was measured (machine, date, fit quality).
    """

    name: str
    roles: dict
    indexes: dict
    messages: MessageCosts = field(default_factory=MessageCosts)
    after_idle: IdleCosts = field(default_factory=IdleCosts)
    cpu_scale: float = 1.0
    net_scale: float = 1.0
    cpus: int | None = None
    cpu_share: tuple = ()
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        c = self.cpus
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise ValueError(f"cpus must be a positive integer or None, got {c!r}")
        share = tuple(self.cpu_share)
        if not all(isinstance(v, int | float) and 0 < v <= 1 for v in share):
            raise ValueError(f"cpu_share must hold shares of a processor in (0, 1], got {share!r}")
        object.__setattr__(self, "cpu_share", tuple(float(v) for v in share))

    def slowdown(self, busy: int) -> float:
        """How much longer a step's compute takes while ``busy`` steps share the processors
        (itself included; see ``cpu_share``): 1.0 without ``cpus`` or ``cpu_share``."""
        share = self.cpu_share
        if self.cpus is None or not share or busy <= 1:
            return 1.0
        return share[0] / share[min(busy, len(share)) - 1]

    # -- JSON ----------------------------------------------------------------------------------

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "cpu_scale": self.cpu_scale,
            "net_scale": self.net_scale,
            "cpus": self.cpus,
            "cpu_share": list(self.cpu_share),
            "roles": self.roles,
            "indexes": self.indexes,
            "messages": self.messages.to_dict(),
            "after_idle": self.after_idle.to_dict(),
            "info": self.info,
        }

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
        return cls(
            name=str(d.get("name", "unnamed")),
            roles=roles,
            indexes=idx,
            messages=messages,
            after_idle=after_idle,
            cpu_scale=float(d.get("cpu_scale", 1.0)),
            net_scale=float(d.get("net_scale", 1.0)),
            cpus=d.get("cpus"),
            cpu_share=tuple(d.get("cpu_share", ())),
            info=dict(d.get("info", {})),
        )

    def save(self, path: str | os.PathLike) -> None:
        """Write the profile as JSON (an editable text file)."""
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> MachineProfile:
        with open(path) as f:
            return cls.from_dict(json.load(f))

    def summary(self) -> str:
        """A text table of the coefficients (µs per unit), the message and after-idle costs."""
        share = ", ".join(f"{v:.2f}" for v in self.cpu_share)
        lines = [
            f"machine profile {self.name!r} (cpu x{self.cpu_scale:g}, net x{self.net_scale:g}, "
            f"{self.cpus or 'a processor per actor'}{' processors' if self.cpus else ''}"
            f"{f', shares {share} by busy processes' if share else ''})"
        ]
        for title, table in (("role", self.roles), ("index", self.indexes)):
            for key, coefs in sorted(table.items()):
                cells = "  ".join(f"{f} {c / 1e3:.4g}" for f, c in coefs.items() if c)
                lines.append(f"  {title} {key:<12} {cells or '(free)'}")
        m = self.messages
        lines.append(
            f"  messages: send {m.send_ns / 1e3:.4g} + {m.send_per_byte_ns:.3g} ns/B, "
            f"hop {m.hop_ns / 1e3:.4g} + {m.hop_per_byte_ns:.3g} ns/B, "
            f"receive {m.recv_ns / 1e3:.4g} + {m.recv_per_byte_ns:.3g} ns/B  (µs)"
            f"{f'; send and receive as measured at {len(m.measured)} sizes' if m.measured else ''}"
        )
        idle = self.after_idle
        cells = "  ".join(f"{g} {idle.of(g) / 1e3:.4g}" for g in FEATURES)
        ramp = ", ".join(f"{f:.2f} at {g / 1e6:g} ms" for g, f in idle.ramp)
        lines.append(
            f"  after idle (µs per step): {cells}{f'  (shorter gaps: {ramp})' if ramp else ''}"
        )
        return "\n".join(lines)

    # -- variants ------------------------------------------------------------------------------

    def scaled(self, cpu: float = 1.0, net: float = 1.0) -> MachineProfile:
        """The same machine with compute ``cpu`` times and messaging ``net`` times as fast.

        ``profile.scaled(cpu=2.0)`` halves every compute coefficient (the after-idle costs
        too); ``net`` divides the message costs.
        """
        for name, v in (("cpu", cpu), ("net", net)):
            if not (isinstance(v, int | float) and v > 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be a positive factor, got {v!r}")

        def div(table: dict) -> dict:
            return {k: {f: c / cpu for f, c in coefs.items()} for k, coefs in table.items()}

        return dataclasses.replace(
            self,
            roles=div(self.roles),
            indexes=div(self.indexes),
            messages=self.messages.scaled(net),
            after_idle=self.after_idle.scaled(cpu),
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

    def with_cpus(self, cpus: int | None, cpu_share: tuple | None = None) -> MachineProfile:
        """The same costs with ``cpus`` processors shared by all actors (None: one each), and
        ``cpu_share`` if given (see the class docstring; ``()``: whole processors)."""
        if cpu_share is None:
            return dataclasses.replace(self, cpus=cpus)
        return dataclasses.replace(self, cpus=cpus, cpu_share=tuple(cpu_share))


def _coefficients(group: str, coefs: dict) -> dict:
    unknown = set(coefs) - set(FEATURES[group])
    if unknown:
        raise ValueError(
            f"machine profile: unknown {group} cost feature(s) {sorted(unknown)}; "
            f"known: {list(FEATURES[group])}"
        )
    return {f: float(coefs.get(f, 0.0)) for f in FEATURES[group]}


def default_profile() -> MachineProfile:
    """The profile shipped with streamjoin (calibrated on the development machine)."""
    from streamjoin.runtime.machine_default import DEFAULT_PROFILE

    return MachineProfile.from_dict(DEFAULT_PROFILE)


def as_profile(machine) -> MachineProfile:
    """``machine`` as a profile: a :class:`MachineProfile`, a path to its JSON, a dict, or None
    for :func:`default_profile`."""
    if machine is None:
        return default_profile()
    if isinstance(machine, MachineProfile):
        return machine
    if isinstance(machine, dict):
        return MachineProfile.from_dict(machine)
    if isinstance(machine, str | os.PathLike):
        return MachineProfile.load(machine)
    raise ValueError(
        f"machine must be a MachineProfile, a JSON path or a dict, got {type(machine).__name__}"
    )


# ---------------------------------------------------------------------------------------------
# Charging steps
# ---------------------------------------------------------------------------------------------


def _per_stream(stream: np.ndarray, streams: tuple) -> tuple[int, int]:
    """Tuples of R and S in a batch (all R for a self-join); ``stream`` holds 0s and 1s."""
    if len(streams) == 1:
        return len(stream), 0
    n_s = int(np.count_nonzero(stream))
    return len(stream) - n_s, n_s


class CostModel:
    """Charges actor steps and messages from a :class:`MachineProfile`.

    The simulator binds each actor once (:meth:`bind`: a snapshot of the counters a step will
    change, taken before it, and a charge computed after it), and calls :meth:`message_ns`
    per message sent (its receive is charged to the receiver). :meth:`features` gives the
    feature vector itself (calibration fits the coefficients to it).
    """

    def __init__(self, profile: MachineProfile) -> None:
        self.profile = profile
        m = profile.messages
        self._hop = (m.hop_ns, m.hop_per_byte_ns)
        self._msg_const = (int(round(m.send_ns)), int(round(m.hop_ns)), int(round(m.recv_ns)))
        self._per_byte = bool(
            m.send_per_byte_ns or m.hop_per_byte_ns or m.recv_per_byte_ns or m.measured
        )
        self._sizes, self._lines = m._sizes, m._lines  # MessageCosts.send_recv, inlined
        self._coefs: dict[tuple, tuple] = {}
        self.fallbacks: dict[str, str] = {}

    # -- features ------------------------------------------------------------------------------

    def snapshot(self, role: str, logic, msg):
        """What :meth:`features` needs from before the step (None for most roles)."""
        if role == "emitter":
            return logic.copied
        if role in ("join_core", "handshake_ll_core") and isinstance(msg, Batch):
            st = logic.stats
            parts = logic.parts
            return (
                (st["inserted"], st["pairs"], st["expired"]),
                {y: len(p.index) for y, p in parts.items()},
                sum(p.candidates for p in parts.values()),
            )
        if role == "handshake_core":
            parts = logic.parts
            return (
                {y: (len(p.index), len(p.store)) for y, p in parts.items()},
                sum(p.candidates for p in parts.values()),
            )
        if role == "worker" and isinstance(msg, WorkerCommand):
            # probed subwindows may be dropped by the same command: keep the objects
            return [
                (x, [(p, len(p.index), p.candidates) for p in map(logic.parts.get, subs)])
                for x, subs in msg.probe
            ]
        return None

    def features(self, role: str, logic, kind: str, msg, out: list, snap) -> tuple:
        """The step's feature vector, in the order of ``FEATURES`` for its group."""
        if role == "emitter":
            return (
                1,
                len(msg) if kind == "chunk" else 0,
                len(out),
                sum(len(m) for _, m in out),
                logic.copied - snap,
            )
        if role == "collector":
            return (1, len(msg) if kind == "batch" else 0)
        if kind != "batch":
            return (1,) + (0,) * (len(FEATURES[_group(role)]) - 1)
        if role == "manager":
            pairs = sum(len(m) for p, m in out if p == "out")
            return (1, len(msg), len(out) - (pairs > 0), pairs)
        if role == "join_core":
            return self._core_features(logic, msg, snap)
        if role == "worker":
            return self._worker_features(logic, msg, out, snap)
        if role == "handshake_core":
            return self._handshake_features(logic, msg, out, snap)
        if role == "handshake_ll_core":  # a batch costs what it would at a join core
            return self._core_features(logic, msg, snap) if snap else (1,) + (0,) * 8
        raise ValueError(f"no cost model for actor role {role!r}")

    @staticmethod
    def _core_features(core, batch: Batch, snap) -> tuple:
        (ins0, pairs0, exp0), sizes, cand0 = snap
        spec, st = core.spec, core.stats
        part_calls = probes = 0
        scan = 0.0
        inserted = st["inserted"] - ins0
        counts = _per_stream(batch.stream, spec.streams)
        for x in spec.streams:
            n_x = counts[x]
            size = sizes[spec.probed(x)]
            if n_x and size:
                part_calls += 1
                probes += n_x
                scan += n_x * scan_units(core.index_name, size)
            if n_x and inserted:  # one insert call per stream the batch stores tuples of
                part_calls += 1
        cand = sum(p.candidates for p in core.parts.values()) - cand0
        return (
            1,
            part_calls,
            len(batch),
            probes,
            scan,
            cand,
            st["pairs"] - pairs0,
            inserted,
            st["expired"] - exp0,
        )

    @staticmethod
    def _worker_features(worker, cmd: WorkerCommand, out: list, snap) -> tuple:
        spec, batch = worker.spec, cmd.batch
        part_calls = probes = cand = 0
        scan = 0.0
        counts = _per_stream(batch.stream, spec.streams)
        for x, parts in snap:
            n_x = counts[x]
            for part, size, cand0 in parts:
                cand += part.candidates - cand0
                if n_x and size:
                    part_calls += 1
                    probes += n_x
                    scan += n_x * scan_units(spec.index_name, size)
        inserted = sum(len(pos) for _, pos in cmd.insert)
        # whole subwindows are created and dropped in O(1): a part call each, no per-tuple cost
        part_calls += len(cmd.insert) + len(cmd.create) + len(cmd.expire)
        pairs = sum(len(m) for _, m in out)
        return (1, part_calls, len(batch), probes, scan, cand, pairs, inserted, 0)

    @staticmethod
    def _handshake_features(core, msg, out: list, snap) -> tuple:
        sizes, cand0 = snap
        part_calls = probes = inserted = 0
        scan = 0.0
        x = None
        if isinstance(msg, Batch):  # probe the other stream's segment, store in our own
            x = int(msg.stream[0]) if len(msg) else 0
            probes = inserted = len(msg)
            part_calls = 1
            if sizes[1 - x][0]:
                part_calls += 1
                scan = probes * scan_units(core.spec.index_name, sizes[1 - x][0])
        expired = 0
        for y, part in core.parts.items():
            gone = sizes[y][1] + (inserted if y == x else 0) - len(part.store)
            if gone > 0:
                part_calls += 1
                expired += gone
        # tuples passed on to a neighbour are copied out of the store
        moved = sum(len(m) for p, m in out if p != "out" and isinstance(m, Batch))
        pairs = sum(len(m) for p, m in out if p == "out")
        cand = sum(p.candidates for p in core.parts.values()) - cand0
        return (1, part_calls, len(msg) + moved, probes, scan, cand, pairs, inserted, expired)

    # -- charging ------------------------------------------------------------------------------

    def coefficients(self, role: str, logic) -> tuple:
        """Coefficients for ``role`` (and the index of a join core or worker), in feature order."""
        group = _group(role)
        index = logic.spec.index_name if group == "join" else None
        key = (group, index)
        coefs = self._coefs.get(key)
        if coefs is None:
            table = self._index_costs(index) if group == "join" else self.profile.roles[group]
            coefs = self._coefs[key] = tuple(table[f] for f in FEATURES[group])
        return coefs

    def _index_costs(self, index: str) -> dict:
        costs = self.profile.indexes
        if index in costs:
            return costs[index]
        stand_in = _FALLBACK[SCAN_KINDS.get(index, "log")]
        if stand_in not in costs:
            raise ValueError(
                f"machine profile {self.profile.name!r} has no costs for index "
                f"{index!r}; calibrate it: cost_model.calibrate(indexes=[{index!r}])"
            )
        warnings.warn(
            f"machine profile {self.profile.name!r} has no costs for index {index!r}; "
            f"using those of {stand_in!r}",
            stacklevel=3,
        )
        self.fallbacks[index] = stand_in
        return costs[stand_in]

    def bind(self, role: str, logic) -> tuple:
        """``(snapshot, charge)`` for one actor, its coefficients looked up once.

        ``snapshot(msg)`` (None for roles that need none) is called before a step and
        ``charge(kind, msg, out, snap, wall_ns)`` after it: the step's compute in virtual ns
        (``wall_ns``, the host's time, is not used here). A message's receive is charged
        apart (:meth:`message_ns`).
        """
        coefs = self.coefficients(role, logic)
        if role == "join_core":
            return self._bind_join_core(logic, coefs)
        if role == "emitter":
            c_call, c_in, c_msg, c_out, c_copied = coefs

            def copied(msg):
                return logic.copied

            def charge_emitter(kind, msg, out, snap, wall_ns):
                ns = c_call
                if kind == "chunk":
                    ns += c_in * len(msg)
                if out:
                    ns += c_msg * len(out) + c_out * sum([len(m) for _, m in out])
                return ns + c_copied * (logic.copied - snap)

            return copied, charge_emitter
        if role == "collector":
            c_call, c_pairs = coefs

            def charge_collector(kind, msg, out, snap, wall_ns):
                return c_call + c_pairs * len(msg) if kind == "batch" else c_call

            return None, charge_collector

        def snapshot(msg):
            return self.snapshot(role, logic, msg)

        def charge(kind, msg, out, snap, wall_ns):
            f = self.features(role, logic, kind, msg, out, snap)
            return float(sum(map(operator.mul, f, coefs)))  # left to right: the dot product

        return snapshot, charge

    def _bind_join_core(self, core, coefs: tuple) -> tuple:
        """:meth:`bind` for a join core: :meth:`_core_features` and the dot product in one,
        on the counters and parts the core keeps (looked up once, not per step)."""
        c_call, c_part, c_tuples, c_probes, c_scan, c_cand, c_pairs, c_ins, c_exp = coefs
        spec, stats = core.spec, core.stats
        kind = SCAN_KINDS.get(core.index_name, "log")
        streams = spec.streams
        probed = tuple(core.parts[spec.probed(x)] for x in streams)  # the part x probes
        parts = tuple(core.parts.values())
        two = len(spec.streams) == 2

        def snapshot(msg):
            if type(msg) is not Batch:
                return None
            return (
                stats["inserted"],
                stats["pairs"],
                stats["expired"],
                [len(p.index) for p in probed],
                sum([p.candidates for p in parts]),
            )

        def charge(kind_, msg, out, snap, wall_ns):
            if snap is None:
                return c_call
            ins0, pairs0, exp0, sizes, cand0 = snap
            n = len(msg.seq)
            inserted = stats["inserted"] - ins0
            if two:
                n_s = int(msg.stream[0]) if n == 1 else int(np.count_nonzero(msg.stream))
                counts = (n - n_s, n_s)
            else:
                counts = (n,)
            part_calls = probes = 0
            scan = 0.0
            for x, size in zip(streams, sizes, strict=True):
                n_x = counts[x]
                if n_x:
                    if size:
                        part_calls += 1
                        probes += n_x
                        if kind == "linear":
                            scan += n_x * size
                        elif kind == "log":
                            scan += n_x * math.log2(size + 1)
                    if inserted:  # one insert call per stream the batch stores tuples of
                        part_calls += 1
            cand = sum([p.candidates for p in parts]) - cand0
            return (
                c_call
                + c_part * part_calls
                + c_tuples * n
                + c_probes * probes
                + c_scan * scan
                + c_cand * cand
                + c_pairs * (stats["pairs"] - pairs0)
                + c_ins * inserted
                + c_exp * (stats["expired"] - exp0)
            )

        return snapshot, charge

    def after_idle_ns(self, role: str) -> float:
        """What a step of ``role`` costs more when it follows idle time."""
        return self.profile.after_idle.of(_group(role))

    def message_ns(self, msg) -> tuple[int, int, int]:
        """``(send, hop, receive)`` of one message to one destination, in ns: the sender's CPU
        time to hand it over, the latency until the receiver can start on it (no core busy),
        and the receiver's CPU time before its step runs."""
        if self._per_byte:
            nbytes = message_nbytes(msg)
            s, s_pb, r, r_pb = self._lines[bisect_left(self._sizes, nbytes)]
            hop, hop_pb = self._hop
            return (
                int(round(s + s_pb * nbytes)),
                int(round(hop + hop_pb * nbytes)),
                int(round(r + r_pb * nbytes)),
            )
        return self._msg_const


def _group(role: str) -> str:
    joins = ("join_core", "worker", "handshake_core", "handshake_ll_core")
    return "join" if role in joins else role


# ---------------------------------------------------------------------------------------------
# Calibration
# ---------------------------------------------------------------------------------------------


class _Recorder(CostModel):
    """Charges each step its measured host time and keeps ``(group key, features, ns)``."""

    def __init__(self, profile: MachineProfile, skip: int = 3) -> None:
        super().__init__(profile)
        self.rows: dict[tuple, list] = {}
        self.skip = skip  # first steps of each actor run colder (caches, allocator)
        self.run = 0  # workload number, so each workload weighs the same in the fit

    def bind(self, role, logic):
        group = _group(role)
        rows = self.rows.setdefault((group, logic.spec.index_name if group == "join" else None), [])
        seen = [0]

        def snapshot(msg):
            return self.snapshot(role, logic, msg)

        def charge(kind, msg, out, snap, wall_ns):
            seen[0] += 1
            if seen[0] > self.skip and kind != "eof":
                rows.append((self.features(role, logic, kind, msg, out, snap), wall_ns, self.run))
            return wall_ns

        return snapshot, charge


def nnls(a: np.ndarray, b: np.ndarray, tol: float = 1e-12) -> np.ndarray:
    """Non-negative least squares ``min ||a x - b||, x >= 0`` (Lawson & Hanson's active set)."""
    n = a.shape[1]
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    a = a / norms  # scale columns so one tolerance fits features of any magnitude
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    for _ in range(3 * n):
        w = a.T @ (b - a @ x)
        if passive.all() or w[~passive].max() <= tol * max(1.0, np.abs(b).max()):
            break
        passive[np.argmax(np.where(passive, -np.inf, w))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if np.all(z[passive] > 0):
                x = z
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > tol
    return x / norms


def fit_costs(rows: list, names: tuple) -> tuple[dict, dict]:
    """Coefficients (ns per feature) minimising relative error over measured steps.

    ``rows`` are ``(features, measured ns, workload)``. Relative error, because a latency is a
    sum of small steps and a plain fit would be dominated by the largest ones; each workload
    weighs the same, or the many small steps of batch size 1 would drown the few large ones
    that reveal per-tuple costs. Steps off by more than 3× after a first fit (GC pauses,
    preemption on a shared host) are dropped and the fit repeated once.
    """
    x = np.array([f for f, _, _ in rows], dtype=np.float64)
    y = np.array([t for _, t, _ in rows], dtype=np.float64)
    run = np.array([r for _, _, r in rows])
    per_run = np.bincount(run)[run]
    keep = np.ones(len(y), dtype=bool)
    for _ in range(2):
        w = 1.0 / (np.maximum(y[keep], 1_000.0) * np.sqrt(per_run[keep]))
        coef = nnls(x[keep] * w[:, None], y[keep] * w)
        ratio = (x @ coef) / np.maximum(y, 1.0)
        keep = (ratio > 1 / 3) & (ratio < 3)
        if keep.sum() < len(names):
            break
    err = np.abs(x @ coef - y) / np.maximum(y, 1.0)
    quality = {
        "steps": len(y),
        "median_rel_error": float(np.median(err)),
        "p90_rel_error": float(np.percentile(err, 90)),
    }
    return {n: float(c) for n, c in zip(names, coef, strict=True)}, quality


def _workload(index: str, n: int, window: int, match: float, seed: int):
    """``(query, data)``: a band join at ``match`` rate over a count ``window`` (an equi-join
    for an index without range probes), or None if ``index`` supports neither."""
    import streamjoin as sj

    cls = sj.indexes.get(index)
    band_ok = cls.unsupported(sj.Query(sj.band("x", 1), window=sj.CountWindow(1)).predicate) is None
    if band_ok:
        data = sj.sources.synthetic(n, low=0, high=1_000_000, seed=seed)
        x = data.column("x").to_numpy()
        eps = sj.sources.band_for_match_rate(x, window=window, match_rate=match)
        query = sj.Query(sj.band("x", eps), window=sj.CountWindow(window))
    else:
        data = sj.sources.synthetic(n, low=0, high=max(1, int(window / match)), seed=seed)
        query = sj.Query(sj.equal("x"), window=sj.CountWindow(window))
    return None if cls.unsupported(query.predicate) is not None else (query, data)


def _calibration_runs(index: str, quick: bool, seed: int):
    """``(query, data, topology, batch_size, chunk_rows)`` workloads spanning window sizes,
    batch sizes and match rates, so every feature varies independently enough to be fitted."""
    import streamjoin as sj

    windows = (256, 4096) if quick else (256, 4096, 16384)
    # past the default batch size (1024), which the fit otherwise extrapolates to: for
    # sim_fidelity's single layout, three fits on batches up to 512 predicted 0.89-1.01 of
    # Ray's throughput and 1.20-1.32 of its paced p50; up to 2048, 0.96-1.06 and 1.09-1.21
    batches = (1, 32, 512) if quick else (1, 32, 512, 2048)
    for w in windows:
        for b in batches:
            for k, match in enumerate((0.5, 16.0)):
                steps = 300 if quick else 1_200  # per actor: bounds the run time
                n = int(min(3 * w + 4 * b, steps * b))
                workload = _workload(index, n, w, match, seed)
                if workload is None:
                    continue
                query, data = workload
                # varied chunk sizes, so the emitter's per-chunk and per-tuple costs separate
                chunk = max((1, 64, 1024)[(k + b + w) % 3], -(-n // steps))
                yield query, data, sj.topologies.single(index), b, chunk
                if b > 1:  # workers: the same kernels behind per-subwindow calls
                    yield query, data, sj.topologies.panjoin(2, 4, index), b, chunk


#: Idle gap (s) before each step when :func:`measure_after_idle` times steps after idle time:
#: a paced stream's gap between chunks of a few milliseconds of input.
IDLE_GAP_S = 0.005
#: Shorter gaps at which :func:`measure_after_idle` measures how much of the after-idle cost
#: they already cost (``IdleCosts.ramp``): steps that waited a moment for a shared processor,
#: or a fast paced stream's gaps.
RAMP_GAPS_S = (0.0002, 0.001)


class _GapRecorder(CostModel):
    """Charges each step its host time; once ``warm_rows`` input rows are in, keeps each
    step's host time per cost group and, with ``gap_s``, sleeps that long after it, so the
    next step follows idle time (this process asleep, others free to run)."""

    def __init__(self, profile: MachineProfile, warm_rows: int, gap_s: float) -> None:
        super().__init__(profile)
        self.warm_rows, self.gap_s = warm_rows, gap_s
        self.rows_in = 0
        self.times: dict[str, list] = {}

    def bind(self, role, logic):
        times = self.times.setdefault(_group(role), [])

        def charge(kind, msg, out, snap, wall_ns):
            if kind == "chunk":
                self.rows_in += len(msg)
            if self.rows_in > self.warm_rows and kind != "eof":
                times.append(wall_ns)
                if self.gap_s:
                    time.sleep(self.gap_s)
            return wall_ns

        return None, charge


def measure_after_idle(
    index: str = "bplus_tree",
    *,
    gap_s: float = IDLE_GAP_S,
    ramp_gaps_s: tuple[float, ...] = RAMP_GAPS_S,
    window: int = 16384,
    batches: tuple[int, ...] = (64, 512, 4096),
    steps: int = 40,
    rounds: int = 3,
    seed: int = 0,
) -> tuple[IdleCosts, dict]:
    """Time steps after idle time against the same steps back to back: :class:`IdleCosts`.

    A band join at match rate 2 over a count ``window`` runs on ``single(index)`` for each
    batch size in ``batches`` and on ``panjoin(2, 4, index)`` for the middle one; once the
    windows are full, ``steps`` chunks (one batch each) are stepped through every actor back
    to back, and with this process asleep for ``gap_s`` before every step, and for each
    shorter gap of ``ramp_gaps_s``. Per cost group and workload the medians give a step's
    host time hot and after each gap; a group's after-idle cost is the median of its
    differences over its workloads at ``gap_s`` (clipped at 0), and the ramp's share at a
    shorter gap is the median over groups and workloads of the difference there against the
    one at ``gap_s`` (clipped to [0, 1]). The runs alternate ``rounds`` times (the host is
    shared: medians over rounds). Host (wall) time, so it carries what other processes do to
    the caches while this one sleeps: the load of the moment (returned with the raw figures,
    ns per group and workload).
    """
    from streamjoin import topologies
    from streamjoin.runtime import sim

    gaps = (0.0, *sorted(g for g in ramp_gaps_s if 0 < g < gap_s), gap_s)
    base = default_profile().with_messages(MessageCosts())
    layouts = [(f"single:{b}", topologies.single(index), b) for b in batches]
    mid = batches[len(batches) // 2]
    layouts.append((f"panjoin:{mid}", topologies.panjoin(2, 4, index), mid))
    points: dict[tuple, list] = {}  # (group, workload) -> per round, the medians by gap
    load0 = os.getloadavg()[0]
    for _ in range(rounds):
        for name, topo, b in layouts:
            warm = 2 * window + 2 * b
            workload = _workload(index, warm + (steps + 4) * b, window, 2.0, seed)
            if workload is None:
                raise ValueError(f"index {index!r} supports neither a band nor an equi-join")
            query, data = workload
            medians = []
            for gap in gaps:
                rec = _GapRecorder(base, warm, gap)
                sim.run(
                    query,
                    data,
                    topo,
                    batch_size=b,
                    chunk_rows=b,
                    collect="count",
                    progress=False,
                    machine=rec,
                    arrival=sim.Arrival.constant(1e6),
                )
                # the first steps after the warm-up follow no gap
                medians.append({g: float(np.median(t[3:])) for g, t in rec.times.items()})
            for g in medians[0]:
                points.setdefault((g, name), []).append([m[g] for m in medians])
    raw = {
        f"{g}:{name}": {
            "hot_ns": float(np.median([r[0] for r in v])),
            "after_idle_ns": float(np.median([r[-1] for r in v])),
            "after_gap_ns": {
                f"{gap * 1e3:g} ms": float(np.median([r[k] for r in v]))
                for k, gap in enumerate(gaps[1:], 1)
            },
        }
        for (g, name), v in sorted(points.items())
    }
    extra: dict[str, list] = {}
    shares: dict[float, list] = {}
    for (g, _), v in points.items():
        full = float(np.median([r[-1] - r[0] for r in v]))
        extra.setdefault(g, []).append(full)
        for k, gap in enumerate(gaps[1:-1], 1):
            if full > 0:
                part = float(np.median([r[k] - r[0] for r in v]))
                shares.setdefault(gap, []).append(min(1.0, max(0.0, part / full)))
    ramp = [(gap * 1e9, float(np.median(shares[gap]))) for gap in gaps[1:-1] if gap in shares]
    ramp.append((gap_s * 1e9, 1.0))
    for k in range(1, len(ramp)):  # a longer gap never costs less
        ramp[k] = (ramp[k][0], max(ramp[k][1], ramp[k - 1][1]))
    costs = IdleCosts(
        **{
            f"{g}_ns": max(0.0, float(np.median(extra[g]))) if g in extra else 0.0 for g in FEATURES
        },
        ramp=tuple(ramp),
    )
    return costs, {
        "gap_s": gap_s,
        "ramp_gaps_s": list(gaps[1:-1]),
        "index": index,
        "window": window,
        "steps": raw,
        "load_1min_start_end": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }


#: A busy process for :func:`measure_cpu_share`: spins for the given seconds, then prints
#: its process CPU time over its wall time.
_SPIN = """import sys, time
t = float(sys.argv[1])
w0, c0 = time.perf_counter(), time.process_time()
while time.perf_counter() - w0 < t:
    pass
print((time.process_time() - c0) / (time.perf_counter() - w0))
"""


def measure_cpu_share(
    cpus: int | None = None, *, seconds: float = 0.5, rounds: int = 3
) -> tuple[tuple[float, ...], dict]:
    """The share of a processor each of k busy processes gets on this host, k = 1 … ``cpus``.

    Starts k processes that spin for ``seconds`` and reports each one's CPU time over its
    wall time (median over the k), for each k, ``rounds`` times interleaved (median over
    rounds). On an idle host every share is about 1; where other work runs, the shares fall
    as k grows (with Linux's per-session group scheduling another session's busy job holds
    about its half of the processors whatever the number of threads on either side). For
    :attr:`MachineProfile.cpu_share`; a child of this process runs where its actors would
    (the ``ray`` executor's actors descend from the driver as well). Returns the shares and
    the raw figures (per k, every round's share, and the load average).
    """
    import subprocess
    import sys

    cpus = cpus or os.cpu_count() or 1
    load0 = os.getloadavg()[0]
    seen: dict[int, list] = {k: [] for k in range(1, cpus + 1)}
    for _ in range(rounds):
        for k in seen:
            procs = [
                subprocess.Popen(
                    [sys.executable, "-c", _SPIN, str(seconds)], stdout=subprocess.PIPE, text=True
                )
                for _ in range(k)
            ]
            seen[k].append(float(np.median([float(p.communicate()[0]) for p in procs])))
    share = tuple(min(1.0, round(float(np.median(v)), 3)) for v in seen.values())
    return share, {
        "by_busy": {str(k): [round(x, 3) for x in v] for k, v in seen.items()},
        "seconds": seconds,
        "load_1min_start_end": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }


def calibrate(
    path: str | os.PathLike | None = None,
    *,
    indexes: list[str] | None = None,
    ray: bool = True,
    quick: bool = False,
    seed: int = 0,
    name: str | None = None,
    idle_gap_s: float | None = IDLE_GAP_S,
) -> MachineProfile:
    """Measure this machine and return (and optionally write) its :class:`MachineProfile`.

    Parameters
    ----------
    path : path-like, optional
        Write the profile JSON here.
    indexes : list of str, optional
        Window indexes to measure (default: every registered index).
    ray : bool
        Time the ``ray`` executor's messages for the message costs (starts a Ray instance with
        this host's CPUs if none is running); with False the message costs of
        :func:`default_profile` are kept.
    quick : bool
        Fewer and smaller workloads (a few seconds per index; coarser fit).
    seed : int
    name : str, optional
        Profile name (default: the host name).
    idle_gap_s : float, optional
        Idle gap (s) at which :func:`measure_after_idle` times steps after idle time, on
        ``bplus_tree`` (or the first index measured, if that is not among them); with None
        the after-idle costs of :func:`default_profile` are kept.

    The share of a processor that one and several busy processes get
    (:func:`measure_cpu_share`) is measured first, next to the kernel timings, whose
    conditions it describes.

    Returns
    -------
    MachineProfile
        Its ``info`` holds the machine, the date and each group's fit quality (median and p90
        relative error of the fitted step times against the measured ones).
    """
    from streamjoin import indexes as registry
    from streamjoin._version import __version__
    from streamjoin.runtime import sim
    from streamjoin.runtime.result import machine_info

    names = list(indexes) if indexes is not None else registry.names()
    for n in names:
        registry.get(n)
    base = default_profile()
    # the share of a processor the timed steps get, and what several busy processes get
    cpu_share, share_raw = measure_cpu_share(**({"seconds": 0.2, "rounds": 1} if quick else {}))
    recorder = _Recorder(base.with_messages(MessageCosts()))  # steps cost host time only
    for index in names:
        for query, data, topo, b, chunk in _calibration_runs(index, quick, seed):
            # costs are the measured host times, so the arrival rate only orders the steps
            recorder.run += 1
            sim.run(
                query,
                data,
                topo,
                batch_size=b,
                chunk_rows=chunk,
                collect="count",
                progress=False,
                machine=recorder,
                arrival=sim.Arrival.constant(1e6),
            )
    quality = {"cpu_share": share_raw}
    roles, index_costs = {}, {}
    for (group, index), rows in sorted(recorder.rows.items(), key=str):
        if not rows:
            continue
        coefs, q = fit_costs(rows, FEATURES[group])
        if group == "join":
            index_costs[index] = coefs
            quality[f"index:{index}"] = q
        else:
            roles[group] = coefs
            quality[group] = q
    for group in ("emitter", "manager", "collector"):
        roles.setdefault(group, base.roles[group])
    after_idle = base.after_idle
    if idle_gap_s is not None:
        index = "bplus_tree" if "bplus_tree" in names else names[0]
        kw = {"window": 4096, "rounds": 1, "steps": 20} if quick else {}
        after_idle, quality["after_idle"] = measure_after_idle(
            index, gap_s=idle_gap_s, seed=seed, **kw
        )
    messages = base.messages
    if ray:
        from streamjoin.runtime.ray_calibrate import measure_messages

        messages, quality["messages"] = measure_messages()
    profile = MachineProfile(
        name=name or os.uname().nodename,
        roles=roles,
        indexes=index_costs,
        messages=messages,
        after_idle=after_idle,
        cpu_share=cpu_share,
        info={
            "machine": machine_info(),
            "date": datetime.date.today().isoformat(),
            "streamjoin": __version__,
            "quick": quick,
            "fit": quality,
        },
    )
    if path is not None:
        profile.save(path)
    return profile
