"""The corrected label's look-ahead fitted on the logs (drive.replay.lookahead_fit): on logs with DART
recoveries the labels of a look-ahead longer than the recording expert's leave the logs' own paths
and the fit lands near the expert's (0.9 s); on logs without recoveries nothing is identified and
the default for such logs (0.71 s, not the longest candidate: erring long is what hurts) is used.
Through drive fit, ``lookahead_s: fit`` reaches the augmentation and the checkpoint."""

from __future__ import annotations

import numpy as np
import pytest

from drive.data.augment import AugmentConfig, Augmenter
from drive.data.cache import cache_recordings
from drive.data.preprocess import Preprocessing
from drive.data.readers import read_logs
from drive.replay.cached import cached_paths, cached_world
from drive.replay.lookahead_fit import UNIDENTIFIED_S, fit_lookahead, track_with_labels
from drive.sim.expert import PurePursuitExpert
from drive.sim.record import simulate

SIZE = (39, 100)


def _worlds(root, noise_std: float, minutes: float = 2.0, roads: str = "easy"):
    kw = dict(seed=11, fps=10.0, noise_std=noise_std, recording_minutes=1.0, roads=roads)
    simulate(root / "logs", minutes=minutes, **kw)
    recs = cache_recordings(read_logs(str(root / "logs")), Preprocessing(size=SIZE), root / "cache")
    return [cached_world(r, p, 10.0, 0.0) for r in recs for p in cached_paths(r) if p.length_m > 30]


@pytest.fixture(scope="module")
def dart(tmp_path_factory):
    return _worlds(tmp_path_factory.mktemp("dart"), 0.015)


def test_on_logs_with_recoveries_long_labels_leave_the_path_and_the_fit_finds_the_expert(dart):
    expert = PurePursuitExpert()  # the recording expert: 0.9 s, at least 6 m
    two_s = [track_with_labels(w, 2.0, expert.min_lookahead_m, margin_m=1.0) for w in dart]
    assert not all(kept for _, _, kept in two_s)  # today's 2 s under-corrects: its labels leave a path
    for w in dart:
        w.place_on_lane(0.0)
    own = [track_with_labels(w, expert.lookahead_s, expert.min_lookahead_m, margin_m=1.0) for w in dart]
    assert all(kept for _, _, kept in own)  # the expert's own gain keeps them all

    fit = fit_lookahead(dart, expert.min_lookahead_m)
    assert fit.identified and fit.trials[0].lookahead_s == 2.0 and not fit.trials[0].kept
    assert 0.59 <= fit.lookahead_s <= 1.19  # the candidates next to the expert's 0.9 s
    assert fit.trials[-1].kept and all(not t.kept for t in fit.trials[:-1])
    assert "label look-ahead" in fit.summary()


def test_on_logs_without_recoveries_nothing_is_identified_and_a_short_default_is_used(tmp_path):
    fit = fit_lookahead(_worlds(tmp_path, 0.0), 5.0)
    assert fit.lookahead_s == UNIDENTIFIED_S == 0.71 and not fit.identified and len(fit.trials) == 1
    assert fit.trials[0].lookahead_s == 2.0 and fit.trials[0].kept
    assert fit.trials[0].max_offset_m < 0.05  # the recorded commands drive the recorded path
    assert "no recoveries" in fit.summary() and "0.71 s" in fit.summary()
    # on sharp curves the car's steering rate lags the clean command, so even clean labels drift a
    # little from their path (0.11 m here): still no recoveries, and no gain to fit (the longest keeps
    # them); taken for a fitted 2 s, the labels under-corrected and the policy left hard roads
    hard = fit_lookahead(_worlds(tmp_path / "hard", 0.0, minutes=1.0, roads="hard"), 5.0)
    assert hard.lookahead_s == UNIDENTIFIED_S and not hard.identified and len(hard.trials) == 1
    assert hard.trials[0].kept and hard.trials[0].max_offset_m > 0.05
    nothing = fit_lookahead([], 5.0)  # no path of 30 m: nothing tried
    assert (
        nothing.lookahead_s == UNIDENTIFIED_S
        and not nothing.trials
        and "no reference path" in nothing.summary()
    )


def test_lookahead_setting_is_a_positive_number_or_fit():
    assert AugmentConfig(lookahead_s="fit").lookahead_s == "fit"
    for bad in (0.0, -1.0, "auto", True):
        with pytest.raises(ValueError, match="lookahead_s"):
            AugmentConfig(lookahead_s=bad)
    unresolved = Augmenter(AugmentConfig(lookahead_s="fit", viewpoint_p=1.0))
    import torch

    camera = dict(fx=50.0, fy=50.0, cx=49.5, cy=19.0, height_m=1.5, pitch_rad=0.15)
    with pytest.raises(ValueError, match="fitted on the training logs by drive fit"):
        unresolved(
            torch.zeros(2, 3, *SIZE, dtype=torch.uint8),
            np.zeros(2),
            np.full(2, 8.0),
            np.random.default_rng(0),
            camera,
            np.eye(3),
        )


def test_when_no_look_ahead_keeps_the_paths_the_fit_says_where_each_left_and_takes_the_short_default(
    tmp_path,
):
    """Labels that do not explain their own paths (a fifth of the command: a steering that saturates, another
    simulator's expert) leave the paths at every look-ahead; the fit names the recording and the place
    each candidate left it and uses the short default instead of the one that drove farthest."""
    import csv

    simulate(tmp_path / "logs", minutes=1.0, seed=11, fps=10.0, noise_std=0.015, roads="hard")
    (log,) = (tmp_path / "logs").glob("*/log.csv")
    rows = list(csv.DictReader(log.open()))
    for row in rows:
        row["curvature"] = str(0.2 * float(row["curvature"]))
    with log.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    recs = cache_recordings(read_logs(str(tmp_path / "logs")), Preprocessing(size=SIZE), tmp_path / "cache")
    worlds = [cached_world(r, p, 10.0, 0.0) for r in recs for p in cached_paths(r) if p.length_m > 30]
    fit = fit_lookahead(worlds, 5.0)
    assert fit.kept_none and fit.lookahead_s == UNIDENTIFIED_S
    assert all(not t.kept and log.parent.name in t.left_at for t in fit.trials)
    assert "no candidate's labels keep the logs' own paths" in fit.summary()
    assert log.parent.name in fit.summary() and " m (max " in fit.summary()
