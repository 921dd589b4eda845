#!/usr/bin/env python3
"""Minimal Python runner for an exported drive policy: torch only, no `drive` package needed.

    python run_policy.py policy.ts FRAMES [--device auto|cpu|cuda] [--no-pace]
                         [--warmup 20] [--threads 1] [--out commands.csv] [--quiet]
    python run_policy.py policy.ts drive.mp4 --dump-ppm frames/   # frames for drive_runtime

This file ships inside the drive package (``drive export --print-runtime-dir`` prints its folder);
copy it to the vehicle, where only torch is needed.

MODEL is policy.ts (TorchScript) or policy.pt2 (AOTInductor). FRAMES is a video file (needs
opencv-python), a folder of images (.ppm read here; .png/.jpg need opencv-python), or a raw file
of consecutive uint8 RGB frames at the camera's native size. Output matches the C++
`drive_runtime`: CSV rows ``frame,curvature_per_m,status,latency_ms`` and latency p50/p99 on
stderr. Status bits: 1 non-finite frame, 2 black frame (command held), 4 clamped, 8 hidden
reset, 16 non-finite network output (held).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import warnings
import zipfile
from pathlib import Path
from typing import Dict, Iterator, Tuple

import torch

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


def read_metadata(model: Path) -> Dict:
    """The drive export metadata of a .ts (zip entry) or .pt2 (package metadata) file, read from
    the archive without loading the model (a package's loader is native code: reading its
    metadata must not run it)."""
    if not model.is_file():
        raise SystemExit(f"{model}: no such file")
    if model.suffix == ".pt2" and zipfile.is_zipfile(model):
        with zipfile.ZipFile(model) as zf:
            for name in sorted(
                n for n in zf.namelist() if n.endswith("_metadata.json") and "/aotinductor/" in n
            ):
                strings = json.loads(zf.read(name))
                if isinstance(strings, dict) and "metadata_json" in strings:
                    return json.loads(strings["metadata_json"])
        raise SystemExit(f"{model}: no drive metadata in the package; export it with `drive export`")
    if not zipfile.is_zipfile(model):
        raise SystemExit(
            f"{model}: not a TorchScript file (.ts, a zip archive) or an AOTInductor package (.pt2)"
        )
    with zipfile.ZipFile(model) as zf:
        name = next((n for n in zf.namelist() if n.endswith("extra/drive_meta.json")), None)
        if name is None:
            raise SystemExit(f"{model}: no drive metadata inside; export it with `drive export`")
        return json.loads(zf.read(name))


def read_ppm(path: Path) -> torch.Tensor:
    """Binary PPM (P6, maxval 255) -> uint8 [H, W, 3]."""
    data = path.read_bytes()
    fields, pos = [], 0
    while len(fields) < 4 and pos < len(data):
        while data[pos : pos + 1].isspace():
            pos += 1
        if data[pos : pos + 1] == b"#":
            pos = data.find(b"\n", pos) + 1 or len(data)
            continue
        end = pos
        while end < len(data) and not data[end : end + 1].isspace():
            end += 1
        fields.append(data[pos:end])
        pos = end
    if (
        len(fields) < 4
        or fields[0] != b"P6"
        or not all(f.isdigit() for f in fields[1:])
        or int(fields[3]) != 255
    ):
        raise SystemExit(f"{path}: only binary 8-bit PPM (P6, maxval 255)")
    w, h = int(fields[1]), int(fields[2])
    pixels = data[pos + 1 : pos + 1 + w * h * 3]
    if len(pixels) != w * h * 3:
        raise SystemExit(f"{path}: truncated ({len(pixels)} of {w * h * 3} pixel bytes)")
    return torch.frombuffer(bytearray(pixels), dtype=torch.uint8).reshape(h, w, 3)


def write_ppm(path: Path, frame: torch.Tensor) -> None:
    h, w = frame.shape[0], frame.shape[1]
    path.write_bytes(b"P6\n%d %d\n255\n" % (w, h) + frame.contiguous().numpy().tobytes())


def _read_frames(source: Path, size: Tuple[int, int]) -> Iterator[Tuple[str, torch.Tensor]]:
    """(where it came from, uint8 RGB [h, w, 3]) for each frame of a video, an image folder or a raw dump."""
    h, w = size
    if source.is_dir():
        files = sorted(p for p in source.iterdir() if p.suffix.lower() in (".ppm",) + IMAGE_SUFFIXES)
        for p in files:
            if p.suffix.lower() == ".ppm":
                yield str(p), read_ppm(p)
            else:
                import cv2

                bgr = cv2.imread(str(p))
                if bgr is None:
                    raise SystemExit(f"{p}: cannot read the image")
                yield str(p), torch.from_numpy(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
    elif source.suffix.lower() in (".rgb", ".raw"):
        raw = torch.from_file(str(source), size=source.stat().st_size, dtype=torch.uint8)
        if raw.numel() % (h * w * 3):
            raise SystemExit(f"{source}: {raw.numel()} bytes is not a whole number of {h}x{w}x3 frames")
        for i, frame in enumerate(raw.reshape(-1, h, w, 3)):
            yield f"{source} frame {i}", frame
    else:
        import cv2

        video = cv2.VideoCapture(str(source))
        if not video.isOpened():
            raise SystemExit(f"cannot open video {source}")
        ok, bgr = video.read()
        i = 0
        while ok:
            yield f"{source} frame {i}", torch.from_numpy(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
            ok, bgr = video.read()
            i += 1


def frames_from(source: Path, size: Tuple[int, int]) -> Iterator[torch.Tensor]:
    """uint8 RGB [H, W, 3] frames at the camera's native ``size`` from a video, an image folder or a
    raw .rgb dump.

    Bad input stops the run with a message naming the file: a missing source, a frame of another
    size, or no frames at all (which would otherwise surface as a bare StopIteration)."""
    if not source.exists():
        raise SystemExit(f"{source}: no such file or folder")
    count = 0
    for name, frame in _read_frames(source, size):
        if tuple(frame.shape) != (*size, 3):
            raise SystemExit(
                f"{name}: frame is {frame.shape[1]}x{frame.shape[0]}, the model expects the camera's "
                f"{size[1]}x{size[0]} (frame_size in its metadata); resize on the camera side, not here"
            )
        count += 1
        yield frame
    if count == 0:
        raise SystemExit(f"{source}: no frames")


class Model:
    """policy.ts or policy.pt2 behind one step(frame[1,H,W,3], hidden) -> (curvature, hidden, status)."""

    def __init__(self, path: Path, device: torch.device) -> None:
        self.meta = read_metadata(path)
        self.size = tuple(self.meta["frame_size"])
        self.hidden_size = int(self.meta["hidden_size"])
        if path.suffix == ".pt2":
            from torch._inductor import aoti_load_package

            self.device = torch.device(self.meta["device"])
            loader = aoti_load_package(str(path)).loader
            # the loader's flat call: the package's Python wrapper parses its pytree specs again on
            # every step (~0.04 ms); drive's packages take (frame, hidden) and return three tensors
            self.run = lambda frame, hidden: tuple(loader.boxed_run([frame, hidden]))
        else:
            self.device = device
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # TorchScript's deprecation notice
                module = torch.jit.load(str(path), map_location=device).eval()
                # specialise to this process, as drive.export.optimize_loaded and drive_runtime do:
                # oneDNN convolutions on CPU, then freeze (parameters and what derives from them folded)
                if hasattr(module, "head") and hasattr(module.head, "use_mkldnn"):
                    module.head.use_mkldnn = device.type == "cpu" and torch.backends.mkldnn.is_available()
                self.run = torch.jit.freeze(module, preserved_attrs=["step_with_status"]).step_with_status

    def initial_state(self) -> torch.Tensor:
        return torch.zeros((1, self.hidden_size), dtype=torch.float32, device=self.device)

    def step(
        self, frame: torch.Tensor, hidden: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(curvature_per_m [1], hidden [1, S], status [1]); inputs checked against the metadata first,
        because an AOTInductor package accepts wrong shapes and dtypes silently."""
        if tuple(frame.shape) != (1, *self.size, 3) or frame.dtype != torch.uint8:
            raise ValueError(
                f"frame must be uint8 [1, {self.size[0]}, {self.size[1]}, 3]; got "
                f"{frame.dtype} {list(frame.shape)} (resize on the camera side, not here)"
            )
        if tuple(hidden.shape) != (1, self.hidden_size) or hidden.dtype != torch.float32:
            raise ValueError(
                f"hidden must be float32 [1, {self.hidden_size}] (hidden_size in the metadata; start "
                f"from initial_state()); got {hidden.dtype} {list(hidden.shape)}"
            )
        return self.run(frame.to(self.device), hidden)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("frames", type=Path)
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--fps", type=float, default=0.0, help="override the camera rate from the metadata")
    ap.add_argument("--no-pace", action="store_true", help="step as fast as possible, not at camera rate")
    ap.add_argument("--out", type=Path, help="write the CSV here too")
    ap.add_argument("--quiet", action="store_true", help="no per-frame lines on stdout")
    ap.add_argument(
        "--dump-ppm", type=Path, metavar="DIR", help="only write the frames as PPMs (for drive_runtime)"
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    model = Model(args.model, torch.device("cuda" if cuda else "cpu"))
    if args.dump_ppm:
        args.dump_ppm.mkdir(parents=True, exist_ok=True)
        n = 0
        for n, frame in enumerate(frames_from(args.frames, model.size), 1):
            write_ppm(args.dump_ppm / f"{n - 1:06d}.ppm", frame)
        print(f"wrote {n} frames to {args.dump_ppm}", file=sys.stderr)
        return 0

    fps = args.fps or float(model.meta["fps"])
    period = 1.0 / fps
    frames = frames_from(args.frames, model.size)
    rows, latency = ["frame,curvature_per_m,status,latency_ms"], []
    if not args.quiet:
        print(rows[0])
    with torch.inference_mode():
        first = next(frames)
        hidden = model.initial_state()
        for _ in range(args.warmup):
            hidden = model.step(first[None], hidden)[1]
        hidden = model.initial_state()
        start = time.perf_counter()
        for i, frame in enumerate(itertools.chain([first], frames)):
            if not args.no_pace:
                time.sleep(max(0.0, start + i * period - time.perf_counter()))
            t0 = time.perf_counter()
            curvature, hidden, status = model.step(frame[None], hidden)
            value = float(curvature[0])
            ms = (time.perf_counter() - t0) * 1e3
            latency.append(ms)
            rows.append(f"{i},{value:.9g},{int(status[0])},{ms:.4f}")
            if not args.quiet:
                print(rows[-1])
    if args.out:
        args.out.write_text("\n".join(rows) + "\n")
    lat = torch.tensor(latency, dtype=torch.float64)
    print(
        f"# {len(latency)} steps: latency p50 {lat.quantile(0.5):.3f} ms, p99 {lat.quantile(0.99):.3f} ms, "
        f"max {lat.max():.3f} ms; {int((lat > period * 1e3).sum())} over the {period * 1e3:.1f} ms "
        "frame period",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
