"""Bad input: each kind raises naming the file and row, or with on_error="skip" is dropped and counted."""

import cv2
import h5py
import numpy as np
import pytest

from drive.data.cache import cache_recordings
from drive.data.errors import DataError, Problems
from drive.data.preprocess import Preprocessing
from drive.data.readers import read_logs

OPTS = {"label": {"unit": "curvature_per_m"}}


def _folder(tmp_path, n=6, rows=None):
    for i in range(n):
        cv2.imwrite(str(tmp_path / f"{i}.jpg"), np.full((40, 60, 3), 20 * i, np.uint8))
    rows = rows or [f"{i}.jpg,{0.1 * i},0.01" for i in range(n)]
    (tmp_path / "log.csv").write_text("image,timestamp,curvature\n" + "\n".join(rows) + "\n")
    return str(tmp_path)


def _skip(path, fmt=None):
    problems = Problems("skip")
    recs = read_logs(path, fmt, OPTS, problems)
    return recs, problems


def test_nan_label_names_file_and_line(tmp_path):
    path = _folder(tmp_path, rows=[f"{i}.jpg,{0.1 * i},{'nan' if i == 3 else 0.01}" for i in range(6)])
    with pytest.raises(DataError, match=r"log.csv, row 5: curvature is nan"):
        read_logs(path, options=OPTS)
    (rec,), problems = _skip(path)
    assert len(rec) == 5 and problems.counts() == {"non_finite_label": 1}


def test_inf_label_is_refused(tmp_path):
    path = _folder(tmp_path, rows=[f"{i}.jpg,{0.1 * i},{'inf' if i == 1 else 0.0}" for i in range(6)])
    with pytest.raises(DataError, match="row 3: curvature is inf"):
        read_logs(path, options=OPTS)


def test_duplicate_and_decreasing_timestamps(tmp_path):
    times = [0.0, 0.1, 0.1, 0.05, 0.3, 0.4]
    path = _folder(tmp_path, rows=[f"{i}.jpg,{t},0.0" for i, t in enumerate(times)])
    with pytest.raises(DataError, match=r"row 4: .*duplicate_timestamp"):
        read_logs(path, options=OPTS)
    (rec,), problems = _skip(path)
    assert problems.counts() == {"duplicate_timestamp": 1, "non_monotonic_timestamp": 1}
    np.testing.assert_allclose(rec.log["timestamp_s"], [0.0, 0.1, 0.3, 0.4])


def test_missing_image(tmp_path):
    path = _folder(tmp_path)
    (tmp_path / "2.jpg").unlink()
    with pytest.raises(DataError, match=r"row 4: image '2.jpg' not found"):
        read_logs(path, options=OPTS)
    (rec,), problems = _skip(path)
    assert len(rec) == 5 and problems.counts() == {"missing_image": 1}


def test_corrupt_image_reported_by_cache_with_its_file(tmp_path):
    path = _folder(tmp_path)
    (tmp_path / "4.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    recs = read_logs(path, options=OPTS)
    with pytest.raises(DataError, match=r"log.csv, row 6: .*4.jpg: not a readable image"):
        cache_recordings(recs, Preprocessing(size=(20, 30)), tmp_path / "cache")
    problems = Problems("skip")
    (cached,) = cache_recordings(recs, Preprocessing(size=(20, 30)), tmp_path / "cache2", problems)
    assert cached.valid.tolist() == [True, True, True, True, False, True]
    assert problems.counts() == {"unreadable_frame": 1}


def test_wrong_image_size(tmp_path):
    path = _folder(tmp_path)
    cv2.imwrite(str(tmp_path / "1.jpg"), np.zeros((41, 60, 3), np.uint8))
    with pytest.raises(DataError, match=r"log.csv, row 3: 1.jpg: frame is uint8 \(41, 60, 3\)"):
        cache_recordings(read_logs(path, options=OPTS), Preprocessing(size=(20, 30)), tmp_path / "c")


def test_truncated_video_reported_once_and_rest_dropped(tmp_path):
    video = tmp_path / "v.avi"
    vw = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 10.0, (64, 48))
    for i in range(40):
        vw.write(np.random.default_rng(i).integers(0, 255, (48, 64, 3), dtype=np.uint8))
    vw.release()
    (tmp_path / "v.csv").write_text("timestamp,curvature\n0,0\n10,0\n")
    data = video.read_bytes()
    video.write_bytes(data[: len(data) // 2])
    problems = Problems("skip")
    (rec,) = read_logs(str(video), problems=problems, on_error="skip")
    (cached,) = cache_recordings([rec], Preprocessing(size=(24, 32)), tmp_path / "c", problems)
    assert 5 < cached.valid.sum() < 40 and not cached.valid[-1]
    assert problems.counts().get("truncated_video", 0) + problems.counts().get("unreadable_frame", 0) == 1
    with pytest.raises(DataError, match=r"v.avi, row \d+"):
        cache_recordings([rec], Preprocessing(size=(24, 32)), tmp_path / "c2")


def test_hdf5_length_mismatch(tmp_path):
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f["camera_front"] = np.zeros((5, 8, 8, 3), np.uint8)
        f["inverse_r"] = np.zeros(4)
        f["timestamp"] = np.arange(5) / 10.0
    with pytest.raises(DataError, match=r"d.h5, row 4: datasets differ in length"):
        read_logs(str(path))
    (rec,), problems = _skip(str(path))
    assert len(rec) == 4 and problems.counts() == {"count_mismatch": 1}


def test_image_folder_count_mismatch(tmp_path):
    _folder(tmp_path, n=4)
    (tmp_path / "log.csv").write_text(
        "timestamp,curvature\n" + "\n".join(f"{0.1 * i},0" for i in range(6)) + "\n"
    )
    with pytest.raises(DataError, match="6 label rows but 4 images"):
        read_logs(str(tmp_path), options=OPTS)


def test_empty_recording(tmp_path):
    (tmp_path / "log.csv").write_text("image,timestamp,curvature\n")
    with pytest.raises(DataError, match=r"log.csv: no data rows \[empty\]"):
        read_logs(str(tmp_path), options=OPTS)
    recs, problems = _skip(str(tmp_path))
    assert recs == [] and problems.counts() == {"empty": 1}
    assert "skipped 1 bad item(s): 1 empty" in problems.summary()


@pytest.mark.parametrize("storage", ["frames", "video"])
def test_canonical_recording_with_more_frames_than_log_rows_is_refused(tmp_path, storage):
    from drive.io.recording import RecordingMeta, RecordingWriter

    root = tmp_path / "rec"
    meta = RecordingMeta(fps=10.0, width=32, height=24, storage=storage)
    with RecordingWriter(root, meta) as w:
        for i in range(6):
            w.append(
                np.full((24, 32, 3), 30 * i, np.uint8), timestamp_s=i / 10.0, curvature=0.0, speed_mps=8.0
            )
    log = (root / "log.csv").read_text().splitlines()
    (root / "log.csv").write_text("\n".join(log[:4]) + "\n")  # 3 rows left for 6 stored frames
    with pytest.raises(DataError, match=r"log.csv: 3 log rows but 6 frames in .*\[count_mismatch\]"):
        read_logs(str(root))
    (rec,), problems = _skip(str(root))
    assert len(rec) == 3 and problems.counts() == {"count_mismatch": 1}


def test_rows_named_after_dropped_rows_are_the_users_rows(tmp_path):
    path = _folder(tmp_path, rows=[f"{i}.jpg,{0.1 * i},{'nan' if i == 1 else 0.0}" for i in range(6)])
    (tmp_path / "4.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    recs, problems = _skip(path)
    cache_recordings(recs, Preprocessing(size=(20, 30)), tmp_path / "cache", problems)
    rows = {p.kind: (p.file, p.row) for p in problems.items}
    assert rows["non_finite_label"][1] == 3  # 1.jpg's line
    assert rows["unreadable_frame"] == (str(tmp_path / "log.csv"), 6)  # 4.jpg's line, not its new index 3


def _canonical(root, storage="frames", n=8):
    from drive.io.recording import RecordingMeta, RecordingWriter

    meta = RecordingMeta(fps=10.0, width=32, height=24, storage=storage)
    with RecordingWriter(root, meta) as w:
        for i in range(n):
            w.append(
                np.full((24, 32, 3), 25 * i + 10, np.uint8),
                timestamp_s=i / 10.0,
                curvature=0.001 * i,
                speed_mps=8.0,
            )
    return root


def _edit_log(root, edit):
    lines = (root / "log.csv").read_text().splitlines()
    (root / "log.csv").write_text(edit(lines))


@pytest.mark.parametrize("storage", ["frames", "video"])
def test_one_bad_canonical_row_is_dropped_alone_not_the_whole_recording(tmp_path, storage):
    """A short row and a non-number used to make the whole log.csv [unreadable] (all frames lost
    under on_error: skip): each is now reported by file and line and dropped with its frame only;
    the frames that stay are the right ones."""
    root = _canonical(tmp_path / "rec", storage)

    def damage(lines):
        lines[3] = ",".join(lines[3].split(",")[:2])  # frame 2: a short row (line 4)
        fields = lines[6].split(",")
        fields[2] = "abc"  # frame 5: curvature is text (line 7)
        lines[6] = ",".join(fields)
        return "\n".join(lines) + "\n"

    _edit_log(root, damage)
    (rec,), problems = _skip(str(root))
    log = str(root / "log.csv")
    assert [(p.file, p.row, p.kind) for p in problems.items] == [
        (log, 4, "malformed_row"),
        (log, 7, "not_a_number"),
    ]
    assert "curvature is not a number: 'abc'" in problems.items[1].message
    assert len(rec) == 6
    np.testing.assert_allclose(rec.curvature, [0.001 * i for i in (0, 1, 3, 4, 6, 7)])
    assert [rec.origin_of(i)[1] for i in range(6)] == [2, 3, 5, 6, 8, 9]
    means = [float(rec.frame(i).mean()) for i in range(6)]
    np.testing.assert_allclose(means, [25 * i + 10 for i in (0, 1, 3, 4, 6, 7)], atol=8.0)  # frames 25 apart
    # strict mode (the default) names the file and the first bad row
    with pytest.raises(DataError, match=r"log.csv, row 4: 2 fields, header has \d+ \[malformed_row\]"):
        read_logs(str(root))
    # the Recording API itself: strict by default, row by row with a report callback
    from drive.io.recording import Recording, RecordingError

    with pytest.raises(RecordingError, match=r"log.csv, row 4: 2 fields"):
        Recording.open(root)
    seen = []
    opened = Recording.open(root, report=lambda *p: seen.append(p))
    assert [(row, kind) for _, row, kind, _ in seen] == [(4, "malformed_row"), (7, "not_a_number")]
    assert len(opened) == 6 and opened.log_rows == 8
    opened.log["curvature"][3] = np.nan  # frame 4, line 6 of the file
    assert [(p.row, p.kind) for p in opened.problems()] == [(6, "non_finite")]


@pytest.mark.parametrize("damage", ["blank_lines", "bom", "crlf"])
def test_canonical_log_with_a_bom_or_blank_lines_reads_whole(tmp_path, damage):
    """A trailing blank line or a UTF-8 BOM used to make the log unreadable; the folder reader
    already accepted both, and so does the canonical one now, in strict mode too."""
    root = _canonical(tmp_path / "rec")
    if damage == "blank_lines":
        _edit_log(root, lambda lines: "\n".join(lines[:4] + [""] + lines[4:]) + "\n\n\n")
    elif damage == "bom":
        _edit_log(root, lambda lines: "\ufeff" + "\n".join(lines) + "\n")
    else:
        _edit_log(root, lambda lines: "\r\n".join(lines) + "\r\n")
    (rec,) = read_logs(str(root))
    assert len(rec) == 8
    np.testing.assert_allclose(rec.curvature, [0.001 * i for i in range(8)])
    from drive.io.recording import Recording

    assert len(Recording.open(root)) == 8
    if damage == "blank_lines":  # the lines after a blank line keep their own numbers
        assert rec.origin_of(3)[1] == 6


def test_frame_column_that_is_not_an_integer_is_a_bad_row(tmp_path):
    root = _canonical(tmp_path / "rec")

    def damage(lines):
        fields = lines[2].split(",")
        fields[0] = "nan"
        lines[2] = ",".join(fields)
        return "\n".join(lines) + "\n"

    _edit_log(root, damage)
    (rec,), problems = _skip(str(root))
    assert len(rec) == 7 and [(p.row, p.kind) for p in problems.items] == [(3, "not_a_number")]


def _faststart_mp4(path, frames, fps=10.0, movflags="+faststart"):
    """A real MP4 as cameras and ffmpeg write them: OpenCV's mp4v encoder, then the index (moov)
    moved to the front (ffmpeg -movflags +faststart, stream copy) or the file fragmented (moof
    boxes, as many cameras record), so a cut-short copy still opens."""
    import subprocess

    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    raw = path.with_name("raw-" + path.name)
    vw = cv2.VideoWriter(
        str(raw), cv2.VideoWriter_fourcc(*"mp4v"), fps, (frames[0].shape[1], frames[0].shape[0])
    )
    for f in frames:
        vw.write(cv2.cvtColor(f, cv2.COLOR_RGB2BGR))
    vw.release()
    subprocess.run(
        [
            imageio_ffmpeg.get_ffmpeg_exe(),
            "-y",
            "-loglevel",
            "error",
            "-i",
            str(raw),
            "-c",
            "copy",
            "-movflags",
            movflags,
            str(path),
        ],
        check=True,
        timeout=60,
    )
    raw.unlink()


def _moving_frames(n=30, h=96, w=128):
    yy, xx = np.mgrid[0:h, 0:w]
    return [
        np.stack([(xx * 2 + i * 5) % 256, (yy * 2 + i * 3) % 256, (xx + yy + i * 7) % 256], -1).astype(
            np.uint8
        )
        for i in range(n)
    ]


@pytest.mark.parametrize(
    "movflags", ["+faststart", "frag_keyframe+empty_moov+default_base_moof"], ids=["faststart", "fragmented"]
)
def test_truncated_mp4_drops_its_half_decoded_last_frame(tmp_path, movflags):
    """A cut-short MP4 used to keep its last, half-decoded frame (OpenCV returns it without an
    error): it is now detected from the container's sample table, reported once as
    truncated_video and dropped with the frames after it; every kept frame is a whole one."""
    from drive.io.recording import VideoFrames, complete_video_frames

    frames = _moving_frames()
    video = tmp_path / "drive.mp4"
    _faststart_mp4(video, frames, movflags=movflags)
    assert complete_video_frames(video) == 30
    data = video.read_bytes()
    video.write_bytes(data[: int(len(data) * 0.77)])
    (tmp_path / "drive.csv").write_text(
        "timestamp,curvature\n" + "\n".join(f"{i / 10.0},0.001" for i in range(30))
    )

    # the damage is real: OpenCV decodes one frame more than the file holds whole, far off the original
    cap = cv2.VideoCapture(str(video))
    raw = []
    while True:
        ok, image = cap.read()
        if not ok:
            break
        raw.append(np.abs(cv2.cvtColor(image, cv2.COLOR_BGR2RGB).astype(int) - frames[len(raw)]).mean())
    whole = complete_video_frames(video)
    assert 5 < whole < 30 and len(raw) == whole + 1
    assert raw[-1] > 2.5 * np.median(raw[:-1])  # ~12.7 vs ~3: the half-decoded frame

    with pytest.raises(Exception, match=rf"drive.mp4: video is truncated, frame {whole} is cut short"):
        VideoFrames(video).read(whole)
    problems = Problems("skip")
    (rec,) = read_logs(str(video), problems=problems, options=OPTS)
    (cached,) = cache_recordings([rec], Preprocessing(size=(96, 128)), tmp_path / "c", problems)
    assert int(cached.valid.sum()) == whole and not cached.valid[whole:].any()
    assert problems.counts() == {"truncated_video": 1}
    kept = [np.abs(rec.frame(i).astype(int) - frames[i]).mean() for i in range(whole)]
    assert max(kept) < 2.0 * np.median(raw[:-1])
    with pytest.raises(DataError, match=rf"drive.mp4, row {whole}: .*truncated"):
        cache_recordings([rec], Preprocessing(size=(96, 128)), tmp_path / "c2")
