"""Files in and out, upstream of everything: the canonical recording format
(:mod:`drive.io.recording` reads it; :mod:`drive.io.recording_meta`, :mod:`drive.io.frames` and
:mod:`drive.io.recording_writer` hold its description, frame sources and writer), whole-or-nothing
writes (:mod:`drive.io.atomic`) and container indexes of video files (:mod:`drive.io.video_index`).
"""
