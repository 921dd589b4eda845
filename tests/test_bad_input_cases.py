"""Issue 44, "Bad input, round 2": each case a user met, on real files, answered the house way: one
line on stderr naming the file, row or option, exit status 2, nothing half-written or written over.
(``drive fit``'s cases are in test_bad_input_fit.py; a real full disk in test_full_disk.py.)"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Dict

import numpy as np
import pytest
from bad_input_util import edit_csv, folder_log, one_line, run_cli, snapshot, tiny_recordings

from drive.cli import main
from drive.data.errors import DataError
from drive.io.recording import CameraCalibration, RecordingError, RecordingMeta, RecordingWriter

CAMERA = "camera={hfov_deg: 80, height_m: 1.5, pitch_rad: 0.15}"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Dict[str, Path]:
    """Two tiny recordings of the world (48x16, 10 Hz, 6 s), the first also as a folder + CSV log."""
    d = tmp_path_factory.mktemp("bad-input")
    recs = tiny_recordings(d / "logs", minutes=0.1, seed=1) + tiny_recordings(
        d / "logs2", minutes=0.1, seed=2
    )
    return {"dir": d, "rec": recs[0], "rec2": recs[1], "folder": folder_log(recs[0], d / "folder")}


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _err(capsys) -> str:
    return capsys.readouterr().err


# -- 1: a recording with nothing to drive ------------------------------------------------------
def test_evaluate_logs_names_and_skips_recordings_with_nothing_to_drive(world, tmp_path, capsys) -> None:
    """A recording standing still (speed 0 in every row) or of a single row ended a run over good
    ones with "need at least one array to concatenate"; now each is named in the report, with why."""
    logs = tmp_path / "logs"
    good = _copy(world["rec"], logs / "good")
    still = _copy(world["rec"], logs / "still")
    for row in range(60):
        edit_csv(still / "log.csv", row, "speed_mps", "0")
    single = _copy(world["rec"], logs / "single")
    lines = (single / "log.csv").read_text().splitlines()
    (single / "log.csv").write_text("\n".join(lines[:2]) + "\n")
    for frame in sorted((single / "frames").iterdir())[1:]:
        frame.unlink()
    out = tmp_path / "out"
    assert (
        main(["evaluate", "--logs", str(logs), "--policy", "expert", "--out", str(out), "--workers", "1"])
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    skipped = {Path(s["name"]).name: s["reason"] for s in metrics["skipped"]}
    assert skipped == {
        "single": "nothing to drive: 1 row",
        "still": "nothing to drive: the car stands still (speed_mps is 0 in every row)",
    }
    assert metrics["recordings"] == 1 and metrics["per_recording"][0]["name"] == str(good)
    report = (out / "REPORT.md").read_text()
    assert f"{still} (nothing to drive: the car stands still" in report and f"{single} (nothing" in report
    assert f"{still}: skipped, nothing to drive" in capsys.readouterr().out
    # only such recordings: refused, naming each, and nothing written
    shutil.rmtree(good)
    assert main(["evaluate", "--logs", str(logs), "--policy", "expert", "--out", str(tmp_path / "o2")]) == 2
    one_line(_err(capsys), "evaluate", "no recording has a drivable stretch", f"{still}: nothing to drive")
    assert not (tmp_path / "o2").exists()


def test_a_bad_log_in_a_worker_process_is_named_not_a_broken_pool(world, tmp_path, capsys) -> None:
    """DataError did not survive the trip back from a worker process (its four arguments): two
    logs over two workers, one damaged, ended in BrokenProcessPool and a traceback."""
    err = DataError("a.csv", 3, "kind", "what")
    assert str(pickle.loads(pickle.dumps(err))) == str(err)
    bad = _copy(world["rec"], tmp_path / "logs" / "bad")
    _copy(world["rec2"], tmp_path / "logs" / "good")
    (bad / "log.csv").write_text("\n".join((bad / "log.csv").read_text().splitlines()[:3]) + "\n")
    argv = ["evaluate", "--logs", str(tmp_path / "logs"), "--policy", "expert", "--workers", "2"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    one_line(_err(capsys), "evaluate", f"{bad / 'log.csv'}: 2 log rows but 60 frames", "[count_mismatch]")
    assert not (tmp_path / "out").exists()


# -- 2, 3, 5: reader options -------------------------------------------------------------------
def _reader_command(command: str, world, tmp_path) -> list:
    if command == "evaluate":
        return [
            "evaluate",
            "--logs",
            str(world["folder"]),
            "--policy",
            "expert",
            "--out",
            str(tmp_path / "o"),
        ]
    if command == "convert":
        return ["data", "convert", str(world["folder"]), "--out", str(tmp_path / "o")]
    return ["data", "inspect", str(world["folder"])]


@pytest.mark.parametrize("command", ["evaluate", "inspect", "convert"])
def test_broken_yaml_in_set_or_reader_is_one_line_naming_the_option(command, world, tmp_path, capsys) -> None:
    """A missing brace printed a 50-60 line YAML traceback and exit status 1."""
    argv = _reader_command(command, world, tmp_path)
    name = "evaluate" if command == "evaluate" else "data"
    assert main([*argv, "--set", "camera={hfov_deg: 80, height_m: 1.5"]) == 2
    one_line(_err(capsys), name, "--set camera: not valid YAML", "(line 1, column 29)")
    broken = tmp_path / "reader.yaml"
    broken.write_text("label: {unit: normalized\nfps: 10\n")
    assert main([*argv, "--reader", str(broken)]) == 2
    one_line(_err(capsys), name, f"--reader {broken}: not valid YAML", "line 2")
    twice = tmp_path / "twice.yaml"
    twice.write_text("fps: 10\nfps: 20\n")
    assert main([*argv, "--reader", str(twice)]) == 2
    one_line(_err(capsys), name, "key 'fps' is given twice (line 2, column 1)")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "value, must",
    [
        (
            "camera={hfov_deg: abc, height_m: 1.5, pitch_rad: 0.1}",
            "--set camera: reader option camera: hfov_deg must be a number, got 'abc'",
        ),
        ("camera={fx: 40, fy: 40, cx: 24, cy: x, height_m: 1.5}", "cy must be a number, got 'x'"),
        ("fps=ten", "--set fps: reader option fps must be a number, got 'ten'"),
        ("speed_mps=-3", "reader option speed_mps must be in (0, 100], got -3"),
        ("label={unit: normalized, max_angle_deg: abc}", "label max_angle_deg must be a number, got 'abc'"),
        ("label=5", "reader option label must be a mapping"),
        ("image_column=[1]", "reader option image_column must be a text, got [1]"),
        ("side_cameras=maybe", "side_cameras must be true or false, got 'maybe'"),
    ],
)
def test_a_non_number_where_a_number_belongs_names_the_option(value, must, world, tmp_path, capsys) -> None:
    """`could not convert string to float: 'abc'` named no option."""
    assert main([*_reader_command("evaluate", world, tmp_path), "--set", value]) == 2
    one_line(_err(capsys), "evaluate", must)


@pytest.mark.parametrize(
    "content, kind", [("- a\n- b\n", "a YAML list"), ("hello\n", "a YAML str"), ("", "empty")]
)
def test_a_reader_file_that_is_not_a_mapping_is_refused(content, kind, world, tmp_path, capsys) -> None:
    """A --reader file holding a list or a scalar was silently ignored (exit 0)."""
    reader = tmp_path / "reader.yaml"
    reader.write_text(content)
    assert main([*_reader_command("inspect", world, tmp_path), "--reader", str(reader)]) == 2
    one_line(
        _err(capsys), "data", f"--reader {reader}: the file is {kind}; expected a mapping of reader options"
    )


# -- 4: calibrations -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "camera, must",
    [
        ("{hfov_deg: 80, height_m: 1.5, pitch_rad: .nan}", "pitch_rad must be a finite number, got nan"),
        ("{hfov_deg: 80, height_m: .inf, pitch_rad: 0.1}", "height_m must be a finite number, got inf"),
        ("{hfov_deg: 80, height_m: -1.5, pitch_rad: 0.1}", "height_m must be in (0, 100], got -1.5"),
        ("{hfov_deg: 80, height_m: 1.5, pitch_rad: 2.0}", "pitch_rad must be in (-1.5708, 1.5708), got 2.0"),
        ("{hfov_deg: 200, height_m: 1.5, pitch_rad: 0.1}", "hfov_deg must be in [1, 179), got 200"),
        ("{fx: 40, fy: .nan, cx: 24, cy: 8, height_m: 1.5, pitch_rad: 0.1}", "fy must be a finite number"),
        ("{fx: 1.0e+300, fy: 40, cx: 24, cy: 8}", "fx must be in (0, 1e+06], got 1e+300"),
    ],
)
def test_a_non_finite_or_absurd_calibration_is_refused_before_anything_is_written(
    camera, must, world, tmp_path, capsys
) -> None:
    """`pitch_rad: .nan` drove (8 interventions, exit 0) and `data convert` wrote NaN into meta.json."""
    for command in ("evaluate", "convert"):
        argv = _reader_command(command, world, tmp_path)
        assert main([*argv, "--set", f"camera={camera}"]) == 2
        one_line(
            _err(capsys), "evaluate" if command == "evaluate" else "data", "reader option camera: " + must
        )
        assert not (tmp_path / "o").exists()


def test_a_meta_json_with_a_nan_calibration_is_a_problem_of_that_file(world, tmp_path, capsys) -> None:
    """`data inspect` found no problem in a recording whose meta.json says NaN; nothing writes one."""
    rec = _copy(world["rec"], tmp_path / "rec")
    meta = json.loads((rec / "meta.json").read_text())
    meta["camera"]["pitch_rad"] = float("nan")
    (rec / "meta.json").write_text(json.dumps(meta))
    assert main(["data", "inspect", str(rec), "--quick"]) == 1
    out = capsys.readouterr().out
    assert f"{rec / 'meta.json'}: camera calibration: pitch_rad must be a finite number, got nan" in out
    with pytest.raises(RecordingError, match="pitch_rad must be a finite number"):
        CameraCalibration(fx=40.0, fy=40.0, cx=24.0, cy=8.0, pitch_rad=float("nan"))
    meta = RecordingMeta(fps=10.0, width=4, height=2, extra={"gain": float("inf")})
    with pytest.raises(RecordingError, match="meta.json would hold a number that is not finite"):
        with RecordingWriter(tmp_path / "w", meta) as w:
            w.append(np.zeros((2, 4, 3), np.uint8), timestamp_s=0.0, curvature=0.0, speed_mps=1.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec"]


# -- 7: convert after a bad frame ------------------------------------------------------------
@pytest.mark.parametrize("damage", ["truncated", "wrong_size"])
def test_convert_after_a_bad_frame_leaves_no_out_folder(damage, world, tmp_path, capsys) -> None:
    log = _copy(world["folder"], tmp_path / "log")
    frame = log / "000010.jpg"
    if damage == "truncated":
        frame.write_bytes(frame.read_bytes()[:200])
    else:
        import cv2  # only this case writes an image of another size

        cv2.imwrite(str(frame), np.zeros((30, 70, 3), np.uint8))
    out = tmp_path / "out"
    assert main(["data", "convert", str(log), "--out", str(out)]) == 2
    one_line(_err(capsys), "data", f"{log / 'labels.csv'}, row 12: ", "000010.jpg")
    assert not out.exists()
    # skipping: the bad frame dropped and counted, the rest converted
    assert main(["data", "convert", str(log), "--out", str(out), "--on-error", "skip"]) == 0
    assert "skipped 1 bad item(s)" in capsys.readouterr().out
    assert len((out / "log").joinpath("log.csv").read_text().splitlines()) == 60  # header + 59 rows


# -- 8: bytes that are not UTF-8 -------------------------------------------------------------
def test_a_non_utf8_byte_names_the_file_and_row(world, tmp_path, capsys) -> None:
    """`'utf-8' codec can't decode byte 0xff in position 2553` named no file."""
    log = _copy(world["folder"], tmp_path / "log")
    lines = (log / "labels.csv").read_bytes().split(b"\n")
    lines[5] = lines[5].replace(b",", b"\xff,", 1)
    (log / "labels.csv").write_bytes(b"\n".join(lines))
    assert main(["data", "convert", str(log), "--out", str(tmp_path / "o")]) == 2
    one_line(_err(capsys), "data", f"{log / 'labels.csv'}, row 6: byte 0xff is not UTF-8 text", "[not_utf8]")
    assert main(["data", "inspect", str(log), "--quick"]) == 1
    assert f"{log / 'labels.csv'}, row 6: byte 0xff is not UTF-8 text" in capsys.readouterr().out
    rec = _copy(world["rec"], tmp_path / "rec")
    (rec / "log.csv").write_bytes((rec / "log.csv").read_bytes().replace(b"\n5,", b"\n5\xfe,", 1))
    assert main(["evaluate", "--logs", str(rec), "--policy", "expert", "--out", str(tmp_path / "o")]) == 2
    one_line(_err(capsys), "evaluate", f"{rec / 'log.csv'}, row 7: byte 0xfe is not UTF-8 text")
    reader = tmp_path / "reader.yaml"
    reader.write_bytes(b"fps: 10\n# caf\xe9\n")
    assert main(["data", "inspect", str(log), "--reader", str(reader)]) == 2
    one_line(_err(capsys), "data", f"--reader {reader}, line 2: byte 0xe9 is not UTF-8 text")
    assert not (tmp_path / "o").exists()


# -- 11: --debug ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "--logs", "{missing}", "--policy", "expert", "--out", "{tmp}/o"],
        ["data", "inspect", "{missing}"],
        ["data", "convert", "{missing}", "--out", "{tmp}/o"],
        ["simulate", "--out", "{tmp}/o", "--minutes", "-1"],
    ],
)
def test_debug_shows_the_traceback_for_every_command(argv, tmp_path) -> None:
    """`--debug` and `DRIVE_DEBUG=1` showed no traceback for `evaluate --logs` and `data`."""
    argv = [a.format(tmp=tmp_path, missing=tmp_path / "missing") for a in argv]
    with pytest.raises((FileNotFoundError, ValueError)):
        main([*argv, "--debug"])
    done = run_cli(*argv, env={"DRIVE_DEBUG": "1"})
    assert done.returncode == 1 and "Traceback (most recent call last)" in done.stderr, done.stderr[-2000:]


# -- 12: never write over an input -----------------------------------------------------------
def test_convert_never_writes_over_its_own_logs(world, tmp_path, capsys) -> None:
    """`drive data convert LOGS --out LOGS --overwrite` replaced the user's log with its conversion."""
    logs = tmp_path / "logs"
    log = _copy(world["folder"], logs / "log")
    before = snapshot(tmp_path)
    (tmp_path / "link").symlink_to(logs)
    for out, relation in [
        (log, "is the input"),
        (logs, "contains the input"),
        (log / "converted", "lies inside the input"),
        (tmp_path / "link" / "log", "is the input"),
    ]:
        assert main(["data", "convert", str(log), "--out", str(out), "--overwrite"]) == 2
        one_line(_err(capsys), "data", f"--out {out}: {relation} --logs {log}")
    assert (
        main(["evaluate", "--logs", str(log), "--set", CAMERA, "--policy", "expert", "--out", str(log)]) == 2
    )
    one_line(_err(capsys), "evaluate", f"--out {log}: is the input --logs {log}")
    (tmp_path / "link").unlink()
    assert snapshot(tmp_path) == before


def test_export_never_writes_over_its_checkpoint(tmp_path, capsys) -> None:
    """The same for a file: `export --ckpt a.ckpt --out a.ckpt --format torchscript` replaced the
    checkpoint with the exported file (then failed to read it back)."""
    ckpt = tmp_path / "policy.ckpt"
    ckpt.write_bytes(b"not read: the output is refused first")
    assert main(["export", "--ckpt", str(ckpt), "--out", str(ckpt), "--format", "torchscript"]) == 2
    one_line(_err(capsys), "export", f"--out {ckpt}: is the input --ckpt {ckpt}")
    assert ckpt.read_bytes() == b"not read: the output is refused first"


# -- 13: messages ----------------------------------------------------------------------------
def test_row_messages_say_plain_numbers_and_what_the_text_was(world, tmp_path, capsys) -> None:
    log = _copy(world["folder"], tmp_path / "log")
    edit_csv(log / "labels.csv", 3, "timestamp", "abc")
    edit_csv(log / "labels.csv", 8, "timestamp", "0.5")
    assert main(["data", "inspect", str(log), "--quick"]) == 1
    out = capsys.readouterr().out
    csv = log / "labels.csv"
    assert f"{csv}, row 5: timestamp = 'abc' is not a number [not_a_number]" in out
    assert f"{csv}, row 10: timestamp 0.5 s is not after the previous 0.7 s [non_monotonic_timestamp]" in out
    assert "np.float" not in out and "timestamp_s is nan" not in out


def test_a_column_named_twice_is_refused(world, tmp_path, capsys) -> None:
    """A CSV with `curvature` twice was "no problems found" (the last one silently won)."""
    log = _copy(world["folder"], tmp_path / "log")
    text = (log / "labels.csv").read_text().splitlines()
    (log / "labels.csv").write_text(
        "\n".join([text[0] + ",curvature"] + [t + ",0.5" for t in text[1:]]) + "\n"
    )
    assert main(["data", "inspect", str(log), "--quick"]) == 2
    one_line(_err(capsys), "data", "row 1: column 'curvature' appears twice in the header (fields 3 and 5)")
    rec = _copy(world["rec"], tmp_path / "rec")
    text = (rec / "log.csv").read_text().splitlines()
    (rec / "log.csv").write_text("\n".join([text[0] + ",speed_mps"] + [t + ",0" for t in text[1:]]) + "\n")
    assert main(["data", "inspect", str(rec), "--quick"]) == 1
    assert "column(s) ['speed_mps'] appear twice in the header" in capsys.readouterr().out


def test_a_recording_without_meta_json_says_so(world, tmp_path, capsys) -> None:
    """It was read as a folder + CSV log: `60 label rows but 0 images`."""
    rec = _copy(world["rec"], tmp_path / "rec")
    (rec / "meta.json").unlink()
    assert main(["data", "convert", str(rec), "--out", str(tmp_path / "o")]) == 2
    one_line(_err(capsys), "data", f"{rec / 'meta.json'}: missing (is {rec} a drive recording?)")


@pytest.mark.parametrize("command", ["evaluate", "convert"])
def test_an_output_that_is_a_file_is_named_as_such(command, world, tmp_path, capsys) -> None:
    """`convert --out FILE` named its internal `.partial-NNNN` folder, `evaluate --out FILE` said
    only `File exists`."""
    out = tmp_path / "notes.txt"
    out.write_text("mine\n")
    if command == "evaluate":
        argv = ["evaluate", "--policy", "expert", "--km", "0.01"]
    else:
        argv = ["data", "convert", str(world["rec"])]
    assert main([*argv, "--out", str(out)]) == 2
    line = one_line(_err(capsys), argv[0], f"--out {out}: is a file; give a folder")
    assert ".partial" not in line and out.read_text() == "mine\n"


def test_a_video_name_opencv_cannot_write_is_refused_before_anything_is_read(world, tmp_path, capsys) -> None:
    """`drive saliency --out v.txt` failed only when OpenCV would not open the writer, after the
    checkpoint had loaded; now the name is refused first (the checkpoint here does not even exist)."""
    argv = ["saliency", "--ckpt", str(tmp_path / "none.ckpt"), "--recording", str(world["rec"])]
    assert main([*argv, "--out", str(tmp_path / "v.txt")]) == 2
    one_line(
        _err(capsys), "saliency", f"--out {tmp_path / 'v.txt'}: a video cannot be written as .txt", ".mp4"
    )
    assert sorted(tmp_path.iterdir()) == []


def test_the_expert_does_not_hide_a_damaged_frame(world, tmp_path, capsys) -> None:
    """The expert never decodes frames, so a truncated JPEG passed `evaluate --logs`: every frame
    is decoded once whatever drives."""
    rec = _copy(world["rec"], tmp_path / "rec")
    jpeg = rec / "frames" / "000005.jpg"
    jpeg.write_bytes(jpeg.read_bytes()[:150])
    for policy in ("expert", "constant:0"):
        assert main(["evaluate", "--logs", str(rec), "--policy", policy, "--out", str(tmp_path / "o")]) == 2
        one_line(_err(capsys), "evaluate", f"{rec / 'log.csv'}, row 7: {jpeg}: not a readable image")
    assert not (tmp_path / "o").exists()


# -- 6, 7: outputs together or not at all ------------------------------------------------------
def test_outputs_of_a_failed_command_appear_none_of_them(tmp_path) -> None:
    """What `drive evaluate`, `simulate` and `data convert` write lands together when the command
    ends well, or not at all: on a full disk `evaluate` left metrics.json (written before the plot
    that failed), `simulate` the recordings before the one that failed."""
    from drive.io.atomic import all_or_nothing, commit, write_text

    write_text(tmp_path / "old.txt", "previous\n")
    with pytest.raises(OSError, match="disk full"):
        with all_or_nothing():
            write_text(tmp_path / "metrics.json", "{}\n")
            write_text(tmp_path / "old.txt", "replaced\n")
            assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["old.txt"]
            raise OSError(28, "disk full")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.txt"]  # no temporary either
    assert (tmp_path / "old.txt").read_text() == "previous\n"
    with all_or_nothing():  # a folder committed with outputs waiting inside it takes them along
        staging = tmp_path / ".videos.partial"
        staging.mkdir()
        (staging / ".a.tmp").write_text("video")
        commit(staging / ".a.tmp", staging / "a.mp4")
        commit(staging, tmp_path / "videos")
        write_text(tmp_path / "metrics.json", "{}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json", "old.txt", "videos"]
    assert [p.name for p in (tmp_path / "videos").iterdir()] == ["a.mp4"]


@pytest.mark.parametrize("argv", [["export", "--ckpt", "{ckpt}", "--format", "torchscript"], ["simulate"]])
def test_an_output_that_is_a_device_or_empty_is_refused(argv, tmp_path, capsys) -> None:
    """`export --out /dev/null` renamed its temporary onto the device (as root: /dev/null replaced)."""
    ckpt = tmp_path / "policy.ckpt"
    ckpt.write_bytes(b"not read")
    argv = [a.format(ckpt=ckpt) for a in argv]
    assert main([*argv, "--out", "/dev/null"]) == 2
    one_line(_err(capsys), argv[0], "--out /dev/null: is not a regular file or folder")
    assert Path("/dev/null").is_char_device()
    assert main([*argv, "--out", ""]) == 2  # export's --out is a Path: "" is "."
    one_line(_err(capsys), argv[0], "--out .: is a folder" if argv[0] == "export" else "--out: an empty path")


@pytest.mark.parametrize("k, must", [("1e9", "in [-1, 1], got '1e9'"), ("nan", "a finite number, got 'nan'")])
def test_a_constant_policy_is_a_curvature_a_car_can_steer(k, must, tmp_path, capsys) -> None:
    """`--policy constant:1e9` drove (a 1 nm radius)."""
    assert main(["evaluate", "--policy", f"constant:{k}", "--km", "0.01", "--out", str(tmp_path / "o")]) == 2
    one_line(
        _err(capsys), "evaluate", "--policy constant:K needs a number K (curvature in 1/m): K must be", must
    )
    assert not (tmp_path / "o").exists()
