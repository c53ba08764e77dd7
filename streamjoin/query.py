"""Join predicates, windows and the :class:`Query` that combines them.

Semantics (docs/design.md §1). Every predicate is written with ``r`` from stream R and ``s`` from
stream S. Each elementary condition compares one attribute of r with one of s — the same one
by default, another when a second name is given (``less("a", "b")`` ⇔ ``r.a < s.b``) — and is
normalised once, here, to a *closed interval on the difference* ``d = s.attr_s - r.attr``:

=============================  ===========================  ===============================
condition                      meaning                      ``d = s.attr_s - r.attr`` in
=============================  ===========================  ===============================
``band("x", eps)``             ``|r.x - s.x| <= eps``       ``[-eps, eps]``
``band("x", eps, "y")``        ``|r.x - s.y| <= eps``       ``[-eps, eps]``
``band("x", lo=a, hi=b)``      ``s.x - r.x in [a, b]``      ``[a, b]``
``equal("k")``                 ``r.k == s.k``               ``[0, 0]``
``not_equal("k")``             ``r.k != s.k``               not in ``[0, 0]``
``less("a")``                  ``r.a < s.a``                ``[TINY, +inf]``
``less_equal("start", "end")`` ``r.start <= s.end``         ``[0, +inf]``
``greater("a")``               ``r.a > s.a``                ``[-inf, -TINY]``
``greater_equal("a")``         ``r.a >= s.a``               ``[-inf, 0]``
=============================  ===========================  ===============================

``TINY`` is the smallest positive float64 (5e-324). For finite IEEE doubles ``s - r > 0`` holds
exactly when ``s > r`` (gradual underflow), and ``s - r == 0`` exactly when ``s == r``, so the
strict inequalities become closed intervals without changing their meaning. ``not_equal`` is the
one *negated* interval: it holds when ``d`` lies outside ``[0, 0]``. Every join path (oracle,
index, core) evaluates the same formula ``lo <= s - r <= hi`` (negated for ``not_equal``),
which is what makes the result identical on every backend.

``d`` is exact between integers: when both values come from integer columns (any numpy
integer dtype within int64, Arrow ``int64``, …) ``d`` is the difference of the integers, never
rounded or wrapped, and is compared with the bounds exactly, over the whole int64 range
(nanosecond timestamps, 64-bit ids, cents). Otherwise ``d`` is the float64 difference of two
float64 values, an integer compared with a float taking its nearest float64. Up to ``2**52``
in magnitude the two readings agree, and a join over such integers runs as it would over
floats; beyond, the join core refines its indexes' candidates on the exact integers
(:class:`~streamjoin.validation.Columns`).

Conjunctions are written with ``&``; the first conjunct is the *primary* one that indexes serve,
the rest are checked as residual filters (or, for two inequalities, both served by a
``po_join`` IE-Join structure). Disjunctions are written with ``|``: ``(A & B) | C`` holds when
any of its terms does (each pair is still emitted once), and a :class:`Predicate` keeps it in
disjunctive normal form with the conditions common to every term factored out. An index
serves what every term implies: a common condition, or the *hull* of the terms' intervals on
one attribute pair (:attr:`Predicate.implied`); with neither, each term may have an index of
its own (:class:`~streamjoin.indexes.base.IndexPlan`'s ``terms``). The terms themselves are
checked on every candidate. A self-join keeps the pair (a older, b newer) iff θ(a, b) or
θ(b, a); with a second attribute that is ``lo <= b.attr_s - a.attr <= hi`` or
``lo <= a.attr_s - b.attr <= hi``.
"""

from __future__ import annotations

import collections
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from streamjoin.checks import positive_int
from streamjoin.modes import HOWS, ON_LATE, How, OnLate

TINY = float(np.nextafter(0.0, 1.0))
INF = math.inf


@dataclass(frozen=True)
class Condition:
    """One elementary condition ``lo <= s.attr_s - r.attr <= hi`` (closed; the difference
    exact between integers, float64 otherwise: see the module docstring), or its negation
    (``not_equal``).

    ``attr`` names r's attribute, ``attr_s`` s's (the same one unless the condition compares two
    attributes). ``kind`` is kept for display and for indexes that serve only some kinds
    (``hash`` serves ``equal`` only).
    """

    attr: str
    lo: float
    hi: float
    kind: str
    attr_s: str = ""

    def __post_init__(self) -> None:
        if not self.attr_s:
            object.__setattr__(self, "attr_s", self.attr)

    def __and__(self, other: Condition | Filter | Predicate | Residual) -> Predicate:
        return Predicate((self,)) & other

    def __or__(self, other: Condition | Predicate) -> Predicate:
        return Predicate((self,)) | other

    def __ror__(self, other: Condition | Predicate) -> Predicate:
        return Predicate((self,)).__ror__(other)

    @property
    def is_equality(self) -> bool:
        return self.lo == 0.0 and self.hi == 0.0 and not self.negated

    @property
    def negated(self) -> bool:
        """True for ``not_equal``: the condition holds when ``d`` is *outside* ``[lo, hi]``."""
        return self.kind == "not_equal"

    @property
    def pair(self) -> tuple[str, str]:
        """``(attr, attr_s)``: the attributes the condition compares."""
        return (self.attr, self.attr_s)

    @property
    def cross(self) -> bool:
        """True when r's and s's attributes differ (``less("a", "b")``)."""
        return self.attr != self.attr_s

    @property
    def shift(self) -> float:
        """``c`` of an inequality ``r.attr + c OP s.attr_s`` (0 for the others)."""
        match self.kind:
            case "less":
                return 0.0 if self.lo == TINY else float(np.nextafter(self.lo, -INF))
            case "less_equal":
                return self.lo
            case "greater":
                return 0.0 if self.hi == -TINY else float(np.nextafter(self.hi, INF))
            case "greater_equal":
                return self.hi
        return 0.0

    def __str__(self) -> str:
        r, s = f"r.{self.attr}", f"s.{self.attr_s}"
        c = self.shift
        if c:
            r = f"{r} {'+' if c > 0 else '-'} {abs(c):g}"
        match self.kind:
            case "band":
                if self.lo == -self.hi:
                    return f"|{r} - {s}| <= {self.hi:g}"
                return f"{s} - {r} in [{self.lo:g}, {self.hi:g}]"
            case "equal":
                return f"{r} == {s}"
            case "not_equal":
                return f"{r} != {s}"
            case "less":
                return f"{r} < {s}"
            case "less_equal":
                return f"{r} <= {s}"
            case "greater":
                return f"{r} > {s}"
            case _:
                return f"{r} >= {s}"


@dataclass(frozen=True)
class Filter:
    """A condition on one tuple's own column, ``r.attr OP value`` or ``s.attr OP value``
    (SQL's ``ON r.price < 100``), written ``sj.r.price < 100`` or ``sj.s["kind"] != 3``.

    Semantics (SQL ``ON``): a tuple that fails a filter of its side joins nothing, but it is
    still a tuple of its stream: it takes its place in count windows, and it moves the
    watermark. In a self-join both sides are the one stream, so every filter applies to
    every tuple. Filters are decided before a tuple is stored or probes (the emitter drops
    it), so they cost nothing downstream.

    The comparison is exact: an integer column is compared with ``value`` as integers (a
    fractional ``value`` by its floor or ceiling, as the operator needs), a float column as
    float64. A missing value (null or NaN) fails every filter, as SQL's ``NULL`` does.
    """

    side: str  # "r" or "s"
    attr: str
    op: str
    value: int | float

    def __post_init__(self) -> None:
        if self.side not in ("r", "s"):
            raise ValueError(f"a filter is on r or s, got {self.side!r}")
        _attr_name(self.attr)
        if self.op not in FILTER_OPS:
            raise ValueError(f"filter operator must be one of {FILTER_OPS}, got {self.op!r}")
        v = self.value
        if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
            raise ValueError(
                f"{self.side}.{self.attr} {self.op} …: the value must be a number, got {v!r}"
            )
        if isinstance(v, float | np.floating) and not math.isfinite(v):
            raise ValueError(
                f"{self.side}.{self.attr} {self.op} …: the value must be finite, got {v!r}"
            )
        object.__setattr__(self, "value", int(v) if isinstance(v, int | np.integer) else float(v))

    def __and__(self, other: Condition | Filter | Predicate | Residual) -> Predicate:
        return Predicate((), (self,)) & other

    def __rand__(self, other: Condition) -> Predicate:
        return Predicate((other,)) & self

    def __or__(self, other: object) -> Predicate:
        raise _filter_in_or(self)

    __ror__ = __or__

    def __str__(self) -> str:
        return (
            f"{self.side}.{self.attr} {self.op} {self.value:g}"
            if isinstance(self.value, float)
            else f"{self.side}.{self.attr} {self.op} {self.value}"
        )


#: The comparisons a :class:`Filter` takes.
FILTER_OPS = ("<", "<=", ">", ">=", "==", "!=")


@dataclass(frozen=True, eq=False)
class Residual:
    """A residual function ``fn(r, s)`` over the candidates' columns (:func:`where`).

    ``fn`` gets two read-only views of ``columns``, one for the r tuples and one for the s
    tuples of ``n`` candidate pairs (``r["x"]`` or ``r.x``: numpy arrays of ``n`` values,
    int64 for an integer column, float64 for a float one), and returns ``n`` booleans: the
    pairs it keeps. It is called only on pairs that satisfy every other condition, never
    chooses an index, and applies to the whole join (not to one side of an OR).
    """

    fn: Callable
    columns: tuple[str, ...]

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ValueError(f"where() takes a function fn(r, s), got {self.fn!r}")
        if isinstance(self.columns, str) or not self.columns:
            raise ValueError(
                f"where() needs columns=(...), the names fn reads, got {self.columns!r}"
            )
        object.__setattr__(self, "columns", tuple(_attr_name(c) for c in self.columns))
        if _compiled(self.fn):
            for c in self.columns:
                if not c.isidentifier() or c.startswith("_"):
                    raise ValueError(
                        f"where() with a numba function reads its columns as attributes "
                        f"(r.{c}): column {c!r} is not a Python name; rename it, or pass a "
                        f"plain function, which can read r[{c!r}]"
                    )

    @property
    def name(self) -> str:
        """The function's name, for messages (``<lambda>`` for a lambda)."""
        return getattr(self.fn, "__name__", None) or repr(self.fn)

    def __and__(self, other: Condition | Filter | Predicate | Residual) -> Predicate:
        return _as_predicate(other) & self

    __rand__ = __and__

    def __or__(self, other: object) -> Predicate:
        raise _residual_in_or(self)

    __ror__ = __or__

    def __str__(self) -> str:
        text = getattr(self.fn, "text", None)  # a residual read from text: itself
        return text if isinstance(text, str) else f"where {self.name}({', '.join(self.columns)})"

    def keep(self, r: dict[str, np.ndarray], s: dict[str, np.ndarray]) -> np.ndarray:
        """``fn`` on candidates whose columns are ``r`` and ``s`` (each column's values, one
        per pair): a bool array, one per pair. Raises :class:`ResidualError` naming the
        function when it raises or returns something else."""
        n = len(next(iter(r.values())))
        try:
            if _compiled(self.fn):  # each side's columns as a named tuple of arrays
                kept = self.fn(_named(r), _named(s))
            else:
                kept = self.fn(Rows(r), Rows(s))
        except Exception as e:
            raise ResidualError(
                f"the where() function {self.name} raised {type(e).__name__}: {e}"
            ) from e
        kept = np.asarray(kept)
        if kept.dtype != np.bool_ or kept.shape != (n,):
            raise ResidualError(
                f"the where() function {self.name} must return {n} booleans (one per pair), "
                f"got {kept.dtype} of shape {kept.shape}"
            )
        return kept


def _compiled(fn) -> bool:
    """Whether ``fn`` is a numba function (a dispatcher, which keeps the Python one)."""
    return hasattr(fn, "py_func") and hasattr(fn, "signatures")


@functools.cache
def _columns_type(names: tuple[str, ...]) -> type:
    return collections.namedtuple("Columns", names)


def _read_only(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Read-only views of ``columns`` (the caller's arrays stay writeable)."""
    views = {name: np.asarray(values).view() for name, values in columns.items()}
    for view in views.values():
        view.flags.writeable = False
    return views


def _named(columns: dict[str, np.ndarray]) -> tuple:
    """``columns`` as a named tuple of read-only arrays, as a numba function reads them."""
    return _columns_type(tuple(columns))(*_read_only(columns).values())


class ResidualError(ValueError):
    """A :func:`where` function raised, or returned something other than one bool a pair."""


class Rows:
    """The columns of one side's tuples of a batch of candidate pairs, as a :class:`Residual`
    function sees them: ``rows["x"]`` or ``rows.x``, read-only numpy arrays."""

    __slots__ = ("_columns",)
    _columns: dict[str, np.ndarray]

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        object.__setattr__(self, "_columns", _read_only(columns))

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self._columns[name]
        except KeyError:
            raise KeyError(
                f"column {name!r} is not among where()'s columns {list(self._columns)}"
            ) from None

    def __getattr__(self, name: str) -> np.ndarray:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError as e:
            raise AttributeError(e.args[0]) from None

    def __len__(self) -> int:
        return len(next(iter(self._columns.values()), ()))


def where(fn: Callable, columns: Sequence[str]) -> Residual:
    """A residual function: ``fn(r, s)`` keeps the candidate pairs for which it returns True
    (:class:`Residual`), e.g. DuckDB's ``l.k100 + r.k100 < 10``::

        sj.band("x", 5) & sj.where(lambda r, s: r.k100 + s.k100 < 10, columns=["k100"])

    ``columns`` names every column ``fn`` reads (numeric columns; they travel with the tuples
    as join attributes do). It is evaluated where the pairs are collected, on pairs that pass
    every other condition; an exception inside it ends the run naming it, with nothing
    returned. A plain function runs as numpy code (one vector expression is as fast as a
    compiled loop); a numba function (``numba.njit(lambda r, s: ...)``) is called compiled,
    with each side's columns as a named tuple of arrays (``r.k100``), and compiles on its
    first call."""
    return Residual(fn, (columns,) if isinstance(columns, str) else tuple(columns))


class _Column:
    """``sj.r.x``: one side's column, compared with a number to make a :class:`Filter`."""

    __slots__ = ("_attr", "_side")

    def __init__(self, side: str, attr: str) -> None:
        self._side, self._attr = side, _attr_name(attr)

    def _filter(self, op: str, value) -> Filter:
        return Filter(self._side, self._attr, op, value)

    def __lt__(self, value) -> Filter:
        return self._filter("<", value)

    def __le__(self, value) -> Filter:
        return self._filter("<=", value)

    def __gt__(self, value) -> Filter:
        return self._filter(">", value)

    def __ge__(self, value) -> Filter:
        return self._filter(">=", value)

    def __eq__(self, value) -> Filter:  # type: ignore[override]  # a builder, not a value
        return self._filter("==", value)

    def __ne__(self, value) -> Filter:  # type: ignore[override]  # a builder, not a value
        return self._filter("!=", value)

    __hash__ = None  # type: ignore[assignment]  # (== builds a Filter)

    def __repr__(self) -> str:
        return f"{self._side}.{self._attr}"


class Side:
    """``sj.r`` and ``sj.s``: the columns of one side, for filters (``sj.r.price < 100``,
    ``sj.s["unit price"] >= 2``)."""

    __slots__ = ("_side",)

    def __init__(self, side: str) -> None:
        self._side = side

    def __getattr__(self, attr: str) -> _Column:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Column(self._side, attr)

    def __getitem__(self, attr: str) -> _Column:
        return _Column(self._side, attr)

    def __repr__(self) -> str:
        return self._side


#: The two sides of a join, for filters: ``sj.r.x < 5 & ...``.
r, s = Side("r"), Side("s")


#: How a condition of :attr:`Predicate.flat` joins the ones around it: a conjunct of every
#: term, a condition inside an OR's term, or the last condition of a term.
AND_ALL, IN_TERM, ENDS_TERM = 0, 1, 2

#: The most terms a disjunction may have once ``&`` has distributed over ``|``.
MAX_TERMS = 64


@dataclass(frozen=True)
class Predicate:
    """θ(r, s) in disjunctive normal form, with what every term shares factored out:

    ``θ = AND(conditions) AND (OR over terms of AND(term)) AND AND(filters)``

    ``conditions`` are the conditions every pair that joins satisfies (``conditions[0]`` is the
    primary one); ``terms`` the disjunction's terms, each a conjunction of conditions (empty:
    no disjunction, θ is a conjunction); ``filters`` the :class:`Filter` s on one side's own
    columns, which apply to the whole join. ``(A & B) | C`` and ``(A | B) & C`` build it (``&``
    distributes over ``|``, up to :data:`MAX_TERMS` terms); a condition common to every term
    moves to ``conditions``, a term that another term's conditions contain is dropped
    (absorption: ``A | (A & B)`` is ``A``), and one term left is a conjunction.

    A filter cannot be one side of an OR unless it is on both (``(A & f) | (B & f)`` is
    ``(A | B) & f``): SQL's ``ON r.x < 5 OR r.a < s.a`` would make a tuple that fails the filter
    still join, which one-sided filters (decided before a tuple is stored or probes) cannot
    express. That is a ``ValueError``.
    """

    conditions: tuple[Condition, ...]
    filters: tuple[Filter, ...] = ()
    terms: tuple[tuple[Condition, ...], ...] = ()
    #: residual functions (:func:`where`), which apply to the whole join
    residuals: tuple[Residual, ...] = ()

    def __post_init__(self) -> None:
        if self.terms:
            conditions, terms = _factor(self.conditions, self.terms)
            object.__setattr__(self, "conditions", conditions)
            object.__setattr__(self, "terms", terms)
        if not (self.conditions or self.terms or self.filters or self.residuals):
            raise ValueError("a predicate needs at least one condition")

    def __and__(self, other: Condition | Filter | Predicate | Residual) -> Predicate:
        if isinstance(other, Condition | Filter | Residual):
            other = _as_predicate(other)
        if not isinstance(other, Predicate):
            return NotImplemented
        filters = self.filters + other.filters
        residuals = self.residuals + other.residuals
        if not self.terms and not other.terms:
            return Predicate(self.conditions + other.conditions, filters, (), residuals)
        terms = [a + b for a in self._dnf() for b in other._dnf()]
        if len(terms) > MAX_TERMS:
            raise ValueError(
                f"({self}) AND ({other}) has {len(terms)} terms once AND is distributed over "
                f"OR; at most {MAX_TERMS}"
            )
        return Predicate((), filters, tuple(terms), residuals)

    def __rand__(self, other: Condition | Filter | Residual) -> Predicate:
        if not isinstance(other, Condition | Filter | Residual):
            return NotImplemented
        return _as_predicate(other) & self

    def __or__(self, other: Condition | Predicate) -> Predicate:
        if isinstance(other, Filter):
            raise _filter_in_or(other)
        if isinstance(other, Residual):
            raise _residual_in_or(other)
        if isinstance(other, Condition):
            other = Predicate((other,))
        if not isinstance(other, Predicate):
            return NotImplemented
        shared = set(self.residuals) & set(other.residuals)
        lone = [f for f in self.residuals + other.residuals if f not in shared]
        if lone:
            raise _residual_in_or(lone[0])
        if set(self.filters) != set(other.filters):
            alone = (
                f
                for f in self.filters + other.filters
                if f not in set(self.filters) & set(other.filters)
            )
            raise _filter_in_or(next(alone))
        terms = self._dnf() + other._dnf()
        if len(terms) > MAX_TERMS:
            raise ValueError(f"({self}) OR ({other}) has {len(terms)} terms; at most {MAX_TERMS}")
        return Predicate((), self.filters, tuple(terms), self.residuals)

    def __ror__(self, other: Condition | Predicate) -> Predicate:
        if not isinstance(other, Condition | Filter | Predicate):
            return NotImplemented
        return _as_predicate(other) | self

    def _dnf(self) -> list[tuple[Condition, ...]]:
        """θ's conditions as a list of terms (filters left out)."""
        if not self.terms:
            return [self.conditions]
        return [self.conditions + t for t in self.terms]

    def __iter__(self) -> Iterator[Condition]:
        """The :attr:`conjuncts`."""
        return iter(self.conjuncts)

    def __len__(self) -> int:
        return len(self.conjuncts)

    @property
    def implied(self) -> tuple[Condition, ...]:
        """Conditions every term implies beyond ``conditions`` (none without a disjunction):
        for each attribute pair (r's, s's) that every term constrains and no common condition
        does, the *hull* of the terms' intervals on it, ``[min lo, max hi]`` (each term's
        interval the intersection of its conditions on the pair; ``!=`` ones left out). A pair
        that joins satisfies it, so an index may serve it: exact, and it narrows the window an
        OR scans. O(conditions)."""
        if not self.terms:
            return ()
        common = {(c.attr, c.attr_s) for c in self.conditions}
        spans: list[dict[tuple[str, str], tuple[float, float, bool, bool]]] = []
        for term in self.terms:
            span: dict[tuple[str, str], tuple[float, float, bool, bool]] = {}
            for c in term:
                if c.negated:
                    continue
                lo, hi, strict_lo, strict_hi = span.get(c.pair, (-INF, INF, False, False))
                if c.lo >= lo:
                    lo, strict_lo = c.lo, c.kind == "less"
                if c.hi <= hi:
                    hi, strict_hi = c.hi, c.kind == "greater"
                span[c.pair] = (lo, hi, strict_lo, strict_hi)
            spans.append(span)
        out = []
        for pair in spans[0]:
            if pair in common or not all(pair in span for span in spans):
                continue
            lo = min(span[pair][0] for span in spans)
            hi = max(span[pair][1] for span in spans)
            if lo > hi or (lo == -INF and hi == INF):
                continue
            strict_lo = any(span[pair][0] == lo and span[pair][2] for span in spans)
            strict_hi = any(span[pair][1] == hi and span[pair][3] for span in spans)
            out.append(
                Condition(pair[0], lo, hi, _hull_kind(lo, hi, strict_lo, strict_hi), pair[1])
            )
        return tuple(out)

    @property
    def conjuncts(self) -> tuple[Condition, ...]:
        """``conditions`` and :attr:`implied`: what every pair that joins satisfies, and so
        what an index may serve (:func:`~streamjoin.indexes.plan` picks among them)."""
        return self.conditions + self.implied

    @property
    def flat(self) -> tuple[Condition, ...]:
        """Every condition the kernels check, in :attr:`links` order: the :attr:`conjuncts`,
        then each term's conditions."""
        return self.conjuncts + tuple(c for t in self.terms for c in t)

    @property
    def links(self) -> tuple[int, ...]:
        """For each condition of :attr:`flat`: ``AND_ALL`` (a conjunct), ``IN_TERM`` or
        ``ENDS_TERM`` (the last condition of its term). θ holds iff every ``AND_ALL`` one
        holds and, when there are terms, every condition of some term does."""
        out = [AND_ALL] * len(self.conjuncts)
        for t in self.terms:
            out += [IN_TERM] * (len(t) - 1) + [ENDS_TERM]
        return tuple(out)

    @property
    def attrs(self) -> tuple[str, ...]:
        """Join attribute names in condition order (:attr:`flat`), r's then s's of each (names
        may repeat)."""
        return tuple(a for c in self.flat for a in (c.attr, c.attr_s))

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)`` float64 arrays, one entry per condition of :attr:`flat`."""
        lo = np.array([c.lo for c in self.flat], dtype=np.float64)
        hi = np.array([c.hi for c in self.flat], dtype=np.float64)
        return lo, hi

    @property
    def symmetric(self) -> bool:
        """True when ``θ(a, b) ⇔ θ(b, a)`` (every interval is symmetric around 0 and compares
        an attribute with itself; an OR of such conditions is symmetric too)."""
        return all(c.lo == -c.hi and not c.cross for c in self.flat)

    @property
    def filter_attrs(self) -> tuple[str, ...]:
        """Distinct column names the filters read, in order of first use."""
        return tuple(dict.fromkeys(f.attr for f in self.filters))

    def __str__(self) -> str:
        parts = [str(c) for c in self.conditions]
        if self.terms:
            ors = " OR ".join(
                str(t[0]) if len(t) == 1 else "(" + " AND ".join(map(str, t)) + ")"
                for t in self.terms
            )
            parts.append(f"({ors})" if parts or self.filters else ors)
        return " AND ".join(parts + [str(f) for f in self.filters + self.residuals])

    @property
    def residual_columns(self) -> tuple[str, ...]:
        """Distinct column names the residual functions read, in order of first use."""
        return tuple(dict.fromkeys(c for f in self.residuals for c in f.columns))


def _as_predicate(p: Condition | Filter | Predicate | Residual) -> Predicate:
    if isinstance(p, Condition):
        return Predicate((p,))
    if isinstance(p, Filter):
        return Predicate((), (p,))
    if isinstance(p, Residual):
        return Predicate((), (), (), (p,))
    return p


def _residual_in_or(f: Residual) -> ValueError:
    return ValueError(
        f"where({f.name}) is inside one side of an OR, but a residual function applies to the "
        "whole join: AND it with the whole disjunction, or test the OR inside the function"
    )


def _filter_in_or(f: Filter) -> ValueError:
    return ValueError(
        f"the filter {f} is inside one side of an OR, but filters apply to the whole join: "
        f"AND it with the whole disjunction ((A | B) & ({f}); as text, (A OR B) AND {f}), "
        "or put it on every side of the OR"
    )


def _factor(
    conditions: tuple[Condition, ...], terms: tuple[tuple[Condition, ...], ...]
) -> tuple[tuple[Condition, ...], tuple[tuple[Condition, ...], ...]]:
    """``(conditions, terms)`` with the conditions every term shares moved to ``conditions``,
    a term whose conditions contain another's dropped (its pairs are the other's too), and a
    single term merged into ``conditions`` (:class:`Predicate`)."""
    kept = [tuple(dict.fromkeys(c for c in t if c not in conditions)) for t in terms]
    sets = [frozenset(t) for t in kept]
    kept = [
        t
        for i, t in enumerate(kept)
        if not any(sets[j] < sets[i] or (sets[j] == sets[i] and j < i) for j in range(len(kept)))
    ]
    shared = [c for c in kept[0] if all(c in t for t in kept[1:])]
    conditions = conditions + tuple(shared)
    kept = [tuple(c for c in t if c not in shared) for t in kept]
    if len(kept) == 1 or not all(kept):  # one term, or one that is just the shared part
        return conditions + (kept[0] if len(kept) == 1 else ()), ()
    return conditions, tuple(kept)


def _hull_kind(lo: float, hi: float, strict_lo: bool, strict_hi: bool) -> str:
    """The kind (for display and index choice) of the interval ``[lo, hi]``: a strict bound
    is one a ``less``/``greater`` condition set (``lo`` then its next float64)."""
    if lo == 0.0 and hi == 0.0:
        return "equal"
    if hi == INF:
        return "less" if strict_lo else "less_equal"
    if lo == -INF:
        return "greater" if strict_hi else "greater_equal"
    return "band"


def _attr_name(attr: str) -> str:
    if not isinstance(attr, str) or not attr:
        raise ValueError(f"attribute name must be a non-empty string, got {attr!r}")
    if attr in RESERVED_COLUMNS:
        raise ValueError(f"{attr!r} is a reserved column and cannot be a join attribute")
    return attr


def _finite(name: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    except OverflowError:  # an int beyond float64's range (~1.8e308)
        raise ValueError(
            f"{name} must be finite, got an integer of {len(str(abs(value)))} digits "
            "(beyond float64)"
        ) from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if isinstance(value, int | np.integer) and int(value) != v:
        raise ValueError(
            f"{name} {value} is not a float64 (the nearest is {int(v)}); bounds are float64, "
            "so give one that is (every integer up to 2**53 is)"
        )
    return v


def _s_attr(attr: str, attr_s: str | None) -> str:
    return attr if attr_s is None else _attr_name(attr_s)


def band(
    attr: str,
    eps: float | None = None,
    attr_s: str | None = None,
    *,
    lo: float | None = None,
    hi: float | None = None,
) -> Condition:
    """Band condition: ``|r.attr - s.attr_s| <= eps``, or ``lo <= s.attr_s - r.attr <= hi``.

    Give either ``eps`` (symmetric band, ``eps >= 0``) or both ``lo`` and ``hi``
    (``lo <= hi``); bounds are inclusive. ``attr_s`` (default: ``attr``) names s's attribute.
    """
    attr = _attr_name(attr)
    other = _s_attr(attr, attr_s)
    if eps is not None:
        if lo is not None or hi is not None:
            raise ValueError("band takes either eps or lo/hi, not both")
        e = _finite("band eps", eps)
        if e < 0:
            raise ValueError(f"band eps must be >= 0, got {eps!r}")
        return Condition(attr, -e, e, "band", other)
    if lo is None or hi is None:
        raise ValueError("band needs eps, or both lo= and hi=")
    lo_f, hi_f = _finite("band lo", lo), _finite("band hi", hi)
    if lo_f > hi_f:
        raise ValueError(f"band lo must be <= hi, got lo={lo!r} > hi={hi!r}")
    return Condition(attr, lo_f, hi_f, "band", other)


def equal(attr: str, attr_s: str | None = None) -> Condition:
    """Equi-join condition ``r.attr == s.attr_s`` (``attr_s`` defaults to ``attr``)."""
    return Condition(_attr_name(attr), 0.0, 0.0, "equal", _s_attr(attr, attr_s))


def not_equal(attr: str, attr_s: str | None = None) -> Condition:
    """``r.attr != s.attr_s``. No index searches it (it matches almost the whole window): it
    is checked as a residual filter, beside a condition an index serves."""
    return Condition(_attr_name(attr), 0.0, 0.0, "not_equal", _s_attr(attr, attr_s))


def _shift(value: float) -> float:
    """A shift ``c`` of ``r.attr + c OP s.attr_s``: a float64 below 2**53 in magnitude, so that
    a strict comparison is a closed one with the next float64 (``d > c`` iff ``d >=
    nextafter(c)``, for integer differences too: no integer lies strictly between them)."""
    c = _finite("shift", value)
    if abs(c) >= 2.0**53:
        raise ValueError(f"shift must lie within ±2**53, got {value!r}")
    return c


def less(attr: str, attr_s: str | None = None, *, shift: float = 0) -> Condition:
    """``r.attr + shift < s.attr_s`` (``shift`` 0: ``r.attr < s.attr_s``), decided on the
    difference ``s.attr_s - r.attr > shift``."""
    c = _shift(shift)
    lo = float(np.nextafter(c, INF)) if c else TINY
    return Condition(_attr_name(attr), lo, INF, "less", _s_attr(attr, attr_s))


def less_equal(attr: str, attr_s: str | None = None, *, shift: float = 0) -> Condition:
    """``r.attr + shift <= s.attr_s``, decided as ``s.attr_s - r.attr >= shift``."""
    c = _shift(shift)
    return Condition(_attr_name(attr), c, INF, "less_equal", _s_attr(attr, attr_s))


def greater(attr: str, attr_s: str | None = None, *, shift: float = 0) -> Condition:
    """``r.attr + shift > s.attr_s``, decided as ``s.attr_s - r.attr < shift``."""
    c = _shift(shift)
    hi = float(np.nextafter(c, -INF)) if c else -TINY
    return Condition(_attr_name(attr), -INF, hi, "greater", _s_attr(attr, attr_s))


def greater_equal(attr: str, attr_s: str | None = None, *, shift: float = 0) -> Condition:
    """``r.attr + shift >= s.attr_s``, decided as ``s.attr_s - r.attr <= shift``."""
    c = _shift(shift)
    return Condition(_attr_name(attr), -INF, c, "greater_equal", _s_attr(attr, attr_s))


#: Largest window size: windows are compared with int64 counts and ``ts`` differences.
MAX_WINDOW = 2**63 - 1
INT64_MIN = -(2**63)


def _window_size(name: str, value) -> int:
    value = positive_int(name, value)
    if value > MAX_WINDOW:
        raise ValueError(f"{name} must be at most 2**63 - 1 (int64), got {value}")
    return int(value)


@dataclass(frozen=True)
class CountWindow:
    """Count-based sliding window.

    When a tuple of stream X arrives, the window of the other stream Y holds the last ``w_Y``
    tuples of Y that arrived before it. ``CountWindow(w)`` uses ``w`` for both streams;
    ``CountWindow(w_r, w_s)`` sets them per stream (``w_r`` bounds the R window that S tuples
    probe). For a self-join only ``w_r`` is used. Sizes go up to ``2**63 - 1``.
    """

    r: int
    s: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "r", _window_size("count window size", self.r))
        s = self.r if self.s is None else _window_size("count window size", self.s)
        object.__setattr__(self, "s", s)

    kind = "count"

    def size(self, stream: int) -> int:
        assert self.s is not None  # __post_init__ set it
        return self.r if stream == 0 else self.s


@dataclass(frozen=True)
class TimeWindow:
    """Time-based sliding window on the ``ts`` column (int64, any unit the data uses).

    When a tuple x of stream X arrives, the window of Y holds the tuples y of Y that arrived
    before it with ``x.ts - y.ts <= t_Y`` (inclusive). ``TimeWindow(t)`` uses ``t`` for both
    streams; ``TimeWindow(t_r, t_s)`` sets them per stream (up to ``2**63 - 1``). ``ts`` must be
    non-decreasing within each stream. The difference ``x.ts - y.ts`` is that of the integers,
    never wrapped: ``ts`` spans the whole int64 range, and the earliest ``ts`` in a window,
    ``x.ts - t_Y``, saturates at the int64 minimum (everything is in the window then).
    """

    r: int
    s: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "r", _window_size("time window length", self.r))
        s = self.r if self.s is None else _window_size("time window length", self.s)
        object.__setattr__(self, "s", s)

    kind = "time"

    def size(self, stream: int) -> int:
        assert self.s is not None  # __post_init__ set it
        return self.r if stream == 0 else self.s


def window_start(ts: np.ndarray, length: int) -> np.ndarray:
    """``ts - length`` for int64 ``ts`` and ``0 < length <= 2**63 - 1``, saturated at the int64
    minimum instead of wrapping: the smallest ``ts`` a time window of ``length`` reaches back
    to from each ``ts`` (when the exact value is below the minimum, every ``ts`` is at or above
    it, as the saturated one says). O(n)."""
    return np.maximum(ts, np.int64(INT64_MIN + length)) - np.int64(length)


Window = CountWindow | TimeWindow

#: Columns the library itself uses; they cannot be join attributes.
RESERVED_COLUMNS = frozenset({"stream", "ts", "seq", "idx", "lo_idx", "ingest_ns"})


@dataclass(frozen=True)
class Query:
    """A sliding-window join: predicate θ(r, s), window, and two-way or self-join.

    The pair (r, s) is in the result iff θ(r, s) holds and, when the later of the two arrives,
    the earlier is in its stream's window; each pair is emitted once. A self-join (one
    stream) emits (a, b), a older than b, iff b arrives while a is in the window and
    θ(a, b) or θ(b, a) holds.

    Parameters
    ----------
    predicate : Condition or Predicate
        θ(r, s): conditions joined with ``&`` and ``|`` (an OR of conjunctions, each pair
        once), and :class:`Filter` s on one side's own columns (``(sj.r.kind == 3) &
        sj.band("x", 1.0)``: ``&`` binds tighter than a comparison, so a filter needs its
        brackets), which apply to the whole join (:class:`Predicate`).
    window : CountWindow or TimeWindow
    self_join : bool
        One stream joined with itself.
    lateness : int, optional
        Out-of-order input (event time). By default (None) ``ts`` must not decrease within a
        stream under a time window, and tuples are joined in arrival order. With
        ``lateness=L`` (in ``ts`` units) rows may come in any order: before row *i* (arrival
        order, both streams) the *watermark* is ``max(ts of the rows before i) - L``, and row
        *i* is *late* if its ``ts`` lies below it. The result is then exactly the join of the
        rows that are not late, stably sorted by ``ts`` (ties keep arrival order; count
        windows count in that order), with pairs reported by the rows' input numbers; for a
        self-join ``r`` is the row earlier in that order. Each row waits until the watermark
        passes its ``ts``, and latency counts that wait (docs/design.md §1).
    on_late : {"error", "drop"}
        A late row raises :class:`~streamjoin.InputError` naming it, its ``ts`` and the
        watermark, and the run returns nothing (``"error"``, the default); or it is left out
        and listed in ``Result.late`` and counted in ``metrics["late_tuples"]`` (``"drop"``).
    how : {"inner", "left", "right", "full"}
        Outer joins, as SQL's ``LEFT/RIGHT/FULL OUTER JOIN ... ON``: besides the pairs,
        each R tuple (``"left"``), S tuple (``"right"``) or both (``"full"``) that has no
        partner in the result is returned once as the pair ``(r, -1)`` or ``(-1, s)``. A
        tuple that fails a filter of its side joins nothing, so it is such a tuple; a late
        row (``on_late="drop"``) is in ``Result.late`` instead. A self-join takes
        ``"inner"`` or ``"left"``: ``(t, -1)`` for each tuple that met no other. Such a
        tuple leaves once no later tuple's window can reach it (on a handshake chain: when
        the input ends); its latency counts to then.
    """

    predicate: Predicate
    window: Window
    self_join: bool = False
    lateness: int | None = None
    on_late: OnLate = "error"
    how: How = "inner"

    def __init__(
        self,
        predicate: Condition | Predicate,
        window: Window,
        self_join: bool = False,
        *,
        lateness: int | None = None,
        on_late: OnLate = "error",
        how: How = "inner",
    ):
        if isinstance(predicate, Condition):
            predicate = Predicate((predicate,))
        elif isinstance(predicate, Filter | Residual):
            predicate = _as_predicate(predicate)
        if not isinstance(predicate, Predicate):
            raise ValueError(
                f"predicate must be built from band/equal/less/..., got {type(predicate).__name__}"
            )
        if not predicate.flat:
            raise ValueError(
                f"the predicate {predicate} has no condition between r and s; a join needs one "
                "(band, equal, less, ...) beside its filters"
            )
        if not isinstance(window, CountWindow | TimeWindow):
            raise ValueError(f"window must be CountWindow(...) or TimeWindow(...), got {window!r}")
        if not isinstance(self_join, bool):
            raise ValueError(f"self_join must be True or False, got {self_join!r}")
        if lateness is not None:
            if isinstance(lateness, bool) or not isinstance(lateness, int | np.integer):
                raise ValueError(f"lateness must be an int (ts units) or None, got {lateness!r}")
            if lateness < 0:
                raise ValueError(f"lateness must be >= 0, got {lateness}")
            lateness = int(lateness)
        if on_late not in ON_LATE:
            raise ValueError(f"on_late must be 'error' or 'drop', got {on_late!r}")
        if on_late != "error" and lateness is None:
            raise ValueError(
                "on_late='drop' needs lateness= (the bound beyond which rows are late)"
            )
        if how not in HOWS:
            raise ValueError(f"how must be one of {', '.join(map(repr, HOWS))}, got {how!r}")
        if self_join and how not in ("inner", "left"):
            raise ValueError(
                f"a self-join takes how='inner' or how='left' (each tuple that met no other), "
                f"got how={how!r}"
            )
        object.__setattr__(self, "predicate", predicate)
        object.__setattr__(self, "window", window)
        object.__setattr__(self, "self_join", self_join)
        object.__setattr__(self, "lateness", lateness)
        object.__setattr__(self, "on_late", on_late)
        object.__setattr__(self, "how", how)

    @property
    def attrs(self) -> tuple[str, ...]:
        """Distinct join attribute names, in order of first use, then the columns only a
        residual function reads (they travel with the tuples as join attributes do)."""
        return tuple(dict.fromkeys(self.predicate.attrs + self.predicate.residual_columns))

    @property
    def condition_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """For each condition of ``predicate.flat``, the rows of r's and of s's attribute in
        the batch's ``attrs`` matrix: two int64 arrays."""
        pos = {a: i for i, a in enumerate(self.attrs)}
        r = np.array([pos[c.attr] for c in self.predicate.flat], dtype=np.int64)
        s = np.array([pos[c.attr_s] for c in self.predicate.flat], dtype=np.int64)
        return r, s

    @property
    def negated(self) -> np.ndarray:
        """For each condition of ``predicate.flat``, whether it is negated (``not_equal``):
        bool array."""
        return np.array([c.negated for c in self.predicate.flat], dtype=np.bool_)

    def window_size(self, stream: int) -> int:
        """Window size (tuples or ts units) of ``stream``; self-joins use the R size."""
        return self.window.size(0 if self.self_join else stream)

    def __str__(self) -> str:
        kind = "self-join" if self.self_join else "join"
        if self.how != "inner":
            kind = f"{self.how} outer {kind}"
        w = self.window
        size = f"{w.r}" if self.self_join or w.r == w.s else f"R {w.r}, S {w.s}"
        text = f"{kind} on {self.predicate} within {w.kind} window {size}"
        if self.lateness is not None:
            text += f", lateness {self.lateness} ({'late rows dropped' if self.on_late == 'drop' else 'late rows refused'})"
        return text

    @property
    def keeps_unmatched(self) -> tuple[bool, bool]:
        """Whether the result holds R's and S's tuples without a partner (``how``); a
        self-join's one stream is R."""
        return self.how in ("left", "full"), self.how in ("right", "full")
