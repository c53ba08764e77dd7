"""What an actor step costs in virtual time: the ``sim`` backend's :class:`CostModel`.

The simulator runs the real actor logic and charges each step from what the step *did* —
never from how long it took on this host. That keeps virtual time deterministic and lets a
profile (:class:`~streamjoin.runtime.sim.profile.MachineProfile`) describe another machine.

Every actor logic keeps cumulative counters of its work (``logic.COUNTERS``, read by
``logic.counters()``; :mod:`streamjoin.actors.base`). A step is charged

    ``calls + Σ coefficient_i · (counter_i after − counter_i before)``

with the coefficients (ns per unit) of the logic's cost group — ``emitter``, ``join``
(one set per window index: ``logic.cost_key``; a shared-index core's are its own,
``shared:<index>``, and so are PanJoin's workers', ``<index>:panjoin``, and SPO-Join's
stages', ``po_join:mutable`` and ``po_join:worker``), ``manager``, ``collector`` — in one
code path for every role: a new actor is charged as soon as it counts its work. What the counters mean is documented beside
each logic (for the join group, :class:`~streamjoin.actors.join_spec.JoinWork`; PIM-Tree
§2.2.3 Eq. 4 charges a probe ``H · λ`` for its descent, which the *scan* counter follows).

Messages and steps after idle time are charged as the profile's module docstring says
(:mod:`streamjoin.runtime.sim.profile`).
"""

from __future__ import annotations

import warnings
from typing import Protocol

from streamjoin import indexes
from streamjoin.actors.base import ActorLogic
from streamjoin.actors.shared_index.core import SHARED_COST_PREFIX
from streamjoin.actors.shared_index.kernels import (
    W_CANDIDATES,
    W_INSERTED,
    W_PAIRS,
    W_PROBES,
    W_SCANNED,
    W_TUPLES,
)
from streamjoin.runtime.sim.profile import (
    FEATURES,
    FITTED_HELD,
    MachineProfile,
    WindowCosts,
    message_nbytes,
)
from streamjoin.runtime.sim.window_growth import measurable

#: Index whose coefficients stand in for an index the profile has not measured, by how its
#: probes' work grows (``WindowIndex.probe_cost``).
_FALLBACK = {"linear": "nested_loop", "const": "hash", "log": "bplus_tree"}


class Charge(Protocol):
    """``charge(kind, msg, before, after, wall_ns, threads=None) -> ns``: a step's compute,
    from the logic's counters before and after it (``kind`` and ``msg`` for recorders that
    calibrate; the host time ``wall_ns`` is not what a model charges); ``threads``, the
    processors a threaded core's step holds (None: all its threads; others ignore it)."""

    def __call__(
        self, kind, msg, before: tuple, after: tuple, wall_ns: int, threads: int | None = None
    ) -> float: ...


class CostModel:
    """Charges actor steps and messages from a :class:`MachineProfile`.

    The simulator binds each actor once (:meth:`bind`), reads ``logic.counters()`` before and
    after every step and charges the difference; it calls :meth:`message_ns` per message sent
    (its receive is charged to the receiver).
    """

    def __init__(self, profile: MachineProfile) -> None:
        self.profile = profile
        m = profile.messages
        self._msg_const = (
            int(round(m.send_ns + m.kernel_ns)),
            int(round(m.hop_ns)),
            int(round(m.recv_ns)),
        )
        self._per_byte = bool(
            m.send_per_byte_ns
            or m.hop_per_byte_ns
            or m.recv_per_byte_ns
            or m.kernel_per_byte_ns
            or m.measured
        )
        self._coefs: dict[tuple, tuple] = {}
        self.fallbacks: dict[str, str] = {}
        #: indexes whose cores outgrew the fitted windows without :class:`WindowCosts`
        self.unfitted_windows: set[str] = set()

    def coefficients(self, logic: ActorLogic) -> tuple:
        """``(calls, *per counter)`` coefficients (ns) of ``logic``'s cost group (and index)."""
        group, key = logic.cost_group, logic.cost_key
        coefs = self._coefs.get((group, key))
        if coefs is None:
            names = FEATURES[group]
            if tuple(names[1:]) != tuple(logic.COUNTERS):
                raise ValueError(
                    f"{type(logic).__name__} counts {logic.COUNTERS}, but cost group "
                    f"{group!r} charges {names[1:]}"
                )
            if group == "join":
                assert key is not None  # a join logic's cost key is its index
                table = self._index_costs(key)
            else:
                table = self.profile.roles[group]
            coefs = self._coefs[(group, key)] = tuple(table[f] for f in names)
        return coefs

    def _index_costs(self, index: str) -> dict:
        costs = self.profile.indexes
        if index in costs:
            return costs[index]
        if index.startswith(SHARED_COST_PREFIX):
            # a profile from before the shared core had costs of its own: its index's
            # plain-core costs, which leave out the task machinery and put a plain core's
            # per-step work in the serial part
            stand_in = index.removeprefix(SHARED_COST_PREFIX)
            costs = self._index_costs(stand_in)
            warnings.warn(
                f"machine profile {self.profile.name!r} has no costs for the shared-index "
                f"core over {stand_in!r}; using a single core's; calibrate it: "
                f"sim.calibrate(indexes=[{stand_in!r}])",
                stacklevel=3,
            )
            self.fallbacks[index] = self.fallbacks.get(stand_in, stand_in)
            return costs
        if ":" in index:  # a stage's own costs (``po_join:mutable``): a profile from before
            return self._index_costs(index.partition(":")[0])  # stages had them: the index's
        stand_in = _FALLBACK[indexes.get(index).probe_cost]
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

    def bind(self, logic: ActorLogic) -> Charge:
        """The charge of ``logic``'s steps, its coefficients looked up once. A core with
        ``threads > 1`` that reports its tasks (``last_tasks``: a shared-index core) is
        charged as ``threads`` processors (:func:`threads_charge`), or as the processors the
        engine says its step holds (the charge's ``threads`` argument)."""
        c_call, *per_unit = self.coefficients(logic)
        growth = self._window_growth(logic)

        def charge(kind, msg, before, after, wall_ns, threads=None) -> float:
            ns = _dot(c_call, per_unit, before, after)
            return ns if growth is None else ns + growth(before, after)

        if getattr(logic, "threads", 1) > 1 and hasattr(logic, "last_tasks"):
            coefs = dict(zip(logic.COUNTERS, per_unit, strict=True))

            def charge_threads(kind, msg, before, after, wall_ns, threads=None) -> float:
                one = charge(kind, msg, before, after, wall_ns)
                rates = _rates(growth)
                return threads_charge(one, logic, coefs, before, after, threads, rates)

            return charge_threads
        return charge

    def _window_growth(self, logic: ActorLogic):
        """``growth(before, after) -> ns`` that a join actor's step costs more for the size
        of its window (the profile's :class:`~streamjoin.runtime.sim.profile.WindowCosts`
        at the items it holds after the step: its cost key's, or for a shared-index core
        without its own those of its index in a plain core, whose probes and inserts
        descend the same kind of nodes), or None: not a join actor holding window parts or
        windows, or no such costs, or costs that do not describe the actor
        (``window_costs_apply`` false: PanJoin's workers over an index with subwindows of its
        own); then a warning once it holds more than the windows the costs were fitted on."""
        if logic.cost_group != "join" or getattr(logic, "held_items", lambda: None)() is None:
            return None
        index = logic.spec.index_name  # type: ignore[attr-defined]
        windows = self.profile.windows
        costs = windows.get(logic.cost_key or index, windows.get(index))
        at = {n: i for i, n in enumerate(logic.COUNTERS)}
        held = logic.held_items  # type: ignore[attr-defined]
        applies = getattr(logic, "window_costs_apply", True)
        if costs is not None and applies:
            return _WindowGrowth(costs, held, at["probes"], at["inserted"], at["expired"])
        key = index if applies else (logic.cost_key or index)
        if key in self.unfitted_windows:
            return None

        if not applies:
            remedy = "no calibration measures them for this actor (docs/simulator.md)"
        elif measurable(index):
            remedy = "`streamjoin calibrate` measures them"
        else:
            remedy = "no calibration measures them for an index whose probes scan the window"

        def watch(before: tuple, after: tuple) -> float:
            if key not in self.unfitted_windows and held() > 2 * FITTED_HELD:
                self.unfitted_windows.add(key)
                warnings.warn(
                    f"machine profile {self.profile.name!r} has no costs for windows past "
                    f"{FITTED_HELD:,} items a core over {key!r}, and a core holds "
                    f"{held():,}: its steps are charged as if its window fit the caches, "
                    'though past them they take longer (docs/simulator.md, "How a step is '
                    f'charged"); {remedy}',
                    stacklevel=2,
                )
            return 0.0

        return watch

    def bind_tasks(self, logic: ActorLogic):
        """For a core that reports its tasks (``last_tasks``): ``split(kind, msg, before,
        after, wall_ns) -> (serial ns, [task ns, …])`` of a step (:func:`task_costs`), for
        the simulator's model of a pipelined core; None for other cores."""
        if not hasattr(logic, "last_tasks"):
            return None
        c_call, *per_unit = self.coefficients(logic)
        coefs = dict(zip(logic.COUNTERS, per_unit, strict=True))
        growth = self._window_growth(logic)

        def split(kind, msg, before, after, wall_ns) -> tuple[float, list[float]]:
            one = _dot(c_call, per_unit, before, after)
            if growth is not None:
                one += growth(before, after)
            return task_costs(one, logic, coefs, before, after, _rates(growth))

        return split

    def after_idle_ns(self, logic: ActorLogic) -> float:
        """What a step of ``logic`` costs more when it follows idle time."""
        return self.profile.after_idle.of(logic.cost_group)

    def message_ns(self, msg) -> tuple[int, int, int]:
        """``(send, hop, receive)`` of one message to one destination, in ns: the sender's CPU
        time to hand it over, the latency until the receiver can start on it (no core busy),
        and the receiver's CPU time before its step runs."""
        if self._per_byte:
            return self.profile.messages.step_ns(message_nbytes(msg))
        return self._msg_const


class _WindowGrowth:
    """What a join actor's steps cost more for its window: ``costs`` at the items it holds
    (``held()``), per probe and per tuple inserted or expired (their counters' positions)."""

    def __init__(self, costs: WindowCosts, held, probes: int, inserted: int, expired: int):
        self.costs, self.held = costs, held
        self.probes, self.inserted, self.expired = probes, inserted, expired

    def __call__(self, before: tuple, after: tuple) -> float:
        p, i, e = self.probes, self.inserted, self.expired
        stored = after[i] - before[i] + after[e] - before[e]
        return self.costs.charge(self.held(), after[p] - before[p], stored)

    def rates(self) -> tuple[float, float]:
        """``(ns more a probe, ns more a tuple inserted)`` at the items held now."""
        probe_ns, store_ns = self.costs.at(self.held())
        return probe_ns, store_ns / 2


def _rates(growth) -> tuple[float, float]:
    """A threaded core's window costs a probe and an insert (:meth:`_WindowGrowth.rates`),
    charged with its tasks; ``(0, 0)`` without."""
    return growth.rates() if isinstance(growth, _WindowGrowth) else (0.0, 0.0)


def _dot(c_call: float, per_unit: list, before: tuple, after: tuple) -> float:
    """A step's charge on one processor: the call, and each counter's growth at its cost."""
    ns = c_call
    for c, a, b in zip(per_unit, after, before, strict=True):
        ns += c * (a - b)  # left to right: the dot product in counter order
    return ns


def threads_charge(
    one: float,
    logic,
    coefs: dict,
    before: tuple,
    after: tuple,
    threads: int | None = None,
    rates: tuple[float, float] = (0.0, 0.0),
) -> float:
    """A step of a core whose ``logic.threads`` threads share its tasks (PIM-Tree §4.1) on
    ``threads`` processors (default ``logic.threads``; fewer where the host has no more free),
    from ``one``, its charge on one processor (:func:`task_costs`, ``rates`` its window
    costs): tasks go in order to the thread that is free first, and the step costs what is
    not task work plus the last thread's finish. Lock waits are not charged: their count
    depends on the host's timing, and virtual time must not."""
    serial, per_task = task_costs(one, logic, coefs, before, after, rates)
    if not per_task:
        return one
    return serial + finish_at(per_task, [0.0] * (threads or logic.threads))


def task_costs(
    one: float,
    logic,
    coefs: dict,
    before: tuple,
    after: tuple,
    rates: tuple[float, float] = (0.0, 0.0),
) -> tuple[float, list[float]]:
    """A threaded core's step charged ``one`` on one processor, split into what is not task
    work (the call and the window-part calls, staging, gathering, expiry) and each task's
    cost (``logic.last_tasks``, the W_* columns of
    :mod:`~streamjoin.actors.shared_index.kernels`): its tuples, probes (and their share of
    the step's descent work), candidates, pairs, inserts and the rows it scanned past the
    edge tuple, and what its probes and inserts cost more for the window (``rates``: ns a
    probe, ns an insert; ``one`` holds them, and the expiries' part stays serial).
    ``(one, [])`` for a step without tasks."""
    tasks = logic.last_tasks
    if len(tasks) == 0:
        return one, []
    delta = {n: a - b for n, a, b in zip(logic.COUNTERS, after, before, strict=True)}
    probes = tasks[:, W_PROBES].astype(float)
    # the step's descent work (``scan``) split by what it counted: the probes' descents of an
    # index, or a nested loop's rows scanned
    by = probes if logic.indexed else tasks[:, W_SCANNED].astype(float)
    scan = delta["scan"] * by / by.sum() if by.sum() else 0.0 * by
    per_task = (
        coefs["tuples"] * tasks[:, W_TUPLES]
        + coefs["probes"] * probes
        + coefs["scan"] * scan
        + coefs["candidates"] * tasks[:, W_CANDIDATES]
        + coefs["pairs"] * tasks[:, W_PAIRS]
        + (coefs["inserted"] + rates[1]) * tasks[:, W_INSERTED]
        + rates[0] * probes
    )
    return max(0.0, one - float(per_task.sum())), per_task.tolist()


def schedule(per_task: list[float], free: list[float]) -> list[float]:
    """When each thread is free again after ``per_task`` are taken, in order, by the thread
    free first, the threads free from ``free`` (a time each; ties go to the earlier listed)."""
    free = list(free)
    for cost in per_task:
        k = free.index(min(free))
        free[k] += cost
    return free


def finish_at(per_task: list[float], free: list[float]) -> float:
    """When the last of ``per_task`` ends (:func:`schedule`)."""
    return max(schedule(per_task, free))
