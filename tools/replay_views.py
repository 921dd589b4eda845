"""Where does log replay differ from the true closed loop? Swap its views for the world's own.

In the built-in world the true view at any pose can be rendered, so log replay of a policy can be run
with the recorded frames re-rendered (as always), with the world's true view at the car's pose
instead, and with composites: re-rendered below the horizon and true above it, and the reverse. If
true views give the world's interventions, everything else replay does (reference path, kinematics,
interventions, resets) is right and the difference is in the views; the composites say which part
of the picture. Run on the proof's logs (``tools/bench_replay.py``'s, recorded if missing):

    python tools/replay_views.py runs/bench_onpolicy/runs/small-bc/checkpoints/last.ckpt

Diagnostic only: it swaps :meth:`drive.replay.world.LogWorld.render` for the run.
"""

from __future__ import annotations

import argparse
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import replay_proof as proof  # tools/replay_proof.py, beside this script
import torch

from drive.data.viewpoint import view_homographies
from drive.io.recording import Recording
from drive.policy_drivers import load_driver
from drive.replay import replay_recording
from drive.replay.world import LogWorld
from drive.sim.closed_loop import summarize
from drive.sim.poisson import format_rate
from drive.sim.record import record_logs
from drive.sim.render import Renderer

ROOT = Path(__file__).resolve().parents[1]
MODES = ("re-rendered", "true", "re-rendered ground, true sky", "true ground, re-rendered sky")


@contextmanager
def views(mode: str, log: Dict[str, Any]) -> Iterator[None]:
    """LogWorld shows ``mode``'s view of ``log``'s road while inside."""
    synthesized = LogWorld.render
    if mode == MODES[0]:
        yield
        return
    road, app = proof.log_scene(log)
    renderer, hint = Renderer(), [0.0]

    def render(world: LogWorld) -> np.ndarray:
        shown = synthesized(world)  # keeps the world's bookkeeping (frames shown, no-source share)
        st = world.vehicle.state
        hint[0] = road.lane_errors(st.x_m, st.y_m, st.yaw_rad, hint[0])[0]
        true = renderer.render(road, app, st.x_m, st.y_m, st.yaw_rad, hint[0])
        if mode == MODES[1]:
            return true
        forward, left, yaw = world.offset
        horizon = view_homographies(world.view.camera, left, yaw, forward)[2]
        below = (world.view._pixels @ horizon > 0)[..., None]
        return np.where(below, shown, true) if mode == MODES[2] else np.where(below, true, shown)

    LogWorld.render = render  # type: ignore[method-assign]
    try:
        yield
    finally:
        LogWorld.render = synthesized  # type: ignore[method-assign]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("policy", help="checkpoint or exported policy file")
    p.add_argument("--logs", default=str(ROOT / "runs" / "bench_replay" / "logs"))
    p.add_argument("--seeds", default="101,202,303")
    p.add_argument("--km", type=float, default=6.0)
    args = p.parse_args()
    torch.set_num_threads(1)
    logs = record_logs(Path(args.logs), [int(s) for s in args.seeds.split(",")], args.km, 0.5)
    driver = load_driver(args.policy)
    fps = 1.0 / driver.nominal_dt_s
    world: List[Any] = []
    for mode in MODES:
        segments = []
        for log in logs:
            with views(mode, log):
                replayed = replay_recording(Recording.open(log["path"]), driver, fps).segments
            segments += replayed
            if mode == MODES[0]:  # the true closed loop over the same distance of the same road
                world.append(proof.world_drive(driver, log, sum(s.km for s in replayed) * 1000.0, fps))
        r = summarize(segments)
        print(f"log replay, {mode:<30} {format_rate(r['interventions'], r['km'])}", flush=True)
    w = summarize(world)
    print(f"the world on the same roads{'':<17} {format_rate(w['interventions'], w['km'])}")


if __name__ == "__main__":
    main()
