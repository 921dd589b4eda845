"""Training throughput per model family, and how much of a step is spent outside the conv head.

For every family: build the :class:`drive.train.module.PolicyModule`, feed uint8 batches of
``batch x seq`` frames (the paper's 20 x 16 by default; the ``cnn`` family gets the same number of
single frames), and time full optimizer steps (forward, curve-weighted loss, backward, grad clip,
Adam, weight constraints) -> training frames per second. Then time the conv head alone on the same
frames (forward + backward of its features) in the same run: the share of step time outside the
head = (step - head) / step. Target for ``ncp_ltc``: <= 25 % (the recurrent part is not the
bottleneck). Frames come from memory; ``--logs DIR`` also times the data pipeline
(:class:`~drive.data.datamodule.DriveDataModule` batches of the same shape, in this process) and
reports its share of a serial step (data + step; DataLoader workers overlap it in practice). On a
CPU the same run also times the step with the frames as they come (NCHW), the layout before the head
read them channels-last (:attr:`PolicyModule.channels_last`), and prints the speed-up. It also times
the head's per-frame standardisation (:func:`drive.nn.heads.standardize_frames`) against the same
formula through ``Tensor.std``'s one-pass reduction, alone and as the whole step (interleaved).

``--fit LOGS`` is the end-to-end mode: a real ``drive fit`` of each profile (``--profiles``: the
demo's, and ``ncp_ltc`` with ``data``'s full augmentation) on the cached recordings LOGS, with the
augmentation in the DataLoader workers and on the training device (``--augment-on``), for
``--fit-steps`` optimizer steps at ``--batch`` windows; its frames/s after the warm-up come from
:class:`drive.train.throughput.Throughput` (everything a step costs: workers, copy, augmentation,
model, optimizer, logging, checkpoints). In the same run the model-only step of the same network
(the checkpoint's hyperparameters, synthetic uint8 frames already on the device) is timed, and the
ratio printed: the goal of a GPU fit is >= 80 % of the model-only step.

    python tools/bench_train.py                       # all families, this CPU
    python tools/bench_train.py --device cuda --batch 64   # on a GPU (head under bf16 autocast)
    python tools/bench_train.py --families ncp_ltc --threads 1
    python tools/bench_train.py --families ncp_ltc,lstm --input-hw 39,100 --batch 16   # the demo profile's
    python tools/bench_train.py --families ncp_ltc --logs runs/demo/data/train
    python tools/bench_train.py --device cuda --batch 64 --fit runs/demo/data/train   # end to end
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch

from drive.nn import heads
from drive.nn.heads import standardize_frames
from drive.nn.registry import families
from drive.train.loss import curve_weights, weighted_mse
from drive.train.module import PolicyModule


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timeit(fns: List[Callable[[], None]], device: torch.device, warmup: int, iters: int) -> List[float]:
    """Best-of-``iters`` seconds of each function, interleaved so load changes hit all alike."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    _sync(device)
    best = [float("inf")] * len(fns)
    for _ in range(iters):
        for k, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            _sync(device)
            best[k] = min(best[k], time.perf_counter() - t0)
    return best


def bench_family(
    family: str,
    batch: int,
    seq: int,
    device: torch.device,
    warmup: int,
    iters: int,
    hparams: Optional[Dict[str, Any]] = None,
    standardise_peer: bool = False,
) -> Dict[str, float]:
    """Model-only training step of ``family`` (or of the network ``hparams`` describe);
    ``standardise_peer`` also times the same step with :func:`one_pass_standardize` in the head."""
    torch.manual_seed(0)
    module = PolicyModule(**(hparams or {"family": family})).to(device)
    optimizer = torch.optim.Adam(module.parameters(), lr=5e-4)
    b, length = (batch * seq, 1) if family == "cnn" else (batch, seq)
    h, w = module.hparams.input_hw
    frames = torch.randint(0, 256, (b, length, 3, h, w), dtype=torch.uint8, device=device)
    target = torch.randn(b, length, device=device) * 20.0
    weight = curve_weights(target, 0.1)
    dt = torch.full((b, length), 1.0 / 30.0, device=device)
    module.policy.frame_period_s = 1.0 / 30.0

    def train_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        pred, _ = module.forward_km(frames, None, dt)
        weighted_mse(pred, target, weight).backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), 10.0)
        optimizer.step()
        module.on_train_batch_end(None, None, 0)

    def head_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        module._encode(frames).square().mean().backward()

    def peer_step() -> None:  # the frames as they come (NCHW): the layout before channels-last
        module.channels_last = False
        try:
            train_step()
        finally:
            module.channels_last = True

    def one_pass_step() -> None:  # the step with the standardisation through Tensor.std (before 2026-12-07)
        heads.standardize_frames = one_pass_standardize
        try:
            train_step()
        finally:
            heads.standardize_frames = standardize_frames

    fns = [train_step, head_step] + ([one_pass_step] if standardise_peer else [])
    fns += [peer_step] if device.type == "cpu" else []
    step_s, head_s, *peers = _timeit(fns, device, warmup, iters)
    one_pass = peers.pop(0) if standardise_peer else None
    n = b * length
    row = {
        "family": family,
        "frames_per_s": n / step_s,
        "step_ms": step_s * 1e3,
        "head_ms": head_s * 1e3,
        "outside_head_share": max(0.0, (step_s - head_s) / step_s),
    }
    if one_pass is not None:
        row["one_pass_step_ms"] = one_pass * 1e3
        row["standardise_step_speedup"] = one_pass / step_s
    if peers:
        row["nchw_step_ms"] = peers[0] * 1e3
        row["channels_last_speedup"] = peers[0] / step_s
    return row


def one_pass_standardize(frames: torch.Tensor) -> torch.Tensor:
    """The peer: the same formula through Tensor.std's one-pass reduction (drive's form before)."""
    flat = frames.reshape(frames.shape[0], -1)
    std = flat.std(dim=1, unbiased=False).clamp_min(flat.shape[1] ** -0.5)
    return (frames - flat.mean(dim=1).view(-1, 1, 1, 1)) / std.view(-1, 1, 1, 1)


def bench_standardise(frames: int, hw: List[int], device: torch.device, iters: int) -> Dict[str, float]:
    """The head's per-frame standardisation (drive.nn.heads.standardize_frames) against the one-pass
    form of the same formula, on ``frames`` channels-last float frames (as the head sees them)."""
    x = torch.rand(frames, 3, hw[0], hw[1], device=device).contiguous(memory_format=torch.channels_last)
    ours, peer = _timeit(
        [lambda: standardize_frames(x), lambda: one_pass_standardize(x)], device, 2, max(iters, 10)
    )
    return {"standardise_ms": ours * 1e3, "one_pass_ms": peer * 1e3, "speedup": peer / ours}


def bench_data(logs: str, batch: int, seq: int, iters: int) -> float:
    """Seconds per training batch from the datamodule (cached, no augmentation, no workers)."""
    import tempfile

    from drive.data.datamodule import DriveDataModule

    with tempfile.TemporaryDirectory() as cache:
        dm = DriveDataModule(
            train=[logs], seq_len=seq, batch_size=batch, num_workers=0, cache_dir=cache, val_split="none"
        )
        dm.prepare_data()
        dm.setup("fit")
        it = iter(dm.train_dataloader())
        next(it)
        best = float("inf")
        for _ in range(iters):
            t0 = time.perf_counter()
            next(it)
            best = min(best, time.perf_counter() - t0)
    return best


FIT_PROFILES = {"demo": ["--config", "demo"], "ncp_ltc": ["--config", "ncp_ltc", "--config", "data"]}


def bench_fit(
    profile: str, logs: List[str], augment_on: str, batch: int, steps: int, device: torch.device, out: Path
) -> Dict[str, Any]:
    """One real ``drive fit`` of ``profile`` for ``steps`` steps; its end-to-end frames/s and checkpoint."""
    from drive.train.launch import launch  # Lightning's import only in this mode

    root = out / f"{profile}-{augment_on}"
    trainer = ["--config", "trainer/gpu"] if device.type == "cuda" else ["--config", "trainer/cpu"]
    argv = ["fit", *FIT_PROFILES[profile], *trainer, "--seed_everything", "0"]
    argv += ["--data.train", json.dumps(logs), "--data.val", "null", "--data.test", "null"]
    argv += ["--data.val_split", "none", "--data.augment_on", augment_on, "--data.batch_size", str(batch)]
    argv += ["--data.cache_dir", str(out / "cache"), "--trainer.default_root_dir", str(root)]
    argv += ["--trainer.max_steps", str(steps), "--trainer.max_epochs", "-1"]
    argv += ["--trainer.enable_progress_bar", "false", "--trainer.logger", "false"]
    argv += [
        "--throughput.skip_steps",
        str(max(5, steps // 4)),
        "--throughput.path",
        str(root / "throughput.json"),
    ]
    launch(argv)
    row = json.loads((root / "throughput.json").read_text())
    row.update(profile=profile, augment_on=augment_on, checkpoint=str(root / "checkpoints" / "last.ckpt"))
    return row


def fit_rows(args: argparse.Namespace, device: torch.device) -> List[Dict[str, Any]]:
    """End-to-end ``drive fit`` against the model-only step of the same network, per profile."""
    from drive.train.hparams import checkpoint_hparams

    rows = []
    print(f"\nend to end: drive fit on {args.fit}, batch {args.batch} windows, {args.fit_steps} steps")
    print(f"{'profile':<9} {'augment on':<10} {'fit frames/s':>12} {'model-only':>11} {'ratio':>7}")
    with tempfile.TemporaryDirectory(prefix="bench-fit-") as tmp:
        for profile in args.profiles.split(","):
            model_only = None
            for augment_on in args.augment_on.split(","):
                row = bench_fit(profile, args.fit, augment_on, args.batch, args.fit_steps, device, Path(tmp))
                if model_only is None:
                    hp = checkpoint_hparams(row["checkpoint"])
                    model_only = bench_family(hp["family"], args.batch, args.seq, device, 3, args.iters, hp)
                row["model_only_frames_per_s"] = model_only["frames_per_s"]
                row["ratio"] = row["frames_per_s"] / model_only["frames_per_s"]
                rows.append(row)
                print(
                    f"{profile:<9} {augment_on:<10} {row['frames_per_s']:>12.0f} "
                    f"{row['model_only_frames_per_s']:>11.0f} {row['ratio']:>7.2f}"
                )
    return rows


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default=",".join(families()), help="comma-separated families")
    parser.add_argument("--batch", type=int, default=20, help="sequences per batch (paper: 20)")
    parser.add_argument("--seq", type=int, default=16, help="frames per sequence (paper: 16)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument(
        "--input-hw", type=_input_hw, default=None, help="network input H,W, e.g. 39,100 (the demo profile's)"
    )
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--logs", default="", help="recordings to time the data pipeline on (optional)")
    parser.add_argument("--fit", nargs="*", default=[], help="recordings for the end-to-end drive fit mode")
    parser.add_argument("--profiles", default=",".join(FIT_PROFILES), help="profiles of the --fit mode")
    parser.add_argument("--augment-on", default="workers,device", help="where --fit augments")
    parser.add_argument("--fit-steps", type=int, default=200, help="optimizer steps of each --fit run")
    parser.add_argument("--json", default="", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    rows: List[Dict[str, Any]] = []
    if args.fit:
        rows = fit_rows(args, device)
    else:
        rows = family_rows(args, device)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0


def _input_hw(text: str) -> List[int]:
    """``--input-hw H,W``: two positive integers (argparse names the argument on a bad value)."""
    try:
        hw = [int(v) for v in text.split(",")]
    except ValueError:
        hw = []
    if len(hw) != 2 or min(hw) < 1:
        raise argparse.ArgumentTypeError(f"expected two positive integers H,W, got {text!r}")
    return hw


def _hparams(family: str, args: argparse.Namespace) -> Optional[Dict[str, Any]]:
    """The family at ``--input-hw`` (None: at its default input size)."""
    return None if args.input_hw is None else {"family": family, "input_hw": args.input_hw}


def family_rows(args: argparse.Namespace, device: torch.device) -> List[Dict[str, Any]]:
    rows: List[Dict[str, Any]] = []
    print(f"device {device}, {torch.get_num_threads()} threads, batch {args.batch} x {args.seq} frames")
    print(
        f"{'family':<9} {'frames/s':>9} {'step ms':>9} {'head ms':>9} {'outside head':>13}"
        + (f" {'NCHW step ms':>13} {'speed-up':>9}" if device.type == "cpu" else "")
    )
    for family in args.families.split(","):
        row = bench_family(
            family.strip(),
            args.batch,
            args.seq,
            device,
            args.warmup,
            args.iters,
            _hparams(family.strip(), args),
            standardise_peer=True,
        )
        rows.append(row)
        print(
            f"{row['family']:<9} {row['frames_per_s']:>9.1f} {row['step_ms']:>9.1f} {row['head_ms']:>9.1f} "
            f"{100 * row['outside_head_share']:>12.1f}%"
            + (
                f" {row['nchw_step_ms']:>13.1f} {row['channels_last_speedup']:>8.2f}x"
                if "nchw_step_ms" in row
                else ""
            )
        )
    hw = args.input_hw or [78, 200]
    std = bench_standardise(args.batch * args.seq, hw, device, args.iters)
    print(
        f"standardisation of {args.batch * args.seq} frames at {hw[0]}x{hw[1]}: "
        f"{std['standardise_ms']:.2f} ms, one-pass Tensor.std {std['one_pass_ms']:.2f} ms: "
        f"{std['speedup']:.2f}x"
    )
    for row in rows:
        print(
            f"{row['family']:<9} step with the one-pass standardisation {row['one_pass_step_ms']:.1f} ms: "
            f"this step {row['standardise_step_speedup']:.2f}x faster"
        )
    if args.logs:
        data_s = bench_data(args.logs, args.batch, args.seq, args.iters)
        for row in rows:
            serial = row["step_ms"] / 1e3 + data_s
            row["data_ms"] = data_s * 1e3
            row["outside_head_share_with_data"] = (serial - row["head_ms"] / 1e3) / serial
            print(
                f"{row['family']:<9} data {data_s * 1e3:.1f} ms/batch; outside the head incl. data (serial): "
                f"{100 * row['outside_head_share_with_data']:.1f}%"
            )
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
