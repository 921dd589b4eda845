"""What training takes from its labels before the first step: their range (single-frame spikes
left out, :func:`drive.data.inspect.spike_frames`), the export's curvature limit and the scale of
the policy's readout. :class:`~drive.train.module.PolicyModule` stores the first two in its
checkpoints' metadata (``label_range_per_m``, ``curvature_limit_per_m``)."""

from __future__ import annotations

import math
from typing import List, Optional, Sequence

import numpy as np

from drive.data.inspect import spike_frames

__all__ = ["CURVATURE_MARGIN", "label_range", "curvature_limit", "readout_scale_km", "curve_weight_note"]

CURVATURE_MARGIN = 1.25  # the export's curvature limit: this x the training labels' largest |value|
WEIGHT_SPREAD = 1000.0  # curve weights spread wider than this: a batch's loss is a few frames' error
SUGGESTED_SPREAD = 100.0  # the spread of the curve_factor the warning suggests


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


def curve_weight_note(labels: Optional[Sequence[float]], median_abs_km: float, curve_factor: float) -> str:
    """A warning ('' if none) when the weighted MSE's weights ``exp(c |y|)`` (y in 1/km) of the
    sharpest label of the range ``labels`` exceed the median frame's by more than
    :data:`WEIGHT_SPREAD`: the loss, normalised by the weights, is then the error of the few sharpest
    frames of each batch (the NCP paper's c = 0.1 was chosen for highway curvatures of tens of 1/km;
    a junction turn of 1/5 m is 200 1/km, a weight e^20 times a straight's)."""
    if curve_factor <= 0 or labels is None:
        return ""
    sharpest_km = 1000.0 * max(abs(v) for v in labels)
    exponent = curve_factor * (sharpest_km - median_abs_km)
    if exponent <= math.log(WEIGHT_SPREAD):
        return ""
    suggested = math.log(SUGGESTED_SPREAD) / max(sharpest_km - median_abs_km, 1e-9)
    return (
        f"--data.curve_factor {curve_factor:g} weighs the sharpest training labels ({sharpest_km:.0f} 1/km) "
        f"e^{exponent:.0f} times the median frame ({median_abs_km:.1f} 1/km): the weighted MSE is then the "
        f"error of a few frames per batch; for logs with curves this sharp use {suggested:.2g} or less "
        f"(at most {SUGGESTED_SPREAD:g}x), or 0"
    )
