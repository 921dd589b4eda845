"""Drawing a wiring (:meth:`drive.nn.wiring.Wiring.plot`): sensory inputs then each layer as a
column, motor on the right; green = excitatory, red = inhibitory; recurrent synapses inside a layer
drawn as arcs. Kept apart from :mod:`drive.nn.wiring` so that building networks never loads matplotlib.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Circle, FancyArrowPatch

from drive.io.atomic import save_figure

if TYPE_CHECKING:
    from drive.nn.wiring import Wiring

__all__ = ["plot_wiring"]


def plot_wiring(wiring: "Wiring", path: str, title: Optional[str] = None) -> None:
    """Write a PNG of ``wiring``'s graph to ``path`` (atomically), titled ``title`` or its kind and counts."""
    matplotlib.use("Agg")
    columns: List[Tuple[str, List[int]]] = [("sensory", list(range(wiring.input_dim)))] + wiring.layers
    pos_sens: Dict[int, Tuple[float, float]] = {}
    pos: Dict[int, Tuple[float, float]] = {}
    tallest = max(len(idx) for _, idx in columns)
    for col, (_, idx) in enumerate(columns):
        for k, i in enumerate(idx):
            y = (k - (len(idx) - 1) / 2.0) * tallest / max(len(idx), 1)
            (pos_sens if col == 0 else pos)[i] = (float(col), y)
    fig, ax = plt.subplots(figsize=(2.2 * len(columns) + 2, max(4.0, 0.22 * tallest + 2)))
    colours = {1: "tab:green", -1: "tab:red"}

    def edge(p: Tuple[float, float], q: Tuple[float, float], pol: int, alpha: float) -> None:
        if p == q:  # self-synapse: a small loop beside the neuron
            ax.add_patch(
                Circle((p[0] + 0.12, p[1]), 0.12, fill=False, lw=0.8, color=colours[pol], alpha=alpha)
            )
            return
        rad = 0.4 if abs(p[0] - q[0]) < 1e-9 else 0.0
        ax.add_patch(
            FancyArrowPatch(
                p,
                q,
                arrowstyle="-|>",
                mutation_scale=7,
                lw=0.6,
                color=colours[pol],
                alpha=alpha,
                connectionstyle=f"arc3,rad={rad}",
                shrinkA=4,
                shrinkB=4,
            )
        )

    for i, j in zip(*np.nonzero(wiring.sensory_adjacency)):
        edge(pos_sens[int(i)], pos[int(j)], int(wiring.sensory_adjacency[i, j]), 0.25)
    for i, j in zip(*np.nonzero(wiring.adjacency)):
        edge(pos[int(i)], pos[int(j)], int(wiring.adjacency[i, j]), 0.7)
    node_colours = {
        "sensory": "tab:olive",
        "inter": "tab:blue",
        "command": "tab:purple",
        "motor": "tab:orange",
        "all": "tab:blue",
    }
    for col, (name, idx) in enumerate(columns):
        pts = [(pos_sens if col == 0 else pos)[i] for i in idx]
        ax.scatter(
            [p[0] for p in pts],
            [p[1] for p in pts],
            s=60,
            zorder=3,
            color=node_colours.get(name, "tab:blue"),
            edgecolor="k",
            linewidth=0.5,
        )
        ax.text(col, tallest / 2.0 + 0.8, f"{name} ({len(idx)})", ha="center")
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
