"""Explain policies: VisualBackProp saliency masks, saliency along drives, saliency videos.

- :func:`visual_backprop` -- masks ``[B, H, W]`` for a conv head (Bojarski et al. 2018).
- :func:`policy_saliency` -- (frame, mask, steering) along a drive, recurrent state carried.
- :func:`saliency_video` -- MP4 + contact sheet for a policy on a recording (``drive saliency``).
- :class:`SaliencyRecorder` -- the same video recorded live during closed-loop driving.
"""

from drive.explain.live import SaliencyRecorder
from drive.explain.policy_saliency import SaliencyFrame, policy_saliency
from drive.explain.video import SaliencyVideoWriter, saliency_still, saliency_video
from drive.explain.visual_backprop import VisualBackPropError, conv_geometry, visual_backprop

__all__ = [
    "visual_backprop",
    "VisualBackPropError",
    "conv_geometry",
    "policy_saliency",
    "SaliencyFrame",
    "saliency_video",
    "saliency_still",
    "SaliencyVideoWriter",
    "SaliencyRecorder",
]
