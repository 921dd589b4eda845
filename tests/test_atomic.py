"""drive.io.atomic: outputs are whole or absent, never half-written, and no temporary file is left."""

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from drive.io.atomic import atomic_path, save_figure, write_image, write_text


def listing(folder: Path):
    return sorted(p.name for p in folder.iterdir())


def test_failure_keeps_the_previous_file_and_leaves_no_temporary(tmp_path):
    out = tmp_path / "report.csv"
    out.write_text("old complete file\n")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_path(out) as tmp:
            tmp.write_text("half of the new fi")
            assert tmp.parent == out.parent and tmp.name.startswith(".") and tmp.suffix == ".csv"
            raise RuntimeError("disk full")
    assert out.read_text() == "old complete file\n"
    assert listing(tmp_path) == ["report.csv"]


def test_success_replaces_the_file_and_creates_parents(tmp_path):
    out = tmp_path / "a" / "b" / "summary.json"
    write_text(out, '{"ok": true}\n')
    assert out.read_text() == '{"ok": true}\n'
    write_text(out, "{}\n")
    assert out.read_text() == "{}\n" and listing(out.parent) == ["summary.json"]


def test_files_get_the_umask_mode_not_a_private_one(tmp_path):
    """A temporary file from tempfile.mkstemp is 0600: renamed into place, a report or an exported
    policy would be unreadable to the vehicle's runtime user or a colleague."""
    previous = os.umask(0o022)
    try:
        out = write_text(tmp_path / "REPORT.md", "# report\n")
        with atomic_path(tmp_path / "policy.ts") as tmp:
            tmp.write_bytes(b"model")
        plain = tmp_path / "plain.txt"
        plain.write_text("x")
    finally:
        os.umask(previous)
    want = stat.S_IMODE(plain.stat().st_mode)
    assert want == 0o644
    assert (
        stat.S_IMODE(out.stat().st_mode) == want
        and stat.S_IMODE((tmp_path / "policy.ts").stat().st_mode) == want
    )


def test_write_image_round_trips_and_names_a_file_it_cannot_encode(tmp_path):
    import cv2

    rgb = np.zeros((6, 8, 3), np.uint8)
    rgb[..., 0] = 255  # red
    path = write_image(tmp_path / "sheet.png", rgb)
    back = cv2.imread(str(path))
    assert back.shape == (6, 8, 3) and back[0, 0].tolist() == [0, 0, 255]  # BGR on disk
    with pytest.raises(RuntimeError, match="nothing.unknownext: could not write the image"):
        write_image(tmp_path / "nothing.unknownext", rgb)
    assert listing(tmp_path) == ["sheet.png"]


def test_save_figure_writes_by_suffix_and_closes_the_figure(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    out = save_figure(fig, tmp_path / "curve.png", dpi=50)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plt.fignum_exists(fig.number)
    assert listing(tmp_path) == ["curve.png"]


def _synced_paths(monkeypatch) -> list:
    """Record what os.fsync flushes (the real call still runs): the path behind each descriptor."""
    synced = []
    real = os.fsync

    def spy(fd):
        synced.append(os.path.realpath(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return synced


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name descriptors")
@pytest.mark.parametrize("storage", ["frames", "video"])
def test_a_recording_is_on_the_disk_before_it_is_renamed_into_place(tmp_path, monkeypatch, storage):
    """RecordingWriter.close syncs every file (frames or video, log.csv, meta.json) and directory of
    the recording before the rename, then the parent: a power cut cannot leave a renamed recording
    with empty files."""
    from drive.io.recording import RecordingMeta, RecordingWriter

    out = tmp_path / "rec"
    writer = RecordingWriter(out, RecordingMeta(fps=10, width=32, height=24, storage=storage))
    frame = np.full((24, 32, 3), 128, dtype=np.uint8)
    for i in range(3):
        writer.append(frame, timestamp_s=i / 10, curvature=0.0, speed_mps=5.0)
    synced = _synced_paths(monkeypatch)
    writer.close()
    tmp = [p for p in synced if ".rec.partial-" in p]
    names = {os.path.relpath(p, tmp[-1]) for p in tmp}  # the last synced is the temporary directory
    files = {str(p.relative_to(out)) for p in out.rglob("*")}
    assert files <= names, files - names
    assert synced[-1] == str(tmp_path)  # the parent, after the rename


def test_a_recording_of_many_frames_is_synced_in_one_call(tmp_path, monkeypatch):
    """More than SYNCFS_FILES files: one syncfs(2) of the file system before the rename (where
    the system has it; else file by file, as above), then the parent directory."""
    import drive.io.atomic as atomic
    from drive.io.recording import RecordingMeta, RecordingWriter

    out = tmp_path / "rec"
    writer = RecordingWriter(out, RecordingMeta(fps=10, width=32, height=24))
    frame = np.full((24, 32, 3), 128, dtype=np.uint8)
    for i in range(atomic.SYNCFS_FILES + 1):
        writer.append(frame, timestamp_s=i / 10, curvature=0.0, speed_mps=5.0)
    calls = []
    real = atomic._syncfs
    monkeypatch.setattr(atomic, "_syncfs", lambda d: calls.append((str(d), out.exists())) or real(d))
    synced = _synced_paths(monkeypatch)
    writer.close()
    assert len(calls) == 1 and ".rec.partial-" in calls[0][0] and calls[0][1] is False  # before rename
    if real(tmp_path):  # this system has syncfs: no file was synced one by one
        assert synced == [str(tmp_path)]
    else:
        assert len(synced) >= atomic.SYNCFS_FILES + 4  # frames, log.csv, meta.json, folders, parent
    assert len(list((out / "frames").iterdir())) == atomic.SYNCFS_FILES + 1
