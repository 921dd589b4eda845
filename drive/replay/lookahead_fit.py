"""The corrected label's look-ahead, fitted to the logs it labels.

Viewpoint augmentation and on-policy rollouts show the policy a camera moved off a recorded frame and
label it with the recorded command plus a pure-pursuit correction back to the recorded path
(:func:`~drive.data.viewpoint.corrected_curvature`, look-ahead ``L = max(min_lookahead_m,
lookahead_s x speed)``). That correction stands in for the demonstrator's own response to being off
its path: its gain, ``2 / L^2`` per metre and ``2 / L`` per radian, should be the demonstrator's.

Logs with recoveries in them (DART noise, a human's corrections) show that gain. Their recorded
commands are the demonstrator's answers to states off its ideal line, so the recorded path is not the
line the commands steer to. A label whose look-ahead is longer than the demonstrator's under-corrects
there: **driven as a controller on the logs' own paths, it leaves them**, and a policy imitating such
labels inherits the drift.

:func:`fit_lookahead` therefore drives the labels themselves in log replay, without images: on every
reference path, every step, the command is the label for the car's pose. It returns the longest
look-ahead of :data:`CANDIDATES_S` whose labels keep every path within ``margin_m`` (0.8 m, inside the
safety driver's 1 m) and its heading rule. The gain is seen only where a longer look-ahead's labels
leave a path: where even the longest keeps them all (logs without recoveries, whose recorded commands
drive the recorded path; on sharp curves within 0.1-0.2 m, not exactly, as the car's steering rate lags
the command), the fit has no bound and :data:`UNIDENTIFIED_S` (0.71 s) is used. Where no candidate keeps
the paths (logs whose commands do not explain their own paths: a saturated steering, a path integrated
from noisy labels) the fit says so, naming where each candidate left which recording
(:attr:`LookaheadFit.kept_none`; ``drive fit`` warns), and uses :data:`UNIDENTIFIED_S` too: the short
side, which errs safe (erring long is what hurts). The rule is a worst case over the logs, so it errs
short where recoveries come near the margin, and more so on more logs. The measurements behind it:
docs/benchmarks.md, "The label look-ahead: why it is fitted".
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import List, Sequence, Tuple

from drive.data.viewpoint import corrected_curvature
from drive.replay.path import MIN_PATH_M
from drive.replay.world import LogWorld
from drive.sim.safety import SAFETY_DRIVER

__all__ = [
    "CANDIDATES_S",
    "UNIDENTIFIED_S",
    "LookaheadFit",
    "LookaheadTrial",
    "fit_lookahead",
    "track_with_labels",
]

CANDIDATES_S = (2.0, 1.68, 1.41, 1.19, 1.0, 0.84, 0.71, 0.59, 0.5)  # longest first, x0.84 apart
UNIDENTIFIED_S = 0.71  # the look-ahead of logs whose recoveries do not show the demonstrator's gain
MARGIN_M = 0.8  # the labels must keep the path this close (the safety driver takes over at 1 m)


@dataclass
class LookaheadTrial:
    """One look-ahead's labels driven on the paths: the largest distance from a path, the km driven
    (up to the first departure), and whether they kept every path."""

    lookahead_s: float
    max_offset_m: float
    km: float
    kept: bool
    left_at: str = ""  # where it left a path: "<recording> at <s> m"


@dataclass
class LookaheadFit:
    """The fitted look-ahead and the trials behind it (longest first, down to the one chosen)."""

    lookahead_s: float
    trials: List[LookaheadTrial]

    @property
    def kept_none(self) -> bool:
        """Whether no candidate kept every path (the look-ahead is then :data:`UNIDENTIFIED_S`)."""
        return bool(self.trials) and not any(t.kept for t in self.trials)

    @property
    def identified(self) -> bool:
        """Whether the logs show the demonstrator's gain (the longest look-ahead's labels left a path);
        without it the look-ahead is :data:`UNIDENTIFIED_S`."""
        return bool(self.trials) and not self.trials[0].kept

    def summary(self) -> str:
        if not self.trials:
            return (
                f"label look-ahead {self.lookahead_s:g} s: no reference path of {MIN_PATH_M:g} m to fit it on"
            )
        tried = ", ".join(
            f"{t.lookahead_s:g} s {'kept' if t.kept else 'left ' + t.left_at} (max {t.max_offset_m:.2f} m)"
            for t in self.trials
        )
        if self.kept_none:
            return (
                f"label look-ahead {self.lookahead_s:g} s: no candidate's labels keep the logs' own paths "
                f"({tried}), so the demonstrator's gain cannot be fitted; the short, safe default"
            )
        why = (
            "the longest whose labels keep the logs' own paths"
            if self.identified
            else "the logs show no recoveries (even the longest look-ahead's labels keep their paths), so "
            "the demonstrator's gain cannot be fitted; the default for such logs"
        )
        return f"label look-ahead {self.lookahead_s:g} s: {why} ({tried})"


def track_with_labels(
    world: LogWorld, lookahead_s: float, min_lookahead_m: float, margin_m: float = MARGIN_M
) -> Tuple[float, float, bool]:
    """Drive ``world`` to its path's end with the corrected label as the command; stop at the first
    step beyond ``margin_m`` or the safety driver's heading limit (``world.s_m`` is then where it left).
    Returns (max offset m, km driven, kept)."""
    rule = replace(SAFETY_DRIVER, max_lateral_m=margin_m)
    path, start, worst = world.path, world.s_m, 0.0
    while world.remaining_m > 1.0:
        pos = path.nearest_frame(world.s_m)
        _, left, yaw = world.camera_offset(pos)
        label = corrected_curvature(
            path.curvature_per_m[pos], left, yaw, path.speed_mps[pos], lookahead_s, min_lookahead_m
        )
        world.step(float(label))
        worst = max(worst, abs(world.lateral_offset_m))
        if rule.needs_takeover(world):
            return worst, (world.s_m - start) / 1000.0, False
    return worst, (world.s_m - start) / 1000.0, True


def fit_lookahead(
    worlds: Sequence[LogWorld],
    min_lookahead_m: float,
    candidates: Sequence[float] = CANDIDATES_S,
    margin_m: float = MARGIN_M,
) -> LookaheadFit:
    """The longest of ``candidates`` whose labels keep every one of ``worlds``, each driven from the
    start of its reference path (and left where it stopped). A look-ahead is dropped at its first
    departure, so only the chosen one drives all the paths; when none keeps them all,
    :data:`UNIDENTIFIED_S` is used (:attr:`LookaheadFit.kept_none`). Without a path nothing is tried, and
    logs whose paths the longest candidate keeps get :data:`UNIDENTIFIED_S` (nothing bounds the gain)."""
    if not worlds:
        return LookaheadFit(UNIDENTIFIED_S, [])
    trials: List[LookaheadTrial] = []
    for lookahead_s in sorted(candidates, reverse=True):
        worst, km, kept, left_at = 0.0, 0.0, True, ""
        for world in worlds:
            world.place_on_lane(0.0)
            w_max, w_km, kept = track_with_labels(world, lookahead_s, min_lookahead_m, margin_m)
            worst, km = max(worst, w_max), km + w_km
            if not kept:
                left_at = f"{world.path.recording} at {world.s_m:.0f} m"
                break
        trials.append(LookaheadTrial(float(lookahead_s), worst, km, kept, left_at))
        if kept:
            fit = LookaheadFit(float(lookahead_s), trials)
            return fit if fit.identified else LookaheadFit(UNIDENTIFIED_S, trials)
    return LookaheadFit(UNIDENTIFIED_S, trials)
