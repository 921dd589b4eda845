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

Datasets are written once under ``--root`` (default ``.cache/bench_learn``) and reused. The ``cnn``
family (PilotNet, VALID convolutions) needs at least 66 rows and trains at ``--cnn-hw``.
Exit status 1 when a family does not learn somewhere.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from drive.nn.registry import families
from drive.train.learnability import DATASETS, fit_and_score, make_dataset

FAMILIES = tuple(families())  # every registered family (drive.nn.registry)


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
    args = p.parse_args(argv)
    datasets = [d for d in args.datasets.split(",") if d]
    families = [f for f in args.families.split(",") if f]
    for name in datasets:
        if name not in DATASETS:
            p.error(f"--datasets: unknown dataset {name!r}; choose from {', '.join(DATASETS)}")
    for fam in families:
        if fam not in FAMILIES:
            p.error(f"--families: unknown family {fam!r}; choose from {', '.join(FAMILIES)}")
    hw = tuple(int(v) for v in args.hw.split("x"))
    cnn_hw = tuple(int(v) for v in args.cnn_hw.split("x"))
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
            start = time.perf_counter()
            score = fit_and_score(
                fam,
                data,
                args.steps,
                model_hw=cnn_hw if fam == "cnn" else hw,
                batch_size=args.batch,
                lr=args.lr,
                seed=args.seed,
                cache_dir=Path(args.root) / "cache",
                **kw,
            )
            label = fam + (" (paper)" if kw else "")
            learns = score.ratio <= 0.5
            failures += (not learns) and not kw
            print(
                f"{name:30s} {label:22s} {score.val_mse:9.1f} {score.best_constant:9.1f} {score.ratio:6.3f} "
                f"{'yes' if learns else 'NO':>6s} {time.perf_counter() - start:5.0f}",
                flush=True,
            )
            for w in score.warnings:
                print(f"    warning: {w}", flush=True)
    for name in datasets:
        print(f"{name}: {DATASETS[name].what}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
