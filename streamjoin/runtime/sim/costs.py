"""What an actor step costs in virtual time: the ``sim`` backend's :class:`CostModel`.

The simulator runs the real actor logic and charges each step from what the step *did*, read
off the counters the logic already keeps and the messages it sent — never from how long it
took on this host. That keeps virtual time deterministic and lets a profile
(:class:`~streamjoin.runtime.sim.profile.MachineProfile`) describe another machine.

Each step is reduced to a short feature vector (the ``FEATURES`` of its cost group) and
charged the dot product with the profile's coefficients (ns per unit):

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

Messages and steps after idle time are charged as the profile's module docstring says
(:mod:`streamjoin.runtime.sim.profile`).
"""

from __future__ import annotations

import math
import operator
import warnings
from bisect import bisect_left

import numpy as np

from streamjoin.actors.panjoin import WorkerCommand
from streamjoin.batch import Batch
from streamjoin.runtime.sim.profile import FEATURES, MachineProfile, cost_group, message_nbytes

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
            return (1,) + (0,) * (len(FEATURES[cost_group(role)]) - 1)
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
        group = cost_group(role)
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
                f"{index!r}; calibrate it: sim.calibrate(indexes=[{index!r}])"
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
        return self.profile.after_idle.of(cost_group(role))

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
