"""The robustness measurements of one policy under one perturbation (:mod:`drive.evaluate.robustness`
runs them for every model and level and writes the report).

- :func:`open_loop_errors`: steering MSE / MAE in 1/km over whole recordings, the hidden state
  carried across each and reset at time gaps (as on the car);
- :func:`saliency_stability`: SSIM between the VisualBackProp maps of clean and perturbed frames;
- :func:`sensitivity_profile`: per neuron ``max_t |h(t+1) - h(t)| / ||x(t+1) - x(t)||`` over a
  drive, the NCP paper's Lipschitz analysis (Lechner et al. 2020), stepped in time exactly as the
  open-loop drive is (:func:`drive_recording`).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch

from drive.data.perturb import Perturbation, perturb_views
from drive.data.preprocess import Preprocessing
from drive.evaluate.ssim import ssim
from drive.explain.visual_backprop import visual_backprop
from drive.io.recording import Recording
from drive.nn.policy import Policy

__all__ = [
    "GAP_FACTOR",
    "drive_recording",
    "open_loop_errors",
    "saliency_stability",
    "neuron_count",
    "sensitivity_profile",
]

GAP_FACTOR = 3.0  # a frame interval longer than this x the nominal period is a gap: reset the state


def _frames_tensor(
    frames: Sequence[np.ndarray], pre: Preprocessing, perturb: Optional[Perturbation] = None
) -> torch.Tensor:
    """Camera frames -> the network's [0, 1] input [N, 3, h, w], perturbed after crop and resize."""
    return perturb_views(pre(np.stack(frames)), perturb).float().div_(255.0)


def _timing(timestamps_s: np.ndarray, period_s: float) -> Tuple[List[Tuple[int, int]], np.ndarray]:
    """Gap-free ``[start, end)`` index ranges and each frame's elapsed seconds (float32).

    A frame interval longer than ``GAP_FACTOR`` periods is a gap: the state restarts there, and the
    first frame of every range counts one period. The open-loop drive and the sensitivity profile
    both step through time with this, so they see the same dynamics.
    """
    t = np.asarray(timestamps_s, dtype=np.float64)
    cuts = np.flatnonzero(np.diff(t) > GAP_FACTOR * period_s) + 1
    edges = [0, *cuts.tolist(), len(t)]
    segments = [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    dt = np.diff(t, prepend=t[0] - period_s).astype(np.float32) if len(t) else np.zeros(0, np.float32)
    for start, _ in segments:
        dt[start] = period_s
    return segments, dt


class _Drive(NamedTuple):
    """One open-loop drive over a recording: steering in 1/km, head features, frame times."""

    prediction: np.ndarray  # [T] 1/km
    label: np.ndarray  # [T] 1/km
    features: np.ndarray  # [T, F]
    timestamps_s: np.ndarray  # [T]


@torch.inference_mode()
def drive_recording(
    policy: Policy,
    meta: Mapping[str, Any],
    rec: Recording,
    perturb: Optional[Perturbation],
    max_frames: Optional[int],
    chunk: int = 64,
) -> _Drive:
    """Run a policy over a whole recording with carried state, reset at gaps (``perturb`` None: clean)."""
    pre = Preprocessing.from_dict(meta["preprocessing"])
    n = len(rec) if max_frames is None else min(len(rec), max_frames)
    t = rec.timestamps_s[:n]
    segments, dt = _timing(t, 1.0 / float(meta["fps"]))
    preds, feats = [], []
    if perturb is not None:
        perturb.reset()
    for start, end in segments:
        hidden = policy.initial_state(1)
        for a in range(start, end, chunk):
            b = min(a + chunk, end)
            x = _frames_tensor([rec.frame(i) for i in range(a, b)], pre, perturb)[None]
            features = policy.encode(x)
            y, hidden = policy.decode(features, hidden, torch.from_numpy(dt[a:b])[None])
            preds.append(y[0].numpy())
            feats.append(features[0].numpy())
    label = rec.curvature[:n] * policy.km_per_m
    return _Drive(np.concatenate(preds), label, np.concatenate(feats), np.asarray(t, dtype=np.float64))


def open_loop_errors(
    policy: Policy,
    meta: Mapping[str, Any],
    recordings: Sequence[Recording],
    perturb: Optional[Perturbation],
    max_frames: Optional[int] = None,
) -> Tuple[Dict[str, float], _Drive]:
    """Steering MSE (1/km^2) and MAE (1/km) over all frames of ``recordings``.

    Also returns the first recording's drive, whose features feed the sensitivity profile, so the
    head does not run twice.
    """
    drives = [drive_recording(policy, meta, rec, perturb, max_frames) for rec in recordings]
    e = np.concatenate([d.prediction - d.label for d in drives])
    return {"mse": float(np.mean(e**2)), "mae": float(np.mean(np.abs(e)))}, drives[0]


def saliency_stability(
    policy: Policy,
    meta: Mapping[str, Any],
    recordings: Sequence[Recording],
    perturb: Perturbation,
    n_frames: int,
) -> Dict[str, float]:
    """SSIM between VisualBackProp maps of clean and perturbed frames (evenly spaced frames)."""
    pre = Preprocessing.from_dict(meta["preprocessing"])
    per_rec = max(1, n_frames // max(1, len(recordings)))
    scores = []
    perturb.reset()
    for rec in recordings:
        idx = np.unique(np.linspace(0, len(rec) - 1, per_rec).round().astype(int))
        frames = [rec.frame(int(i)) for i in idx]
        masks_clean = visual_backprop(policy.head, _frames_tensor(frames, pre))
        masks_noisy = visual_backprop(policy.head, _frames_tensor(frames, pre, perturb))
        scores.append(ssim(masks_clean, masks_noisy).numpy())
    s = np.concatenate(scores)
    return {"ssim_mean": float(s.mean()), "ssim_std": float(s.std())}


def neuron_count(policy: Policy) -> int:
    """How many leading entries of the policy's flat hidden state are its neurons' outputs h.

    drive's cells pack further memory after h (LSTM and mixed-memory CfC: the cell state c; the
    approximate closed-form LTC: x0 and t). That memory is no neuron's response, so the sensitivity
    profile leaves it out; cells without such memory (``units`` absent) are all neurons.
    """
    return int(getattr(policy.rnn, "units", policy.state_size))


@torch.inference_mode()
def sensitivity_profile(
    policy: Policy,
    features: np.ndarray,
    timestamps_s: Optional[np.ndarray] = None,
    period_s: Optional[float] = None,
) -> np.ndarray:
    """Per neuron ``max_t |h(t+1)-h(t)| / ||x(t+1)-x(t)||`` over a feature sequence [T, F], sorted descending.

    The cell steps through ``timestamps_s`` as the open-loop drive does (elapsed time per step, the
    state reset at gaps longer than ``GAP_FACTOR`` periods, pairs across a gap skipped): a gap is not
    a response to the input. ``timestamps_s`` None: one ``period_s`` per step (default the policy's
    frame period). Steps of (numerically) unchanged input are skipped; a policy without memory gives
    an empty profile. h is the neurons' outputs only (:func:`neuron_count`).
    """
    period = policy.frame_period_s if period_s is None else float(period_s)
    if not period > 0:
        raise ValueError(f"period_s must be positive, got {period_s}")
    if timestamps_s is None:
        timestamps_s = np.arange(len(features)) * period
    if len(timestamps_s) != len(features):
        raise ValueError(f"timestamps_s has {len(timestamps_s)} entries for {len(features)} feature rows")
    units = neuron_count(policy)
    if units == 0 or len(features) < 2:
        return np.zeros(0)
    x = torch.from_numpy(np.asarray(features, dtype=np.float32))
    segments, dt = _timing(timestamps_s, period)
    ratios = [torch.zeros(1, units)]  # ratios are >= 0: a neutral start, and the answer if no step counts
    for start, end in segments:
        hidden = policy.initial_state(1)
        states = []
        for t in range(start, end):
            _, hidden = policy.decode(x[None, t : t + 1], hidden, torch.from_numpy(dt[None, t : t + 1]))
            states.append(hidden[0, :units].clone())
        h = torch.stack(states)
        dh = (h[1:] - h[:-1]).abs()
        dx = (x[start + 1 : end] - x[start : end - 1]).norm(dim=1, keepdim=True)
        keep = dx[:, 0] > 1e-6
        ratios.append(dh[keep] / dx[keep])
    return np.sort(torch.cat(ratios).amax(dim=0).numpy())[::-1].copy()
