"""Run exported policy files from Python: one interface over TorchScript, AOTInductor and ONNX.

:func:`load_exported` opens a ``.ts`` / ``.pt2`` / ``.onnx`` file written by
:func:`drive.export.export_policy` and returns an :class:`ExportedPolicy` with
``initial_state()``, ``step(frame, hidden) -> (curvature_per_m, hidden, status)`` and ``meta``.
AOTInductor packages do not check their inputs, so every backend's inputs are checked here
against the metadata first (shape, dtype), with the same messages the TorchScript module gives.

:class:`ExportedDriver` drives the built-in world (``drive evaluate --policy policy.ts``): the
world's ``Driver`` protocol on top of an exported file, so a vehicle file can be evaluated in
closed loop exactly as its checkpoint was.

AOTInductor checks and loading live in :mod:`drive.export.aoti`, the CUDA-graph step in
:mod:`drive.export.cuda_graph`.
"""

from __future__ import annotations

import json
import os
import warnings
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import torch

from drive.export.aoti import check_aoti_loadable, flat_runner, init_cuda, probe_aoti, read_aoti_strings
from drive.export.cuda_graph import CapturedStep
from drive.export.integrity import check_aoti_package, load_aoti_package, load_error
from drive.nn.torchscript import quiet_torchscript

__all__ = [
    "ExportedPolicy",
    "ExportedDriver",
    "load_exported",
    "read_metadata",
    "read_aoti_strings",
    "check_aoti_loadable",
    "probe_aoti",
    "optimize_loaded",
    "PRESERVED",
]

META_FILE = "drive_meta.json"
PathLike = Union[str, os.PathLike]


def read_metadata(path: PathLike) -> Dict[str, Any]:
    """The export metadata of a ``.ts`` / ``.pt2`` / ``.onnx`` file, without running the model
    (a damaged file is a ``ValueError`` naming it: :mod:`drive.export.integrity`)."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such exported policy file")
    if os.path.getsize(path) == 0:
        raise load_error(path, EOFError())
    try:
        if Path(path).suffix.lower() == ".pt2":
            check_aoti_package(path)  # the metadata is read from the archive: nothing is extracted or loaded
        return _read_metadata(path)
    except (ValueError, RuntimeError, OSError, EOFError, zipfile.BadZipFile, KeyError) as err:
        raise load_error(path, err) from None
    except Exception as err:
        if type(err).__name__ != "DecodeError":
            raise
        raise load_error(path, err) from None


def _read_metadata(path: PathLike) -> Dict[str, Any]:
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".ts":
        with zipfile.ZipFile(path) as zf:
            names = [n for n in zf.namelist() if n.endswith("extra/" + META_FILE)]
            if not names:
                raise ValueError(f"{path}: no {META_FILE} inside: not exported by drive")
            return json.loads(zf.read(names[0]))
    if suffix == ".pt2":
        return json.loads(read_aoti_strings(path)["metadata_json"])
    if suffix == ".onnx":
        import onnx  # optional dependency (the dev extra): needed only to read .onnx files

        model = onnx.load(str(path), load_external_data=False)
        props = {p.key: p.value for p in model.metadata_props}
        if META_FILE not in props:
            raise ValueError(f"{path}: no {META_FILE} metadata: not exported by drive")
        return json.loads(props[META_FILE])
    raise ValueError(f"{path}: unknown export suffix {suffix!r} (.ts, .pt2, .onnx)")


# What a frozen module keeps: the methods and the attributes drive_runtime and run_policy.py read.
PRESERVED = (
    "step",
    "step_with_status",
    "initial_state",
    "metadata",
    "frame_height",
    "frame_width",
    "state_size",
    "hidden_size",
    "fps",
    "period_s",
    "curvature_limit_per_m",
    "half",
    "black_level",
    "max_gap_s",
    "family",
    "metadata_json",
    "crop",
    "model_size",
)


def optimize_loaded(module: torch.jit.ScriptModule, device: str = "cpu") -> torch.jit.ScriptModule:
    """Specialise a loaded TorchScript policy to this process: oneDNN convolutions where available,
    then ``torch.jit.freeze`` (parameters become constants, everything derived from them only --
    the LTC's synapse tables, sensory terms and masks -- is folded once, dead branches go).

    Done at load time, never saved: the file stays portable (any libtorch, CPU or GPU), and a
    frozen module cannot be re-saved and reloaded reliably (pytorch#81085). Outputs equal the
    unfrozen module's within fp32 rounding (tests/test_export_optimize.py). The methods and
    attributes in :data:`PRESERVED` survive.
    """
    module = module.eval()
    if hasattr(module, "head") and hasattr(module.head, "use_mkldnn"):
        module.head.use_mkldnn = torch.device(device).type == "cpu" and torch.backends.mkldnn.is_available()
    with quiet_torchscript():
        keep = [name for name in PRESERVED if hasattr(module, name)]
        return torch.jit.freeze(module, preserved_attrs=keep)


class ExportedPolicy:
    """An exported policy file, loaded with its own runtime (torch.jit, AOTInductor or onnxruntime).

    ``frame``: uint8 RGB ``[1, H, W, 3]`` or ``[H, W, 3]`` (numpy or torch) at the camera's
    native size ``meta["frame_size"]``; ``hidden``: float32 ``[1, meta["hidden_size"]]``.
    TorchScript files also take batches ``[B, H, W, 3]``.
    """

    def __init__(
        self,
        path: PathLike,
        device: str = "cpu",
        threads: int = 0,
        optimize: bool = True,
        cuda_graph: bool = True,
        probe: bool = True,
    ) -> None:
        self.path = Path(path)
        self.meta = read_metadata(self.path)
        self.format = self.meta["format"]
        self.device = torch.device(device)
        self.frame_size: Tuple[int, int] = (int(self.meta["frame_size"][0]), int(self.meta["frame_size"][1]))
        self.hidden_size = int(self.meta["hidden_size"])
        self._run: Optional[Callable[[List[torch.Tensor]], List[torch.Tensor]]] = None
        if self.format == "torchscript":
            with quiet_torchscript():
                self._module = torch.jit.load(str(self.path), map_location=self.device).eval()
            if optimize:
                self._module = optimize_loaded(self._module, self.device.type)
        elif self.format == "aoti":
            self.device = torch.device(self.meta["device"])
            check_aoti_loadable(self.path, self.meta)
            if self.device.type == "cuda":
                init_cuda(self.device)
                if probe:
                    probe_aoti(self.path)
            self._module = load_aoti_package(self.path)
            self._run = flat_runner(self._module)
        elif self.format == "onnx":
            import onnxruntime as ort  # optional dependency (the dev extra): needed only to run .onnx files

            options = ort.SessionOptions()
            if threads:
                options.intra_op_num_threads = threads
                options.inter_op_num_threads = 1
            providers = (
                ["CUDAExecutionProvider", "CPUExecutionProvider"]
                if device == "cuda"
                else ["CPUExecutionProvider"]
            )
            self._session = ort.InferenceSession(str(self.path), options, providers=providers)
            self.device = torch.device("cpu")
        else:
            raise ValueError(f"{self.path}: unknown export format {self.format!r}")
        # CUDA graphs: on by default on CUDA (TorchScript and AOTInductor), one per (batch, frame dtype)
        self.cuda_graph = (
            bool(cuda_graph)
            and self.device.type == "cuda"
            and self.format in ("torchscript", "aoti")
            and os.environ.get("DRIVE_CUDA_GRAPH", "1") != "0"
        )
        self._graphs: Dict[Tuple[int, torch.dtype], Optional[CapturedStep]] = {}
        self.graph_failures: Dict[int, str] = {}  # batch -> why its capture failed (stepped without a graph)

    def initial_state(self, batch: int = 1) -> torch.Tensor:
        """Fresh hidden ``[batch, hidden_size]`` fp32 (zeros: no state, last command 0, no flags)."""
        return torch.zeros((batch, self.hidden_size), dtype=torch.float32, device=self.device)

    def _check(self, frame: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        if frame.dim() == 3:
            frame = frame.unsqueeze(0)
        h, w = self.frame_size
        batched = self.format == "torchscript"
        if frame.dim() != 4 or (not batched and frame.size(0) != 1) or tuple(frame.shape[1:]) != (h, w, 3):
            raise ValueError(
                f"frame must be RGB [H, W, 3] or [{'B' if batched else 1}, H, W, 3] with H, W = {h}, {w} "
                f"(the camera's native size); got {list(frame.shape)}"
            )
        if frame.dtype != torch.uint8 and not (batched and frame.dtype == torch.float32):
            raise ValueError(f"frame must be uint8 (0-255) RGB; got {frame.dtype}")
        if hidden.dim() != 2 or hidden.size(0) != frame.size(0) or hidden.size(1) != self.hidden_size:
            raise ValueError(
                f"hidden must be [B, {self.hidden_size}] with B = {frame.size(0)} "
                f"(from initial_state(B)); got {list(hidden.shape)}"
            )
        if hidden.dtype != torch.float32:
            raise ValueError(f"hidden must be float32; got {hidden.dtype}")
        return frame

    def _uncaptured(
        self, frame: torch.Tensor, hidden: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.format == "torchscript":
            return self._module.step_with_status(frame, hidden)
        curvature, hidden, status = self._run([frame, hidden]) if self._run else self._module(frame, hidden)
        return curvature, hidden, status

    def graph_batches(self) -> List[int]:
        """Batch sizes whose step runs as a captured CUDA graph so far."""
        return sorted({b for (b, _), g in self._graphs.items() if g is not None})

    def _graph_for(self, frame: torch.Tensor, hidden: torch.Tensor) -> Optional["CapturedStep"]:
        key = (int(frame.size(0)), frame.dtype)
        if key not in self._graphs:
            try:
                self._graphs[key] = CapturedStep(self._uncaptured, frame, hidden)
            except Exception as e:  # noqa: BLE001 - any capture failure falls back to plain stepping
                torch.cuda.synchronize(self.device)
                reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                self.graph_failures[key[0]] = reason
                self._graphs[key] = None
                message = (
                    f"{self.path}: CUDA-graph capture of the step at batch {key[0]} failed ({reason}); "
                    "stepping without a graph (load with cuda_graph=False, or set DRIVE_CUDA_GRAPH=0, "
                    "to skip the attempt)"
                )
                warnings.warn(message, RuntimeWarning, stacklevel=3)
        return self._graphs[key]

    @torch.inference_mode()
    def step(
        self, frame: Union[np.ndarray, torch.Tensor], hidden: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One frame -> (curvature 1/m ``[B]``, hidden ``[B, S+3]``, status int64 ``[B]``).

        On CUDA (TorchScript and AOTInductor files, unless ``cuda_graph=False``) the first step at
        each batch size captures the step in a CUDA graph over static frame and hidden buffers;
        every later step copies its inputs in, replays the graph and returns copies of the outputs
        (the same kernels as plain stepping: bitwise the same results). A capture that fails
        warns once, is recorded in ``graph_failures`` and that batch size steps without a graph."""
        frame = self._check(torch.as_tensor(frame), hidden)
        if self.format == "onnx":
            outs = self._session.run(None, {"frame": frame.cpu().numpy(), "hidden": hidden.cpu().numpy()})
            return tuple(torch.from_numpy(np.asarray(o)) for o in outs)  # type: ignore[return-value]
        if self.cuda_graph:
            graph = self._graph_for(frame, hidden)
            if graph is not None:
                return graph(frame, hidden)
        frame, hidden = frame.to(self.device), hidden.to(self.device)
        return self._uncaptured(frame, hidden)


def load_exported(
    path: PathLike,
    device: str = "cpu",
    threads: int = 0,
    optimize: bool = True,
    cuda_graph: bool = True,
    probe: bool = True,
) -> ExportedPolicy:
    """Open an exported policy file (``.ts``, ``.pt2``, ``.onnx``); TorchScript files are
    specialised to this process with :func:`optimize_loaded` unless ``optimize=False``. On CUDA
    the step is captured in a CUDA graph per batch size unless ``cuda_graph=False`` (or the
    environment has ``DRIVE_CUDA_GRAPH=0``). An AOTInductor package is checked against this
    process before loading (:func:`check_aoti_loadable`); a CUDA one is also loaded and stepped
    once in a child process first unless ``probe=False`` (:func:`probe_aoti`). A damaged file is a
    ``ValueError`` naming it."""
    try:
        return ExportedPolicy(
            path, device=device, threads=threads, optimize=optimize, cuda_graph=cuda_graph, probe=probe
        )
    except (ValueError, RuntimeError, OSError, EOFError, zipfile.BadZipFile) as err:
        if isinstance(err, FileNotFoundError) or type(err).__name__ == "OutOfMemoryError":
            raise
        raise load_error(path, err) from None
    except Exception as err:
        if not type(err).__module__.startswith("onnxruntime"):
            raise
        raise load_error(path, err) from None


class ExportedDriver:
    """An exported policy file in the world's ``Driver`` protocol (``reset()``, ``act(obs)``).

    Each ``act(obs)`` hands ``obs.image`` (uint8 RGB ``[H, W, 3]``, the camera's native size) to
    the file's own preprocessing and safety layer; ``last_status`` keeps the status bits of the
    latest step (:func:`drive.export.decode_status` names them). The file steps at its recorded
    fps; an observation whose ``dt_s`` differs from ``1/fps`` by more than 1% is refused, since
    the exported module cannot integrate another step length.
    """

    def __init__(self, path: PathLike, device: str = "cpu") -> None:
        self.policy = load_exported(path, device=device)
        self.meta = self.policy.meta
        self.name = f"{self.meta.get('family', 'policy')} ({self.meta['format']})"
        self.nominal_dt_s = float(self.meta["dt_s"])
        self.last_status = 0
        self.hidden = self.policy.initial_state(1)

    def reset(self) -> None:
        self.hidden = self.policy.initial_state(1)
        self.last_status = 0

    def act(self, obs: Any) -> float:
        dt_s = float(getattr(obs, "dt_s", self.nominal_dt_s))
        if abs(dt_s - self.nominal_dt_s) > 0.01 * self.nominal_dt_s:
            raise ValueError(
                f"observation dt_s {dt_s} differs from the exported policy's 1/fps = {self.nominal_dt_s}"
            )
        curvature, self.hidden, status = self.policy.step(np.ascontiguousarray(obs.image), self.hidden)
        self.last_status = int(status[0])
        return float(curvature[0])
