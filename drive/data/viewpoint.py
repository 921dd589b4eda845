"""Viewpoint synthesis: what the camera would see after a lateral shift and a yaw, and the label
that steers back (plane-induced homography, pure pursuit; docs/references.md).

Geometry (camera axes x right, y down, z forward; ground plane ``n^T X = d`` with ``d`` the
camera height and ``n = (0, cos p, sin p)`` for a camera pitched down by ``p``). The new camera
sits at ``C = -shift e_x + forward f`` (shift > 0 = LEFT; ``f = (0, -sin p, cos p)`` is the
horizontal forward direction, so the camera keeps its height) and is yawed by ``yaw`` (> 0 = LEFT)
about the vertical. Ground pixels map by the plane-induced homography H = R^T (I - C n^T / d) (the
textbook ``R - t n^T / d``), whose inverse, used to sample, is (I + C n^T / d) R; above the horizon
the scene is treated as infinitely far (rotation only). Both are the single formula
``q = R r + C max(n^T R r, 0) / d`` for a target ray ``r``, which is continuous across the horizon;
in pixels they are two homographies (:func:`view_homographies`) split by the target's horizon line.

Where in the pipeline: the warp is defined in the SOURCE camera's pixel geometry (its
intrinsics K), but applied to the cached, already cropped and resized frames by conjugating with
the crop/resize affine A (source pixels -> model pixels): ``M = A K q(K^-1 A^-1 p)``. Crop and
resize are affine, so this equals warping the source frame and then preprocessing, except that
content outside the crop is unavailable (border pixels are replicated) and the warp resamples at
model resolution. For the built-in world the recording already is at model size (A = I).
Rotation is about the camera centre (mounting offsets and roll are ignored).

Label correction, pure pursuit toward the original path at look-ahead ``L``:
kappa' = kappa + 2 (-L sin(yaw) - shift cos(yaw)) / (L^2 + shift^2), i.e. for small angles
kappa - 2 shift / (L^2 + shift^2) - 2 yaw / L (left-positive curvature; Coulter 1992).
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F

__all__ = [
    "warp_grid",
    "warp_grids",
    "warp_params",
    "warp_frames",
    "view_homographies",
    "corrected_curvature",
    "camera_geometry",
    "road_region_error",
]


def camera_geometry(camera: Dict[str, float]) -> Tuple[np.ndarray, np.ndarray, float]:
    """(K [3,3], ground normal n [3] in camera axes, camera height d [m]) from a calibration dict."""
    k = np.array([[camera["fx"], 0.0, camera["cx"]], [0.0, camera["fy"], camera["cy"]], [0.0, 0.0, 1.0]])
    p = float(camera.get("pitch_rad", 0.0))
    return k, np.array([0.0, math.cos(p), math.sin(p)]), float(camera["height_m"])


def _yaw_rotation(up: np.ndarray, yaw: float) -> np.ndarray:
    """Rodrigues rotation by ``yaw`` about the unit axis ``up`` (yaw > 0 turns forward to the left)."""
    ux = np.array([[0.0, -up[2], up[1]], [up[2], 0.0, -up[0]], [-up[1], up[0], 0.0]])
    return math.cos(yaw) * np.eye(3) + math.sin(yaw) * ux + (1 - math.cos(yaw)) * np.outer(up, up)


def _camera_motion(
    camera: Dict[str, float], shift_m: float, yaw_rad: float, forward_m: float
) -> Tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(K, R, C, d): intrinsics, the new camera's rotation and centre in source camera axes, and the
    camera height (module docstring)."""
    k, n, d = camera_geometry(camera)
    forward = np.array([0.0, -n[2], n[1]])  # horizontal forward: perpendicular to n in the y-z plane
    return k, _yaw_rotation(-n, yaw_rad), np.array([-shift_m, 0.0, 0.0]) + forward_m * forward, d


def view_homographies(
    camera: Dict[str, float], shift_m: float, yaw_rad: float, forward_m: float = 0.0
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The warp as homographies in source pixels: (H_ground, H_sky, horizon) with ``p_src ~ H p_new``.

    ``H_ground = K (I + C n^T / d) R K^-1`` applies where the new camera's ray meets the ground,
    ``horizon . p_new > 0`` (``horizon = (n^T R K^-1)``, a line in the new image); ``H_sky = K R K^-1``
    elsewhere. Both agree on the line itself.
    """
    k, r, c, d = _camera_motion(camera, shift_m, yaw_rad, forward_m)
    _, n, _ = camera_geometry(camera)
    k_inv = np.linalg.inv(k)
    sky = k @ r @ k_inv
    ground = k @ (np.eye(3) + np.outer(c, n) / d) @ r @ k_inv
    return ground, sky, n @ r @ k_inv


def warp_params(
    camera: Dict[str, float], a: np.ndarray, shift_m: float, yaw_rad: float, forward_m: float = 0.0
) -> np.ndarray:
    """The warp in model pixels as 15 numbers ``[P (3x3), b (3), l (3)]``: a target model pixel
    ``p = (u, v, 1)`` samples the source model pixel ``P p + b max(l . p, 0)`` (dehomogenised).
    With ``M = R K^-1 A^-1``: ``P = A K M``, ``b = A K C / d``, ``l = n^T M`` (module docstring).
    """
    k, r, c, d = _camera_motion(camera, shift_m, yaw_rad, forward_m)
    _, n, _ = camera_geometry(camera)
    m = r @ np.linalg.inv(k) @ np.linalg.inv(a)
    return np.concatenate([(a @ k @ m).ravel(), a @ k @ c / d, n @ m])


def warp_grids(params: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
    """Sampling grids [U, H, W, 2] (grid_sample's normalized x, y) of U warps ``params`` [U, 15]
    (:func:`warp_params`), computed where ``params`` lies (float64, as one batched product)."""
    h, w = size
    dev = params.device
    v, u = torch.meshgrid(
        torch.arange(h, dtype=torch.float64, device=dev),
        torch.arange(w, dtype=torch.float64, device=dev),
        indexing="ij",
    )
    pix = torch.stack([u.reshape(-1), v.reshape(-1), torch.ones(h * w, dtype=torch.float64, device=dev)])
    p = params.to(torch.float64)
    down = (p[:, 12:15] @ pix).clamp_min(0.0)  # [U, P] > 0 where the ray meets the ground
    src = p[:, :9].reshape(-1, 3, 3) @ pix + p[:, 9:12, None] * down[:, None, :]
    z = torch.where(src[:, 2].abs() < 1e-9, torch.full_like(src[:, 2], 1e-9), src[:, 2])
    x, y = src[:, 0] / z, src[:, 1] / z
    grid = torch.stack([(2 * x + 1) / w - 1, (2 * y + 1) / h - 1], dim=-1)
    return grid.reshape(-1, h, w, 2).to(torch.float32)


def warp_grid(
    camera: Dict[str, float],
    a: np.ndarray,
    size: Tuple[int, int],
    shift_m: float,
    yaw_rad: float,
    forward_m: float = 0.0,
) -> torch.Tensor:
    """Sampling grid [H, W, 2] (grid_sample's normalized x, y) for one shift/yaw (and forward move).

    Args:
        camera: calibration at the source image size (fx, fy, cx, cy, height_m, pitch_rad).
        a: [3, 3] affine from source pixels to model pixels (:func:`drive.data.cache.source_to_model`).
        size: (H, W) of the model frames.
    """
    params = torch.from_numpy(warp_params(camera, a, shift_m, yaw_rad, forward_m))
    return warp_grids(params[None], size)[0]


def warp_frames(frames: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Warp float frames [T, 3, H, W] with one grid [H, W, 2] (or per-frame grids [T, H, W, 2])."""
    if grid.dim() == 3:
        grid = grid.unsqueeze(0).expand(frames.shape[0], -1, -1, -1)
    return F.grid_sample(frames, grid, mode="bilinear", padding_mode="border", align_corners=False)


def corrected_curvature(
    curvature_per_m: np.ndarray,
    shift_m: np.ndarray,
    yaw_rad: np.ndarray,
    speed_mps: np.ndarray,
    lookahead_s: float = 2.0,
    min_lookahead_m: float = 5.0,
) -> np.ndarray:
    """Pure-pursuit label for the shifted/yawed car [T] (1/m); see module docstring.

    Look-ahead L = max(min_lookahead_m, lookahead_s x speed).
    """
    la = np.maximum(min_lookahead_m, lookahead_s * np.asarray(speed_mps, dtype=np.float64))
    s, y = np.asarray(shift_m, dtype=np.float64), np.asarray(yaw_rad, dtype=np.float64)
    return np.asarray(curvature_per_m) + 2.0 * (-la * np.sin(y) - s * np.cos(y)) / (la**2 + s**2)


def road_region_error(a: np.ndarray, b: np.ndarray, mask: Optional[np.ndarray] = None) -> float:
    """Mean absolute difference in [0, 255] units between two uint8 images [H, W, 3] inside ``mask``."""
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64)).mean(axis=-1)
    return float(diff[mask].mean() if mask is not None else diff.mean())
