"""One window index per term of an OR (docs/design.md §1, disjunctions): the same items in
each, each over the key rows its term's served conditions read; a probe asks each term's
index with that term's box and returns the union, each item once.

A pair that joins satisfies some term, so that term's index returns it: the union is a
superset of the pairs (``exact`` is False) and the join core checks all of θ on every
candidate. The key rows are the terms' groups in order: ``groups[t]`` rows for term ``t``.
"""

from __future__ import annotations

import numpy as np

from streamjoin.indexes.base import WindowIndex, unique_pairs


class PerTermIndex(WindowIndex):
    """Indexes of one kind, one per OR term, over the same items (module docstring).

    Complexity: each operation is the inner index's, once per term, and a probe adds
    O(c log c) to merge its ``c`` candidates; memory the inner indexes' together.

    Parameters
    ----------
    inner : type[WindowIndex]
        The kind of each term's index.
    groups : tuple[int, ...]
        Key rows of each term's index (one term each, in order; at least two terms).
    **options
        Keyword arguments for each inner index.
    """

    name = "per_term"
    multi_attribute = True
    #: a term's index returns items that another term may fail: θ is checked on every one
    exact = False

    def __init__(self, inner: type[WindowIndex], groups: tuple[int, ...], **options) -> None:
        if len(groups) < 2 or min(groups) < 1:
            raise ValueError(f"per-term indexes need two or more terms of keys, got {groups}")
        super().__init__(sum(groups))
        self.inner = inner
        self.parts = [inner(g, **options) for g in groups]
        #: first key row of each term's index, and the end
        self.rows = np.cumsum((0, *groups))

    def _slices(self):
        return zip(self.parts, self.rows[:-1], self.rows[1:], strict=True)

    def insert(self, keys: np.ndarray, refs: np.ndarray) -> None:
        for part, a, b in self._slices():
            part.insert(np.ascontiguousarray(keys[a:b]), refs)

    def probe(
        self, keys: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        found = [
            part.probe(np.ascontiguousarray(keys[a:b]), lo[a:b], hi[a:b])
            for part, a, b in self._slices()
        ]
        return unique_pairs(*map(np.concatenate, zip(*found, strict=True)))

    def expire(self, before_ref: int) -> None:
        for part in self.parts:
            part.expire(before_ref)

    def __len__(self) -> int:
        return max(len(part) for part in self.parts)

    def probe_units(self) -> float:
        return sum(part.probe_units() for part in self.parts)

    @property
    def nbytes(self) -> int:
        return sum(part.nbytes for part in self.parts)

    def check(self) -> None:
        assert len(self.parts) == len(self.rows) - 1 >= 2
        for part, a, b in self._slices():
            assert part.n_keys == b - a
            part.check()
