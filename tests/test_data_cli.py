"""`drive data inspect|convert` on real logs, and the DataModule's skip summary and determinism."""

import json

import cv2
import numpy as np
import torch

from drive.cli import main
from drive.data.augment import AugmentConfig
from drive.data.datamodule import DriveDataModule
from drive.data.readers import read_logs


def _udacity(root, n=20, bad_row=None):
    (root / "IMG").mkdir(parents=True)
    rows = []
    for i in range(n):
        name = f"center_2016_12_01_13_30_{48 + i // 10:02d}_{100 * (i % 10):03d}.jpg"
        cv2.imwrite(str(root / "IMG" / name), np.full((160, 320, 3), 5 * i, np.uint8))
        steer = "nan" if i == bad_row else f"{0.01 * i}"
        rows.append(f"D:\\sim\\IMG\\{name},D:\\sim\\IMG\\l.jpg,D:\\sim\\IMG\\r.jpg,{steer},0.3,0,25.0")
    (root / "driving_log.csv").write_text("\n".join(rows) + "\n")


def test_inspect_reports_counts_timing_and_problem_rows_as_json(tmp_path, capsys):
    _udacity(tmp_path / "run1", bad_row=7)
    assert main(["data", "inspect", str(tmp_path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["logs"] == [{"path": str(tmp_path / "run1"), "format": "udacity_sim"}]
    (rec,) = report["recordings"]
    assert rec["frames"] == 19 and rec["decodable_frames"] == 19 and rec["size"] == [320, 160]
    assert abs(rec["fps"] - 10.0) < 1e-3
    assert report["problems"] == [
        {
            "file": str(tmp_path / "run1" / "driving_log.csv"),
            "row": 8,
            "kind": "non_finite_label",
            "message": "curvature is nan",
        }
    ]


def test_convert_writes_canonical_recordings_that_read_back_identically(tmp_path, capsys):
    _udacity(tmp_path / "run1")
    assert main(["data", "convert", str(tmp_path / "run1"), "--out", str(tmp_path / "out")]) == 0
    (orig,) = read_logs(str(tmp_path / "run1"))
    (conv,) = read_logs(str(tmp_path / "out"))
    assert conv.meta.source == orig.meta.source and len(conv) == 20
    for key in ("timestamp_s", "curvature", "speed_mps"):
        np.testing.assert_allclose(conv.log[key], orig.log[key])
    assert np.abs(conv.frame(9).astype(int) - orig.frame(9).astype(int)).max() <= 2  # JPEG re-encode


def test_convert_refuses_bad_rows_unless_skipping(tmp_path, capsys):
    _udacity(tmp_path / "run1", bad_row=3)
    assert main(["data", "convert", str(tmp_path / "run1"), "--out", str(tmp_path / "o")]) == 2
    captured = capsys.readouterr()
    assert (
        "drive data: error: " in captured.err and "driving_log.csv, row 4: curvature is nan" in captured.err
    )
    assert captured.out == ""
    assert not (tmp_path / "o").exists()
    assert (
        main(["data", "convert", str(tmp_path / "run1"), "--out", str(tmp_path / "o"), "--on-error", "skip"])
        == 0
    )
    assert len(read_logs(str(tmp_path / "o"))[0]) == 19


def test_datamodule_skip_prints_summary_and_trains_on_clean_windows_only(tmp_path, capsys):
    _udacity(tmp_path / "run1", n=40, bad_row=20)
    dm = DriveDataModule(
        train=[str(tmp_path)],
        cache_dir=str(tmp_path / "c"),
        on_error="skip",
        num_workers=0,
        seq_len=8,
        stride=1,
        val_split="none",
    )
    dm.prepare_data()
    dm.setup("fit")
    assert "skipped 1 bad item(s): 1 non_finite_label" in capsys.readouterr().err
    starts = [w.start for w in dm.datasets["train"].windows]
    # 39 frames remain; the dropped row leaves a 0.2 s step (2 x median): still one segment
    assert starts == list(range(0, 32))


def test_augmented_batches_are_reproducible_with_workers(tmp_path):
    _udacity(tmp_path / "run1", n=40)
    cam = {"fx": 277.0, "fy": 277.0, "cx": 159.5, "cy": 79.5, "height_m": 1.4, "pitch_rad": 0.05}

    def first_batch():
        dm = DriveDataModule(
            train=[str(tmp_path)],
            cache_dir=str(tmp_path / "c"),
            num_workers=2,
            seq_len=8,
            batch_size=4,
            reader={"camera": cam},
            augment=AugmentConfig(viewpoint_p=1.0, lookahead_s=2.0),
            val_split="none",
            seed=5,
        )
        dm.prepare_data()
        dm.setup("fit")
        return next(iter(dm.train_dataloader()))

    torch.manual_seed(0)
    a = first_batch()
    torch.manual_seed(0)
    b = first_batch()
    assert torch.equal(a["frames"], b["frames"]) and torch.equal(a["curvature"], b["curvature"])


def test_inspect_plot_draws_one_panel_per_recording(tmp_path, capsys):
    import matplotlib.image

    _udacity(tmp_path / "run1")
    _udacity(tmp_path / "run2")
    out = tmp_path / "labels.png"
    assert main(["data", "inspect", str(tmp_path), "--quick", "--plot", str(out)]) == 0
    image = matplotlib.image.imread(str(out))
    assert image.shape[0] > 1.5 * 242  # two panels of 2.2 in at 110 dpi
    assert "- run1-center (udacity_sim:" in capsys.readouterr().out


def test_reader_options_from_a_data_config_and_set(tmp_path, capsys):
    for i in range(3):
        cv2.imwrite(str(tmp_path / f"{i}.jpg"), np.full((8, 8, 3), 10 * i, np.uint8))
    (tmp_path / "log.csv").write_text(
        "image,time_ms,wheel\n" + "".join(f"{i}.jpg,{100 * i},{3.0 * i}\n" for i in range(3))
    )
    config = tmp_path / "data.yaml"
    config.write_text(
        "data:\n  reader:\n    timestamp_column: time_ms\n    time_unit: ms\n    steering_column: wheel\n"
    )
    assert main(["data", "inspect", str(tmp_path), "--json", "--reader", str(config)]) == 2  # unit not named
    captured = capsys.readouterr()
    assert "drive data: error: " in captured.err and "ambiguous" in captured.err and captured.out == ""
    assert main(["data", "inspect", str(tmp_path), "--reader", str(config), "--set", "label"]) == 2
    assert "drive data: error: --set expects KEY=VALUE, got 'label'" in capsys.readouterr().err
    assert (
        main(
            [
                "data",
                "inspect",
                str(tmp_path),
                "--json",
                "--reader",
                str(config),
                "--set",
                "label={unit: wheel_deg, wheelbase_m: 2.0}",
            ]
        )
        == 0
    )
    (rec,) = json.loads(capsys.readouterr().out)["recordings"]
    assert abs(rec["curvature_per_m"]["max"] - np.tan(np.radians(6.0)) / 2.0) < 1e-12
    assert abs(rec["duration_s"] - 0.2) < 1e-12


def test_inspect_of_something_that_is_not_a_log_fails_and_says_what_is_recognised(tmp_path):
    """`drive data inspect` used to report success (exit 0, "0 log(s)") on a text file, an empty
    folder or a recording's meta.json: now one line on stderr naming the path, that no driving
    log was found and the layouts that are recognised, exit 2."""
    import subprocess
    import sys
    from pathlib import Path

    from drive.io.recording import RecordingMeta, RecordingWriter

    notes = tmp_path / "notes.txt"
    notes.write_text("not a driving log\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    only_text = tmp_path / "only_text"
    only_text.mkdir()
    (only_text / "readme.md").write_text("hello\n")
    rec = tmp_path / "rec"
    with RecordingWriter(rec, RecordingMeta(fps=10.0, width=32, height=24)) as w:
        for i in range(3):
            w.append(
                np.full((24, 32, 3), 40 + i, np.uint8), timestamp_s=i / 10.0, curvature=0.0, speed_mps=5.0
            )
    root = str(Path(__file__).resolve().parents[1])
    for target, extra in [
        (notes, ""),
        (empty, "the folder is empty"),
        (only_text, ""),
        (rec / "meta.json", f"part of the canonical log {rec}"),
    ]:
        out = subprocess.run(
            [sys.executable, "-m", "drive.cli", "data", "inspect", str(target)],
            capture_output=True,
            text=True,
            cwd=root,
            env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"},
            timeout=120,
        )
        assert out.returncode == 2, (target, out.stdout, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
        assert lines[0].startswith(f"drive data: error: {target}: no driving log found")
        assert "recognised layouts: canonical: a folder with meta.json and log.csv" in lines[0]
        assert "udacity_sim: driving_log.csv" in lines[0] and lines[0].endswith("[no_logs]")
        assert extra in lines[0]
        assert out.stdout == ""
    # the recording itself still inspects fine
    assert main(["data", "inspect", str(rec), "--quick"]) == 0
