"""Drawing a wiring (:func:`plot_wiring`): sensory inputs then each layer as a column, motor on the
right; green = excitatory, red = inhibitory; recurrent synapses inside a layer drawn as arcs.
matplotlib loads only when a wiring is drawn, so building networks never imports it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from drive.io.atomic import save_figure
from drive.nn.wiring.base import Wiring

__all__ = ["plot_wiring"]

Point = Tuple[float, float]
Columns = List[Tuple[str, List[int]]]  # (layer name, its neurons), sensory first
_EDGE_COLOURS = {1: "tab:green", -1: "tab:red"}
_NODE_COLOURS = {
    "sensory": "tab:olive",
    "inter": "tab:blue",
    "command": "tab:purple",
    "motor": "tab:orange",
    "all": "tab:blue",
}


def plot_wiring(wiring: Wiring, path: str, title: Optional[str] = None) -> None:
    """Write a PNG of ``wiring``'s graph to ``path`` (atomically), titled ``title`` or its kind and counts."""
    # start-up time: matplotlib takes ~1 s to import, and only drawing needs it
    import matplotlib
    import matplotlib.pyplot as plt  # start-up time, as above

    matplotlib.use("Agg")
    columns: Columns = [("sensory", list(range(wiring.input_dim)))] + wiring.layers
    tallest = max(len(idx) for _, idx in columns)
    pos_sens, pos = _positions(columns, tallest)
    fig, ax = plt.subplots(figsize=(2.2 * len(columns) + 2, max(4.0, 0.22 * tallest + 2)))
    for i, j in zip(*np.nonzero(wiring.sensory_adjacency)):
        _edge(ax, pos_sens[int(i)], pos[int(j)], int(wiring.sensory_adjacency[i, j]), 0.25)
    for i, j in zip(*np.nonzero(wiring.adjacency)):
        _edge(ax, pos[int(i)], pos[int(j)], int(wiring.adjacency[i, j]), 0.7)
    _nodes(ax, columns, pos_sens, pos, tallest)
    ax.plot([], [], color="tab:green", label="excitatory")
    ax.plot([], [], color="tab:red", label="inhibitory")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(
        title
        or f"{wiring.kind}: {wiring.units} neurons, {wiring.synapse_count} + "
        f"{wiring.sensory_synapse_count} sensory synapses"
    )
    ax.set_xlim(-0.5, len(columns) - 0.5)
    ax.set_ylim(-tallest / 2.0 - 1, tallest / 2.0 + 1.5)
    ax.axis("off")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def _positions(columns: Columns, tallest: int) -> Tuple[Dict[int, Point], Dict[int, Point]]:
    """(sensory input -> point, neuron -> point): one column per layer, each centred vertically."""
    pos_sens: Dict[int, Point] = {}
    pos: Dict[int, Point] = {}
    for col, (_, idx) in enumerate(columns):
        for k, i in enumerate(idx):
            y = (k - (len(idx) - 1) / 2.0) * tallest / max(len(idx), 1)
            (pos_sens if col == 0 else pos)[i] = (float(col), y)
    return pos_sens, pos


def _edge(ax: Any, p: Point, q: Point, polarity: int, alpha: float) -> None:
    """One synapse p -> q: an arrow, an arc inside a column, a small loop for a self-synapse."""
    # start-up time: matplotlib loads only when a wiring is drawn
    from matplotlib.patches import Circle, FancyArrowPatch

    colour = _EDGE_COLOURS[polarity]
    if p == q:
        ax.add_patch(Circle((p[0] + 0.12, p[1]), 0.12, fill=False, lw=0.8, color=colour, alpha=alpha))
        return
    rad = 0.4 if abs(p[0] - q[0]) < 1e-9 else 0.0
    ax.add_patch(
        FancyArrowPatch(
            p,
            q,
            arrowstyle="-|>",
            mutation_scale=7,
            lw=0.6,
            color=colour,
            alpha=alpha,
            connectionstyle=f"arc3,rad={rad}",
            shrinkA=4,
            shrinkB=4,
        )
    )


def _nodes(
    ax: Any, columns: Columns, pos_sens: Dict[int, Point], pos: Dict[int, Point], tallest: int
) -> None:
    """The neurons of each column, coloured by layer, with the layer's name and size above."""
    for col, (name, idx) in enumerate(columns):
        pts = [(pos_sens if col == 0 else pos)[i] for i in idx]
        ax.scatter(
            [p[0] for p in pts],
            [p[1] for p in pts],
            s=60,
            zorder=3,
            color=_NODE_COLOURS.get(name, "tab:blue"),
            edgecolor="k",
            linewidth=0.5,
        )
        ax.text(col, tallest / 2.0 + 0.8, f"{name} ({len(idx)})", ha="center")
