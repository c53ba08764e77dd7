"""``chained``: the chained index of PIM-Tree §2.2.2 (Lin et al., Ya-xin et al.).

The window is cut, in arrival order, into subindexes of ``s`` items. New items go into the
*active* subindex, a mutable B+-tree; when it holds ``s`` items it is archived (pushed onto the
chain) and a new empty one takes its place. Nothing is deleted item by item: a subindex leaves
the chain as a whole once its newest item has expired (§2.2.2 step 2, cost zero). A probe
searches every subindex, and the items of the oldest one that have already expired are skipped
by the scan (their refs are below the expiry bound).

With chain length L the window spans L - 1 full subindexes, ``s = w / (L - 1)``, so the chain
holds at most L subindexes and a probe meets σ_s / (2 (L - 1)) expired matches on average
(Eq. 3).

Two designs (§5.1): ``archive="bplus"`` (B-chain) keeps archived subindexes as B+-trees;
``archive="css"`` (IB-chain) converts each to an immutable B+-tree (CSS-tree, Alg. 3) when it
is archived, which searches faster. An IB-chain with ``layout="compact"`` packs each archived
subindex into 8-byte items (a 32-bit grid code of the key above the ref's offset,
:mod:`~streamjoin.indexes.blocks.grid_codes`), coded from the keys it holds once they stop changing,
as BI-Sort packs a full subwindow: half the memory of the archived items, and probes of them
return a superset that the join core refines (docs/design.md §2: 8-byte items).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from streamjoin.checks import number
from streamjoin.indexes.base import WindowIndex, register
from streamjoin.indexes.blocks.grid_codes import bulk_window, fit_grid, merge_grid_items_into
from streamjoin.indexes.blocks.item_layout import WIDE_GRID, item_layout
from streamjoin.indexes.blocks.key_codes import REF_SPAN, item_refs
from streamjoin.indexes.blocks.key_order import stable_order
from streamjoin.indexes.pim.bplus_tree import (
    HEIGHT,
    ROOT,
    BPlusArrays,
    chain_items,
    check_forest,
    insert_items,
    new_tree,
    probe_tree,
    reserve,
    shrink_to_fit,
)
from streamjoin.indexes.pim.css_tree import CSSTree, build_css_tree, search_css_tree
from streamjoin.indexes.pim.tree_shape import DEFAULT_SHAPE, TreeShape
from streamjoin.modes import Layout

_NO_REF = np.iinfo(np.int64).min
ARCHIVES = ("bplus", "css")
#: The longest chain: a probe visits every subindex, so a chain of thousands is a typo (the
#: paper's chains are 2 to 16 long).
MAX_CHAIN = 1024


class CSSRun(NamedTuple):
    """An archived subindex of an IB-chain: a sorted leaf level and its CSS-tree inner keys;
    compact, ``keys`` are uint64 items on ``grid`` (``(base, shift)``) with refs counted from
    ``ref_base[0]``, and ``refs`` is empty."""

    keys: np.ndarray
    refs: np.ndarray
    inner: np.ndarray
    offsets: np.ndarray
    grid: np.ndarray
    ref_base: np.ndarray


@register
class ChainedIndex(WindowIndex):
    """Chained index (§2.2.2) of B+-tree subindexes, archived as B+-trees or CSS-trees (§5.1).

    Complexity (w window, L chain length, s = w / (L - 1) items per subindex, H_c its height):
    ``insert`` of b items O(b log b + b · H_c · log(fanout)) plus, for ``archive="css"``,
    O(s) per archived subindex, i.e. O(1) per item (Eq. 7); ``probe`` of m keys
    O(m · L · H_c · log(fanout) + items scanned), expired ones included (Eq. 3 step 1);
    ``expire`` O(L) (whole subindexes, Eq. 3 step 2). Memory: the active subindex as a B+-tree;
    archived ones as trimmed B+-trees (up to 32 bytes per item in leaves) or as CSS-trees
    (16 bytes per item plus ``8 / css_leaf_size`` of inner keys).

    Parameters
    ----------
    n_keys : int
        Must be 1.
    chain_length : int
        L >= 2.
    subindex_size : int, optional
        s, items per subindex. Default: ``ceil(window / (L - 1))``.
    window : int, optional
        w, the window in items, to derive s. If neither is given, s is measured each time a
        subindex fills as the ref span of the live items over L - 1 (refs are consecutive
        store positions in a join core), which also serves time windows.
    archive : {"css", "bplus"}
        Archived subindexes as CSS-trees (IB-chain) or B+-trees (B-chain).
    fanout, leaf_size : int
        Node sizes of the B+-trees (see ``bplus_tree``).
    css_fanout, css_leaf_size : int
        Node sizes of the CSS-trees (see ``css_tree``).
    layout : {"wide", "compact"}
        Archived CSS-trees' items (``archive="css"`` only): ``"wide"`` (default) a float64
        key beside an int64 ref, exact probes; ``"compact"`` one uint64 each, a 32-bit code
        of the key on a grid fitted to the subindex's own keys (far outliers clamped to the
        extreme codes) above the ref's offset in the subindex. Probes of a compact subindex
        return a superset that the caller refines (``exact`` is False); the active subindex
        keeps full keys.
    """

    name = "chained"
    takes_order = True

    def __init__(
        self,
        n_keys: int = 1,
        chain_length: int = 2,
        subindex_size: int | None = None,
        window: int | None = None,
        archive: str = "css",
        fanout: int = DEFAULT_SHAPE.fanout,
        leaf_size: int = DEFAULT_SHAPE.leaf_size,
        css_fanout: int = DEFAULT_SHAPE.css_fanout,
        css_leaf_size: int = DEFAULT_SHAPE.css_leaf_size,
        layout: Layout = "wide",
    ) -> None:
        super().__init__(n_keys)
        self._items = item_layout(self.name, layout)
        if self._items.packed and archive != "css":
            raise ValueError("chained layout='compact' packs CSS-trees: it needs archive='css'")
        chain_length = int(
            number("chained chain_length", chain_length, integer=True, low=2, high=MAX_CHAIN)
        )
        if subindex_size is not None and window is not None:
            raise ValueError("chained takes subindex_size or window, not both")
        for option, value in (("subindex_size", subindex_size), ("window", window)):
            if value is not None:
                number(f"chained {option}", value, integer=True, low=1, high=2**63 - 1)
        if archive not in ARCHIVES:
            raise ValueError(f"chained archive must be one of {ARCHIVES}, got {archive!r}")
        if subindex_size is None and window is not None:
            subindex_size = -(-window // (chain_length - 1))  # s = w / (L - 1), rounded up
        self.chain_length = chain_length
        self.subindex_size = None if subindex_size is None else int(subindex_size)
        self.archive = archive
        self.layout = layout
        self.exact = self._items.exact
        shape = TreeShape(fanout, leaf_size, css_fanout, css_leaf_size).checked(self.name)
        self.fanout, self.leaf_size = shape.fanout, shape.leaf_size
        self.css_fanout, self.css_leaf_size = shape.css_fanout, shape.css_leaf_size
        self._before = _NO_REF
        self._first_ref: int | None = None
        self._active_last = _NO_REF
        self._clear_active()
        # archived subindexes, oldest first, with their item counts and newest refs
        self._chain: list[BPlusArrays | CSSRun] = []
        self._chain_n: list[int] = []
        self._chain_last: list[int] = []

    def _capacity(self, newest: int) -> int:
        """s: the option, or the ref span of the live items up to ``newest`` over L - 1."""
        if self.subindex_size:
            return self.subindex_size
        assert self._first_ref is not None  # (set by the first insert)
        span = newest + 1 - max(self._before, self._first_ref)
        return max(1, -(-span // (self.chain_length - 1)))

    def _clear_active(self) -> None:
        """Start an empty active subindex."""
        self._active = new_tree(self.fanout, self.leaf_size, 16, 16)
        self._active_n = 0

    def _archive_active(self) -> None:
        """Push the full active subindex onto the chain and start an empty one (§2.2.2)."""
        t = self._active
        sub: BPlusArrays | CSSRun
        if self.archive == "css":  # §5.1 IB-chain: convert before archiving
            keys, refs = chain_items(t, 0, self._active_n)
            grid, ref_base = WIDE_GRID, np.zeros(1, dtype=np.int64)
            if self._items.packed and int(refs.max()) - int(refs.min()) < REF_SPAN:
                # the keys are final: a grid over their bulk, the refs from the first
                grid = np.array(fit_grid(*bulk_window(keys)), dtype=np.uint64)
                ref_base[0] = refs.min()
                items = np.empty(len(keys), dtype=np.uint64)
                zero = np.uint64(0)
                # the merge kernel with no old items packs the (key, ref)-sorted run
                base, shift = grid
                merge_grid_items_into(
                    items[:0],
                    zero,
                    zero,
                    zero,
                    0,
                    keys,
                    refs,
                    base,
                    shift,
                    ref_base[0],
                    _NO_REF,
                    items,
                )
                keys, refs = items, refs[:0]
            inner, offsets = build_css_tree(keys, self.css_fanout, self.css_leaf_size)
            sub = CSSRun(keys, refs, inner, offsets, grid, ref_base)
        else:
            sub = shrink_to_fit(t)
        self._chain.append(sub)
        self._chain_n.append(self._active_n)
        self._chain_last.append(self._active_last)
        self._clear_active()

    def insert(self, keys: np.ndarray, refs: np.ndarray, order: np.ndarray | None = None) -> None:
        if len(refs) == 0:
            return
        whole = len(refs)
        if self._first_ref is None:
            self._first_ref = int(refs[0])
        i = 0
        while i < len(refs):  # fill the active subindex, archiving it whenever it is full
            cap = self._capacity(int(refs[i]))  # a measured s may shrink below the fill
            j = min(len(refs), i + max(0, cap - self._active_n))
            if j > i:
                # sorted (stably: equal keys stay in ref order), descents touch leaves in turn
                if order is not None and (i, j) == (0, whole):
                    part = order
                elif order is not None:  # the whole batch's order, restricted to [i, j)
                    part = order[(order >= i) & (order < j)]
                else:
                    part = i + stable_order(keys[0, i:j])
                self._active = reserve(self._active, self._active_n + j - i, j - i)
                insert_items(self._active, keys[0, part], refs[part])
                self._active_n += j - i
                self._active_last = int(refs[j - 1])
            if self._active_n >= cap:
                self._archive_active()
            i = j

    def probe(self, keys, lo, hi):
        k, lo, hi, before = np.ascontiguousarray(keys[0]), lo[0], hi[0], self._before
        found = [probe_tree(self._active, k, lo, hi, before)] if self._active_n else []
        for sub in self._chain:  # §2.2.2 step 1: search every subindex
            if isinstance(sub, CSSRun):
                found.append(
                    search_css_tree(
                        CSSTree(*sub[:4], self.css_fanout, self.css_leaf_size),
                        k,
                        lo,
                        hi,
                        before,
                        sub.grid,
                        sub.ref_base[0],
                    )
                )
            else:
                found.append(probe_tree(sub, k, lo, hi, before))
        if not found:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        pos, refs = zip(*found, strict=True)
        return np.concatenate(pos), np.concatenate(refs)

    def expire(self, before_ref: int) -> None:
        self._before = max(self._before, int(before_ref))
        drop = int(np.searchsorted(self._chain_last, self._before, side="left"))
        if drop:  # §2.2.2 step 2: release whole subindexes whose newest item expired
            del self._chain[:drop], self._chain_n[:drop], self._chain_last[:drop]
        if self._active_n and self._active_last < self._before:
            self._clear_active()

    def __len__(self) -> int:
        return self._active_n + sum(self._chain_n)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for sub in (self._active, *self._chain) for a in sub)

    def check(self) -> None:
        runs = []  # each subindex's items, oldest subindex first
        for sub, n in zip(self._chain, self._chain_n, strict=True):
            if isinstance(sub, CSSRun):
                if sub.keys.dtype == np.uint64:  # compact: sorted by code, refs packed
                    assert self._items.packed and len(sub.refs) == 0
                    assert np.all(sub.keys[1:] >> 32 >= sub.keys[:-1] >> 32), "sorted by code"
                    refs = item_refs(sub.keys, int(sub.ref_base[0]))
                else:
                    assert np.array_equal(np.lexsort((sub.refs, sub.keys)), np.arange(n))
                    refs = sub.refs
                inner, offsets = build_css_tree(sub.keys, self.css_fanout, self.css_leaf_size)
                assert np.array_equal(inner, sub.inner) and np.array_equal(offsets, sub.offsets)
                runs.append(refs.tolist())
            else:
                (items,) = check_forest(sub, sub.meta[None, ROOT : HEIGHT + 1])
                runs.append([r for _, r in items])
            assert len(runs[-1]) == n, "archived subindex count"
        (items,) = check_forest(self._active, self._active.meta[None, ROOT : HEIGHT + 1])
        assert len(items) == self._active_n, "active subindex count"
        runs.append([r for _, r in items])
        assert all(runs[:-1]), "no empty archived subindex"
        assert [max(r) for r in runs[:-1]] == self._chain_last, "newest ref of each subindex"
        assert all(r >= self._before for r in self._chain_last), "expired subindexes released"
        flat = [r for run in runs for r in sorted(run)]
        assert flat == sorted(set(flat)), "subindexes hold disjoint ref ranges in arrival order"
        if items:
            assert max(r for _, r in items) == self._active_last >= self._before
