"""The window-index protocol, the registry of indexes by name, and kernels they share.

A window index holds ``(key, ref)`` items of one stream at one join core. ``ref`` is the
position of the tuple in the core's store: int64, strictly increasing in insertion order, never
reused, so "expired" is always a prefix of refs.

Probe semantics, the same for every index: ``probe(keys, lo, hi)`` returns every held item with
``lo[c] <= item_key[c] - keys[c, i] <= hi[c]`` for each key row ``c`` (float64 arithmetic,
closed bounds, exactly the formula of :mod:`streamjoin.query`). An index may keep items whose
ref is below the last ``expire`` bound for a while (coarse-grained expiry, docs/design.md §2) and return
them from probes; the join core's window check drops them. An index whose ``exact`` is False
(compact 8-byte items, :mod:`~streamjoin.indexes.blocks.key_codes`) may also return items *outside*
the band of its first key row, those whose key code ties a code inside it; the join core then
checks every condition on the full keys in its tuple store (the refinement).

Keys are float64: an integer attribute's keys are its values' float64 images. Beyond ``2**52``
images round, and the join core then probes with bounds widened by more than the rounding, so
that the index returns a superset, and decides every pair on the exact integers
(:meth:`~streamjoin.actors.join_spec.JoinSpec.observe`): no index needs to know.
"""

from __future__ import annotations

import inspect
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np
from numba import njit

from streamjoin.checks import number
from streamjoin.indexes.blocks.no_refcount import njit_no_refcount
from streamjoin.query import Condition, Predicate

# --------------------------------------------------------------------------------------------
# Shared kernels
# --------------------------------------------------------------------------------------------

#: Relative margin that covers the rounding of ``key + bound`` and of ``item - key``
#: (half an ulp each, with room to spare).
_REL_MARGIN = 2.0**-50


@njit(cache=True, nogil=True, inline="always")
def key_range(key, lo, hi):
    """Item-key interval ``[vlo, vhi]`` that contains every item with ``lo <= item - key <= hi``.

    ``key + lo`` rounds, so the interval is widened by a relative margin; callers scan it and
    then test ``lo <= item - key <= hi`` exactly. Infinite bounds stay infinite.
    """
    vlo = key + lo
    vhi = key + hi
    vlo -= (abs(key) + abs(lo)) * _REL_MARGIN + 5e-324
    vhi += (abs(key) + abs(hi)) * _REL_MARGIN + 5e-324
    return vlo, vhi


@njit(cache=True, nogil=True, inline="always")
def in_band(item, key, lo, hi):
    """The exact test of the probe semantics: ``lo <= item - key <= hi``."""
    d = item - key
    return (d >= lo) & (d <= hi)


@njit(cache=True, nogil=True)
def copy_prefix(dst, src, n):
    """``dst[:n] = src[:n]`` for 1-d arrays, written out: numba compiles an array slice
    assignment together with the message it raises on mismatched shapes, string formatting
    that cost a first run about 1.4 s of compiling (once per process)."""
    for i in range(n):
        dst[i] = src[i]


@njit_no_refcount
def copy_cols(dst, at, src, start, n):
    """``dst[:, at : at + n] = src[:k, start : start + n]`` for 2-d arrays, ``k`` the rows of
    ``dst``, written out as :func:`copy_prefix` is (and without reference counting: kernels
    call it in their loops)."""
    for a in range(dst.shape[0]):
        for j in range(n):
            dst[a, at + j] = src[a, start + j]


@njit(cache=True, nogil=True)
def grow(arr, need):
    """A copy of 1-d ``arr`` with capacity at least ``need`` (doubling)."""
    cap = max(16, arr.shape[0])
    while cap < need:
        cap *= 2
    out = np.empty(cap, dtype=arr.dtype)
    copy_prefix(out, arr, arr.shape[0])
    return out


def unique_pairs(pos: np.ndarray, refs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(pos, refs)`` pairs sorted, each once (two probe boxes, or two OR terms' indexes, may
    find a pair twice). O(n log n)."""
    order = np.lexsort((refs, pos))
    pos, refs = pos[order], refs[order]
    first = np.ones(len(pos), dtype=bool)
    first[1:] = (pos[1:] != pos[:-1]) | (refs[1:] != refs[:-1])
    return pos[first], refs[first]


# --------------------------------------------------------------------------------------------
# Protocol and registry
# --------------------------------------------------------------------------------------------


class WindowIndex(ABC):
    """Base class of window indexes. State lives in numpy arrays; work in numba kernels.

    Parameters
    ----------
    n_keys : int
        Number of key rows per item. Indexes with ``multi_attribute = False`` serve only the
        primary condition and are always built with ``n_keys = 1``.
    """

    #: Registry name.
    name: ClassVar[str]
    #: True if the index evaluates several conditions of a conjunction (one key row each).
    multi_attribute: ClassVar[bool] = False
    #: Most key rows a multi-attribute index takes (None: as many as there are conditions).
    max_keys: ClassVar[int | None] = None
    #: True if ``insert`` takes ``order=``: the stable order of ``keys[0]``, when the caller
    #: already sorted the batch (the join core does, once per batch), else None.
    takes_order: ClassVar[bool] = False
    #: Options under which a throwaway instance reaches every kernel within a few batches of
    #: a few hundred items (``JoinCore.warm`` runs one before the timed part), overriding the
    #: user's: e.g. a small subwindow, so that one fills and the next is set up.
    warm_options: ClassVar[dict] = {}
    #: Options under which a fresh instance over one batch's tuples, probed by the batch, is
    #: the join core's in-batch join (docs/design.md §2 step 2) when the index serves two or more
    #: conditions; None: the join core sweeps the batch on the first condition's key instead.
    batch_join_options: ClassVar[dict | None] = None
    #: How a probe's work grows with the items held (the simulator's *scan units*, PIM-Tree
    #: §2.2.3 Eq. 4 charges a probe ``H · λ`` for its descent): ``"log"`` (a search tree or
    #: sorted runs), ``"linear"`` (a scan), ``"const"`` (a hash table).
    probe_cost: ClassVar[str] = "log"
    #: False if probes may return a superset of the band on the first key row (items whose
    #: coded key ties a code inside it): the caller refines every candidate on the full key.
    #: An instance may set it (an index option can choose the layout).
    exact: bool = True
    #: False if the index cannot be one of several, one per OR term, over one window
    #: (:class:`~streamjoin.indexes.per_term.PerTermIndex`): a scan gains nothing from
    #: scanning once per term, and PO-Join's structures are built by SPO's own actors.
    serves_terms: ClassVar[bool] = True

    @classmethod
    def window_options(cls, items: int) -> dict:
        """Options that suit an index over a window of about ``items`` tuples (a join core over
        a count window knows it); the join core uses them only where the user set none of
        them. None by default."""
        return {}

    @classmethod
    def probe_work(cls, size: int) -> float:
        """Work units of one probe into ``size`` held items (see ``probe_cost``)."""
        if cls.probe_cost == "linear":
            return float(size)
        if cls.probe_cost == "log":
            return math.log2(size + 1)
        return 0.0

    def probe_units(self) -> float:
        """Work units of one probe into this index as it stands (the simulator's *scan*):
        :meth:`probe_work` of the items held, unless the index says otherwise (one made of
        several searched structures charges each)."""
        return self.probe_work(len(self))

    def compile_ahead(self) -> str | None:
        """``"module:function"`` naming kernels a first run reaches late and compiles long,
        which a second process may compile meanwhile (:mod:`streamjoin.compile_ahead`), or
        None (the default)."""
        return None

    def __init__(self, n_keys: int = 1) -> None:
        if n_keys < 1 or (n_keys > 1 and not self.multi_attribute):
            raise ValueError(f"index {self.name!r} takes one key row, got n_keys={n_keys}")
        if self.max_keys is not None and n_keys > self.max_keys:
            raise ValueError(
                f"index {self.name!r} takes at most {self.max_keys} key rows, got n_keys={n_keys}"
            )
        self.n_keys = n_keys

    @classmethod
    def unsupported(cls, predicate: Predicate) -> str | None:
        """Why this index cannot serve ``predicate``'s primary condition, or None if it can."""
        return None

    @abstractmethod
    def insert(self, keys: np.ndarray, refs: np.ndarray) -> None:
        """Add items. ``keys``: float64 ``(n_keys, n)``; ``refs``: int64 ``(n,)``, increasing
        and above every ref held."""

    @abstractmethod
    def probe(
        self, keys: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Items matching each probe key: ``lo[c] <= item[c] - keys[c, i] <= hi[c]``.

        Returns ``(probe_pos, refs)``: int64 arrays, one entry per match; ``probe_pos`` is the
        column of ``keys`` that matched.
        """

    @abstractmethod
    def expire(self, before_ref: int) -> None:
        """Items with ``ref < before_ref`` will never be needed again and may be dropped."""

    @abstractmethod
    def __len__(self) -> int:
        """Items held, including expired ones not dropped yet."""

    @property
    @abstractmethod
    def nbytes(self) -> int:
        """Bytes of the arrays holding the index state."""

    @abstractmethod
    def check(self) -> None:
        """Assert every structural invariant (for tests; O(n))."""


_REGISTRY: dict[str, type[WindowIndex]] = {}


class OrderedInsert(Protocol):
    """An index whose ``takes_order`` is True: its :meth:`~WindowIndex.insert` also takes
    ``order``, the stable order of ``keys[0]``, if the caller has it."""

    def insert(
        self, keys: np.ndarray, refs: np.ndarray, order: np.ndarray | None = None
    ) -> None: ...


def register(cls: type[WindowIndex]) -> type[WindowIndex]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    if cls.name in _REGISTRY:
        raise ValueError(f"index name {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def names() -> list[str]:
    """Registered index names."""
    return sorted(_REGISTRY)


def get(name: str) -> type[WindowIndex]:
    """The index class registered as ``name``."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown index {name!r}; available: {', '.join(names())}") from None


#: The largest node (``fanout``, ``leaf_size`` and the like) an index takes: a node of
#: 65,536 float64 keys is 512 KB, far past the sizes that keep a node in cache (the defaults
#: are 32 to 128), and a larger one is most likely a typo that would allocate gigabytes.
MAX_NODE = 2**16


def node_size(index: str, option: str, value, minimum: int) -> int:
    """A node-size option of ``index`` (``fanout``, ``leaf_size``, …): an integer from
    ``minimum`` to :data:`MAX_NODE`, or a ``ValueError`` naming the index and the option."""
    return int(number(f"{index} {option}", value, integer=True, low=minimum, high=MAX_NODE))


def option_names(name: str) -> frozenset[str] | None:
    """The options index ``name`` takes (its constructor's keywords, and for a chain of
    subwindows its store's), or None when it takes any."""
    cls = get(name)
    store = getattr(cls, "store", None)
    own = inspect.signature(cls.__init__).parameters.values()
    if not any(p.kind is p.VAR_KEYWORD for p in own):
        store = None  # the index names its options itself; its store's are not the user's
    taken: set[str] = set()
    for init in (cls.__init__, store.__init__ if store is not None else None):
        if init is None:
            continue
        params = list(inspect.signature(init).parameters.values())[1:]  # not self
        if init is not cls.__init__:  # a store's first is its capacity, not an option
            params = params[1:]
        for p in params:
            if p.kind is p.VAR_KEYWORD:
                if init is cls.__init__ and store is not None:
                    continue  # the store's keywords: taken from its own signature
                return None
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "n_keys":
                taken.add(p.name)
    return frozenset(taken)


def check_options(name: str, options: dict) -> None:
    """A ``ValueError`` naming an option index ``name`` does not take (and the ones it does),
    or a value of one out of its range.

    The values are checked by building the index once with them (an empty index: well under a
    millisecond and a few MB for every registered one), so that the check is the
    constructor's own and a value that fails in an actor fails here first.
    """
    taken = option_names(name)
    unknown = sorted(set(options) - taken) if taken is not None else []
    if unknown:
        raise ValueError(
            f"index {name!r} has no option {unknown[0]!r}; its options: "
            f"{', '.join(sorted(taken or ())) or 'none'}"
        )
    try:
        get(name)(**options)
    except (TypeError, OverflowError, MemoryError) as e:  # a constructor's check missed it
        raise ValueError(f"index {name!r} cannot take options {options}: {e}") from None


def check_supports(name: str, predicate: Predicate) -> type[WindowIndex]:
    """The class of ``name``, after checking it can serve ``predicate``'s primary condition."""
    cls = get(name)
    reason = cls.unsupported(predicate)
    if reason:
        raise ValueError(f"index {name!r} cannot serve {predicate}: {reason}")
    return cls


class IndexFallbackWarning(UserWarning):
    """A window index named for a run cannot serve the query's first condition: another
    condition is served, or every probe scans the window (:class:`IndexPlan`'s note)."""


@dataclass(frozen=True)
class IndexPlan:
    """Which conditions of a query a window index serves, and what becomes of the rest.

    ``index`` is the registry name of the index the join actors hold: the one asked for, or
    ``nested_loop`` when it can serve no condition at all (the *fallback*: every probe scans
    the window, every condition is a residual filter). ``keys`` lists the positions of the
    served conditions among the predicate's conjuncts, one key row each, in the order of the index's key rows; the others are
    residual filters checked on every candidate. ``note`` says, naming the index, why a
    condition the user put first is not served (None when it is, or when each OR term is
    served apart: ``terms``). ``fallback`` is True when no conjunct is served, per-term
    indexes or not.
    """

    index: str
    keys: tuple[int, ...]
    note: str | None = None
    #: With no conjunct served and an OR in the predicate: for each of its terms, the
    #: positions in :attr:`~streamjoin.query.Predicate.flat` of the conditions a separate
    #: index serves for that term (:class:`~streamjoin.indexes.per_term.PerTermIndex`);
    #: empty when some term has none (then the window is scanned).
    terms: tuple[tuple[int, ...], ...] = ()

    @property
    def fallback(self) -> bool:
        return not self.keys


def why_not_served(cls: type[WindowIndex], cond: Condition, self_join: bool) -> str | None:
    """Why index ``cls`` cannot serve ``cond`` as a key row, or None if it can."""
    if cond.negated:
        return "!= is no range an index can search (it matches almost every item)"
    if self_join and cond.cross:
        # θ(a, b) ∨ θ(b, a) compares a.attr with b.attr_s and b.attr with a.attr_s: a stored
        # tuple would need a key for either side
        return "in a self-join it would need two keys per tuple (one per attribute)"
    return cls.unsupported(Predicate((cond,)))


def plan(
    name: str, predicate: Predicate, self_join: bool = False, fallback: str = "nested_loop"
) -> IndexPlan:
    """The :class:`IndexPlan` of index ``name`` for ``predicate``: the conjuncts
    (:attr:`~streamjoin.query.Predicate.conjuncts`: with an OR, what every term implies) it can
    serve, in order (up to one for a single-key index, ``max_keys`` for a multi-attribute one),
    or ``fallback`` (an index that scans everything under an unbounded box) if it can serve
    none. Never a wrong answer: what is not served is checked as a residual filter."""
    cls = get(name)
    conjuncts = predicate.conjuncts
    reasons = [why_not_served(cls, c, self_join) for c in conjuncts]
    usable = tuple(i for i, why in enumerate(reasons) if why is None)
    keys = usable[: _most(cls, len(usable))]
    terms = () if keys or name == fallback else _term_keys(cls, predicate, self_join)
    if terms:
        return IndexPlan(name, (), None, terms)
    note = None
    rest = (
        f"it serves {conjuncts[keys[0]]} instead"
        if keys
        else f"the core scans its window ({fallback}) and checks every condition"
    )
    if name != fallback and not conjuncts:  # (the fallback itself: nothing to say)
        note = (
            f"index {name!r} cannot serve {predicate}: its OR's terms share no condition "
            f"an index could serve (one on the same attributes in every term); {rest}"
        )
    elif name != fallback and reasons[0] is not None:
        note = f"index {name!r} cannot serve {conjuncts[0]}: {reasons[0]}; {rest}"
    return IndexPlan(name if keys else fallback, keys, note)


def _most(cls: type[WindowIndex], usable: int) -> int:
    """How many of ``usable`` servable conditions index ``cls`` serves (one key row each)."""
    return (cls.max_keys or usable) if cls.multi_attribute else 1


def _term_keys(
    cls: type[WindowIndex], predicate: Predicate, self_join: bool
) -> tuple[tuple[int, ...], ...]:
    """For each OR term of ``predicate``, the positions in its ``flat`` conditions that an
    index of ``cls`` of its own serves; empty if some term has none (or ``cls`` cannot be
    one of several: ``serves_terms``)."""
    if not predicate.terms or not cls.serves_terms:
        return ()
    out, at = [], len(predicate.conjuncts)
    for term in predicate.terms:
        usable = [at + i for i, c in enumerate(term) if why_not_served(cls, c, self_join) is None]
        if not usable:
            return ()
        out.append(tuple(usable[: _most(cls, len(usable))]))
        at += len(term)
    return tuple(out)


def default_for(predicate: Predicate, self_join: bool = False) -> str:
    """A sensible index for ``predicate``, by its first condition an index can search:
    ``hash`` for an equality, ``bisort`` for a band with finite bounds, ``po_join`` when two
    one-sided inequalities lead (SPO-Join's query shape), else ``nested_loop`` (an inequality
    matches a whole side of the window, which a vectorised scan serves best). An OR whose
    terms share no such condition gets one index per term (:attr:`IndexPlan.terms`) when
    each term has an equality or a finite band: ``hash`` if they are all equalities, else
    ``bisort``.

    Measured on the 2-core VM (band join, match rate 2, batches of 1024, one core, CPU time):
    ``bisort`` was the fastest from a count window of 2^10 to 2^16 (1.0-1.3 M tuples/s),
    ahead of ``pim_tree`` (0.8-1.1), ``bplus_tree`` (0.5-1.0) and ``nested_loop`` (0.47 at
    2^10, 0.01 at 2^16).
    """
    usable = [c for c in predicate if not c.negated and not (self_join and c.cross)]
    if not usable and predicate.terms:  # an index per OR term, if each term has a range
        each = {default_for(Predicate(t), self_join) for t in predicate.terms}
        if each <= {"hash", "bisort"}:
            return each.pop() if len(each) == 1 else "bisort"
    if not usable:
        return "nested_loop"
    first = usable[0]
    if first.is_equality:
        return "hash"
    if np.isfinite(first.lo) and np.isfinite(first.hi):
        return "bisort"
    one_sided = [c for c in usable if np.isinf(c.lo) != np.isinf(c.hi)]
    if len(one_sided) >= 2 and "po_join" in _REGISTRY:
        return "po_join"
    return "nested_loop"
