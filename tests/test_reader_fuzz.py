"""Fuzzing the readers with a seeded generator (numpy's; no extra dependency): damaged CSV label
tables, damaged canonical recordings (log.csv and meta.json), reader options given as YAML, camera
calibrations, Donkeycar tubs and dave2 logs, each run through the library entry points the commands
use (``read_logs`` as ``drive data convert`` and ``drive fit`` read, ``inspect_logs`` as ``drive data
inspect`` does, and ``drive.cli.reader_args.reader_options`` for ``--reader`` / ``--set``),
in-process.

Every case must end in a recordings list (a skip counted as a problem where skipping is on, a
damaged row never silently kept) or in the one-line input error of the project, a ``ValueError`` or
``OSError`` whose message is one line naming the file or the option -- never another exception,
and within a bounded time. 380 cases: 120 label tables, 60 recordings, 60 option sets, 60
calibrations, 40 Donkeycar tubs and 40 dave2 logs (a few seconds in all).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import cv2
import numpy as np
import pytest

from drive.cli.reader_args import reader_options
from drive.data.inspect import inspect_logs
from drive.data.readers import read_logs
from drive.io.recording import CameraCalibration, RecordingMeta, RecordingWriter

# numpy's warnings (an overflow, a NaN from a damaged row) would print beside the one error line
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")
SEED = 44
N_TABLES, N_RECORDINGS, N_OPTIONS, N_CAMERAS, N_LINE_LOGS = 120, 60, 60, 60, 40
ROWS = 12
CASE_SECONDS = 2.0  # the most one case may take
BAD_VALUES = [
    "nan", "NaN", "inf", "-inf", "1e308", "1e400", "-1e300", "-1", "-0", "", " ", "abc", "0x1F", "1,5",
    '"', "None", "true", "\x00", "9" * 400, "1e-320",
]  # fmt: skip
YAML_VALUES = [
    "1.5", "0.1", "80", "10", "s", "mps", "approximate", "timestamp",
    ".nan", ".inf", "-.inf", "1e400", "-5", "0", "1.0e+300", "abc", "''", "null", "true", "[1, 2]", "{a: 1}",
    "{", "[", "'", "- x", ": :", "\t", "@x", "!!python/object:os.system ls", "&a [*a]", "0x1F", "1_000",
]  # fmt: skip
OPTION_KEYS = [
    "label", "image_column", "timestamp_column", "steering_column", "speed_column", "time_unit", "speed_unit",
    "speed_mps", "fps", "camera", "side_cameras", "side_offset", "csv", "video_start_s", "stamp", "no_such",
]  # fmt: skip
CAMERA_KEYS = [
    "fx", "fy", "cx", "cy", "height_m", "pitch_rad", "yaw_rad", "roll_rad", "lateral_m", "forward_m",
    "hfov_deg", "vfov_deg", "bogus",
]  # fmt: skip


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Dict[str, Path]:
    """Twelve 8x8 JPEGs, their label table, and a canonical recording of the same."""
    d = tmp_path_factory.mktemp("fuzz")
    images = d / "images"
    images.mkdir()
    rows = []
    for i in range(ROWS):
        path = images / f"{i:03d}.jpg"
        cv2.imwrite(str(path), np.full((8, 8, 3), 20 * i, np.uint8))
        rows.append([str(path), f"{0.1 * i:.1f}", f"{0.001 * i:.4f}", "8.0"])
    table = [["image", "timestamp", "curvature", "speed"], *rows]
    camera = CameraCalibration(fx=4.0, fy=4.0, cx=3.5, cy=3.5, height_m=1.5, pitch_rad=0.1)
    with RecordingWriter(d / "rec", RecordingMeta(fps=10.0, width=8, height=8, camera=camera)) as w:
        for i in range(ROWS):
            w.append(np.full((8, 8, 3), 20 * i, np.uint8), timestamp_s=0.1 * i, curvature=0.0, speed_mps=8.0)
    good = d / "good"
    good.mkdir()
    (good / "labels.csv").write_text(_csv(table))
    return {"dir": d, "images": images, "table": table, "rec": d / "rec", "good": good}


def _csv(table: List[List[str]]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(table)
    return out.getvalue()


# -- damage -----------------------------------------------------------------------------------
def _bad_cell(rng, t: List[List[str]]) -> None:
    row, col = int(rng.integers(1, len(t))), int(rng.integers(0, len(t[0])))
    t[row][col] = BAD_VALUES[int(rng.integers(len(BAD_VALUES)))]


def _dup_column(rng, t: List[List[str]]) -> None:
    col = int(rng.integers(0, len(t[0])))
    for r in t:
        r.append(r[col])


def _drop_column(rng, t: List[List[str]]) -> None:
    col = int(rng.integers(0, len(t[0])))
    for r in t:
        del r[col]


def _reorder(rng, t: List[List[str]]) -> None:
    body = t[1:]
    rng.shuffle(body)
    t[1:] = body


def _dup_row(rng, t: List[List[str]]) -> None:
    row = int(rng.integers(1, len(t)))
    t.insert(row, list(t[row]))


def _extra_field(rng, t: List[List[str]]) -> None:
    t[int(rng.integers(1, len(t)))].append("x")


def _no_header(rng, t: List[List[str]]) -> None:
    del t[0]


TABLE_DAMAGE: List[Callable] = [
    _bad_cell,
    _bad_cell,
    _bad_cell,
    _dup_column,
    _drop_column,
    _reorder,
    _dup_row,
]
TABLE_DAMAGE += [_extra_field, _no_header]


def _bytes_damage(rng, data: bytes) -> bytes:
    """Random bytes inserted, the file cut short, bytes that are not UTF-8, a BOM, CRLF, or emptied."""
    kind = int(rng.integers(6))
    at = int(rng.integers(0, len(data) + 1))
    if kind == 0:
        return data[:at] + rng.bytes(int(rng.integers(1, 8))) + data[at:]
    if kind == 1:
        return data[:at]
    if kind == 2:
        return data[:at] + b"\xff\xfe" + data[at:]
    if kind == 3:
        return b"\xef\xbb\xbf" + data.replace(b"\n", b"\r\n")
    if kind == 4:
        return b""
    return data


def _damaged_table(rng, table: List[List[str]]) -> bytes:
    t = [list(r) for r in table]
    for _ in range(int(rng.integers(1, 4))):
        if len(t) > 1 and len(t[0]) > 1:
            TABLE_DAMAGE[int(rng.integers(len(TABLE_DAMAGE)))](rng, t)
    data = _csv(t).encode("utf-8", "surrogateescape")
    return _bytes_damage(rng, data) if rng.random() < 0.4 else data


def _damaged_meta(rng, meta: dict) -> bytes:
    m = json.loads(json.dumps(meta))
    for _ in range(int(rng.integers(1, 3))):
        section = m["camera"] if rng.random() < 0.5 else m
        key = list(section)[int(rng.integers(len(section)))]
        choice = int(rng.integers(4))
        if choice == 0:
            del section[key]
        else:
            section[key] = [float("nan"), float("inf"), -1e300, 1e300, -1, "abc", None, [1], {}, True][
                int(rng.integers(10))
            ]
    return _bytes_damage(rng, json.dumps(m).encode()) if rng.random() < 0.3 else json.dumps(m).encode()


# -- what every case must end in ---------------------------------------------------------------
def _outcome(run: Callable[[], object], names: Tuple[str, ...]) -> str:
    """Run one case: "ok", or "refused" for the project's one-line error naming one of ``names``;
    anything else fails the test, as does a case slower than CASE_SECONDS."""
    start = time.perf_counter()
    try:
        run()
        outcome = "ok"
    except (ValueError, OSError) as e:  # the input errors drive.cli reports in one line
        message = str(e)
        assert not isinstance(e, UnicodeDecodeError), message
        assert "\n" not in message and any(n in message for n in names), (type(e).__name__, message)
        assert "[Errno" not in message and "Traceback" not in message, message  # words, not a raw error
        outcome = "refused"
    assert time.perf_counter() - start < CASE_SECONDS
    return outcome


def _check_case(folder: Path) -> Dict[str, str]:
    """A damaged log read as ``convert`` and ``fit`` read (raise) and as ``inspect`` does (skip)."""
    names = (str(folder),)
    recs: List[object] = []
    out = {"raise": _outcome(lambda: recs.extend(read_logs([str(folder)])), names)}
    for rec in recs:  # what is read is clean: finite, plausible, in time order
        log = rec.log
        assert all(np.isfinite(log[k]).all() for k in ("timestamp_s", "curvature", "speed_mps"))
        assert (np.diff(log["timestamp_s"]) > 0).all() and (np.abs(log["curvature"]) <= 10).all()
    report: Dict[str, object] = {}

    def inspect() -> None:
        report.update(inspect_logs([str(folder)], decode=True))

    out["skip"] = _outcome(inspect, names)
    if out["raise"] == "refused" and out["skip"] == "ok":  # skipping: the damage is counted
        assert report["problems"] and sum(report["problem_counts"].values()) == len(report["problems"])
    return out


def test_damaged_label_tables(base, tmp_path) -> None:
    rng = np.random.default_rng(SEED)
    seen = set()
    for i in range(N_TABLES):
        folder = tmp_path / f"t{i:03d}"
        folder.mkdir()
        (folder / "labels.csv").write_bytes(_damaged_table(rng, base["table"]))
        seen.update(_check_case(folder).values())
    assert seen == {"ok", "refused"}  # the generator reaches both ends


def test_damaged_recordings(base, tmp_path) -> None:
    rng = np.random.default_rng(SEED + 1)
    table = list(csv.reader(io.StringIO((base["rec"] / "log.csv").read_text())))
    meta = json.loads((base["rec"] / "meta.json").read_text())
    seen = set()
    for i in range(N_RECORDINGS):
        folder = tmp_path / f"r{i:03d}"
        (folder / "frames").mkdir(parents=True)
        for frame in (base["rec"] / "frames").iterdir():
            (folder / "frames" / frame.name).symlink_to(frame)
        damage_meta = rng.random() < 0.4
        (folder / "log.csv").write_bytes(
            _damaged_table(rng, table) if not damage_meta else _csv(table).encode()
        )
        (folder / "meta.json").write_bytes(
            _damaged_meta(rng, meta) if damage_meta else json.dumps(meta).encode()
        )
        seen.update(_check_case(folder).values())
    assert seen == {"ok", "refused"}


def _yaml_value(rng, keys: List[str], depth: int = 0) -> str:
    if depth < 2 and rng.random() < 0.3:
        picked = [keys[int(rng.integers(len(keys)))] for _ in range(int(rng.integers(0, 4)))]
        return "{" + ", ".join(f"{k}: {_yaml_value(rng, keys, depth + 1)}" for k in picked) + "}"
    return YAML_VALUES[int(rng.integers(len(YAML_VALUES)))]


def _options_case(base, rng, tmp: Path, sets: List[str]) -> str:
    reader = None
    if rng.random() < 0.3:
        reader = tmp / "reader.yaml"
        reader.write_bytes(_bytes_damage(rng, "\n".join(s.replace("=", ": ", 1) for s in sets).encode()))
        sets = []

    def run() -> None:
        options = reader_options(argparse.Namespace(reader=str(reader) if reader else None, set=sets))
        read_logs([str(base["good"])], options=options)

    return _outcome(run, ("--set", "--reader", "reader option", str(base["good"])))


def test_reader_options_as_yaml(base, tmp_path) -> None:
    rng = np.random.default_rng(SEED + 2)
    seen = set()
    for i in range(N_OPTIONS):
        keys = [OPTION_KEYS[int(rng.integers(len(OPTION_KEYS)))] for _ in range(int(rng.integers(1, 4)))]
        sets = [f"{k}={_yaml_value(rng, OPTION_KEYS if k == 'label' else CAMERA_KEYS)}" for k in keys]
        (tmp_path / f"o{i}").mkdir()
        seen.add(_options_case(base, rng, tmp_path / f"o{i}", sets))
    assert seen == {"ok", "refused"}


def test_camera_calibrations(base, tmp_path) -> None:
    rng = np.random.default_rng(SEED + 3)
    seen = set()
    for i in range(N_CAMERAS):
        full = ["fx: 4", "fy: 4", "cx: 3.5", "cy: 3.5"] if rng.random() < 0.5 else ["hfov_deg: 80"]
        for _ in range(int(rng.integers(0, 4))):
            key = CAMERA_KEYS[int(rng.integers(len(CAMERA_KEYS)))]
            full.append(f"{key}: {YAML_VALUES[int(rng.integers(len(YAML_VALUES)))]}")
        (tmp_path / f"c{i}").mkdir()
        seen.add(_options_case(base, rng, tmp_path / f"c{i}", ["camera={" + ", ".join(full) + "}"]))
    assert seen == {"ok", "refused"}


# -- line-per-record logs: dave2's data.txt, a Donkeycar tub's catalog --------------------------
BAD_FIELDS = [None, "abc", [1], {}, True, float("nan"), 1e308, -1, "", "9" * 300]


def _tub(rng, folder: Path, images: Path) -> None:
    """A Donkeycar tub of six records, some fields, lines or the manifest damaged."""
    (folder / "images").symlink_to(images)
    records = [
        {
            "_index": k,
            "cam/image_array": f"{k:03d}.jpg",
            "user/angle": 0.1 * k,
            "_timestamp_ms": 1000 + 100 * k,
        }
        for k in range(6)
    ]
    for _ in range(int(rng.integers(1, 4))):
        record = records[int(rng.integers(len(records)))]
        record[list(record)[int(rng.integers(len(record)))]] = BAD_FIELDS[int(rng.integers(len(BAD_FIELDS)))]
    lines = [json.dumps(r) for r in records]
    if rng.random() < 0.3:
        lines[int(rng.integers(len(lines)))] = ["{broken", "[1, 2]", "7"][int(rng.integers(3))]
    manifest = {"paths": ["catalog_0.catalog"], "deleted_indexes": [int(rng.integers(6))]}
    if rng.random() < 0.2:
        manifest = [{"paths": "catalog_0.catalog"}, {"deleted_indexes": [[1]]}][int(rng.integers(2))]
    (folder / "manifest.json").write_text("[]\n{}\n" + json.dumps(manifest) + "\n")
    (folder / "catalog_0.catalog").write_bytes(_bytes_damage(rng, "\n".join(lines).encode()))


def _dave2(rng, folder: Path, images: Path) -> None:
    """A dave2 data.txt of six lines, angles and times damaged."""
    lines = []
    for k in range(6):
        angle = (
            ["0.5", "nan", "abc", "1e400", "-3", ""][int(rng.integers(6))] if rng.random() < 0.3 else "0.5"
        )
        lines.append(f"{images / f'{k:03d}.jpg'} {angle},2018-01-01 10:00:0{k}:{int(rng.integers(1000)):03d}")
    (folder / "data.txt").write_bytes(_bytes_damage(rng, "\n".join(lines).encode()))


@pytest.mark.parametrize("make", [_tub, _dave2], ids=["donkeycar", "dave2"])
def test_damaged_line_logs(make, base, tmp_path) -> None:
    rng = np.random.default_rng(SEED + 4)
    seen = set()
    for i in range(N_LINE_LOGS):
        folder = tmp_path / f"l{i:03d}"
        folder.mkdir()
        make(rng, folder, base["images"])
        seen.update(_check_case(folder).values())
    assert "refused" in seen
