"""drive.io.video.VideoFile, the one video writer: whole or not at all, its frames checked against the
container's own index before the rename."""

from __future__ import annotations

import errno

import numpy as np
import pytest

from drive.io.video import VideoFile
from drive.io.video_index import complete_video_frames


def _frames(n: int) -> list:
    return [np.full((32, 48, 3), 10 * i, np.uint8) for i in range(n)]


def test_a_video_appears_whole_with_every_frame_and_no_temporary(tmp_path) -> None:
    video = VideoFile(tmp_path / "out" / "drive.mp4", fps=10.0)
    for frame in _frames(5):
        video.write(frame)
    assert not (tmp_path / "out" / "drive.mp4").exists()  # nothing at the destination until close
    assert video.close() == tmp_path / "out" / "drive.mp4"
    assert complete_video_frames(tmp_path / "out" / "drive.mp4") == 5
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["drive.mp4"]


def test_a_failed_run_an_empty_video_and_a_cut_short_file_leave_nothing(tmp_path) -> None:
    failed = VideoFile(tmp_path / "failed.mp4", fps=10.0)
    failed.write(_frames(1)[0])
    assert failed.close(keep=False) is None
    with pytest.raises(ValueError, match="empty.mp4: no frames were written"):
        VideoFile(tmp_path / "empty.mp4", fps=10.0).close()
    cut = VideoFile(tmp_path / "cut.mp4", fps=10.0)
    for frame in _frames(8):
        cut.write(frame)
    cut._writer.release()  # what a full disk does: the file ends short of what was written
    cut._writer = None
    data = cut._tmp.read_bytes()
    cut._tmp.write_bytes(data[: len(data) // 2])
    with pytest.raises(OSError) as err:
        cut.close()
    assert err.value.errno in (errno.EIO, errno.ENOSPC) and "cut.mp4: the video could not be written" in str(
        err.value
    )
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="fps must be positive"):
        VideoFile(tmp_path / "x.mp4", fps=0)
