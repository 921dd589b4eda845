"""`drive data inspect` label statistics (range, single-frame spikes, values at a steering limit)
and per-folder names of folder + CSV recordings (issue 25)."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from drive.cli import main
from drive.data.cache import display_name
from drive.data.inspect import convert_logs, label_statistics
from drive.data.readers import read_logs


def _folder_log(folder: Path, curvature: np.ndarray) -> None:
    folder.mkdir(parents=True)
    rows = ["image,timestamp,curvature"]
    for i, k in enumerate(curvature):
        img = np.full((24, 32, 3), (i * 7) % 255, np.uint8)
        cv2.imwrite(str(folder / f"{i:04d}.jpg"), img)
        rows.append(f"{i:04d}.jpg,{i * 0.1:.1f},{k:.6f}")
    (folder / "labels.csv").write_text("\n".join(rows) + "\n")


def _labels(n: int = 120) -> np.ndarray:
    k = 0.03 * np.sin(np.arange(n) / 9.0)
    k[min(40, n - 1)] += 0.12  # a logger glitch: one frame
    k[k > 0.025] = 0.025  # a steering limit: the log clips at 0.025 1/m
    return k


def test_label_statistics_find_spikes_and_clipping_but_not_smooth_steering() -> None:
    smooth = 0.05 * np.sin(np.arange(400) / 4.0)  # fast but smooth steering: no spike, no limit
    s = label_statistics(smooth)
    assert s["spikes"]["count"] == 0 and s["at_limit"] == {}
    k = 0.03 * np.sin(np.arange(120) / 9.0)
    k[40] += 0.12
    k[90] -= 0.2
    s = label_statistics(k)
    assert s["spikes"]["frames"] == [40, 90]
    s = label_statistics(_labels())
    assert s["at_limit"]["max"]["value"] == pytest.approx(0.025) and s["at_limit"]["max"]["frames"] >= 10
    assert "min" not in s["at_limit"]
    assert s["min"] == pytest.approx(_labels().min()) and s["max"] == pytest.approx(0.025)


def test_inspect_reports_label_statistics(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _folder_log(tmp_path / "run_a", _labels())
    assert main(["data", "inspect", str(tmp_path / "run_a")]) == 0
    text = capsys.readouterr().out
    assert "1 single-frame spike(s) at frame(s) 40" in text
    assert "frame(s) at the maximum +0.0250 1/m" in text
    assert "best constant predictor MSE" in text
    assert main(["data", "inspect", str(tmp_path / "run_a"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    labels = report["recordings"][0]["labels"]
    assert labels["spikes"]["count"] == 1 and labels["at_limit"]["max"]["frames"] >= 10
    assert report["labels"]["spikes"] == 1 and report["labels"]["max"] == pytest.approx(0.025)


def test_folder_csv_recordings_are_named_after_their_folders(tmp_path: Path) -> None:
    _folder_log(tmp_path / "logs" / "monday", _labels(20))
    _folder_log(tmp_path / "logs" / "tuesday", _labels(20))
    recs = read_logs([str(tmp_path / "logs" / "monday"), str(tmp_path / "logs" / "tuesday")])
    assert sorted(display_name(r) for r in recs) == ["monday", "tuesday"]
    written = convert_logs(
        [str(tmp_path / "logs" / "monday"), str(tmp_path / "logs" / "tuesday")], str(tmp_path / "out")
    )
    assert sorted(p.name for p in written) == ["monday", "tuesday"]


@pytest.mark.parametrize("camera", [{"hfov_deg": 60.0, "height_m": 2.0, "pitch_rad": 0.2}, "approximate"])
def test_viewpoint_synthesis_on_a_log_without_calibration(tmp_path: Path, camera) -> None:
    from drive.data.augment import AugmentConfig
    from drive.data.datamodule import DriveDataModule

    _folder_log(tmp_path / "run", _labels(40))
    augment = AugmentConfig(
        viewpoint_p=1.0, photometric_p=0.0, shadow_p=0.0, blur_p=0.0, noise_p=0.0, jpeg_p=0.0, lookahead_s=2.0
    )
    kw = dict(
        train=[str(tmp_path / "run")],
        image_size=[24, 32],
        seq_len=8,
        stride=8,
        batch_size=2,
        num_workers=0,
        cache_dir=str(tmp_path / "cache"),
        val_split="none",
        augment=augment,
    )
    with pytest.raises(ValueError, match="camera calibration"):
        DriveDataModule(**kw).setup("fit")
    dm = DriveDataModule(**kw, reader={"camera": camera})
    dm.setup("fit")
    cal = dm.datasets["train"].recordings[0].info["camera"]
    hfov = 60.0 if isinstance(camera, dict) else 80.0
    assert cal["fx"] == pytest.approx(0.5 * 32 / np.tan(np.radians(hfov / 2)))  # at the log's 32x24 frames
    assert cal["cx"] == pytest.approx(15.5) and cal["cy"] == pytest.approx(11.5)
    item = dm.datasets["train"][0]
    assert item["frames"].shape == (8, 3, 24, 32)
    # the synthesized views come with corrected labels: not all equal to the log's
    assert not np.allclose(item["curvature"].numpy(), _labels(40)[:8], atol=1e-6)


def test_bad_camera_option_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _folder_log(tmp_path / "run", _labels(10))
    assert main(["data", "inspect", str(tmp_path / "run"), "--set", "camera={hfov_deg: 60, focal: 3}"]) == 2
    assert "unknown keys ['focal']" in capsys.readouterr().err


def test_a_cache_built_under_the_old_name_is_renamed(tmp_path: Path) -> None:
    import json as _json

    from drive.data.cache import cache_recordings
    from drive.data.preprocess import Preprocessing

    _folder_log(tmp_path / "logs" / "monday", _labels(12))
    recs = read_logs([str(tmp_path / "logs" / "monday")])
    (cached,) = cache_recordings(recs, Preprocessing(size=(24, 32)), tmp_path / "cache")
    index = next((tmp_path / "cache").glob("*/index.json"))
    info = _json.loads(index.read_text())
    info["name"] = "labels"  # what the cache held before recordings were named after their folder
    index.write_text(_json.dumps(info))
    (again,) = cache_recordings(recs, Preprocessing(size=(24, 32)), tmp_path / "cache")
    assert again.name == "monday" and _json.loads(index.read_text())["name"] == "monday"


def test_inspect_counts_sharp_places_not_frames(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Two right junction turns (one driven slowly: many frames, still one place), a left curve beyond
    1/20 m only, and a one-frame glitch beyond 1/7 m that is no place."""
    k = np.zeros(200)
    k[20:60] = -0.18  # a slow right turn: 40 frames
    k[100:104] = -0.16  # a quick one: 4 frames
    k[130:150] = 0.07  # a left curve
    k[180] = 0.2  # a glitch
    _folder_log(tmp_path / "run", k)
    assert main(["data", "inspect", str(tmp_path / "run"), "--quick", "--json"]) == 0
    places = json.loads(capsys.readouterr().out)["labels"]["sharp_places"]
    assert [(p["left"], p["right"]) for p in places] == [(1, 2), (0, 2), (0, 2)]
    assert places[0]["share"] == pytest.approx(65 / 200)  # every frame beyond 1/20 m, the glitch too
    assert main(["data", "inspect", str(tmp_path / "run"), "--quick"]) == 0
    assert "1/7 m: 0 left, 2 right (22.5 %)" in capsys.readouterr().out
