"""What an index's probe still waits on memory: each probe of a sorted batch timed cold and
again warm, against this machine's dependent miss measured in the same process.

    python benchmarks/probe_misses.py [LOG2_WINDOW] [BATCH] [INDEX ...]

INDEX: ``bplus_tree``, ``css_tree``, ``pim_tree`` (m = 1/8, D_I = 1), ``bisort`` (two
subwindows of the window, partitions of 128 items, 16-byte items); all four by default.
Defaults: W = 2^20 items, batches of 1,024.

Each index holds W uniform keys (filled untimed, in batches of 8,192). Then, 400 rounds, the
first 50 left out: a batch of uniform keys, sorted as the join core sorts its batch, probes
the index for a band of about one match a probe (*cold*: the lines its descents reach were
last touched about a window ago) and at once a second time (*warm*: the same lines, now in
cache, so what is left is the probe's instructions), then is inserted, and the oldest items
expire. Prints per index, in ns a probe:

- ``cold``, ``warm``; ``cold / warm`` is about the most the probe could gain if every miss it
  waits for were hidden (a ceiling on what prefetching or interleaving more probes can buy).
  Where a batch's probes touch more lines than the L2 holds (1,024 probes into a tree of 2^20
  items can), the warm probe still waits on the L3 and the ceiling is higher: a batch of 256
  gives a tighter one where a call's fixed cost weighs little (not BI-Sort's);
- ``waits``: ``cold - warm`` in dependent misses (:func:`streamjoin.roofline.dependent_load_ns`,
  measured first): the misses' time the probe does not overlap with its work;
- ``lines``: the probe's cache lines in the index's traffic model
  (:mod:`streamjoin.indexes.traffic`, probe bytes / 64; BI-Sort's
  :func:`~streamjoin.indexes.panjoin.bisort.stream_bytes`): every line it touches, a leaf's
  neighbouring lines each counted, so more than the misses a probe waits for one after
  another.

Run it on a quiet machine; the figures move with the host (alternate with the commit you
compare against).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from streamjoin import indexes
from streamjoin.indexes.blocks.key_order import stable_key_order
from streamjoin.indexes.panjoin.bisort import BISortIndex, stream_bytes
from streamjoin.indexes.traffic import LINE, memory_traffic
from streamjoin.roofline import dependent_load_ns

KEY_RANGE = float(2**40)
FILL_BATCH = 8192
ROUNDS, WARM_UP = 400, 50


def build(name: str, w: int, batch: int):
    """``(index, items it holds, the model's lines a probe)``."""
    if name == "bisort":
        index = BISortIndex(subwindow_size=w, partitions=w // 128, layout="wide")
        probe = stream_bytes(w, w // 32, w // 128, batch, 2 * w)["probe"]
        return index, 2 * w, probe / LINE
    options = {"pim_tree": {"merge_ratio": 1 / 8, "window": w, "insertion_depth": 1}}
    index = indexes.get(name)(1, **options.get(name, {}))
    return index, w, memory_traffic(name, w, **options.get(name, {}))["probe_bytes"] / LINE


def measure(name: str, w: int, batch: int) -> tuple[float, float, float]:
    """``(cold ns, warm ns a probe, the model's lines a probe)``."""
    index, held, lines = build(name, w, batch)
    rng = np.random.default_rng(1)
    eps = np.array([KEY_RANGE / (2 * held)])  # about one match a probe
    ref = 0

    def step(keys: np.ndarray, probe: bool) -> tuple[float, float]:
        nonlocal ref
        refs = np.arange(ref, ref + keys.shape[1])
        ref += keys.shape[1]
        order = stable_key_order(keys[0])
        cold = warm = 0.0
        if probe:
            sorted_keys = keys if order is None else keys[:, order]
            t0 = time.perf_counter()
            index.probe(sorted_keys, -eps, eps)
            t1 = time.perf_counter()
            index.probe(sorted_keys, -eps, eps)
            cold, warm = t1 - t0, time.perf_counter() - t1
        if getattr(index, "takes_order", False):
            index.insert(keys, refs, order=order)
        else:
            index.insert(keys, refs)
        index.expire(ref - held)
        return cold, warm

    for _ in range(held // FILL_BATCH + 1):
        step(rng.uniform(0, KEY_RANGE, (1, FILL_BATCH)), False)
    cold = warm = 0.0
    for i in range(ROUNDS):
        c, h = step(rng.uniform(0, KEY_RANGE, (1, batch)), True)
        if i >= WARM_UP:
            cold, warm = cold + c, warm + h
    n = (ROUNDS - WARM_UP) * batch
    return cold / n * 1e9, warm / n * 1e9, lines


if __name__ == "__main__":
    args = sys.argv[1:]
    log2_w = int(args.pop(0)) if args and args[0].isdigit() else 20
    batch = int(args.pop(0)) if args and args[0].isdigit() else 1024
    names = args or ["bplus_tree", "css_tree", "pim_tree", "bisort"]
    miss = dependent_load_ns()
    print(f"W = 2^{log2_w}, batches of {batch:,}; a dependent miss {miss:.0f} ns")
    print(f"{'index':<12}{'cold':>7}{'warm':>7}{'cold/warm':>10}{'waits':>7}{'lines':>7}")
    for name in names:
        cold, warm, lines = measure(name, 1 << log2_w, batch)
        print(
            f"{name:<12}{cold:>7.0f}{warm:>7.0f}{cold / warm:>10.2f}{(cold - warm) / miss:>7.2f}"
            f"{lines:>7.1f}"
        )
