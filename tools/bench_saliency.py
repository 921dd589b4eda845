"""VisualBackProp cost relative to a forward pass of the head, and saliency-video rendering speed.

    python tools/bench_saliency.py [--device cpu|cuda] [--batch 32] [--threads 1] [--repeats 20]

Both timings of each pair are measured in the same run, interleaved, so the ratio holds on a
noisy shared machine. Target (issue 6): VBP <= 1.5x a forward pass of the head.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import torch

from drive.explain.policy_saliency import SaliencyFrame
from drive.explain.video import SaliencyVideoWriter
from drive.explain.visual_backprop import visual_backprop
from drive.nn.heads import NCPConvHead, PilotNetCNN


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _interleaved(
    fns: Dict[str, Callable[[], object]], repeats: int, device: torch.device
) -> Dict[str, float]:
    """Median seconds per call of each function, calls interleaved round-robin after a warm-up."""
    for fn in fns.values():
        for _ in range(3):
            fn()
    _sync(device)
    times: Dict[str, List[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def bench_vbp(batch: int, repeats: int, device: torch.device) -> None:
    frames = torch.rand(batch, 3, 78, 200, device=device)
    print(f"VisualBackProp vs head forward, batch {batch} at 3x78x200 on {device} (median of {repeats})")
    print(f"{'head':<12} {'forward ms':>11} {'vbp ms':>9} {'ratio':>6} {'ncp ms':>9} {'ratio':>6}")
    for head in (NCPConvHead(), PilotNetCNN()):
        head = head.to(device).eval()

        def forward(head=head):
            with torch.no_grad():
                return head(frames)

        t = _interleaved(
            {
                "forward": forward,
                "bojarski": lambda head=head: visual_backprop(head, frames, "bojarski"),
                "ncp": lambda head=head: visual_backprop(head, frames, "ncp"),
            },
            repeats,
            device,
        )
        f = t["forward"]
        print(
            f"{type(head).__name__:<12} {f * 1e3:11.2f} {t['bojarski'] * 1e3:9.2f} {t['bojarski'] / f:6.2f}"
            f" {t['ncp'] * 1e3:9.2f} {t['ncp'] / f:6.2f}"
        )


def bench_video(frames: int) -> None:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (78, 200, 3), dtype=np.uint8)
    mask = rng.random((78, 200)).astype(np.float32)
    print(f"video rendering (compose + mp4v encode, x3 panels), {frames} frames")
    with tempfile.TemporaryDirectory() as tmp:
        for rows in (1, 2):
            names = ["clean", "noise 0.2"][:rows]
            writer = SaliencyVideoWriter(Path(tmp) / f"bench{rows}.mp4", 30.0, (78, 200), names)
            start = time.perf_counter()
            for i in range(frames):
                step = [SaliencyFrame(image, mask, 0.001 * np.sin(i / 10)) for _ in range(rows)]
                writer.write(step, 0.001 * np.sin(i / 10))
            info = writer.close()
            elapsed = time.perf_counter() - start
            print(f"  {rows} row(s) {info['size'][0]}x{info['size'][1]}: {frames / elapsed:6.1f} frames/s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--video-frames", type=int, default=60)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    bench_vbp(args.batch, args.repeats, device)
    if device.type == "cuda":
        bench_vbp(1, args.repeats, device)
    bench_video(args.video_frames)


if __name__ == "__main__":
    main()
