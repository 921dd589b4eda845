"""``lookahead_s: fit`` (the default of ``data.augment``): the corrected label's look-ahead fitted on the
training logs before the first step (:func:`drive.replay.lookahead_fit.fit_lookahead`: the longest whose
labels, driven as a controller on the logs' own paths, keep them). :class:`~drive.train.module.PolicyModule`
resolves it in its ``fit`` set-up (:func:`resolve_lookahead`), before viewpoint augmentation or
on-policy rollouts use it; on-policy rollouts without augmentation fit it themselves
(:func:`fit_on_recordings`). A resumed run fits the same logs to the same value."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from drive.data.cache import CachedRecording, model_camera
from drive.replay.cached import cached_world, drivable_paths
from drive.replay.lookahead_fit import LookaheadFit, fit_lookahead

__all__ = ["fit_on_recordings", "resolve_lookahead"]


def fit_on_recordings(
    recordings: Sequence[CachedRecording], fps: float, min_lookahead_m: float
) -> LookaheadFit:
    """The fit on the reference paths of ``recordings`` that have camera calibration (the others'
    labels are never corrected) and a 30 m stretch; with none, ``UNIDENTIFIED_S``."""
    calibrated = [r for r in recordings if model_camera(r.info) is not None]
    worlds = [cached_world(calibrated[i], p, fps, 0.0) for i, p in drivable_paths(calibrated)]
    return fit_lookahead(worlds, min_lookahead_m)


def resolve_lookahead(datamodule: Any, fps: float) -> Optional[LookaheadFit]:
    """Replace ``datamodule.augment.lookahead_s == "fit"`` by the value fitted on its training
    recordings, in place (the training dataset shares the config). Returns the fit, or None where
    there was nothing to fit."""
    aug = getattr(datamodule, "augment", None)
    if aug is None or aug.lookahead_s != "fit":
        return None
    fit = fit_on_recordings(datamodule.datasets["train"].recordings, fps, aug.min_lookahead_m)
    aug.lookahead_s = fit.lookahead_s
    return fit
