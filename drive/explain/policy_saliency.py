"""Saliency of a whole policy along a drive: masks from its head, steering from its full recurrence.

Every camera frame is preprocessed exactly as in training (the checkpoint's
:class:`~drive.data.preprocess.Preprocessing`), optionally corrupted with Gaussian noise on that view
(the NCP paper's robustness test: zero-mean noise of standard deviation ``noise`` on [0, 1] pixels,
clipped; the same :class:`drive.data.perturb.Perturbation` the robustness report uses), and then

* the policy's perception head gives the VisualBackProp mask (:func:`visual_backprop`), and
* the whole policy (head -> recurrent cell -> readout) gives the steering, with its hidden state
  carried from frame to frame and the elapsed time between frames from the timestamps,

in chunks of frames so both run batched.
"""

from __future__ import annotations

from typing import Iterable, Iterator, NamedTuple, Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

from drive.data.perturb import Perturbation, perturb_views
from drive.data.preprocess import Preprocessing
from drive.explain.visual_backprop import visual_backprop

__all__ = ["SaliencyFrame", "policy_saliency"]


class SaliencyFrame(NamedTuple):
    """One explained frame: what the network saw, where it looked, what it steered."""

    frame: np.ndarray  # uint8 RGB [h, w, 3]: the network input (noise included)
    mask: np.ndarray  # float32 [h, w] in [0, 1]: VisualBackProp mask
    prediction: float  # steering curvature, 1/m (positive = left)


def _chunks(frames: Iterable[np.ndarray], size: int) -> Iterator[list]:
    chunk: list = []
    for frame in frames:
        chunk.append(frame)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def policy_saliency(
    policy: nn.Module,
    frames_iter: Iterable[np.ndarray],
    preprocessing: Optional[Preprocessing] = None,
    timestamps_s: Optional[Sequence[float]] = None,
    frame_period_s: Optional[float] = None,
    noise: Optional[float] = None,
    seed: int = 0,
    method: str = "bojarski",
    chunk: int = 32,
    device: Union[str, torch.device] = "cpu",
) -> Iterator[SaliencyFrame]:
    """Explain ``policy`` frame by frame along a drive.

    Args:
        policy: a :class:`drive.nn.policy.Policy` (``policy.head`` must be VBP-explainable).
        frames_iter: camera frames, uint8 RGB ``[H, W, 3]``, in driving order.
        preprocessing: crop/resize to the network input; ``None`` means frames already have the
            head's input size.
        timestamps_s: one timestamp per frame (seconds); the recurrence gets their differences.
            ``None``: every step lasts ``frame_period_s`` (default: the policy's own period).
        noise: Gaussian noise std on [0, 1] pixels (``None`` or 0: clean).
        seed: seed of the noise generator (the same seed gives the same noisy drive).
        method: ``"bojarski"`` or ``"ncp"`` (see :func:`visual_backprop`).
        chunk: frames per batched step.

    Yields:
        :class:`SaliencyFrame` (frame, mask, prediction in 1/m) per input frame.
    """
    device = torch.device(device)
    policy = policy.to(device).eval()
    period_s = float(frame_period_s if frame_period_s is not None else getattr(policy, "frame_period_s", 1.0))
    if noise is not None and noise < 0:
        raise ValueError(f"noise standard deviation must be >= 0, got {noise}")
    perturb = Perturbation("gaussian", float(noise), seed=int(seed)) if noise else None
    hidden = policy.initial_state(1).to(device)
    previous_t: Optional[float] = None
    index = 0
    for raw in _chunks(frames_iter, max(1, int(chunk))):
        stacked = torch.as_tensor(np.stack(raw))
        views = preprocessing(stacked) if preprocessing is not None else stacked.permute(0, 3, 1, 2)
        x = perturb_views(views, perturb).to(device).float() / 255.0  # [L, 3, h, w]
        if timestamps_s is not None:
            t = np.asarray(timestamps_s[index : index + len(raw)], dtype=np.float64)
            if len(t) != len(raw):
                raise ValueError(f"{len(timestamps_s)} timestamps for more frames than that")
            start = t[0] - period_s if previous_t is None else previous_t
            dt = np.diff(np.concatenate([[start], t]))
            if not np.all(dt > 0):
                raise ValueError(f"timestamps must increase; frames {index}..{index + len(raw) - 1} do not")
            previous_t = float(t[-1])
        else:
            dt = np.full(len(raw), period_s)
        timespans = torch.as_tensor(dt, dtype=torch.float32, device=device)[None]
        masks = visual_backprop(policy.head, x, method=method)
        with torch.no_grad():
            curvature, hidden = policy(x[None], hidden, timespans)
        images = (x * 255.0).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
        for image, mask, k in zip(images, masks.cpu().numpy(), curvature[0].cpu().tolist()):
            yield SaliencyFrame(image, mask.astype(np.float32), float(k))
        index += len(raw)
