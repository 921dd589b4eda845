"""Saliency recorded live while a policy drives the built-in world (closed loop).

:class:`SaliencyRecorder` is a world ``Driver`` (``reset()``, ``act(obs) -> curvature 1/m``) that
wraps a policy's driver: it steers exactly as the wrapped driver does and, for every observation,
also computes the VisualBackProp mask of the frame the policy saw (its view, after the driver's
``perturb``) and appends a row to a saliency video::

    recorder = SaliencyRecorder(policy_driver, "drive.mp4", reference=PurePursuitExpert())
    result = drive.sim.closed_loop.evaluate(recorder, km=0.5, seed=0)
    info = recorder.close()          # frames, fps, size, video, contact_sheet

:func:`saliency_drive` does all of it for a policy (``drive saliency --world``).

The optional ``reference`` driver (e.g. the world's expert) sees the same observations and its
command is drawn as the label curve of the steering trace; it never steers. Episode resets
(start, after an intervention) reset both and break the trace.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional, Sequence, Union

import torch
from torch import nn

from drive.data.perturb import Perturbation
from drive.explain.policy_saliency import SaliencyFrame
from drive.explain.video import SaliencyVideoWriter
from drive.explain.visual_backprop import visual_backprop
from drive.policy_drivers import PolicyDriver
from drive.sim.closed_loop import evaluate
from drive.sim.expert import PurePursuitExpert

__all__ = ["SaliencyRecorder", "saliency_drive"]

PathLike = Union[str, os.PathLike]


class SaliencyRecorder:
    """A ``Driver`` that drives like ``driver`` and records a saliency video of what it sees.

    Args:
        driver_or_policy: a :class:`drive.policy_drivers.PolicyDriver`, or a Policy (then ``meta`` is
            required and a PolicyDriver is built from it).
        out_path: the ``.mp4`` to write (contact sheet beside it).
        meta: checkpoint metadata (preprocessing, fps) when a Policy is given.
        reference: a Driver whose command (1/m) on the same observation is plotted as the label
            (e.g. :class:`drive.sim.expert.PurePursuitExpert`), or ``None`` for no label curve.
        method: VisualBackProp method, ``"bojarski"`` or ``"ncp"``.
        fps: video frame rate (default: the checkpoint's fps).
    """

    def __init__(
        self,
        driver_or_policy: Union[PolicyDriver, nn.Module],
        out_path: PathLike,
        meta: Optional[Mapping[str, Any]] = None,
        reference: Optional[Any] = None,
        method: str = "bojarski",
        fps: Optional[float] = None,
        scale: int = 3,
    ) -> None:
        if isinstance(driver_or_policy, PolicyDriver):
            self.driver = driver_or_policy
        elif isinstance(driver_or_policy, nn.Module):
            if meta is None:
                raise ValueError("SaliencyRecorder needs the checkpoint meta when given a Policy")
            self.driver = PolicyDriver(driver_or_policy, meta)
        else:
            raise TypeError(
                f"SaliencyRecorder wraps a PolicyDriver or a Policy, not {type(driver_or_policy).__name__} "
                "(exported files have no conv layers to explain)"
            )
        self.name = f"{getattr(self.driver, 'name', 'policy')}+saliency"
        self.reference = reference
        self.method = method
        preprocessing = self.driver.preprocessing
        self.writer = SaliencyVideoWriter(
            out_path, float(fps or self.driver.meta["fps"]), preprocessing.size, ["closed loop"], scale=scale
        )

    def reset(self) -> None:
        """Start of an episode: reset the policy's hidden state and break the steering trace."""
        self.driver.reset()
        if self.reference is not None:
            self.reference.reset()
        if self.writer.frames_written:
            self.writer.trace.push([float("nan")], None)

    def act(self, obs: Any) -> float:
        """Steer like the wrapped driver (1/m) and record this frame's saliency."""
        view = self.driver.view(obs.image)
        curvature = self.driver.act_on_view(view, obs)
        with torch.no_grad():
            mask = (
                visual_backprop(self.driver.policy.head, view.float() / 255.0, method=self.method)[0]
                .cpu()
                .numpy()
            )
        frame = view[0].permute(1, 2, 0).cpu().numpy()
        label = float(self.reference.act(obs)) if self.reference is not None else None
        self.writer.write([SaliencyFrame(frame, mask, float(curvature))], label)
        return curvature

    def close(self) -> Dict[str, Any]:
        """Finish the video; returns frames, fps, size (w, h), video and contact-sheet paths."""
        return self.writer.close()


def saliency_drive(
    policy: nn.Module,
    meta: Mapping[str, Any],
    out_path: PathLike,
    km: float,
    seed: int = 0,
    conditions: Union[None, str, Sequence[str]] = None,
    noise: Optional[float] = None,
    method: str = "bojarski",
    scale: int = 3,
    device: Union[str, torch.device] = "cpu",
) -> Dict[str, Any]:
    """Drive ``km`` of held-out roads (world ``seed``) with ``policy`` closed loop, recording its
    saliency live (the expert's command as the label curve); ``noise``: Gaussian std on the
    network's view (seeded by ``seed``). A failed drive leaves no half-written video.

    Returns :meth:`SaliencyRecorder.close`'s summary plus ``closed_loop`` (km, interventions,
    interventions per km, lateral RMS).
    """
    perturb = Perturbation("gaussian", noise, seed=seed) if noise else None
    recorder = SaliencyRecorder(
        PolicyDriver(policy, meta, device=device, perturb=perturb),
        out_path,
        reference=PurePursuitExpert(),
        method=method,
        scale=scale,
    )
    try:
        drive = evaluate(recorder, km=km, seed=seed, conditions=conditions)
    except BaseException:
        recorder.writer.abort()
        raise
    result = recorder.close()
    result["closed_loop"] = {
        k: drive.metrics[k] for k in ("km", "interventions", "interventions_per_km", "lateral_rms_m")
    }
    return result
