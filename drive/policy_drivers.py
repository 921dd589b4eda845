"""Policies of every kind behind the world's ``Driver`` protocol (``reset()``,
``act(obs) -> curvature 1/m``), whatever produced them.

- :class:`PolicyDriver` -- a policy from a checkpoint (training, closed-form conversion): each
  camera frame preprocessed exactly as training did, optionally perturbing the network's view;
- :func:`load_driver` -- any policy file by suffix: checkpoints (``.ckpt`` / ``.pt``) and
  exported files (``.ts`` / ``.pt2`` / ``.onnx``, :class:`drive.export.ExportedDriver`);
- :func:`make_driver` -- what ``drive evaluate --policy`` accepts: ``expert``, ``constant:K`` or
  a policy file;
- :func:`camera_size` -- the camera frame size a driver expects (its metadata).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Tuple, Union

import numpy as np
import torch

from drive.checkpoint import CHECKPOINT_SUFFIXES, EXPORT_SUFFIXES, load_policy
from drive.data.perturb import perturb_views
from drive.data.preprocess import Preprocessing
from drive.export import ExportedDriver
from drive.io.checks import number
from drive.nn.policy import Policy
from drive.sim.driver import ConstantDriver
from drive.sim.expert import PurePursuitExpert

__all__ = ["PolicyDriver", "load_driver", "make_driver", "camera_size"]

PathLike = Union[str, os.PathLike]


class PolicyDriver:
    """A policy in the world's ``Driver`` protocol: camera frames in, curvature (1/m) out.

    Each ``act(obs)`` turns ``obs.image`` (uint8 RGB ``[H, W, 3]``) into the network's view with
    the checkpoint's :class:`~drive.data.preprocess.Preprocessing`, applies ``perturb`` to that view
    (a :class:`drive.data.perturb.Perturbation`: noise levels mean what they mean at the network input,
    whatever the camera's size), scales it to [0, 1] and runs one :meth:`Policy.step` with
    ``dt = obs.dt_s``; the hidden state lives here and ``reset()`` zeroes it (start of an episode,
    or after an intervention; the perturbation's random sequence goes on).
    """

    def __init__(
        self,
        policy: Policy,
        meta: Mapping[str, Any],
        device: Union[str, torch.device] = "cpu",
        perturb: Optional[Callable[[np.ndarray], np.ndarray]] = None,
    ) -> None:
        self.device = torch.device(device)
        self.policy = policy.to(self.device).eval()
        self.meta = dict(meta)
        self.preprocessing = Preprocessing.from_dict(self.meta["preprocessing"])
        self.perturb = perturb
        self.nominal_dt_s = 1.0 / float(self.meta["fps"])
        self.name = str(self.meta.get("family", "policy"))
        self.hidden = self.policy.initial_state(1).to(self.device)

    def reset(self) -> None:
        self.hidden = self.policy.initial_state(1).to(self.device)

    def view(self, image: np.ndarray) -> torch.Tensor:
        """What the network sees of a camera frame: uint8 ``[1, 3, h, w]`` on the device, perturbed."""
        return perturb_views(self.preprocessing(np.ascontiguousarray(image)), self.perturb).to(self.device)

    @torch.inference_mode()
    def act(self, obs: Any) -> float:
        return self.act_on_view(self.view(obs.image), obs)

    @torch.inference_mode()
    def act_on_view(self, view: torch.Tensor, obs: Any) -> float:
        """One step on a view from :meth:`view` (``obs`` gives the elapsed time ``dt_s``)."""
        dt_s = float(getattr(obs, "dt_s", self.nominal_dt_s))
        if not np.isfinite(dt_s) or dt_s <= 0:
            raise ValueError(f"observation dt_s must be positive and finite, got {dt_s}")
        dt = torch.full((1,), dt_s, device=self.device)
        curvature, self.hidden = self.policy.step(view.float() / 255.0, self.hidden, dt)
        return float(curvature[0])


def load_driver(spec: PathLike, device: Union[str, torch.device] = "cpu") -> Any:
    """Open a policy file as a world ``Driver``, by suffix.

    ``.ckpt`` / ``.pt`` (training or converted checkpoints) -> :class:`PolicyDriver`;
    ``.ts`` / ``.pt2`` / ``.onnx`` (exported) -> :class:`drive.export.ExportedDriver`.
    """
    path = Path(spec)
    suffix = path.suffix.lower()
    if suffix in CHECKPOINT_SUFFIXES:
        policy, meta = load_policy(path, map_location=device)
        return PolicyDriver(policy, meta, device=device)
    if suffix in EXPORT_SUFFIXES:
        return ExportedDriver(path, device=str(device))
    raise ValueError(
        f"cannot tell what {path} is from its suffix {suffix!r}: "
        f"checkpoints end in {CHECKPOINT_SUFFIXES}, exported policies in {EXPORT_SUFFIXES}"
    )


def make_driver(spec: str, device: str = "cpu", threads: int = 0) -> Any:
    """``expert`` | ``constant:K`` (K in 1/m) | a checkpoint or exported policy file.

    ``threads`` > 0 sets torch's CPU threads for policy files (batch-1 steps gain little from more).
    """
    if spec == "expert":
        return PurePursuitExpert()
    if spec.startswith("constant:"):
        value = spec.split(":", 1)[1]
        try:  # a finite curvature a car can steer: within a 1 m radius either way
            return ConstantDriver(number(value, "K", low=-1.0, high=1.0))
        except ValueError as e:
            raise ValueError(f"--policy constant:K needs a number K (curvature in 1/m): {e}") from None
    path = Path(spec)
    if not path.exists():
        raise ValueError(f"--policy {spec}: no such file (nor 'expert' or 'constant:K')")
    if threads > 0:
        torch.set_num_threads(threads)
    return load_driver(path, device=device)


def camera_size(driver: Any, height: Optional[int], width: Optional[int]) -> Tuple[int, int]:
    """The world's camera (height, width): the options where given, else the policy's own camera frame
    size (checkpoint or export metadata), else 78 x 200."""
    size = (getattr(driver, "meta", None) or {}).get("frame_size") or (78, 200)
    return (int(size[0]) if height is None else height), (int(size[1]) if width is None else width)
