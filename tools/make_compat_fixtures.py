"""Write the on-disk compatibility fixtures under ``tests/fixtures/compat/`` (issue 23).

DO NOT REGENERATE THESE FILES AFTER A LAYOUT CHANGE. They pin the on-disk formats of the version
that wrote them (checkpoints name their recurrent class by Python module path, e.g.
``drive.nn.cfc.CfC``; TorchScript exports carry their code): ``tests/test_compat_fixtures.py``
proves that files written *before* a redesign still load, give the recorded outputs and drive.
Regenerating them after moving code would only prove that the new code reads its own files.
Regenerate only to add a format that did not exist before, and then only from a commit whose
layout is the one being pinned (say which in the commit message).

What it writes (everything small: network input 53x53, a few optimizer steps on tiny logs):

- ``<name>.ckpt``: ``drive fit`` (LightningCLI, :func:`drive.cli.fit.lightning_main`) runs of every
  family for ``STEPS`` optimizer steps -- ``ncp_ltc``, the CfC variants the ``cfc`` family
  configures (dense default / no_gate + mixed memory / pure; NCP-wired default + mixed memory,
  pure), ``lstm``, ``ctrnn``, ``cnn`` -- with the optimizer and scheduler states dropped (the
  loaders never read them; they would triple the size). Every other key is as written.
- ``ncp_ltc_closed_form.pt``: the ``ncp_ltc`` checkpoint converted by ``drive closed-form``'s
  :func:`drive.evaluate.closed_form_fidelity.closed_form_report` (exact method).
- ``<name>.ts``: TorchScript exports (``drive export``'s :func:`drive.export.export_policy`) of
  ``ncp_ltc`` and the wired CfC with mixed memory.

Size (about 5 MB): the NCP conv head has 71k parameters and PilotNet's fully connected layers 100k
whatever the input size, so a checkpoint cannot be much smaller than 0.3 MB (PilotNet 1.1 MB);
a TorchScript file carries its code (0.5 MB).
- ``inputs.npz``: the frames the references were computed on (uint8, camera size and network size).
- ``reference.npz`` / ``reference.json``: per file, the outputs of the public loaders on those
  frames (``load_policy`` -> ``Policy.forward`` and a ``Policy.step`` loop; ``load_exported`` ->
  ``step`` loop), with the torch version and CPU capability they were computed with.
- ``machine.json``: the fingerprint of the machine that computed them
  (``tools/machine_fingerprint.py``); ``DRIVE_COMPAT_BITWISE=1`` compares bitwise only there.

Run from the repository root (about two minutes on one core)::

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python tools/make_compat_fixtures.py [--out tests/fixtures/compat]

Two narrower modes change no reference:

- ``--fingerprint``: write ``machine.json`` for this machine, after checking that every file gives
  the stored references bitwise here (refused otherwise).
- ``--reexport``: re-export the ``.ts`` files from the fixture checkpoints with today's exporter,
  refused unless the new files give the stored references bitwise here; ``reference.json`` says
  when and why. Done once, on 2026-11-27: the exporter of 2026-11-25 wrote
  ``aten::_upsample_lanczos2d_aa`` into every file, and torch 2.11 lacks it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
for _path in (str(ROOT), str(ROOT / "tools")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

SIZE = (53, 53)  # smallest square PilotNet accepts (VALID convolutions); NCP head maps 7x7
STEPS = 3
FRAMES = 8  # frames per reference sequence
# name -> (config file, extra --model.* options)
CHECKPOINTS: Dict[str, List[str]] = {
    "ncp_ltc": ["ncp_ltc"],
    "cfc_default": ["cfc", "--model.cfc.units", "8"],
    "cfc_no_gate_mixed": [
        "cfc",
        "--model.cfc.units",
        "8",
        "--model.cfc.mode",
        "no_gate",
        "--model.cfc.mixed_memory",
        "true",
    ],
    "cfc_pure": ["cfc", "--model.cfc.units", "8", "--model.cfc.mode", "pure"],
    "cfc_wired_mixed": ["cfc", "--model.cfc.wired", "true", "--model.cfc.mixed_memory", "true"],
    "cfc_wired_pure": ["cfc", "--model.cfc.wired", "true", "--model.cfc.mode", "pure"],
    "lstm": ["lstm", "--model.lstm.units", "8"],
    "ctrnn": ["ctrnn", "--model.ctrnn.units", "8"],
    "cnn": ["cnn", "--data.batch_size", "16"],
}
CLOSED_FORM = "ncp_ltc_closed_form.pt"
EXPORTS = {"ncp_ltc.ts": "ncp_ltc.ckpt", "cfc_wired_mixed.ts": "cfc_wired_mixed.ckpt"}
DROPPED_KEYS = ("optimizer_states", "lr_schedulers")


def _fit(name: str, logs: Path, work: Path, out: Path) -> Path:
    """One ``drive fit`` run in a fresh process (the CLI as a user runs it), checkpoint trimmed."""
    config, *extra = CHECKPOINTS[name]
    root = work / name
    argv = [
        sys.executable,
        "-m",
        "drive.cli",
        "fit",
        "--config",
        config,
        "--config",
        "trainer/cpu",
        "--seed_everything",
        "7",
        "--model.input_hw",
        json.dumps(list(SIZE)),
        "--model.check_after_steps",
        "0",
        "--data.image_size",
        json.dumps(list(SIZE)),
        "--data.train",
        json.dumps(sorted(str(p) for p in (logs / "train").iterdir())),
        "--data.val",
        json.dumps(sorted(str(p) for p in (logs / "val").iterdir())),
        "--data.cache_dir",
        str(work / "cache"),
        "--data.num_workers",
        "0",
        "--trainer.default_root_dir",
        str(root),
        "--trainer.max_steps",
        str(STEPS),
        "--trainer.max_epochs",
        "-1",
        "--trainer.val_check_interval",
        str(STEPS),
        "--trainer.check_val_every_n_epoch",
        "null",
        "--trainer.num_sanity_val_steps",
        "0",
        "--trainer.logger",
        "false",
        "--trainer.enable_progress_bar",
        "false",
        "--last_checkpoint.every_n_train_steps",
        str(STEPS),
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    subprocess.run(argv, cwd=ROOT, env=env, check=True)
    ckpt = torch.load(root / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == STEPS, ckpt["global_step"]
    for key in DROPPED_KEYS:
        ckpt.pop(key, None)
    path = out / f"{name}.ckpt"
    torch.save(ckpt, path)
    return path


def reference_outputs(files: Dict[str, Path], inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """What the public loaders give on ``inputs`` for every fixture file (the test recomputes this).

    Checkpoints: ``load_policy`` then ``Policy.forward`` over the network-size frames (curvature
    [1, L] and the last hidden state) and a ``Policy.step`` loop over them (curvature per step);
    exports: ``load_exported`` then its ``step`` loop over the camera-size frames.
    """
    from drive.checkpoint import load_policy
    from drive.export.runtime import load_exported

    out: Dict[str, np.ndarray] = {}
    views = torch.from_numpy(inputs["views"]).permute(0, 3, 1, 2).float() / 255.0  # [L, 3, h, w]
    dts = torch.from_numpy(inputs["dt_s"])
    with torch.no_grad():
        for name, path in sorted(files.items()):
            if path.suffix == ".ts":
                policy = load_exported(path)
                hidden = policy.initial_state(1)
                steps = []
                for frame in inputs["frames"]:
                    curvature, hidden, status = policy.step(frame, hidden)
                    steps.append(torch.cat([curvature.reshape(-1), status.reshape(-1).float()]))
                out[f"{name}/step"] = torch.stack(steps).numpy()
                out[f"{name}/hidden"] = hidden.numpy()
                continue
            policy, meta = load_policy(path)
            curvature, hidden = policy(views.unsqueeze(0), None, dts.unsqueeze(0))
            out[f"{name}/forward"] = curvature.numpy()
            out[f"{name}/hidden"] = hidden.numpy()
            h = policy.initial_state(1)
            steps = []
            for view, dt in zip(views, dts):
                c, h = policy.step(view.unsqueeze(0), h, dt.reshape(1))
                steps.append(c)
            out[f"{name}/step"] = torch.cat(steps).numpy()
    return out


class _FrameGrabber:
    """A world driver that keeps the first ``FRAMES`` camera frames and steers straight."""

    name = "grabber"

    def __init__(self) -> None:
        self.frames: List[np.ndarray] = []

    def reset(self) -> None:
        pass

    def act(self, obs: Any) -> float:
        if len(self.frames) < FRAMES:
            self.frames.append(np.array(obs.image, copy=True))
        return 0.0


def make_inputs(seed: int = 0) -> Dict[str, np.ndarray]:
    """Camera frames of the built-in world (as a driver sees them), their network views, and dts."""
    from drive.data.preprocess import Preprocessing
    from drive.sim.closed_loop import evaluate

    grabber = _FrameGrabber()
    evaluate(grabber, km=0.02, seed=seed)
    frames = np.stack(grabber.frames[:FRAMES])
    views = Preprocessing(size=SIZE)(frames).permute(0, 2, 3, 1).numpy()
    dt_s = np.full(FRAMES, 0.1, np.float32)
    dt_s[3] = 0.2  # a dropped frame: the recurrent modules integrate 2 frame periods
    return {"frames": frames.astype(np.uint8), "views": views.astype(np.uint8), "dt_s": dt_s}


REEXPORT_NOTE = (
    "2026-11-27 (issue 32): the .ts files were re-exported from the fixture checkpoints with that day's "
    "exporter (tools/make_compat_fixtures.py --reexport). The exporter of 2026-11-25 wrote every resize "
    "mode of F.interpolate into a file, among them aten::_upsample_lanczos2d_aa, which torch 2.11 lacks, "
    "so they did not load there. The re-exported files gave the kept references bitwise on the machine "
    "in machine.json; the references were not recomputed."
)


def _bitwise_check(
    files: Dict[str, Path], inputs: Dict[str, np.ndarray], refs: Dict[str, np.ndarray]
) -> None:
    """Refuse (SystemExit) unless the files give the stored references bitwise on this machine."""
    now = reference_outputs(files, inputs)
    wrong = [k for k in now if k in refs and not np.array_equal(now[k], refs[k])]
    if wrong:
        raise SystemExit(
            f"the files do not give the stored references bitwise on this machine: {wrong}; "
            "nothing written (record the fingerprint on the machine that reproduces them)"
        )


def write_fingerprint(out: Path) -> Path:
    """``machine.json``: this machine's fingerprint (``tools/machine_fingerprint.py``), the machine on
    which ``DRIVE_COMPAT_BITWISE=1`` compares the references bitwise."""
    from machine_fingerprint import machine_fingerprint  # tools/ is on sys.path when run as a script

    path = out / "machine.json"
    path.write_text(json.dumps(machine_fingerprint(threads=1), indent=2) + "\n")
    return path


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "compat")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--only-references",
        action="store_true",
        help="recompute reference.npz from the files already there (never after a layout change)",
    )
    mode.add_argument(
        "--fingerprint",
        action="store_true",
        help="write machine.json for this machine, after checking the files give the stored references "
        "bitwise here (nothing else is written)",
    )
    mode.add_argument(
        "--reexport",
        action="store_true",
        help="re-export the .ts files from the fixture checkpoints with today's exporter, keeping the "
        "references: refused unless the new files give them bitwise here",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.fingerprint or args.reexport:
        inputs = dict(np.load(out / "inputs.npz"))
        refs = dict(np.load(out / "reference.npz"))
        if args.reexport:
            from drive.export import export_policy  # the tool's --help needs no drive import

            with tempfile.TemporaryDirectory() as tmp:
                fresh = {
                    ts: export_policy(out / src, Path(tmp) / ts, format="torchscript")
                    for ts, src in EXPORTS.items()
                }
                _bitwise_check(fresh, inputs, refs)
                for ts, path in fresh.items():
                    (out / ts).write_bytes(path.read_bytes())
            info = json.loads((out / "reference.json").read_text())
            info["exports"] = REEXPORT_NOTE
            (out / "reference.json").write_text(json.dumps(info, indent=2) + "\n")
            print(f"re-exported {', '.join(EXPORTS)}; references kept")
        files = {p.name: p for p in sorted(out.iterdir()) if p.suffix in (".ckpt", ".pt", ".ts")}
        _bitwise_check(files, inputs, refs)
        print(f"wrote {write_fingerprint(out)}")
        return 0
    if not args.only_references:
        from drive.evaluate.closed_form_fidelity import closed_form_report
        from drive.export import export_policy
        from drive.sim.record import simulate

        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            simulate(work / "logs" / "train", minutes=0.3, seed=3, fps=10.0, recording_minutes=0.15)
            simulate(work / "logs" / "val", minutes=0.1, seed=9, fps=10.0, recording_minutes=0.1)
            for name in CHECKPOINTS:
                _fit(name, work / "logs", work, out)
            closed_form_report(
                out / "ncp_ltc.ckpt",
                "exact",
                work / CLOSED_FORM,
                recordings=sorted((work / "logs" / "val").iterdir()),
                km=0.0,
                rounds=1,
            )
            ckpt = torch.load(work / CLOSED_FORM, map_location="cpu", weights_only=True)
            ckpt["drive"]["closed_form"]["source"] = "ncp_ltc.ckpt"  # not the temporary path
            torch.save(ckpt, out / CLOSED_FORM)
            for ts, src in EXPORTS.items():
                export_policy(out / src, out / ts, format="torchscript")
        np.savez_compressed(out / "inputs.npz", **make_inputs())
    inputs = dict(np.load(out / "inputs.npz"))
    files = {p.name: p for p in sorted(out.iterdir()) if p.suffix in (".ckpt", ".pt", ".ts")}
    refs = reference_outputs(files, inputs)
    np.savez(out / "reference.npz", **refs)
    info = {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": 1,
        "files": sorted(files),
        "note": "written by tools/make_compat_fixtures.py; do not regenerate after a layout change",
    }
    (out / "reference.json").write_text(json.dumps(info, indent=2) + "\n")
    write_fingerprint(out)
    total = sum(p.stat().st_size for p in out.iterdir())
    print(f"wrote {len(files)} policy files and references to {out} ({total / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
