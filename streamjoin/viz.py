"""Pictures: actor graphs and latency plots. Depends on no other streamjoin module, so every
layer may use it. Files are written atomically: a failed render leaves nothing behind."""

from __future__ import annotations

import os
import tempfile

import numpy as np

ROLE_COLORS = {
    "emitter": "#8ecae6",
    "join_core": "#ffb703",
    "collector": "#90be6d",
    "manager": "#e5989b",
    "worker": "#ffb703",
    "handshake_core": "#ffb703",
    "handshake_ll_core": "#ffb703",
    "spo_mutable": "#e5989b",
    "spo_worker": "#ffb703",
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | os.PathLike) -> None:
    """Write ``fig`` to ``path`` atomically (through a temporary file in the same folder)."""
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    suffix = os.path.splitext(path)[1] or ".png"
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=suffix, prefix=".tmp-")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def draw_graph(graph, title: str, path: str | os.PathLike) -> None:
    """Draw an actor graph: nodes at their ``pos``, coloured by ``role``, edges labelled; a
    node's ``parts`` (e.g. a shared-index core's threads) as small boxes inside it."""
    import networkx as nx

    plt = _pyplot()
    simple = nx.DiGraph()  # one arrow per node pair, labelled with everything it carries
    simple.add_nodes_from(graph.nodes(data=True))
    for u, v, d in graph.edges(data=True):
        label = d.get("label", "")
        if simple.has_edge(u, v) and label not in simple[u][v]["label"].split("+"):
            label = f"{simple[u][v]['label']}+{label}"
        simple.add_edge(u, v, label=label)
    graph = simple
    pos = {n: d.get("pos", (i, 0)) for i, (n, d) in enumerate(graph.nodes(data=True))}
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    fig, ax = plt.subplots(
        figsize=(max(4.0, 2.4 * (max(xs) - min(xs) + 1)), max(2.5, 2.2 * (max(ys) - min(ys) + 1)))
    )
    colors = [ROLE_COLORS.get(d.get("role"), "#d9d9d9") for _, d in graph.nodes(data=True)]
    labels = {n: d.get("label", n) for n, d in graph.nodes(data=True)}
    nx.draw_networkx_nodes(
        graph, pos, ax=ax, node_color=colors, node_size=2000, node_shape="s", edgecolors="#333333"
    )
    nx.draw_networkx_labels(graph, pos, labels=labels, ax=ax, font_size=8)
    for n, d in graph.nodes(data=True):  # what runs inside a node (a core's threads)
        parts = d.get("parts", ())
        for k, part in enumerate(parts):
            ax.annotate(
                part,
                xy=pos[n],
                xytext=(14 * (k - (len(parts) - 1) / 2), -12),
                textcoords="offset points",
                ha="center",
                va="center",
                fontsize=6,
                bbox={"boxstyle": "square,pad=0.2", "fc": "white", "ec": "#333333"},
            )
    nx.draw_networkx_edges(
        graph, pos, ax=ax, arrows=True, arrowsize=16, node_size=2000, node_shape="s"
    )
    edge_labels = {(u, v): d.get("label", "") for u, v, d in graph.edges(data=True)}
    nx.draw_networkx_edge_labels(graph, pos, edge_labels=edge_labels, ax=ax, font_size=8)
    ax.set_title(title)
    ax.margins(0.25)
    ax.axis("off")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def plot_latency_cdf(
    latency_ns: np.ndarray | None,
    path: str | os.PathLike,
    *,
    title: str = "",
    histogram: tuple[np.ndarray, np.ndarray] | None = None,
) -> None:
    """CDF of per-pair latency, from exact latencies or from ``(bucket_upper_ns, counts)``."""
    plt = _pyplot()
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(6, 4))
    if latency_ns is not None and len(latency_ns):
        x = np.sort(latency_ns) / 1e6
        y = np.arange(1, len(x) + 1) / len(x)
        ax.step(x, y, where="post")
    elif histogram is not None and histogram[1].sum():
        edges, counts = histogram
        keep = counts > 0
        ax.step(edges[keep] / 1e6, np.cumsum(counts[keep]) / counts.sum(), where="post")
    else:
        ax.text(0.5, 0.5, "no output pairs", ha="center", va="center", transform=ax.transAxes)
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("latency per output pair (ms, log scale)")
    ax.set_ylabel("fraction of pairs")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title or "latency CDF")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def plot_layouts(rows: list[dict], path: str | os.PathLike) -> None:
    """Throughput and latency (p50, p99) per layout, side by side (DP-Join Fig. 6/7 style)."""
    plt = _pyplot()
    labels = [r["layout"] for r in rows]
    x = np.arange(len(rows))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(7.0, 1.6 * len(rows) + 4), 3.8))
    ax1.bar(x, [r["input_tuples_per_s"] / 1e3 for r in rows], color="#219ebc")
    ax1.set_ylabel("input throughput (K tuples/s)")
    ax2.plot(x, [r["latency_p50_ms"] for r in rows], "o-", label="p50")
    ax2.plot(x, [r["latency_p99_ms"] for r in rows], "s--", label="p99")
    ax2.set_ylabel("latency per output pair (ms)")
    ax2.legend()
    for ax in (ax1, ax2):
        ax.set_xticks(x, labels)
        ax.set_xlabel("layout")
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"layouts on {rows[0]['backend']}")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
