"""The node sizes of the trees that the PIM-Tree family is built of, with their defaults and
ranges in one place: mutable B+-trees (:mod:`~streamjoin.indexes.pim.bplus_tree`: T_I's
subindexes, the chained index's active subindex) and immutable CSS-trees
(:mod:`~streamjoin.indexes.pim.css_tree`: T_S, the chained index's archived subindexes).

Each index still takes the sizes as keyword options (``fanout=16``; the options a user can pass
are read from its signature), with :data:`DEFAULT_SHAPE`'s values as defaults, and checks them
with :meth:`TreeShape.checked`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from streamjoin.indexes.base import node_size


@dataclass(frozen=True)
class TreeShape:
    """Node sizes of a B+-tree and of a CSS-tree; each an integer from its minimum up to
    :data:`~streamjoin.indexes.base.MAX_NODE`."""

    #: B+-tree: children per inner node, >= 3.
    fanout: int = field(default=32, metadata={"minimum": 3})
    #: B+-tree: items per leaf, >= 3.
    leaf_size: int = field(default=64, metadata={"minimum": 3})
    #: CSS-tree: children per inner node, >= 2 (``css_fanout - 1`` keys: 64 keys, 512 bytes).
    css_fanout: int = field(default=65, metadata={"minimum": 2})
    #: CSS-tree: items per leaf, >= 1.
    css_leaf_size: int = field(default=32, metadata={"minimum": 1})

    def checked(self, index: str) -> TreeShape:
        """This shape with every size an ``int``; a ``ValueError`` naming ``index`` and the
        option for a size of the wrong type or out of its range."""
        sizes = {
            f.name: node_size(index, f.name, getattr(self, f.name), f.metadata["minimum"])
            for f in fields(self)
        }
        return TreeShape(**sizes)


#: The node sizes an index takes when none are given.
DEFAULT_SHAPE = TreeShape()
