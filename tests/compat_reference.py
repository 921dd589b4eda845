"""The compatibility fixtures (``tests/fixtures/compat/``), what the public loaders compute on their
recorded inputs, and the one comparison with the recorded references that every compatibility
test uses (``tests/test_compat_fixtures.py``, ``tests/test_compat_mutations.py``).

The comparison (:func:`mismatch`):

* by default, on every machine: each output array agrees with its reference to
  ``RTOL`` (3e-5) of the reference's largest magnitude, element by element, and integer status
  codes exactly. Other CPUs, instruction sets, MKL/oneDNN paths and thread counts sum float32 in
  other orders: measured, the largest such difference over all fixtures is 7.4e-6 of the scale
  (PilotNet's batch-1 step loop with oneDNN capped at SSE4.1; 5.3e-6 under
  ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2``; the NCP-LTC's at most 2.5e-7). The frame
  standardisation's two-pass form (``drive.nn.heads.standardize_frames``, 2026-12-07; the
  references were recorded with ``Tensor.std``'s one-pass reduction, as accurate) rounds otherwise
  and moves PilotNet's outputs by 1.18-1.35e-5 of the scale, under every one of those kernel caps
  (the one-pass form on the same host: 4.8-6.1e-6). A changed weight, equation or state layout
  moves outputs far more: ``tests/test_compat_mutations.py`` shows each kind failing this same
  comparison.
* bitwise, only on request: ``DRIVE_COMPAT_BITWISE=1`` and a machine whose fingerprint
  (``tools/machine_fingerprint.py``: CPU model, flags, caches, torch/numpy versions, MKL and oneDNN
  builds, threads, the kernel-choosing environment variables) is the one stored beside the
  references in ``machine.json``. Asked for on another machine, the comparisons skip and say which
  parts of the fingerprint differ.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Dict, Optional

import numpy as np
import torch

from drive.data.preprocess import Preprocessing

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "compat"
INFO = json.loads((FIXTURES / "reference.json").read_text())
REFERENCE: Dict[str, np.ndarray] = dict(np.load(FIXTURES / "reference.npz"))
INPUTS: Dict[str, np.ndarray] = dict(np.load(FIXTURES / "inputs.npz"))
CHECKPOINTS = [f for f in INFO["files"] if not f.endswith(".ts")]
EXPORTS = [f for f in INFO["files"] if f.endswith(".ts")]

RTOL = 3e-5  # of the reference array's largest |value|; see the module docstring for the numbers
BITWISE_ENV = "DRIVE_COMPAT_BITWISE"

_spec = importlib.util.spec_from_file_location("fingerprint", ROOT / "tools" / "machine_fingerprint.py")
fingerprints = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fingerprints)


def resize_rounding_differs() -> Optional[str]:
    """Exported files resize camera frames inside (antialiased bilinear in float32, rounded to
    uint8). ATen's AVX2 and AVX-512 kernels give the same pixels; its scalar kernel
    (``ATEN_CPU_CAPABILITY=default``, and so perhaps a CPU of another architecture) rounds 1 of the
    recorded frames' 67,416 values, one within float32 noise of .5, the other way, which moves the
    files' outputs by up to 1e-3 of their scale. Their references are comparable only where the
    recorded frames resize to the recorded views: None there, else the reason to skip."""
    meta = torch.load(FIXTURES / CHECKPOINTS[0], map_location="cpu", weights_only=True)["drive"]
    views = Preprocessing.from_dict(meta["preprocessing"])(INPUTS["frames"]).permute(0, 2, 3, 1).numpy()
    flipped = int((views != INPUTS["views"]).sum())
    if not flipped:
        return None
    return (
        f"this CPU's antialiased uint8 resize ({torch.backends.cpu.get_cpu_capability()}) rounds "
        f"{flipped} of the recorded frames' {views.size} pixel values other than the recording machine "
        "did: the exported files' outputs are not comparable with their references here (the "
        "checkpoint comparisons check the same networks)"
    )


def bitwise_requested() -> bool:
    return os.environ.get(BITWISE_ENV, "") not in ("", "0")


def bitwise_skip_reason() -> Optional[str]:
    """Why a requested bitwise comparison cannot hold here (None: it can, or it was not requested)."""
    if not bitwise_requested():
        return None
    recorded_path = FIXTURES / "machine.json"
    if not recorded_path.is_file():
        return f"{BITWISE_ENV}=1 but {recorded_path} records no machine to compare bitwise on"
    recorded = json.loads(recorded_path.read_text())
    here = fingerprints.machine_fingerprint(threads=INFO["threads"])
    differ = fingerprints.differences(recorded, here)
    if differ:
        return (
            f"{BITWISE_ENV}=1 asks for bitwise equality, but this machine's fingerprint differs from "
            f"the one that reproduced the references ({'; '.join(differ)}): float32 kernels may sum "
            "in another order here"
        )
    return None


def mismatch(got: np.ndarray, want: np.ndarray, what: str, bitwise: Optional[bool] = None) -> Optional[str]:
    """None when ``got`` matches the reference ``want``, else what is wrong (one line).

    ``bitwise``: None follows :func:`bitwise_requested` (the compatibility tests skip before
    comparing bitwise on a machine whose fingerprint differs)."""
    bitwise = bitwise_requested() if bitwise is None else bitwise
    if got.shape != want.shape:
        return f"{what}: shape {got.shape} != recorded {want.shape}"
    if not np.isfinite(got).all():
        return f"{what}: non-finite values"
    if got.size == 0:
        return None
    diff = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())
    if bitwise:
        return None if np.array_equal(got, want) else f"{what}: not bitwise equal, max |diff| {diff:.3g}"
    scale = float(np.abs(want).max())
    if diff <= RTOL * scale:
        return None
    return (
        f"{what}: max |diff| {diff:.3g} > {RTOL:g} x the reference's largest |value| {scale:.3g} "
        f"({diff / scale if scale else float('inf'):.3g} of it)"
    )


def assert_matches(got: np.ndarray, want: np.ndarray, what: str) -> None:
    problem = mismatch(got, want, what)
    assert problem is None, problem


def views_and_dts() -> tuple:
    """The recorded network-size frames as a policy takes them ([L, 3, h, w] in [0, 1]) and dts."""
    views = torch.from_numpy(INPUTS["views"]).permute(0, 3, 1, 2).float() / 255.0
    return views, torch.from_numpy(INPUTS["dt_s"])


def checkpoint_outputs(policy: torch.nn.Module) -> Dict[str, np.ndarray]:
    """``forward`` over the recorded views (curvature, last hidden) and a ``step`` loop over them,
    as ``tools/make_compat_fixtures.py`` recorded them."""
    views, dts = views_and_dts()
    with torch.no_grad():
        curvature, hidden = policy(views.unsqueeze(0), None, dts.unsqueeze(0))
        h = policy.initial_state(1)
        steps = []
        for view, dt in zip(views, dts):
            c, h = policy.step(view.unsqueeze(0), h, dt.reshape(1))
            steps.append(c)
    return {"forward": curvature.numpy(), "hidden": hidden.numpy(), "step": torch.cat(steps).numpy()}


def export_outputs(policy, frames: np.ndarray) -> Dict[str, np.ndarray]:
    """An exported file's ``step`` loop over camera frames: per step [curvature, status], last hidden."""
    hidden = policy.initial_state(1)
    steps = []
    with torch.no_grad():
        for frame in frames:
            curvature, hidden, status = policy.step(frame, hidden)
            steps.append(torch.cat([curvature.reshape(-1), status.reshape(-1).float()]))
    return {"step": torch.stack(steps).numpy(), "hidden": hidden.numpy()}


def export_mismatch(got: Dict[str, np.ndarray], name: str, what: str) -> Optional[str]:
    """An export's outputs against its references: curvature and hidden by :func:`mismatch`, the
    status codes (column 1 of ``step``) exactly."""
    want = REFERENCE[f"{name}/step"]
    step = got["step"]
    if step.shape != want.shape:
        return f"{what} step: shape {step.shape} != recorded {want.shape}"
    if not np.array_equal(step[:, 1], want[:, 1]):
        return f"{what} status codes {step[:, 1].tolist()} != recorded {want[:, 1].tolist()}"
    return mismatch(step[:, :1], want[:, :1], f"{what} curvature") or mismatch(
        got["hidden"], REFERENCE[f"{name}/hidden"], f"{what} hidden"
    )
