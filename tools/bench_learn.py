"""Does every family learn on data unlike the demo's? Validation MSE against the best constant predictor.

For each dataset of :data:`drive.train.learnability.DATASETS` (the built-in world with other cameras,
looks and speeds; plainly synthetic lane scenes with other exposure, colour, sharper curves and label
spikes) and each family, trains for ``--steps`` optimizer steps with the demo's recipe and prints the
stateful validation MSE, the best constant predictor's (the validation labels' variance) and their
ratio; a family "learns" at ratio <= 0.5 (issue 25). ``--paper`` also trains the paper's NCP-LTC
(``init default``, ``feature_norm none``) on each dataset, the peer the fix is measured against.

    python tools/bench_learn.py                                  # everything, 300 steps (long on a CPU)
    python tools/bench_learn.py --families ncp_ltc --paper --steps 200
    python tools/bench_learn.py --datasets synthetic_dark_sharp_spikes --families ncp_ltc,cfc,ctrnn,lstm,cnn

``--perturb EPS,...`` repeats each run with the head's standardised frames scaled by 1 + EPS (0 is
the run as it is): a change the size of another CPU's rounding, which moves a 150-step run as much as
another seed does. It prints how many of the runs learn, their median and their worst: a test that
trains one run must sit where every such run learns (docs/training.md, "Rounding").

    python tools/bench_learn.py --datasets world_high_narrow --families ctrnn --steps 150 --frames 480 \
        --perturb 0,1e-6,-1e-6,3e-6,-3e-6,1e-5,-1e-5,3e-5,1e-4,-1e-4

Datasets are written once under ``--root`` (default ``.cache/bench_learn``) and reused. The ``cnn``
family (PilotNet, VALID convolutions) needs at least 66 rows and trains at ``--cnn-hw``.
Exit status 1 when a family does not learn somewhere.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path
from typing import Iterator, List

import drive.nn.heads as heads
from drive.nn.registry import families
from drive.train.learnability import DATASETS, fit_and_score, make_dataset

FAMILIES = tuple(families())  # every registered family (drive.nn.registry)


@contextlib.contextmanager
def perturbed(eps: float) -> Iterator[None]:
    """The heads' standardised frames scaled by ``1 + eps`` while the block runs (0: unchanged)."""
    original = heads.standardize_frames
    if eps:
        heads.standardize_frames = lambda frames: original(frames) * (1.0 + eps)
    try:
        yield
    finally:
        heads.standardize_frames = original


def _floats(text: str) -> List[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values:  # an empty list would train nothing and report success
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")
    return values


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated: " + ", ".join(DATASETS))
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--steps", type=int, default=300, help="optimizer steps per model")
    p.add_argument(
        "--frames", type=int, default=800, help="training frames per dataset (validation: a quarter)"
    )
    p.add_argument("--hw", default="32x80", help="network input HxW of the NCP-head families")
    p.add_argument("--cnn-hw", default="66x100", help="network input HxW of the cnn family")
    p.add_argument("--batch", type=int, default=8, help="sequences of 16 frames per batch")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument(
        "--paper", action="store_true", help="also the paper's NCP-LTC: init default, feature_norm none"
    )
    p.add_argument("--root", default=".cache/bench_learn")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--perturb",
        type=_floats,
        default=[0.0],
        help="comma-separated relative changes of the standardised frames, one run each (default 0)",
    )
    args = p.parse_args(argv)
    datasets = [d for d in args.datasets.split(",") if d]
    families = [f for f in args.families.split(",") if f]
    for name in datasets:
        if name not in DATASETS:
            p.error(f"--datasets: unknown dataset {name!r}; choose from {', '.join(DATASETS)}")
    for fam in families:
        if fam not in FAMILIES:
            p.error(f"--families: unknown family {fam!r}; choose from {', '.join(FAMILIES)}")
    args.hw = tuple(int(v) for v in args.hw.split("x"))
    args.cnn_hw = tuple(int(v) for v in args.cnn_hw.split("x"))
    runs = [(fam, {}) for fam in families]
    if args.paper:
        runs.append(("ncp_ltc", {"init": "default", "feature_norm": "none"}))
    print(
        f"{'dataset':30s} {'model':22s} {'val MSE':>9s} {'constant':>9s} {'ratio':>6s} "
        f"{'learns':>6s} {'s':>5s}"
    )
    failures = 0
    for name in datasets:
        data = make_dataset(name, Path(args.root), n_train=args.frames, n_val=max(args.frames // 4, 64))
        for fam, kw in runs:
            ratios = _runs(name, data, fam, kw, args)
            failures += sum(r > 0.5 for r in ratios) if not kw else 0
    for name in datasets:
        print(f"{name}: {DATASETS[name].what}")
    return 1 if failures else 0


def _runs(name: str, data: Path, fam: str, kw: dict, args: argparse.Namespace) -> List[float]:
    """Train and score ``fam`` once per ``--perturb`` value; print each run; their ratios."""
    label = fam + (" (paper)" if kw else "")
    ratios = []
    for eps in args.perturb:
        start = time.perf_counter()
        with perturbed(eps):
            score = fit_and_score(
                fam,
                data,
                args.steps,
                model_hw=args.cnn_hw if fam == "cnn" else args.hw,
                batch_size=args.batch,
                lr=args.lr,
                seed=args.seed,
                cache_dir=Path(args.root) / "cache",
                **kw,
            )
        ratios.append(score.ratio)
        run = label + (f" eps {eps:+.0e}" if len(args.perturb) > 1 else "")
        print(
            f"{name:30s} {run:22s} {score.val_mse:9.1f} {score.best_constant:9.1f} {score.ratio:6.3f} "
            f"{'yes' if score.ratio <= 0.5 else 'NO':>6s} {time.perf_counter() - start:5.0f}",
            flush=True,
        )
        for w in score.warnings:
            print(f"    warning: {w}", flush=True)
    if len(ratios) > 1:
        learned = sum(r <= 0.5 for r in ratios)
        print(
            f"{name:30s} {label:22s} learns in {learned} of {len(ratios)} runs, "
            f"median {statistics.median(ratios):.3f}, worst {max(ratios):.3f}",
            flush=True,
        )
    return ratios


if __name__ == "__main__":
    sys.exit(main())
