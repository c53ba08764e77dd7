"""Memory-traffic models of the window indexes, written from their kernels.

Each model says what one tuple costs an index in memory traffic in the steady state of one
stream's share of a join: the index holds ``window`` items, and each tuple probes it once, is
inserted once (in batches of ``insert_batch``) and expires once. Divided into this machine's
copy bandwidth, or multiplied by its dependent-miss latency
(:class:`streamjoin.roofline.Roofline`), a model bounds the index's throughput, and a measured
figure can be reported as a fraction of that bound.

The conventions are :func:`streamjoin.indexes.pim.pim_tree.memory_traffic`'s:

- a cache line is 64 bytes, and every line an operation touches is counted whole, once for
  reading and once more if it is written (a dirty line goes back to memory);
- inner nodes of a tree are taken as cached (a few bytes per leaf), leaves as cold: the keys
  are spread over the window, so consecutive probes and inserts meet different leaves;
- ``cold_lines`` counts the lines a tuple waits for one after another if nothing overlaps:
  the lines each search reads in a leaf (all of them where the kernel fetches a leaf whole,
  as an insert does), and the links of a hash chain.

Every model returns ``{"probe_bytes", "insert_bytes", "upkeep_bytes", "total_bytes",
"cold_lines"}`` per tuple; ``upkeep`` is what keeping the window costs besides placing the new
item: expiry, merges, rebuilds, archiving. Splits and merges of a mutable tree's nodes and the
pairs written out are not counted (a few bytes a tuple at a match rate of 2).

:func:`memory_traffic` picks the model of an index by its registry name; PIM-Tree's and
IM-Tree's is :func:`~streamjoin.indexes.pim.pim_tree.memory_traffic`, BI-Sort's (by the batch, for
its subwindows) :func:`~streamjoin.indexes.panjoin.bisort.stream_bytes`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from streamjoin.indexes.blocks.item_layout import item_layout
from streamjoin.indexes.pim.tree_shape import DEFAULT_SHAPE
from streamjoin.modes import Layout

LINE = 64
#: A mutable B+-tree's nodes under random inserts and deletes are about ln 2 full.
BTREE_FILL = 0.7


def lines(nbytes: float) -> int:
    """Cache lines that ``nbytes`` contiguous bytes span (at least one for any)."""
    return max(1, math.ceil(nbytes / LINE)) if nbytes > 0 else 0


def search_lines(n_items: float, item_bytes: int = 8) -> int:
    """Lines a binary search over a cold sorted run of ``n_items`` touches: one per halving
    while the range spans more than a line, then the last line."""
    run = lines(n_items * item_bytes)
    return 0 if run == 0 else min(run, 1 + math.ceil(math.log2(run)))


def _result(probe: float, insert: float, upkeep: float, cold: float) -> dict[str, float]:
    return {
        "probe_bytes": float(probe),
        "insert_bytes": float(insert),
        "upkeep_bytes": float(upkeep),
        "total_bytes": float(probe + insert + upkeep),
        "cold_lines": float(cold),
    }


def _bplus_leaf(leaf_size: int) -> tuple[int, int, int, int]:
    """``(search, moved, probe, whole)`` lines of one B+-tree leaf visit: the search of its
    keys, the lines of keys and refs a one-slot shift moves (half the items on average), a
    probe's lines, and all its key and ref lines (what an insert into a large tree
    prefetches, :func:`~streamjoin.indexes.bplus_tree.insert_into`, and what a probe
    prefetches too, :func:`~streamjoin.indexes.bplus_tree.probe_tree`, so that a group of
    probes' misses overlap)."""
    items = BTREE_FILL * leaf_size
    search = search_lines(items)
    moved = 2 * lines(items / 2 * 8)
    whole = 2 * lines(leaf_size * 8)
    return search, moved, whole, whole


def bplus_tree(
    window: int,
    fanout: int = DEFAULT_SHAPE.fanout,
    leaf_size: int = DEFAULT_SHAPE.leaf_size,
    **_,
) -> dict[str, float]:
    """:mod:`~streamjoin.indexes.pim.bplus_tree`: a probe descends to a leaf, prefetching each
    node (a group of probes a level at a time), and searches it
    (:func:`~streamjoin.indexes.pim.bplus_tree.probe_tree`); an insert prefetches its whole leaf,
    then shifts the items above its place one slot (written back); an expiry likewise
    prefetches its leaf and shifts to delete the item
    (:func:`~streamjoin.indexes.pim.bplus_tree.delete_items`); the insertion log writes then reads
    the item's key and ref (16 bytes each way). Cold: the probe's, the insert's and the
    expiry's whole leaves, as :func:`~streamjoin.indexes.pim.pim_tree.memory_traffic` counts an
    insert's leaf."""
    moved, probe, whole = _bplus_leaf(leaf_size)[1:]
    insert = (whole + moved) * LINE + 16
    expire = (whole + moved) * LINE + 16
    return _result(probe * LINE, insert, expire, probe + 2 * whole)


def css_tree(
    window: int,
    insert_batch: int = 512,
    fanout: int = DEFAULT_SHAPE.css_fanout,
    leaf_size: int = DEFAULT_SHAPE.css_leaf_size,
    layout: Layout = "wide",
    **_,
) -> dict[str, float]:
    """:mod:`~streamjoin.indexes.pim.css_tree`: a probe fetches and searches one leaf (all its
    keys, or compact items, as :func:`~streamjoin.indexes.pim.css_tree.search_css_tree`
    prefetches them for a group of probes, and a line of refs beside wide keys); every insert merges its sorted batch into the
    whole leaf level (:func:`~streamjoin.indexes.blocks.sorted_runs.merge_runs_into`, or
    :meth:`~streamjoin.indexes.blocks.coded_level.CodedLevel.merge` compact), reading the old level
    and writing the new one (``window + insert_batch`` items each: expiry only moves a bound,
    and the expired batch leaves at the merge that adds the new one), then rebuilds the inner
    keys (one key per leaf)."""
    items = item_layout("css_tree", layout)
    item = items.item_bytes
    probe = lines(leaf_size * 8) + items.ref_lines
    level = 2 * item * (window + insert_batch) + 16 * insert_batch  # old, new, the batch
    inner = 2 * 8 * (window / leaf_size) * fanout / (fanout - 1)  # leaf maxima read, written
    return _result(probe * LINE, 0.0, (level + inner) / insert_batch, probe)


def chained(
    window: int,
    chain_length: int = 2,
    archive: str = "css",
    layout: Layout = "wide",
    fanout: int = DEFAULT_SHAPE.fanout,
    leaf_size: int = DEFAULT_SHAPE.leaf_size,
    css_fanout: int = DEFAULT_SHAPE.css_fanout,
    css_leaf_size: int = DEFAULT_SHAPE.css_leaf_size,
    **_,
) -> dict[str, float]:
    """:mod:`~streamjoin.indexes.pim.chained`: a probe searches the active B+-tree and the
    ``L - 1`` archived subindexes (B+-trees, or CSS-trees of 16- or 8-byte items); an insert
    goes into the active B+-tree as in :func:`bplus_tree`; nothing expires item by item.
    The active tree grows from empty by doubling its node arrays (:func:`~streamjoin.indexes.
    bplus_tree.reserve`): its nodes, at :data:`BTREE_FILL`, are copied about once. Archiving
    a full subindex of ``s = window / (L - 1)`` items copies it once more: a B+-tree's nodes
    read and written; for a CSS-tree the leaf chain read and the sorted run written, and
    compact also read again and packed into 8 bytes an item."""
    search, moved, bplus_probe, whole = _bplus_leaf(leaf_size)
    node_bytes = 16 / BTREE_FILL
    items = item_layout("chained", layout)
    if archive == "css":
        archived = lines(css_leaf_size * 8) + items.ref_lines  # the leaf, prefetched whole
        copy = node_bytes + 16 + (16 + items.item_bytes if items.packed else 0)
    else:
        archived = bplus_probe
        copy = 2 * node_bytes
    probe = bplus_probe + (chain_length - 1) * archived
    insert = (whole + moved) * LINE
    return _result(probe * LINE, insert, copy + 2 * node_bytes, probe + whole)


def hash_table(
    window: int, insert_batch: int = 512, match_rate: float = 2.0, **_
) -> dict[str, float]:
    """:mod:`~streamjoin.indexes.hash`: a probe reads its bucket's head, then walks the chain
    of entries with its key's bucket down to the expired ones, a line of ``next`` and one of
    keys at each (the matches, ``match_rate`` of them, and about ``window / buckets`` other
    keys; the walk waits for ``next`` only), and a line of refs at each match; an insert
    appends its entry (key, bits, ref, next: 32 bytes written) and rewrites its bucket's head
    line. The arrays are compacted and the chains relinked when they fill: with a capacity of
    ``cap`` (the power of two at least twice the live items and a batch) every
    ``cap - window`` inserts, copying each live item's 24 bytes twice (out and back, 96 bytes
    read and written), relinking it (its ``next``, and its bucket's line read and written),
    and writing the ``2 cap`` buckets."""
    cap = 2 ** math.ceil(math.log2(2 * (window + insert_batch)))
    chain = match_rate + window / (2 * cap)
    probe = 1 + 2 * chain + match_rate
    insert = 32 + 2 * LINE
    rebuild = window * (96 + 8 + 2 * LINE) + 2 * cap * 8
    return _result(probe * LINE, insert, rebuild / (cap - window), 1 + chain)


def _swept(window: int, batch: int, c: int, parts: float, wide: bool) -> tuple[float, float]:
    """``(bytes, cold lines)`` per tuple of a sorted probe batch sweeping subwindows of ``c``
    items cut into ``parts`` partitions (or leaves) each: for a band narrower than a
    partition, a batch of ``batch`` keys meets about ``1 - exp(-batch / parts)`` of them and
    streams their keys once, 8 bytes an item in either layout (wide refs are a separate array,
    :func:`~streamjoin.indexes.panjoin.llat.scan_partitions`), and the first line of each met
    partition's chain is a miss. The window holds ``window / c`` full subwindows and the
    newest, half full on average; a probe reads a line of wide refs at its matches (compact
    items hold their refs)."""
    met = 1.0 - math.exp(-batch / parts)
    full = window / c
    per_batch = met * (full + 0.5) * c * 8 + met * parts * (full + 1) * LINE
    return per_batch / batch + LINE * wide, met * parts * (full + 1) / batch


def _appended(batch: int, parts: float) -> float:
    """Bytes per tuple of appending a sorted batch to ``parts`` LLAT chains: a tail line of
    keys and one of refs read and written where the batch's keys meet a chain, 16 bytes of
    each line's 64 per item where they run on in one."""
    return 16 + 4 * LINE * min(1.0, parts / batch)


#: Bytes per item of packing a full subwindow (:meth:`~streamjoin.indexes.panjoin.llat.LLATStore.
#: _pack`): its keys gathered and sorted partly to fit the code (:func:`~streamjoin.indexes.
#: key_codes.fit_unsorted`, about three passes of 8 bytes read and written), then each item
#: read (key and ref) and written as one word.
PACK_BYTES = 3 * 16 + 16 + 8


def rap_table(
    window: int,
    insert_batch: int = 1024,
    subwindow_size: int = 2**16,
    partitions: int = 512,
    layout: Layout = "compact",
    **_,
) -> dict[str, float]:
    """:mod:`~streamjoin.indexes.panjoin.rap_table`: the probe batch sweeps each subwindow's ``P``
    partitions (:func:`_swept`); an insert appends to its partition's LLAT chain
    (:func:`_appended`); compact, the subwindow that fills is packed once
    (:data:`PACK_BYTES`)."""
    wide = not item_layout("rap_table", layout).packed
    probe, cold = _swept(window, insert_batch, subwindow_size, partitions, wide)
    insert = _appended(insert_batch, partitions)
    return _result(probe, insert, 0.0 if wide else PACK_BYTES, cold)


def wib_tree(
    window: int,
    insert_batch: int = 1024,
    subwindow_size: int = 2**16,
    leaf_width: int = 128,
    layout: Layout = "wide",
    **_,
) -> dict[str, float]:
    """:mod:`~streamjoin.indexes.panjoin.wib_tree`: the probe batch descends (inner nodes cached) and
    sweeps the leaves, about :data:`BTREE_FILL` full, as RaP-Table sweeps partitions
    (:func:`_swept`); an insert appends to its leaf (:func:`_appended`); a leaf that fills is
    sorted and split, reading and writing its ``leaf_width`` items of 16 bytes, about once
    every ``leaf_width / 2`` inserts; compact, the subwindow that fills is packed once
    (:data:`PACK_BYTES`)."""
    wide = not item_layout("wib_tree", layout).packed
    leaves = subwindow_size / (BTREE_FILL * leaf_width)
    probe, cold = _swept(window, insert_batch, subwindow_size, leaves, wide)
    split = 2 * 16 * leaf_width / (leaf_width / 2)
    insert = _appended(insert_batch, leaves)
    return _result(probe, insert, split + (0.0 if wide else PACK_BYTES), cold)


def memory_traffic(name: str, window: int, /, **options) -> dict[str, float]:
    """The model of the index registered as ``name`` (its options as keywords, plus
    ``insert_batch`` where the batch matters; a ``window`` option is the positional one).
    Raises ``KeyError`` for an index without one."""
    options.pop("window", None)
    if name in ("pim_tree", "im_tree"):
        from streamjoin.indexes.pim.pim_tree import memory_traffic as pim

        keep = ("merge_ratio", "layout", "leaf_size", "css_leaf_size")
        traffic = pim(window, **{k: v for k, v in options.items() if k in keep})
        return {
            "probe_bytes": traffic["probe_bytes"],
            "insert_bytes": traffic["insert_bytes"],
            "upkeep_bytes": traffic["merge_bytes"],
            "total_bytes": traffic["total_bytes"],
            "cold_lines": traffic["cold_lines"],
        }
    models: dict[str, Callable[..., dict[str, float]]] = {
        "bplus_tree": bplus_tree,
        "css_tree": css_tree,
        "chained": chained,
        "hash": hash_table,
        "rap_table": rap_table,
        "wib_tree": wib_tree,
    }
    return models[name](window, **options)
