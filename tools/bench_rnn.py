"""Benchmark drive's recurrent modules against ncps / torch equivalents, measured in the same run.

Usage: python tools/bench_rnn.py [--device cpu|cuda] [--threads 1] [--batch 16] [--length 32]

For each pair (drive LTC on an NCP of 19 neurons vs ncps LTC with the same wiring and weights;
wired CfC on AutoNCP(19, 1) vs ncps, both with ncps's semantics and with the whole wiring as drive
trains it; dense CfC 64 vs ncps; drive LSTM-64 vs torch nn.LSTM) it
prints the median time of a forward pass (no grad), a forward+backward pass (B x L x F inputs) and
a B=1 single step (eager, and scripted for drive), with the ratio ncps / drive (> 1: drive faster).
With ``--device cuda`` it first reports the LTC's sequence cost on the GPU against cuDNN:
forward+backward with the fused Triton kernels and with the TorchScript solver, vs
``torch.nn.LSTM(F, 64)``, at the given batch and at 256 (default rounds 5 there, so the whole run
fits a 10-minute device call).
"""

from __future__ import annotations

import argparse
import json
import warnings
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from ncps import wirings
from ncps.torch import LTC as NcpsLTC
from ncps.torch import CfC as NcpsCfC
from torch import nn

from drive.bench import interleaved_medians
from drive.nn import LSTM, WiredCfC, from_ncps

warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=DeprecationWarning)


def paired_median_ms(fns: Sequence[Callable[[], object]], rounds: int, device: torch.device) -> List[float]:
    """Median milliseconds per call of each function: every round times each in turn for about the
    same wall time (a block of calls, :func:`drive.bench.interleaved_medians`), so load
    on a shared machine hits all alike while each block measures the steady state of repeated calls,
    as in a training loop (alternating single calls would also charge the faster module for the
    caches the slower one evicts: dense CfC forward+backward ~10% slower that way)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    ms = interleaved_medians({str(i): fn for i, fn in enumerate(fns)}, rounds, 3, sync)
    return [ms[str(i)] for i in range(len(fns))]


class TorchLSTM(nn.Module):
    """torch nn.LSTM(F, 64) with a linear readout, ncps-style call signature."""

    def __init__(self, features: int, units: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, units, batch_first=True)
        self.readout = nn.Linear(units, 1)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        out, (h, _) = self.lstm(x)
        return self.readout(out), h


def pairs(features: int) -> List[Tuple[str, nn.Module, nn.Module, Callable]]:
    """(name, drive module, reference module, reference single-step function)."""
    torch.manual_seed(0)
    ncp = NcpsLTC(features, wirings.NCP(12, 6, 1, 6, 4, 6, 6))
    wired = NcpsCfC(features, wirings.AutoNCP(19, 1))
    dense = NcpsCfC(features, 64)
    ref_lstm = TorchLSTM(features, 64)

    def ltc_step(m: nn.Module, x: torch.Tensor, h: torch.Tensor) -> object:
        return m.rnn_cell(x, h, 1.0)

    def cfc_step(m: nn.Module, x: torch.Tensor, h: torch.Tensor) -> object:
        return m.rnn_cell(x, h, torch.ones(1, device=x.device))

    def lstm_step(m: nn.Module, x: torch.Tensor, h: torch.Tensor) -> object:
        return m.lstm(
            x.unsqueeze(1), (h[:, :64].unsqueeze(0).contiguous(), h[:, 64:].unsqueeze(0).contiguous())
        )

    wired_ncps = from_ncps(wired)  # ncps's semantics, for parity: no command->command synapses, no polarity
    faithful = WiredCfC(**{**wired_ncps.config(), "ncps_compatible": False})  # what drive trains
    return [
        ("LTC, NCP 19 neurons", from_ncps(ncp), ncp, ltc_step),
        ("CfC wired, AutoNCP(19,1), ncps semantics", wired_ncps, wired, cfc_step),
        ("CfC wired, AutoNCP(19,1), whole wiring", faithful, wired, cfc_step),
        ("CfC dense, 64 units", from_ncps(dense), dense, cfc_step),
        ("LSTM, 64 units", LSTM(features, 64, 1), ref_lstm, lstm_step),
    ]


def bench_pair(
    name: str,
    ours: nn.Module,
    ref: nn.Module,
    ref_step: Callable,
    args: argparse.Namespace,
    device: torch.device,
) -> Dict[str, object]:
    ours, ref = ours.to(device), ref.to(device)
    x = torch.randn(args.batch, args.length, args.features, device=device)
    scripted = torch.jit.script(ours)

    def fwd(m: nn.Module) -> Callable[[], object]:
        def run() -> object:
            with torch.no_grad():
                return m(x)

        return run

    def fwd_bwd(m: nn.Module) -> Callable[[], object]:
        def run() -> None:
            y = m(x)[0]
            y.sum().backward()

        return run

    x1 = torch.randn(1, args.features, device=device)
    dt1 = torch.ones(1, device=device)
    h_ours = ours.initial_state(1)
    h_ref = torch.zeros(1, h_ours.size(1) if name.startswith("LSTM") else ours.state_size, device=device)

    def step(fn: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            with torch.no_grad():
                return fn()

        return run

    r = args.rounds
    row: Dict[str, object] = {"model": name}
    row["fwd_ms"] = paired_median_ms([fwd(ours), fwd(ref)], r, device)
    row["fwd_bwd_ms"] = paired_median_ms([fwd_bwd(ours), fwd_bwd(ref)], r, device)
    ours_step, ref_step_ms, scripted_step = paired_median_ms(
        [
            step(lambda: ours.step(x1, h_ours, dt1)),
            step(lambda: ref_step(ref, x1, h_ref)),
            step(lambda: scripted.step(x1, h_ours, dt1)),
        ],
        r,
        device,
    )
    row["step_ms"] = [ours_step, ref_step_ms]
    row["step_scripted_ms"] = scripted_step
    return row


def gpu_ltc(args: argparse.Namespace, device: torch.device) -> List[Dict[str, object]]:
    """The LTC's sequence cost on the GPU against cuDNN: drive's LTC (NCP 19) forward+backward with
    the fused Triton kernels (the default on CUDA) and with the TorchScript solver (``DRIVE_TRITON=0``),
    against ``torch.nn.LSTM(F, 64)`` (cuDNN), at the given batch and at 256, in the same run."""
    import os

    from drive.nn.ltc.kernels import triton_available

    ncp = NcpsLTC(args.features, wirings.NCP(12, 6, 1, 6, 4, 6, 6))
    ours = from_ncps(ncp).to(device)
    lstm = nn.LSTM(args.features, 64, batch_first=True).to(device)
    out = []
    for batch in (args.batch, 256):
        x = torch.randn(batch, args.length, args.features, device=device)
        # the closures run inside this iteration (paired_median_ms); x is bound as a default anyway

        def ltc_fb(kernels: bool, x: torch.Tensor = x) -> Callable[[], None]:
            def run() -> None:
                os.environ["DRIVE_TRITON"] = "1" if kernels else "0"
                try:
                    ours(x)[0].sum().backward()
                finally:
                    os.environ.pop("DRIVE_TRITON", None)

            return run

        def ltc_f(x: torch.Tensor = x) -> None:
            with torch.no_grad():
                ours(x)

        def lstm_fb(x: torch.Tensor = x) -> None:
            lstm(x)[0].sum().backward()

        fns = [ltc_fb(True), ltc_fb(False), lstm_fb, ltc_f]
        kern, script_ms, lstm_ms, fwd = paired_median_ms(fns, args.rounds, device)
        out.append(
            {
                "batch": batch,
                "ltc_fwd_bwd_kernels_ms": kern,
                "ltc_fwd_bwd_torchscript_ms": script_ms,
                "lstm64_cudnn_fwd_bwd_ms": lstm_ms,
                "ltc_fwd_kernels_ms": fwd,
                "triton": triton_available(),
                "ltc_over_lstm": kern / lstm_ms,
                "torchscript_over_kernels": script_ms / kern,
            }
        )
    return out


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="interleaved rounds per measurement (median over rounds of the per-call time; "
        "default 15 on CPU, 5 on CUDA, where ncps's LTC alone takes ~0.2 s per call)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.rounds is None:
        args.rounds = 5 if device.type == "cuda" else 15
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but CUDA is not available")
    # on CUDA the ratios the GPU goals name come first (each row is printed as soon as it is measured)
    gpu = gpu_ltc(args, device) if device.type == "cuda" else []
    if not args.json:
        for g in gpu:
            print(
                f"GPU LTC (NCP 19) B={g['batch']} L={args.length}: forward+backward "
                f"{g['ltc_fwd_bwd_kernels_ms']:.2f} ms "
                f"with the fused kernels (triton {'yes' if g['triton'] else 'MISSING'}), "
                f"{g['ltc_fwd_bwd_torchscript_ms']:.2f} ms TorchScript solver "
                f"({g['torchscript_over_kernels']:.1f}x); cuDNN LSTM(64) "
                f"{g['lstm64_cudnn_fwd_bwd_ms']:.2f} ms: "
                f"LTC / LSTM = {g['ltc_over_lstm']:.2f}x (goal <= 2x); LTC forward "
                f"{g['ltc_fwd_kernels_ms']:.2f} ms",
                flush=True,
            )
    rows = [bench_pair(*p, args, device) for p in pairs(args.features)]
    if args.json:
        print(
            json.dumps(
                {"device": str(device), "threads": args.threads, "rows": rows, "gpu_ltc": gpu}, indent=2
            )
        )
        return
    print(
        f"device {device}, {args.threads} thread(s), B={args.batch}, L={args.length}, F={args.features}; "
        "median ms, drive | reference (ratio reference/drive)"
    )
    print("| model | forward | forward+backward | step B=1 eager | step B=1 drive scripted |")
    print("|---|---|---|---|---|")
    for r in rows:
        cells = []
        for key in ("fwd_ms", "fwd_bwd_ms", "step_ms"):
            ours, ref = r[key]
            cells.append(f"{ours:.2f} \\| {ref:.2f} ({ref / ours:.1f}x)")
        print(f"| {r['model']} | " + " | ".join(cells) + f" | {r['step_scripted_ms']:.3f} |")
    print(
        "references: ncps LTC (same wiring and weights), ncps CfC AutoNCP(19,1) (for the 'whole wiring' "
        "row drive also runs the command->command synapses and polarity ncps drops), ncps CfC dense 64, "
        "torch nn.LSTM"
    )


if __name__ == "__main__":
    main()
