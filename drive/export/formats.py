"""Write a :class:`~drive.export.module.DeployedPolicy` to disk: TorchScript, AOTInductor or ONNX.

All three carry the same graph (raw frame + hidden -> command, hidden, status) and the same
metadata (:func:`export_metadata`), each where its loaders find it:

* ``torchscript`` (``.ts``): ``torch.jit.script`` (not traced: tracing would freeze shapes and
  drop the safety branches); metadata as typed module attributes and the scripted ``metadata()``
  method (C++ reads them) and as ``_extra_files["drive_meta.json"]`` (Python reads it without
  running the module). Methods: ``step``, ``step_with_status``, ``initial_state``, ``metadata``.
* ``aoti`` (``.pt2``): ``torch.export`` + AOTInductor package, batch 1, compiled for ``device``;
  metadata as the package's string map (``AOTIModelPackageLoader::get_metadata()`` in C++).
  AOTInductor does not check input shapes: loaders must (``drive_runtime`` and
  :mod:`drive.export.runtime` do). On CPU the weights are frozen into the package and the
  convolutions' weights prepacked for oneDNN (:func:`_cpu_aoti_freezing`).
* ``onnx`` (``.onnx``): ``torch.onnx.export`` (dynamo exporter, opset 18), batch 1, metadata in
  ``metadata_props``.

Checkpoints are read through :func:`drive.checkpoint.load_policy` (``weights_only=True``): a file
with a pickled payload is refused before anything in it runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple, Union

import torch

from drive import __version__
from drive.checkpoint import load_policy, policy_meta
from drive.data.preprocess import Preprocessing
from drive.export.aoti import USE_TORCHSCRIPT, probe_failure
from drive.export.module import STATUS, DeployedPolicy
from drive.io.atomic import write_bytes
from drive.nn.policy import Policy
from drive.nn.torchscript import quiet_torchscript

__all__ = ["export_policy", "build_deployed", "export_metadata", "FORMATS", "DEFAULT_CURVATURE_LIMIT_PER_M"]

FORMATS: Dict[str, str] = {"torchscript": ".ts", "aoti": ".pt2", "onnx": ".onnx"}
META_FILE = "drive_meta.json"
# 1/m; a 5 m turning radius, tighter than any passenger car can steer
DEFAULT_CURVATURE_LIMIT_PER_M = 0.2
ONNX_OPSET = 18
PathLike = Union[str, os.PathLike]


def export_metadata(deployed: DeployedPolicy, meta: Dict[str, Any], fmt: str, device: str) -> Dict[str, Any]:
    """Everything a vehicle integrator needs to feed the file and read its outputs (plain JSON)."""
    return {
        "format": fmt,
        "drive_version": __version__,
        "torch_version": torch.__version__.split("+")[0],
        "family": str(meta.get("family", "policy")),
        "frame_size": [deployed.frame_height, deployed.frame_width],
        "frame_layout": "RGB HWC uint8 [B, H, W, 3] or [H, W, 3] (TorchScript also float32 in [0, 1]); "
        "AOTInductor and ONNX: uint8 [1, H, W, 3]",
        "crop": list(deployed.crop) or None,
        "model_input_size": list(deployed.model_size),
        "fps": deployed.fps,
        "dt_s": deployed.period_s,
        "label": "curvature",
        "label_units": "1/m",
        "sign": "positive = turning left (ISO 8855)",
        "network_units": "1/km",
        "state_size": deployed.state_size,
        "hidden_size": deployed.hidden_size,
        "hidden_layout": {
            "recurrent_state": [0, deployed.state_size],
            "last_command_per_m": deployed.state_size,
            "status": deployed.state_size + 1,
            "gap_s": deployed.state_size + 2,
        },
        "initial_state": "zeros",
        "curvature_limit_per_m": deployed.curvature_limit_per_m,
        "black_level": deployed.black_level,
        "max_gap_s": deployed.max_gap_s,
        "status_bits": dict(STATUS),
        "half": deployed.half,
        "device": device,
        "preprocessing": meta.get("preprocessing"),
        "policy_config": meta.get("policy_config"),
    }


def _resolve_frame_size(meta: Dict[str, Any], frame_size: Optional[Tuple[int, int]]) -> Tuple[int, int]:
    """Native camera size: explicit > checkpoint ``frame_size`` > checkpoint ``camera`` > network size."""
    if frame_size is not None:
        return int(frame_size[0]), int(frame_size[1])
    if meta.get("frame_size"):
        h, w = meta["frame_size"]
        return int(h), int(w)
    camera = meta.get("camera") or {}
    if "height" in camera and "width" in camera:
        return int(camera["height"]), int(camera["width"])
    prep = Preprocessing.from_dict(meta["preprocessing"])
    if prep.crop is not None:
        raise ValueError(
            "the checkpoint crops frames but does not say the camera's frame size: "
            "pass frame_size=(height, width) (`drive export --frame-size HxW`)"
        )
    return int(prep.size[0]), int(prep.size[1])


def build_deployed(
    policy: Policy,
    meta: Dict[str, Any],
    *,
    half: bool = False,
    curvature_limit_per_m: Optional[float] = None,
    frame_size: Optional[Tuple[int, int]] = None,
    black_level: float = 4.0,
    max_gap_s: float = 1.0,
) -> DeployedPolicy:
    """Wrap a copy of a loaded policy (``load_policy`` output) in the deployable module (eager)."""
    prep = Preprocessing.from_dict(meta["preprocessing"])
    if tuple(prep.size) != tuple(policy.input_size):
        raise ValueError(f"preprocessing resizes to {prep.size} but the policy takes {policy.input_size}")
    limit = curvature_limit_per_m or meta.get("curvature_limit_per_m") or DEFAULT_CURVATURE_LIMIT_PER_M
    labels = meta.get("label_range_per_m")
    if labels and max(abs(float(v)) for v in labels) > float(limit):
        warnings.warn(
            f"the curvature limit {float(limit):g} 1/m is below the training labels' range "
            f"{float(labels[0]):+.3f}..{float(labels[1]):+.3f} 1/m: commands the policy was trained to "
            "give will be clamped (pass a larger curvature limit, or leave it out to use the "
            "checkpoint's, derived from its labels)",
            stacklevel=2,
        )
    size = _resolve_frame_size(meta, frame_size)
    deployed = DeployedPolicy(
        policy,
        size,
        prep.crop_list,
        float(meta["fps"]),
        float(limit),
        half=half,
        black_level=black_level,
        max_gap_s=max_gap_s,
    )
    deployed.requires_grad_(False)
    deployed.family = str(meta.get("family", "policy"))
    deployed.metadata_json = json.dumps(export_metadata(deployed, meta, "eager", "cpu"), sort_keys=True)
    return deployed.eval()


def _example_inputs(deployed: DeployedPolicy, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    frame = torch.full(
        (1, deployed.frame_height, deployed.frame_width, 3), 128, dtype=torch.uint8, device=device
    )
    return frame, deployed.initial_state(1).to(device)


def _export_program(deployed: DeployedPolicy, device: torch.device) -> torch.export.ExportedProgram:
    """``torch.export`` the deployed graph at batch 1.

    The graph has no data-dependent read: :class:`DeployedPolicy` turns off its cell's value checks
    (it guarantees finite features and state and dt > 0 itself, and handles a non-finite network
    output with its hold/reset logic), so nothing is specialised to the example's values and the
    compiled step never syncs with the host before its outputs.
    """
    with torch.no_grad(), warnings.catch_warnings():
        # nn.LSTM refreshes its _flat_weights list in forward; export restores it afterwards and
        # says so in a warning that asks for buffers (pytorch#163809): nothing for a user to act on
        warnings.filterwarnings(
            "ignore", message=r"The tensor attributes .*_flat_weights", category=UserWarning
        )
        return torch.export.export(deployed, _example_inputs(deployed, device), strict=False)


def _write_torchscript(deployed: DeployedPolicy, meta_json: str, tmp: io.BytesIO) -> None:
    deployed.metadata_json = meta_json
    with quiet_torchscript():  # TorchScript's deprecation notice (see docs/deploy.md)
        scripted = torch.jit.script(deployed)
        torch.jit.save(scripted, tmp, _extra_files={META_FILE: meta_json})


def _write_aoti(
    deployed: DeployedPolicy, meta: Dict[str, Any], meta_json: str, tmp: io.BytesIO, device: torch.device
) -> None:
    # torch._inductor takes ~5 s to import: only an AOTInductor export pays it (start-up time)
    from torch._inductor import aoti_compile_and_package

    deployed.metadata_json = meta_json
    program = _export_program(deployed, device)
    strings = {
        k: json.dumps(v) if isinstance(v, (dict, list)) else str(v).lower() if isinstance(v, bool) else str(v)
        for k, v in meta.items()
    }
    strings.update(
        frame_height=str(deployed.frame_height),
        frame_width=str(deployed.frame_width),
        metadata_json=meta_json,
    )
    cpu = device.type == "cpu"
    configs: Dict[str, Any] = {"aot_inductor.metadata": strings, "freezing": cpu}
    # under grad mode Inductor would skip the freezing without a word
    with torch.no_grad(), _cpu_aoti_freezing() if cpu else contextlib.nullcontext():
        aoti_compile_and_package(program, package_path=tmp, inductor_configs=configs)


def _refuse_unloadable(out: Path, package: io.BytesIO) -> None:
    """Load and step a compiled CUDA package in a child process before anything is written: where
    this torch's loader crashes on its own package (seen: torch 2.11 on an H100, SIGSEGV), the
    export is refused with the reason instead of leaving a file no one can load."""
    with tempfile.TemporaryDirectory(prefix="drive-probe-") as d:
        trial = Path(d) / out.name
        trial.write_bytes(package.getbuffer())
        failure = probe_failure(trial)
    if failure is not None:
        raise ValueError(
            f"{out}: not written: the AOTInductor CUDA package compiled, but loading and stepping it "
            f"in a probe process failed with torch {torch.__version__} ({failure}); {USE_TORCHSCRIPT}"
        )


@contextlib.contextmanager
def _cpu_aoti_freezing() -> Iterator[None]:
    """Inductor's freezing for a CPU package, with the convolutions' weights prepacked for oneDNN
    (and ReLU fused) but the small matmuls left to BLAS.

    Freezing packs every matmul with a constant weight for oneDNN too; at batch 1 the cell's
    ``[1, 19] x [19, 38]`` products then each pay oneDNN's ~15 us per-call setup, which cancels the
    convolutions' gain (docs/deploy.md: 1.27 ms with, 1.15 ms without). Inductor packs an fp32
    matmul only on builds it believes have MKL (``_is_packable_linear`` reads ``torch._C.has_mkl``
    when it matches), so that flag reads False while this package compiles. The oneDNN lowerings
    are registered first, as the rest of the process will see them. Not thread-safe: nothing else
    may compile while an export runs.
    """
    import torch._inductor.lowering  # start-up time: Inductor takes seconds to import, only for .pt2

    has_mkl = torch._C.has_mkl
    torch._C.has_mkl = False
    try:
        yield
    finally:
        torch._C.has_mkl = has_mkl


def _write_onnx(deployed: DeployedPolicy, meta_json: str, tmp: io.BytesIO) -> None:
    with warnings.catch_warnings():
        # torch 2.11's exporter trips over its own pytree deprecation (seen on stderr of `drive
        # export --format onnx` there): a notice to torch's developers, nothing for a user to act on
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)`", category=Warning)
        program = torch.onnx.export(
            _export_program(deployed, torch.device("cpu")),
            dynamo=True,
            opset_version=ONNX_OPSET,
            input_names=["frame", "hidden"],
            output_names=["curvature_per_m", "hidden_out", "status"],
            external_data=False,
            verbose=False,
        )
    model = program.model_proto
    del model.metadata_props[:]
    entry = model.metadata_props.add()
    entry.key, entry.value = META_FILE, meta_json
    tmp.write(model.SerializeToString())


def export_policy(
    ckpt_or_policy: Union[PathLike, Tuple[Policy, Dict[str, Any]]],
    out: PathLike,
    format: str = "torchscript",
    device: str = "cpu",
    half: bool = False,
    curvature_limit_per_m: Optional[float] = None,
    frame_size: Optional[Tuple[int, int]] = None,
    black_level: float = 4.0,
    max_gap_s: float = 1.0,
) -> Path:
    """Export a policy for the vehicle; returns the written path (written atomically).

    Args:
        ckpt_or_policy: a checkpoint path (training ``.ckpt`` or converted ``.pt``, loaded with
            ``weights_only=True``), a ``(policy, meta)`` pair as :func:`load_policy` returns, or a
            bare :class:`Policy` (no crop, frames at the network's size, fps = 1 / frame_period_s).
        out: destination file (suffix conventionally ``.ts`` / ``.pt2`` / ``.onnx``).
        format: ``torchscript`` | ``aoti`` | ``onnx``.
        device: ``cpu`` | ``cuda``: where the saved weights live (TorchScript can be moved at load
            time with ``map_location``; AOTInductor compiles for this device; ONNX is exported on CPU).
        half: conv head in fp16 (a CUDA option: fp16 convolutions on CPU are slow); cell stays fp32.
        curvature_limit_per_m: command clamp (default: the checkpoint's, else 0.2 1/m).
        frame_size: the camera's ``(height, width)`` if the checkpoint does not record it.
        black_level: mean pixel (0-255) of the cropped, resized view at or below which a frame is no image.
        max_gap_s: longest elapsed time integrated in one step after held frames.
    """
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; choose one of {sorted(FORMATS)}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device here")
    if format == "onnx" and (half or device != "cpu"):
        raise ValueError("ONNX export is fp32 on CPU; onnxruntime picks the execution provider at load time")
    if isinstance(ckpt_or_policy, (str, os.PathLike)):
        policy, meta = load_policy(ckpt_or_policy)
    elif isinstance(ckpt_or_policy, Policy):  # no checkpoint metadata: frames at the network size
        policy = ckpt_or_policy
        meta = policy_meta(
            policy, Preprocessing(size=policy.input_size), 1.0 / policy.frame_period_s, "policy"
        )
    else:
        policy, meta = ckpt_or_policy
    deployed = build_deployed(
        policy,
        meta,
        half=half,
        curvature_limit_per_m=curvature_limit_per_m,
        frame_size=frame_size,
        black_level=black_level,
        max_gap_s=max_gap_s,
    )
    dev = torch.device(device)
    deployed.to(dev)
    info = export_metadata(deployed, meta, format, device)
    meta_json = json.dumps(info, sort_keys=True)
    out = Path(out)
    # Serialised in memory, then written whole through a synced temporary beside ``out``: torch's
    # C++ file writers abort the process on a full disk (a c10::Error thrown in a destructor)
    # and would leave their temporary behind; a Python write fails cleanly with a WriteError.
    buffer = io.BytesIO()
    if format == "torchscript":
        _write_torchscript(deployed, meta_json, buffer)
    elif format == "aoti":
        _write_aoti(deployed, info, meta_json, buffer, dev)
        if dev.type == "cuda":
            _refuse_unloadable(out, buffer)
    else:
        _write_onnx(deployed, meta_json, buffer)
    return write_bytes(out, buffer.getbuffer())
