"""When input reaches the simulated emitter: :class:`Arrival` processes in virtual time.

A constant or Poisson rate (tuples/s of virtual time; one total rate or one per stream), or a
replay of the input's own ``ts``. A chunk arrives with its last row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamjoin.checks import positive_int, positive_number
from streamjoin.validation import Columns, InputError

#: What a rate is, in error messages.
_RATE = "finite rate in tuples/s"


#: Latest replayed arrival, virtual ns (~146 years): the clock is int64 ns, and the work
#: after the last arrival must fit too.
MAX_REPLAY_NS = 2**62


@dataclass(frozen=True)
class Arrival:
    """When input chunks reach the emitter, in virtual time.

    Build with :meth:`constant`, :meth:`poisson` or :meth:`replay`. Rows keep the input's
    order. With one total rate each row arrives one (constant or exponential) gap after the
    one before, and the input's interleaving decides each stream's share. With one rate per
    stream a row arrives at its own stream's schedule or right after the row before it,
    whichever is later: rows whose stream is ahead of the input's interleaving arrive in
    clumps (two independent Poisson streams forced into a fixed order arrive about half in
    pairs). For per-stream Poisson arrivals generate the input with matching ``ts``
    (``sources.synthetic(process="poisson", ...)``) and replay it.
    """

    process: str
    rate: float | None = None  # total tuples/s, both streams together
    rates: tuple[float, float] | None = None  # (R, S) tuples/s
    seed: int = 0
    speed: float = 1.0
    ts_unit_ns: int = 1_000_000

    @classmethod
    def constant(
        cls, rate: float | None = None, *, rate_r: float | None = None, rate_s: float | None = None
    ) -> Arrival:
        """Evenly spaced arrivals: ``rate`` tuples/s in total, or ``rate_r`` / ``rate_s`` per
        stream (asymmetric streams, DP-Join §IV-C2)."""
        return cls("constant", *cls._rates(rate, rate_r, rate_s))

    @classmethod
    def poisson(
        cls,
        rate: float | None = None,
        *,
        rate_r: float | None = None,
        rate_s: float | None = None,
        seed: int = 0,
    ) -> Arrival:
        """Exponential inter-arrival times (seeded), at the same rates as :meth:`constant`."""
        return cls("poisson", *cls._rates(rate, rate_r, rate_s), seed=seed)

    @classmethod
    def replay(cls, speed: float = 1.0, ts_unit_ns: int = 1_000_000) -> Arrival:
        """Each row arrives at its own ``ts`` (milliseconds by default) from the first row's,
        ``speed`` times faster than recorded."""
        speed = positive_number("speed", speed, "finite factor")
        return cls("replay", speed=speed, ts_unit_ns=positive_int("ts_unit_ns", ts_unit_ns))

    @staticmethod
    def _rates(
        rate: float | None, rate_r: float | None, rate_s: float | None
    ) -> tuple[float | None, tuple[float, float] | None]:
        if rate is not None:
            if rate_r is not None or rate_s is not None:
                raise ValueError("give either rate (total) or rate_r and rate_s, not both")
            return positive_number("rate", rate, _RATE), None
        if rate_r is None or rate_s is None:
            raise ValueError("give rate (total tuples/s) or both rate_r and rate_s")
        return None, (
            positive_number("rate_r", rate_r, _RATE),
            positive_number("rate_s", rate_s, _RATE),
        )

    @property
    def total_rate(self) -> float | None:
        """Tuples/s over both streams (None for a replay)."""
        return self.rate if self.rates is None else (sum(self.rates) if self.rates else None)

    def rate_of(self, cols: Columns | None) -> float | None:
        """Tuples/s over both streams at which ``cols`` arrive: :attr:`total_rate`, or for a
        replay the rate the input's ``ts`` span implies (None without ``cols``, or if every
        row has the same ``ts``)."""
        rate = self.total_rate
        if rate is None and cols is not None and len(cols) > 1:
            span_s = (int(cols.ts.max()) - int(cols.ts.min())) * self.ts_unit_ns / 1e9
            rate = len(cols) * self.speed / span_s if span_s > 0 else None
        return rate

    def scaled(self, factor: float) -> Arrival:
        """The same process ``factor`` times as fast (a replay: ``speed`` times ``factor``)."""
        if self.process == "replay":
            return Arrival("replay", speed=self.speed * factor, ts_unit_ns=self.ts_unit_ns)
        rates = None if self.rates is None else (self.rates[0] * factor, self.rates[1] * factor)
        rate = None if self.rate is None else self.rate * factor
        return Arrival(self.process, rate, rates, self.seed)

    def to_dict(self) -> dict:
        d: dict[str, object] = {"process": self.process}
        if self.process == "replay":
            d.update(speed=self.speed, ts_unit_ns=self.ts_unit_ns)
        else:
            d.update(
                {"rate": self.rate}
                if self.rates is None
                else {"rate_r": self.rates[0], "rate_s": self.rates[1]}
            )
            if self.process == "poisson":
                d["seed"] = self.seed
        return d

    def start(self) -> ArrivalClock:
        """A fresh schedule for one run."""
        return ArrivalClock(self)


class ArrivalClock:
    """Arrival time of each chunk (its last row), chunk by chunk, non-decreasing."""

    def __init__(self, arrival: Arrival) -> None:
        self.a = arrival
        self.last = 0.0  # virtual seconds
        self.n = [0, 0, 0]  # rows so far: R, S, total
        self.t = [0.0, 0.0, 0.0]  # Poisson: current time per stream and total (seconds)
        self.rngs = [np.random.default_rng([arrival.seed, s]) for s in range(3)]
        self.draws = [np.empty(0)] * 3  # exponential draws not used yet, per schedule
        self.used = [0, 0, 0]
        self.ts0: int | None = None

    def chunk_ns(self, cols: Columns) -> int:
        a, n = self.a, len(cols)
        if a.process == "replay":
            if n:
                if self.ts0 is None:
                    self.ts0 = int(cols.ts.min())
                # Python ints: the span of int64 ts can exceed int64
                span = int(cols.ts.max()) - self.ts0
                t = span * a.ts_unit_ns / a.speed / 1e9
                if t * 1e9 > MAX_REPLAY_NS:
                    raise InputError(
                        f"replaying ts: column 'ts' reaches {int(cols.ts.max())}, {span} units "
                        f"after the first row's {self.ts0}; at {a.ts_unit_ns} ns per unit and "
                        f"speed {a.speed:g} that is {t / 3.15576e7:.3g} years of virtual time, "
                        "beyond the simulator's clock (int64 ns, ~146 years); replay faster "
                        "(Arrival.replay(speed=...)) or use a rate (pace=, Arrival.constant)"
                    )
                self.last = max(self.last, t)
        elif a.rates is None:
            assert a.rate is not None  # a rate, total or per stream, unless a replay
            self.last = max(self.last, self._advance(2, n, a.rate))
        else:
            for s in (0, 1):
                k = int(np.count_nonzero((cols.stream & 1) == s))
                if k:
                    self.last = max(self.last, self._advance(s, k, a.rates[s]))
        return int(round(self.last * 1e9))

    def _advance(self, s: int, k: int, rate: float) -> float:
        """Time (s) of the last of ``k`` more arrivals on schedule ``s``."""
        self.n[s] += k
        if self.a.process == "constant":
            return self.n[s] / rate
        # per-row draws, so the schedule does not depend on how the input is chunked
        draws = self._exponentials(s, k)
        # Python floats from here on: rounding a numpy scalar costs microseconds per chunk
        self.t[s] += float(draws[0] if k == 1 else draws.sum()) / rate
        return self.t[s]

    def _exponentials(self, s: int, k: int) -> np.ndarray:
        """The next ``k`` draws of schedule ``s``, drawn a block at a time (a generator gives
        the same values in one call of n as in n calls of one)."""
        buf, i = self.draws[s], self.used[s]
        if i + k > len(buf):
            buf = np.concatenate([buf[i:], self.rngs[s].standard_exponential(max(k, 4096))])
            self.draws[s], i = buf, 0
        self.used[s] = i + k
        return buf[i : i + k]
