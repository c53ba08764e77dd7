"""What an executor records while it runs, and how it becomes :class:`Result` metrics."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from streamjoin.actors.collector import Collector


@dataclass
class ActorStats:
    role: str
    busy_ns: int = 0
    batches_in: int = 0
    tuples_in: int = 0
    batches_out: int = 0
    tuples_out: int = 0
    peak_queue: int = 0
    #: CPU time of the actor's own process from its first message to its end of stream
    #: (``ray`` hosts: the logic, messaging and Ray's threads meanwhile), None where actors
    #: share a process
    cpu_ns: int | None = None
    #: CPU time in the logic's steps alone, messaging left out (``ray``: the stepping
    #: thread's CPU; ``sim``: the compute its steps were charged), None where not measured
    step_cpu_ns: int | None = None


@dataclass
class RunTrace:
    """Raw record of one run; ``collector`` is the collector's logic object after EOF."""

    input_tuples: int
    start_ns: int
    end_ns: int
    actors: dict[str, ActorStats] = field(default_factory=dict)
    collector: Collector | None = None

    def actor_metrics(self) -> dict:
        elapsed = max(1, self.end_ns - self.start_ns)
        out = {}
        for name, st in self.actors.items():
            d = asdict(st)
            d["busy_s"] = d.pop("busy_ns") / 1e9
            d["busy_share"] = st.busy_ns / elapsed
            cpu = d.pop("cpu_ns")
            if cpu is not None:
                d["cpu_s"] = cpu / 1e9
            step_cpu = d.pop("step_cpu_ns")
            if step_cpu is not None:
                d["step_cpu_s"] = step_cpu / 1e9
            out[name] = d
        return out
