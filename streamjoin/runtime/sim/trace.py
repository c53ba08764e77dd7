"""What a simulated run records: :class:`SimTrace` (all times virtual) and the metrics it adds
to a :class:`~streamjoin.runtime.result.Result`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from streamjoin.runtime.sim.arrival import Arrival
from streamjoin.runtime.sim.profile import MachineProfile
from streamjoin.runtime.trace import ActorStats, RunTrace


@dataclass
class SimStats(ActorStats):
    """:class:`ActorStats` in virtual time, plus what only a simulator can see."""

    peak_queue_tuples: int = 0
    mean_queue: float = 0.0  # time-averaged mailbox length, messages
    compute_wall_ns: int = 0  # host time the logic took (model vs. host check)
    after_idle_steps: int = 0  # steps charged the profile's after-idle cost
    step_cpu_ns: int = 0  # the compute its steps were charged (messages left out)
    kernel_ns: int = 0  # the kernel's delivery of its messages, charged in its sends


@dataclass
class SimTrace(RunTrace):
    """:class:`RunTrace` of a simulated run (all times virtual ns)."""

    profile: MachineProfile | None = None
    arrival: Arrival | None = None
    last_arrival_ns: int = 0
    queue_t_ns: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    queue_tuples: dict[str, np.ndarray] = field(default_factory=dict)
    steps: int = 0  # actor steps simulated
    messages: int = 0  # messages delivered (one per destination)
    wall_s: float = 0.0
    fallbacks: dict[str, str] = field(default_factory=dict)

    @property
    def drain_ns(self) -> int:
        """Virtual time from the last arrival until the collector ended."""
        return max(0, self.end_ns - self.last_arrival_ns)

    def metrics(self, max_points: int = 256) -> dict:
        """What a simulated run adds to :attr:`Result.metrics`: the profile and arrival process
        in use (the profile's ``source`` says where it came from: ``shipped``, a file or this
        host's cache), drain time, simulator cost, and the mailbox samples (at most
        ``max_points``)."""
        step = max(1, math.ceil(len(self.queue_t_ns) / max_points))
        return {
            "machine_profile": (
                self.profile.to_dict() | {"source": self.profile.source} if self.profile else None
            ),
            "sim": {
                "arrival": self.arrival.to_dict() if self.arrival else None,
                "last_arrival_s": self.last_arrival_ns / 1e9,
                "drain_s": self.drain_ns / 1e9,
                "steps": self.steps,
                "messages": self.messages,
                "wall_s": self.wall_s,
                "index_fallbacks": self.fallbacks,
                "queue_tuples": {
                    "t_s": (self.queue_t_ns[::step] / 1e9).tolist(),
                    **{n: s[::step].tolist() for n, s in self.queue_tuples.items()},
                },
            },
        }
