"""How much a step's compute and a message's way vary from one to the next on a machine.

On a real host no two steps of the same work take the same time: caches, the other
processes, the kernel's placement of a woken process and the wire each add their share, and a
paced run's latency percentiles are set by that spread (a tail percentile by little else). A
profile without a :class:`Variability` charges every step and message its expected cost, so
its latencies have no spread: every chunk of a paced ``single`` run comes out after the same
time, and its p99 is its p50.

A :class:`Variability` holds two distributions, measured on the executor's hosts
(:func:`~streamjoin.runtime.sim.ray_messages.measure_messages`) as tables of quantiles at
:data:`PROBABILITIES`:

- ``step``: a step's compute over its expected cost, from the join work a host does between
  its messages (the same work every time, after the same rest). The table has mean 1: the
  step costs are fitted as means (:mod:`~streamjoin.runtime.sim.calibrate`), so the spread
  leaves a run's total compute as it was and redistributes it among the steps;
- ``message``: a message's one-way time (the sender's write to the receiver's step) over its
  median: the message costs are fitted as medians
  (:class:`~streamjoin.runtime.sim.profile.MessageCosts`), so the median message stays as it
  was and the mean grows by the measured skew.

The simulator draws a factor from each for every step and every message
(:class:`Draws`): the step's compute is multiplied by it, and a message's time in flight grows
(or shrinks, never below zero) by its factor less one times its send, wire and receive
time. The draws come from a generator per core, seeded by the profile's ``seed`` and the
core's name, so a run's metrics stay the same from one run to the next for a given profile,
and one core's draws do not depend on what the others drew.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

#: Probabilities at which the tables hold their quantiles: finer in the tails, which set a
#: run's high percentiles.
PROBABILITIES = (
    0.0,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.3,
    0.4,
    0.5,
    0.6,
    0.7,
    0.8,
    0.9,
    0.95,
    0.98,
    0.99,
    1.0,
)
_P = np.asarray(PROBABILITIES)
#: Draws a core's generator makes at once (one uniform variate each).
_BLOCK = 1024


def _check_table(name: str, table) -> tuple[float, ...]:
    values = tuple(float(v) for v in table)
    if not values:
        return ()
    if len(values) != len(PROBABILITIES):
        raise ValueError(
            f"variability {name!r} must hold {len(PROBABILITIES)} quantiles (at "
            f"{list(PROBABILITIES)}), got {len(values)}"
        )
    if not all(np.isfinite(values)) or values[0] < 0:
        raise ValueError(f"variability {name!r} must hold finite factors >= 0, got {values}")
    if any(b < a for a, b in zip(values, values[1:], strict=False)):
        raise ValueError(f"variability {name!r} must be non-decreasing quantiles, got {values}")
    return values


def table_mean(table: tuple[float, ...]) -> float:
    """The mean of the distribution whose quantile function is ``table`` at
    :data:`PROBABILITIES`, linear in between."""
    q = np.asarray(table)
    return float(np.sum(np.diff(_P) * (q[1:] + q[:-1]) / 2))


def spread_table(samples, *, mean_one: bool) -> tuple[float, ...]:
    """The quantiles at :data:`PROBABILITIES` of ``samples`` relative to one another: over
    their mean made exactly 1 (``mean_one``, the mean of the interpolated distribution), else
    over their median; ``()`` for fewer than 20 samples or a median of 0."""
    x = np.asarray(samples, dtype=np.float64)
    x = x[np.isfinite(x)]
    if len(x) < 20 or np.median(x) <= 0:
        return ()
    table = np.maximum(0.0, np.quantile(x, _P)) / np.median(x)
    if mean_one:
        table = table / table_mean(tuple(table))
    return tuple(round(float(v), 4) for v in table)


@dataclass(frozen=True)
class Variability:
    """The spread of steps and messages (module docstring): ``step`` and ``message`` are
    tables of quantiles at :data:`PROBABILITIES` (empty: none, every one costs its expected
    time); ``seed`` seeds the draws."""

    step: tuple = ()
    message: tuple = ()
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "step", _check_table("step", self.step))
        object.__setattr__(self, "message", _check_table("message", self.message))
        seed = self.seed
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ValueError(f"variability seed must be an int >= 0, got {seed!r}")
        object.__setattr__(self, "seed", int(seed))

    def __bool__(self) -> bool:
        return bool(self.step or self.message)

    def draws(self, core: str) -> Draws:
        """The factors of core ``core``'s steps and messages, in the order it takes them."""
        return Draws(self, core)

    def to_dict(self) -> dict:
        return {"step": list(self.step), "message": list(self.message), "seed": self.seed}

    def summary(self) -> str:
        """One line: the 10th, 50th, 90th and 99th percentiles of each factor."""
        at = [PROBABILITIES.index(p) for p in (0.1, 0.5, 0.9, 0.99)]
        cells = [
            f"{name} p10/p50/p90/p99 " + "/".join(f"{table[i]:.2f}" for i in at)
            for name, table in (("step", self.step), ("message", self.message))
            if table
        ]
        return "  spread: " + ("; ".join(cells) or "none") + f" (seed {self.seed})"


class Draws:
    """One core's factors (:meth:`Variability.draws`): ``step()`` for its next step's
    compute, ``message()`` for its next message's way; 1.0 where the profile has no such
    table. Each from a generator of its own, seeded by the profile's seed and the core's
    name."""

    def __init__(self, variability: Variability, core: str) -> None:
        key = zlib.crc32(core.encode())
        self._step = _Stream(variability.step, (variability.seed, key, 0))
        self._message = _Stream(variability.message, (variability.seed, key, 1))

    def step(self) -> float:
        return self._step()

    def message(self) -> float:
        return self._message()


class _Stream:
    """Factors drawn from one quantile table by inversion, a block at a time."""

    def __init__(self, table: tuple, seed: tuple) -> None:
        self.table = np.asarray(table, dtype=np.float64)
        self.rng = np.random.default_rng(list(seed)) if table else None
        self.block: list[float] = []

    def __call__(self) -> float:
        if self.rng is None:
            return 1.0
        if not self.block:
            self.block = np.interp(self.rng.random(_BLOCK), _P, self.table)[::-1].tolist()
        return self.block.pop()
