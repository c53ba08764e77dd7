"""The memory-traffic models of :mod:`streamjoin.indexes.traffic` rest on what real indexes
hold: a B+-tree's leaf fill, a CSS-tree's level size, a hash table's capacity. Each is checked
here against an index driven as a join drives it."""

import math

import numpy as np
import pytest

from streamjoin.indexes import traffic
from streamjoin.indexes.hash import HashIndex
from streamjoin.indexes.pim.bplus_tree import BPlusTreeIndex
from streamjoin.indexes.pim.css_tree import CSSTreeIndex


def _slide(index, window: int, batch: int, steps: int, seed: int = 0) -> None:
    """Insert ``steps`` batches of uniform keys, keeping ``window`` items."""
    rng = np.random.default_rng(seed)
    for b in range(steps):
        refs = np.arange(b * batch, (b + 1) * batch)
        index.insert(rng.uniform(0, 1e6, (1, batch)).round(), refs)
        index.expire(refs[-1] + 1 - window)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("bplus_tree", {}),
        ("css_tree", {}),
        ("css_tree", {"layout": "compact"}),
        ("chained", {"chain_length": 2, "archive": "bplus"}),
        ("chained", {"chain_length": 3, "archive": "css", "layout": "compact"}),
        ("hash", {}),
        ("rap_table", {"subwindow_size": 2**18, "partitions": 2048}),
        ("wib_tree", {"subwindow_size": 2**18}),
        ("wib_tree", {"subwindow_size": 2**18, "layout": "compact"}),
        ("pim_tree", {"merge_ratio": 1 / 8, "insertion_depth": 1, "window": 2**20}),
        ("im_tree", {"merge_ratio": 1 / 8}),
    ],
)
def test_every_model_adds_up(name, options):
    model = traffic.memory_traffic(name, 2**20, insert_batch=512, **options)
    parts = model["probe_bytes"] + model["insert_bytes"] + model["upkeep_bytes"]
    assert model["total_bytes"] == pytest.approx(parts)
    assert all(math.isfinite(v) and v >= 0 for v in model.values())
    assert model["total_bytes"] > 64  # every index touches at least one line a tuple


def test_unknown_model_is_a_key_error():
    with pytest.raises(KeyError):
        traffic.memory_traffic("nested_loop", 1024)


def test_search_lines():
    assert traffic.search_lines(0) == 0
    assert traffic.search_lines(8) == 1  # one line
    assert traffic.search_lines(64) == 4  # 8 lines: halve 3 times
    assert traffic.search_lines(2**20) == 1 + 17


def test_bplus_tree_leaves_are_as_full_as_the_model_takes():
    """Random inserts and deletes leave the leaves about ln 2 full (BTREE_FILL)."""
    window = 2**15
    tree = BPlusTreeIndex(leaf_size=64)
    _slide(tree, window, 512, 4 * window // 512)
    t = tree._tree
    counts, leaf = [], 0  # the leaves in use: the chain from leaf 0
    while leaf >= 0:
        counts.append(int(t.leaf_count[leaf]))
        leaf = int(t.leaf_next[leaf])
    fill = sum(counts) / (len(counts) * 64)
    assert len(tree) == sum(counts) == window and abs(fill - traffic.BTREE_FILL) < 0.08, fill


@pytest.mark.parametrize("layout", ["wide", "compact"])
def test_css_tree_rebuilds_the_level_the_model_charges(layout):
    """The upkeep charged per insert is the level read and written: what the index holds."""
    window, batch = 2**14, 256
    tree = CSSTreeIndex(layout=layout)
    _slide(tree, window, batch, 3 * window // batch)
    level = tree._keys.nbytes + tree._refs.nbytes  # after the last merge: window + batch
    model = traffic.css_tree(window, batch, layout=layout)
    inner = 2 * 8 * (window / 32) * 65 / 64
    charged = (model["upkeep_bytes"] * batch - 16 * batch - inner) / 2  # one level's bytes
    assert charged == pytest.approx(level, rel=0.02)


def test_hash_capacity_is_the_models():
    """The arrays the model's rebuilds copy are the capacity the table settles at."""
    window = 5000
    table = HashIndex()
    _slide(table, window, 500, 40)
    assert len(table._keys) == 2 ** math.ceil(math.log2(2 * (window + 500)))
