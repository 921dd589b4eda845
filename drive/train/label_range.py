"""What training takes from its labels before the first step: their range (single-frame spikes
left out, :func:`drive.data.inspect.spike_frames`), the export's curvature limit and the scale of
the policy's readout. :class:`~drive.train.module.PolicyModule` stores the first two in its
checkpoints' metadata (``label_range_per_m``, ``curvature_limit_per_m``)."""

from __future__ import annotations

import math
from typing import List, Optional, Sequence

import numpy as np

from drive.data.inspect import spike_frames

__all__ = ["CURVATURE_MARGIN", "label_range", "curvature_limit", "readout_scale_km"]

CURVATURE_MARGIN = 1.25  # the export's curvature limit: this x the training labels' largest |value|


def label_range(curvatures: Sequence[np.ndarray]) -> Optional[List[float]]:
    """``[min, max]`` (1/m) of the recordings' curvature labels, single-frame spikes left out;
    None if there are none."""
    lo, hi = math.inf, -math.inf
    for k in curvatures:
        k = np.delete(np.asarray(k, dtype=np.float64), spike_frames(k))
        if not k.size:
            continue
        lo, hi = min(lo, float(k.min())), max(hi, float(k.max()))
    return [lo, hi] if math.isfinite(lo) else None


def curvature_limit(labels: Sequence[float]) -> float:
    """The export's curvature clamp (1/m): ``CURVATURE_MARGIN`` x the largest |label| of the range
    ``labels``, rounded up to 0.01 1/m."""
    lo, hi = labels
    return math.ceil(CURVATURE_MARGIN * max(abs(lo), abs(hi), 1e-3) * 100.0) / 100.0


def readout_scale_km(
    curvatures: Sequence[np.ndarray], labels: Optional[Sequence[float]], direct: bool
) -> float:
    """The readout's scale (1/km per unit of recurrent output), to 2 significant digits: the labels'
    standard deviation, or for a cell read out ``direct``ly (bounded to +-1) at least the largest
    |label| of the range ``labels``."""
    labels_km = np.concatenate(list(curvatures)) * 1000.0
    scale = max(float(np.std(labels_km)), 1e-3)
    if direct and labels is not None:
        # a cell read out directly (the NCP's motor neuron) is bounded to +-1 by its
        # reversal potentials: the scale must reach the largest label, not one std
        scale = max(scale, 1000.0 * max(abs(v) for v in labels))
    return float(f"{scale:.2g}")
