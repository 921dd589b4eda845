"""The deployed policy: one scriptable module from raw camera frame to a safe steering command.

:class:`DeployedPolicy` wraps a trained :class:`~drive.nn.policy.Policy` with everything the car
needs and nothing it must import: crop/resize (:func:`drive.data.preprocess.preprocess_frames`, the
same code training used), scaling to [0, 1], the network, and a safety layer. It is stateless:
the caller keeps one float32 tensor per camera stream,

    hidden[B, S + 3] = [ recurrent state (S = policy.state_size) | last command (1/m) | status | gap (s) ]

and every step maps ``(frame, hidden) -> (curvature_per_m[B], hidden, status[B])``. Keeping the
last command, the flags and the time since the last usable frame inside ``hidden`` keeps the
module batch-safe and lets TorchScript, torch.export and ONNX share one graph with no branches
on data.

Frames: uint8 RGB ``[B, H, W, 3]`` at the camera's native size (``[H, W, 3]`` is one frame,
``B = 1``); float32 frames in [0, 1] are also accepted by TorchScript (quantised to uint8 first,
as training's cache did). Any other shape or dtype, and an empty batch, raises a ``ValueError``
saying what was expected.

Safety, per row of the batch (the status bits, :data:`STATUS`):

* ``HIDDEN_RESET`` (8): a non-finite value anywhere in the incoming hidden row: the row restarts
  from ``initial_state`` (last command 0) before the frame is used.
* ``FRAME_NONFINITE`` (1) / ``FRAME_BLACK`` (2): a float frame with NaN/inf, or a frame whose mean
  pixel in the network's view (after crop and resize) is at most ``black_level`` (0-255 scale):
  the command is the last command (held), the recurrent state is kept, and the skipped time is
  remembered in ``gap`` so the next good frame integrates over the real elapsed time
  (``dt = period + gap``, capped at ``max_gap_s``): continuous-time cells handle irregular
  sampling by design.
* ``FRAME_RANGE`` (32): a float32 frame with a value outside [0, 1] (beyond half a uint8 step,
  e.g. a 0-255 frame passed as float, which clamping would turn white): held like a black frame.
  A tensor test, not an error, so the step stays free of host synchronisation.
* ``OUTPUT_NONFINITE`` (16): the network produced a non-finite feature, command or state: the last
  command is held and the recurrent state restarts.
* ``CLAMPED`` (4): the command exceeded ``curvature_limit_per_m`` and was clamped to it.

Precision: with ``half=True`` the conv head runs in fp16 and its features are cast back to fp32;
the recurrent cell, the readout and ``hidden`` stay fp32 (LTC's epsilon 1e-8 underflows in fp16).
"""

import copy
import json
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from drive.data.preprocess import preprocess_frames
from drive.export.head import deployed_head
from drive.nn.checks import skip_value_checks
from drive.nn.policy import Policy

__all__ = ["DeployedPolicy", "STATUS", "EXTRA_STATE", "decode_status"]

FRAME_NONFINITE = 1
FRAME_BLACK = 2
CLAMPED = 4
HIDDEN_RESET = 8
OUTPUT_NONFINITE = 16
FRAME_RANGE = 32
# a float frame may exceed [0, 1] by less than half a uint8 step (it still rounds to 0 or 255)
FLOAT_FRAME_TOLERANCE = 0.5 / 255.0
STATUS: Dict[str, int] = {
    "FRAME_NONFINITE": FRAME_NONFINITE,
    "FRAME_BLACK": FRAME_BLACK,
    "CLAMPED": CLAMPED,
    "HIDDEN_RESET": HIDDEN_RESET,
    "OUTPUT_NONFINITE": OUTPUT_NONFINITE,
    "FRAME_RANGE": FRAME_RANGE,
}
EXTRA_STATE = 3  # last command, status, gap


def decode_status(status: int) -> List[str]:
    """Names of the bits set in a status value, e.g. ``6 -> ['FRAME_BLACK', 'CLAMPED']``."""
    return [name for name, bit in STATUS.items() if int(status) & bit]


def _dtype_name(dtype: torch.dtype) -> str:
    """``str(dtype)`` in TorchScript gives a number; name the usual suspects."""
    names = [
        (torch.float64, "torch.float64"),
        (torch.float16, "torch.float16"),
        (torch.bfloat16, "torch.bfloat16"),
        (torch.int8, "torch.int8"),
        (torch.int16, "torch.int16"),
        (torch.int32, "torch.int32"),
        (torch.int64, "torch.int64"),
        (torch.bool, "torch.bool"),
        (torch.float32, "torch.float32"),
        (torch.uint8, "torch.uint8"),
    ]
    for candidate, name in names:
        if dtype == candidate:
            return name
    return "dtype code " + str(dtype)


class DeployedPolicy(nn.Module):
    """Raw camera frame -> clamped curvature (1/m), with preprocessing and safety inside.

    Args:
        policy: the trained policy (any family, closed-form conversions included); the module
            wraps a deep copy and leaves it untouched.
        frame_size: ``(height, width)`` of the camera frames the vehicle delivers.
        crop: ``[top, bottom, left, right]`` or ``[]`` (from the checkpoint's preprocessing).
        fps: camera rate; the nominal step is ``dt = 1 / fps`` seconds.
        curvature_limit_per_m: commands are clamped to ``[-limit, +limit]``.
        half: run the conv head in fp16 (CUDA); the cell stays fp32.
        black_level: a frame whose mean pixel (0-255) after crop/resize is at most this is no image.
        max_gap_s: longest elapsed time one step integrates after held frames.
        meta: JSON-able metadata stored verbatim in :meth:`metadata`.
    """

    crop: List[int]  # may be empty: annotated so TorchScript knows the element type
    # Plain int/float/bool/str attributes survive scripting; the C++ runtime reads them with
    # module.attr(name): frame_height, frame_width, state_size, hidden_size, fps,
    # curvature_limit_per_m, half, black_level, max_gap_s, family, metadata_json.

    def __init__(
        self,
        policy: Policy,
        frame_size: Tuple[int, int],
        crop: List[int],
        fps: float,
        curvature_limit_per_m: float,
        half: bool = False,
        black_level: float = 4.0,
        max_gap_s: float = 1.0,
        meta: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__()
        if fps <= 0 or not curvature_limit_per_m > 0 or max_gap_s <= 0:
            raise ValueError("fps, curvature_limit_per_m and max_gap_s must be positive")
        # A copy: the head is swapped out below and converted in place (fp16, channels-last
        # weights), which must not reach the caller's policy (it may go on training or driving).
        self.policy = copy.deepcopy(policy).eval()
        # step_with_status hands the cell finite features, a finite state and dt >= one frame
        # period: the cell's own value checks (a host read-back, a GPU sync mid-step) are redundant
        skip_value_checks(self.policy)
        # the head, rearranged for batch-1 steps on 0-255 frames (drive/export/head.py), fp16 on
        # request, channels-last (~30% faster at batch 1 on CPU (oneDNN) and on GPU (cuDNN))
        self.head = deployed_head(self.policy.head, half)
        self.policy.head = nn.Identity()  # the head's parameters live in self.head
        self.frame_height = int(frame_size[0])
        self.frame_width = int(frame_size[1])
        self.crop: List[int] = [int(c) for c in crop]
        if self.crop and not (
            len(self.crop) == 4
            and 0 <= self.crop[0] < self.crop[1] <= self.frame_height
            and 0 <= self.crop[2] < self.crop[3] <= self.frame_width
        ):
            raise ValueError(
                f"crop {self.crop} does not fit frames of size {self.frame_height}x{self.frame_width} (H x W)"
            )
        self.model_size: List[int] = [int(policy.input_size[0]), int(policy.input_size[1])]
        self.state_size = int(policy.state_size)
        self.hidden_size = self.state_size + EXTRA_STATE
        self.fps = float(fps)
        self.period_s: float = 1.0 / float(fps)
        self.curvature_limit_per_m = float(curvature_limit_per_m)
        self.half = bool(half)
        self.black_level = float(black_level)
        self.max_gap_s = float(max_gap_s)
        self.float_frame_tolerance = float(FLOAT_FRAME_TOLERANCE)
        self.family = str((meta or {}).get("family", "policy"))
        self.metadata_json = json.dumps(meta or {}, sort_keys=True)
        self.register_buffer("status_bits", torch.tensor([float(b) for b in STATUS.values()]))
        if bool(policy.initial_state(1).abs().sum() != 0):
            raise ValueError(
                "DeployedPolicy resets corrupted rows to zeros: the policy's initial_state must be zeros"
            )

    @torch.jit.export
    def metadata(self) -> str:
        """The export metadata as a JSON string (sizes, crop, units, fps, limits, family, version)."""
        return self.metadata_json

    @torch.jit.export
    def initial_state(self, batch: int) -> Tensor:
        """Fresh hidden ``[batch, S + 3]`` fp32: zero recurrent state, last command 0, no flags."""
        rnn = self.policy.initial_state(batch)
        return torch.cat(
            [rnn.float(), torch.zeros((batch, 3), dtype=torch.float32, device=rnn.device)], dim=1
        )

    def _frames_uint8(self, frame: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """Validate the shape and dtype (host-side, no sync); return (uint8 frames ``[B, H, W, 3]``,
        non-finite flag ``[B]`` bool, out-of-[0, 1] flag ``[B]`` bool, tensor tests)."""
        given = list(frame.shape)
        if frame.dim() == 3:
            frame = frame.unsqueeze(0)
        if (
            frame.dim() != 4
            or frame.size(1) != self.frame_height
            or frame.size(2) != self.frame_width
            or frame.size(3) != 3
        ):
            raise ValueError(
                "frame must be RGB [H, W, 3] or [B, H, W, 3] with H, W = "
                + str(self.frame_height)
                + ", "
                + str(self.frame_width)
                + " (the camera's native size); got "
                + str(given)
            )
        if frame.size(0) == 0:
            raise ValueError(
                "frame batch is empty (got "
                + str(given)
                + "): pass at least one frame [1, "
                + str(self.frame_height)
                + ", "
                + str(self.frame_width)
                + ", 3]"
            )
        if frame.dtype == torch.uint8:
            none = torch.zeros(frame.size(0), dtype=torch.bool, device=frame.device)
            return frame, none, none
        if frame.dtype != torch.float32:
            raise ValueError(
                "frame must be uint8 (0-255) or float32 (0-1) RGB; got " + _dtype_name(frame.dtype)
            )
        finite = torch.isfinite(frame).flatten(1).all(dim=1)
        clean = torch.nan_to_num(frame, nan=0.0, posinf=0.0, neginf=0.0)
        flat = clean.flatten(1)
        # a 0-255 frame given as float would clamp to white and drive: flag it (held), never use it
        tol = self.float_frame_tolerance
        out_of_range = (flat.amax(dim=1) > 1.0 + tol) | (flat.amin(dim=1) < -tol)
        return (clean.clamp(0.0, 1.0) * 255.0).round().to(torch.uint8), ~finite, out_of_range & finite

    def _check_hidden(self, hidden: Tensor, batch: int) -> None:
        if hidden.dim() != 2 or hidden.size(0) != batch or hidden.size(1) != self.hidden_size:
            raise ValueError(
                "hidden must be [B, "
                + str(self.hidden_size)
                + "] with B = "
                + str(batch)
                + " (from initial_state(B)); got "
                + str(list(hidden.shape))
            )
        if hidden.dtype != torch.float32:
            raise ValueError("hidden must be float32; got " + _dtype_name(hidden.dtype))

    def _network_view(self, frames: Tensor) -> Tensor:
        """uint8 ``[B, H, W, 3]`` -> uint8 ``[B, 3, h, w]``: crop and resize as in training.

        When the crop already has the network's size no arithmetic happens, so the channels-last
        view of the camera's HWC frame goes to the head without the NCHW copy."""
        h, w = self.frame_height, self.frame_width
        if len(self.crop) == 4:
            h, w = self.crop[1] - self.crop[0], self.crop[3] - self.crop[2]
        if h == self.model_size[0] and w == self.model_size[1]:
            if len(self.crop) == 4:
                frames = frames[:, self.crop[0] : self.crop[1], self.crop[2] : self.crop[3], :]
            return frames.permute(0, 3, 1, 2)
        return preprocess_frames(frames, self.crop, self.model_size)

    @torch.jit.export
    def step_with_status(self, frame: Tensor, hidden: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """One camera frame per stream -> (curvature 1/m ``[B]``, hidden ``[B, S+3]``, status int64
        ``[B]``)."""
        frames, nonfinite, out_of_range = self._frames_uint8(frame)
        batch = frames.size(0)
        self._check_hidden(hidden, batch)
        s = self.state_size

        # 1. a corrupted hidden row restarts from the initial state (zeros, checked at construction)
        reset = ~torch.isfinite(hidden).all(dim=1)
        hidden = torch.where(reset.unsqueeze(1), 0.0, hidden)
        state, last, gap = hidden[:, :s], hidden[:, s], hidden[:, s + 2]

        # 2. the network's view and its features (every row; results of held rows are discarded);
        # frames that carry no image in that view are held
        features, mean_pixel = self.head(self._network_view(frames))
        black = mean_pixel <= self.black_level
        held = nonfinite | black | out_of_range

        # 3. Policy.step, split so that non-finite head features (e.g. fp16 overflow) never reach
        # the cell (its value checks are off, see __init__): they are zeroed, the row flagged and held.
        # at least one frame period: a caller-made hidden with a negative gap cannot give dt <= 0
        dt = torch.clamp(gap + self.period_s, min=self.period_s, max=self.max_gap_s)
        features_ok = torch.isfinite(features).all(dim=1)
        features = torch.where(features_ok.unsqueeze(1), features, 0.0)
        y, new_state = self.policy.rnn.step(features, state, dt / self.policy.frame_period_s)
        curvature = self.policy.readout(y).squeeze(-1) / self.policy.km_per_m
        # one finite test for command and state: a sum of finite values is finite unless it
        # overflows fp32 (|x| ~ 1e38), itself a broken state
        bad_out = ~(features_ok & torch.isfinite(new_state.sum(dim=1) + curvature))

        # 4. combine: hold the last command for unusable frames or outputs, clamp, keep the time
        command = torch.where(held | bad_out, last, curvature)
        clamped = command.abs() > self.curvature_limit_per_m
        command = command.clamp(-self.curvature_limit_per_m, self.curvature_limit_per_m)
        restart = bad_out & ~held
        new_state = torch.where(held.unsqueeze(1), state, torch.where(restart.unsqueeze(1), 0.0, new_state))

        # status bits as in STATUS, weighted by the buffer status_bits = [1, 2, 4, 8, 16, 32]
        flags = torch.stack(
            [nonfinite, black & ~nonfinite & ~out_of_range, clamped, reset, restart, out_of_range], dim=1
        )
        status = torch.mv(flags.float(), self.status_bits)
        tail = torch.stack([command, status, torch.where(held, dt, 0.0)], dim=1)
        return command, torch.cat([new_state, tail], dim=1), status.long()

    @torch.jit.export
    def step(self, frame: Tensor, hidden: Tensor) -> Tuple[Tensor, Tensor]:
        """One camera frame per stream -> (curvature 1/m ``[B]``, hidden ``[B, S+3]``); status in
        ``hidden[:, S+1]``."""
        command, hidden, _ = self.step_with_status(frame, hidden)
        return command, hidden

    def forward(self, frame: Tensor, hidden: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """Same as :meth:`step_with_status` (the graph torch.export and ONNX capture)."""
        return self.step_with_status(frame, hidden)
