"""Closed-form LTC vs the ODE LTC (fused solver, 6 unfolds): speed ratios and fidelity, one run.

    python tools/bench_closed_form.py                      # lane-keeping NCP, random LTC, 1 thread
    python tools/bench_closed_form.py --ckpt run.ckpt      # the LTC inside a trained policy
    python tools/bench_closed_form.py --device cuda --json out.json

Timings: forward at B=16, L=32 (32 features) and a batch-1 ``step`` in inference (no grad), eager
(the module as ``drive`` commands run a converted checkpoint) and frozen TorchScript (scripted, then
``torch.jit.freeze``, as every export runtime runs a policy: parameters and what derives from them
folded). Every round times each model once in turn (interleaved, so machine load
hits all alike); the median over rounds (``--statistic min``: the fastest, least-disturbed round, for a
heavily shared machine) is reported with the ratio ODE time / closed-form time.
Fidelity: output MSE and max error of each closed form against the ODE LTC on smooth random input
sequences (random walks, like consecutive camera features), in the module's output units (1/km for
a trained policy's LTC), and against the converged ODE (256 unfolds). ``exact/K`` rows: the exact
kernel with K substeps per step.
"""

from __future__ import annotations

import argparse
import copy
import json
import warnings
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from drive.bench import interleaved_medians
from drive.nn.closed_form import convert
from drive.nn.ltc import LTC
from drive.nn.wiring import lane_keeping_ncp


def smooth_inputs(batch: int, length: int, features: int, seed: int, device: torch.device) -> Tensor:
    """Random walks with unit-scale steps, squashed to about [-2, 2]: ``[B, L, F]``."""
    g = torch.Generator().manual_seed(seed)
    walk = torch.cumsum(torch.randn(batch, length, features, generator=g) * 0.3, dim=1)
    return (2.0 * torch.tanh(walk + torch.randn(batch, 1, features, generator=g))).to(device)


def fidelity(reference: Tensor, truth: Tensor, closed: nn.Module, x: Tensor) -> Dict[str, float]:
    """Output error of ``closed`` against the ODE LTC's outputs ``reference`` and the converged ODE
    ``truth``."""
    with torch.no_grad():
        y, _ = closed(x)
    err = y - reference
    return {
        "mse": float((err**2).mean()),
        "max_abs_err": float(err.abs().max()),
        "mse_vs_true_ode": float(((y - truth) ** 2).mean()),
    }


def frozen(module: nn.Module) -> torch.jit.ScriptModule:
    """Scripted and frozen, as the export runtimes run a policy (both calls warn that TorchScript is
    deprecated; silenced here)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.", category=FutureWarning)
        return torch.jit.freeze(torch.jit.script(module.eval()), preserved_attrs=["step", "initial_state"])


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--ckpt", help="policy checkpoint whose recurrent module is an LTC (default: random LTC)"
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument(
        "--statistic",
        default="median",
        choices=["median", "min"],
        help="per-model time over the interleaved rounds",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--substeps",
        type=int,
        nargs="*",
        default=[],
        help="also time/score exact conversions with these substeps per step (e.g. 2 6)",
    )
    parser.add_argument("--json", help="write the results here")
    return parser.parse_args()


def load_ltc(ckpt: Optional[str], device: torch.device) -> Tuple[LTC, str]:
    """The LTC inside a trained policy's checkpoint, else a random one on the lane-keeping NCP; and
    what it is, in words."""
    if ckpt:
        from drive.checkpoint import load_policy  # start-up time: only with --ckpt

        ltc = load_policy(ckpt)[0].rnn
        if not isinstance(ltc, LTC):
            raise SystemExit(f"{ckpt}: the recurrent module is {type(ltc).__name__}, not an LTC")
        return ltc.to(device).eval(), ckpt
    ltc = LTC(lane_keeping_ncp())
    return ltc.to(device).eval(), "random LTC on the lane-keeping NCP (19 neurons, 32 inputs)"


def time_models(
    models: Dict[str, nn.Module], args: argparse.Namespace, device: torch.device
) -> Dict[str, Dict[str, float]]:
    """Forward (B=16, L=32) and batch-1 step times of every model, eager and frozen, interleaved."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    x = smooth_inputs(16, 32, models["ode"].input_size, args.seed + 2, device)
    x1 = x[:1, 0]
    dt1 = torch.ones(1, device=device)
    results: Dict[str, Dict[str, float]] = {}
    with torch.no_grad():
        for mode in ("eager", "frozen"):
            mods = {k: (frozen(m) if mode == "frozen" else m) for k, m in models.items()}
            hidden = {k: m.initial_state(1) for k, m in mods.items()}
            fwd = interleaved_medians(
                {k: (lambda m=m: m(x)) for k, m in mods.items()}, args.rounds, 5, sync, args.statistic
            )
            step = interleaved_medians(
                {k: (lambda m=m, h=hidden[k]: m.step(x1, h, dt1)) for k, m in mods.items()},
                args.rounds,
                100,
                sync,
                args.statistic,
            )
            results[mode] = {
                f"{k}_{what}_ms": t[k] for k in mods for what, t in (("forward", fwd), ("step", step))
            }
    return results


def report_rows(
    results: Dict[str, Dict[str, float]], fid: Dict[str, Dict[str, float]], models: Dict[str, nn.Module]
) -> List[Dict[str, object]]:
    """Print the table, one row per model and mode, and return its rows."""
    print(
        f"{'model':<10}{'mode':<8}{'fwd B16 L32 ms':>16}{'x faster':>10}{'step B1 ms':>12}{'x faster':>10}"
        f"{'MSE vs ODE':>12}{'max |err|':>11}{'MSE vs true ODE':>17}"
    )
    rows: List[Dict[str, object]] = []
    for mode, r in results.items():
        for k in models:
            fr = r["ode_forward_ms"] / r[f"{k}_forward_ms"]
            sr = r["ode_step_ms"] / r[f"{k}_step_ms"]
            print(
                f"{k:<10}{mode:<8}{r[f'{k}_forward_ms']:>16.3f}{fr:>10.2f}{r[f'{k}_step_ms']:>12.4f}{sr:>10.2f}"
                f"{fid[k]['mse']:>12.3g}{fid[k]['max_abs_err']:>11.3g}{fid[k]['mse_vs_true_ode']:>17.3g}"
            )
            rows.append(
                {
                    "model": k,
                    "mode": mode,
                    "forward_ms": r[f"{k}_forward_ms"],
                    "forward_speedup": fr,
                    "step_ms": r[f"{k}_step_ms"],
                    "step_speedup": sr,
                    **fid[k],
                }
            )
    return rows


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    ltc, source = load_ltc(args.ckpt, device)
    models: Dict[str, nn.Module] = {
        "ode": ltc,
        "exact": convert(ltc, "exact"),
        "approx": convert(ltc, "approx"),
    }
    models.update({f"exact/{k}": convert(ltc, "exact", substeps=k) for k in args.substeps})

    x_fid = smooth_inputs(64, 200, ltc.input_size, args.seed + 1, device)
    with torch.no_grad():
        y_ode = ltc(x_fid)[0]
        fine = copy.deepcopy(ltc)
        fine.ode_unfolds = 256  # the fused solver converged: the ODE's own solution
        y_true = fine(x_fid)[0]
    fid = {k: fidelity(y_ode, y_true, m, x_fid) for k, m in models.items()}
    results = time_models(models, args, device)

    print(
        f"source: {source}; device {device}, {args.threads} thread(s), {args.statistic} of {args.rounds} "
        "interleaved rounds"
    )
    report: Dict[str, object] = {
        "source": source,
        "device": str(device),
        "threads": args.threads,
        "statistic": args.statistic,
        "rounds": args.rounds,
        "rows": report_rows(results, fid, models),
    }
    print(
        f"fidelity on 64 random-walk sequences of 200 steps (timespan 1): MSE against the ODE LTC "
        f"({ltc.ode_unfolds} unfolds) and against the true ODE (256 unfolds); ODE output variance "
        f"{float(y_ode.var()):.3g}"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)


if __name__ == "__main__":
    main()
